"""A stand-in for `kubectl` that checks what a docs recipe asks of the cluster instead of doing it.

tests/contracts/test_doc_commands.py runs docs/kubernetes.md's blocks top to bottom with this script as
`kubectl` on PATH. Each call checks the objects it names against the manifests applied before it, in the
order the page gives, and records what it applies in a JSON state file ($KUBECTL_CHECK_STATE):

    kubectl apply -f FILE | -                 parse (pyyaml); claims ReadWriteMany; every claim a pod or job
                                              mounts applied before it; every image $KUBECTL_CHECK_IMAGE;
                                              a job mounts /results, /data (read-only) and /dev/shm (memory)
    kubectl get KIND NAME...                  each applied
    kubectl wait --for=condition=C KIND/NAME  applied, and C a condition that kind has
    kubectl cp SRC DST                        one side POD:PATH of an applied pod, PATH on a claim it mounts
                                              (writable for a copy in); the local source exists; a copy out
                                              makes the local folder
    kubectl exec POD -- ...                   the pod applied
    kubectl logs [-f] POD | -l SELECTOR       a pod an applied job makes (PyTorchJob: NAME-master-0,
                                              NAME-worker-I), or a selector one applied job's pods carry
    kubectl delete KIND NAME                  applied; removed

Anything else, or a failed check, is one `kubectl-check: ...` line on stderr and exit 1.

The conditions and pod names are the operators': training-operator pkg/apis/kubeflow.org/v1/common_types.go
(JobCreated "Created", JobRunning "Running", JobRestarting, JobSucceeded "Succeeded", JobFailed "Failed";
pods `<job>-<replica type lower case>-<index>`), trainer pkg/apis/trainer/v1alpha1/trainjob_types.go
(TrainJobSuspended, TrainJobComplete "Complete", TrainJobFailed), JobSet's label
`jobset.sigs.k8s.io/jobset-name` (the TrainJob's JobSet has its name).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

KINDS = {  # what `kubectl get/wait/delete` accepts for each kind this recipe uses
    "PersistentVolumeClaim": {"pvc", "persistentvolumeclaim", "persistentvolumeclaims"},
    "Pod": {"pod", "pods", "po"},
    "PyTorchJob": {"pytorchjob", "pytorchjobs"},
    "TrainJob": {"trainjob", "trainjobs"},
}
CONDITIONS = {
    "Pod": {"Ready", "PodScheduled", "Initialized", "ContainersReady"},
    "PyTorchJob": {"Created", "Running", "Restarting", "Succeeded", "Failed"},
    "TrainJob": {"Suspended", "Complete", "Failed"},
    "PersistentVolumeClaim": set(),
}
JOB_MOUNTS = {"/results": "effbench-results", "/data": "datasets"}


class Refused(Exception):
    pass


def kind_of(word: str) -> str:
    for kind, names in KINDS.items():
        if word.lower().split(".")[0] in names:
            return kind
    raise Refused(f"a kind this recipe does not apply: {word}")


def load_state(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text()) if path.exists() else []


def find(state: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for obj in state:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise Refused(f"{kind} {name} was not applied before this command")


def pod_specs(node: Any) -> list[dict[str, Any]]:
    """Every pod spec below `node`: a mapping that holds `containers` (one YAML anchor's spec counts once)."""
    found: dict[int, dict[str, Any]] = {}
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            found[id(node)] = node
        for value in node.values():
            found.update((id(s), s) for s in pod_specs(value))
    elif isinstance(node, list):
        for value in node:
            found.update((id(s), s) for s in pod_specs(value))
    return list(found.values())


def images(obj: dict[str, Any]) -> list[str]:
    out = [c["image"] for spec in pod_specs(obj) for c in spec["containers"] if "image" in c]
    if obj["kind"] == "TrainJob":
        out.append(obj["spec"]["trainer"]["image"])
    return out


def mounts(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """mountPath -> {"claim" or "memory", "read_only"} for the spec's containers."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    out = {}
    for c in spec["containers"]:
        for m in c.get("volumeMounts", []):
            if m["name"] not in volumes:
                raise Refused(f"container {c['name']} mounts {m['name']}, which the pod does not declare")
            v = volumes[m["name"]]
            claim = v.get("persistentVolumeClaim", {}).get("claimName")
            memory = v.get("emptyDir", {}).get("medium") == "Memory"
            read_only = bool(m.get("readOnly") or v.get("persistentVolumeClaim", {}).get("readOnly"))
            out[m["mountPath"]] = {"claim": claim, "memory": memory, "read_only": read_only}
    return out


def check_object(obj: dict[str, Any], state: list[dict[str, Any]]) -> None:
    kind, name = obj.get("kind"), obj.get("metadata", {}).get("name")
    if kind not in KINDS or not name:
        raise Refused(f"an object this recipe does not apply: {kind} {name}")
    if kind == "PersistentVolumeClaim":
        if "ReadWriteMany" not in obj["spec"].get("accessModes", []):
            raise Refused(f"claim {name} is not ReadWriteMany: pods on two nodes mount it")
        return
    want = os.environ.get("KUBECTL_CHECK_IMAGE")
    for image in images(obj):
        if want and image != want:
            raise Refused(f"{kind} {name} runs {image}, not the image the page built ({want})")
    specs = pod_specs(obj)
    for spec in specs:
        for m in mounts(spec).values():
            if m["claim"]:
                find(state, "PersistentVolumeClaim", m["claim"])  # the claim exists before its user
    if kind in ("PyTorchJob", "TrainJob"):
        (spec,) = specs
        got = mounts(spec)
        for where, claim in JOB_MOUNTS.items():
            if got.get(where, {}).get("claim") != claim:
                raise Refused(f"{kind} {name} does not mount claim {claim} on {where}")
        if not got["/data"]["read_only"]:
            raise Refused(f"{kind} {name} mounts the datasets writable")
        if not got.get("/dev/shm", {}).get("memory"):
            raise Refused(f"{kind} {name} has no memory volume on /dev/shm")


def job_pods(state: list[dict[str, Any]]) -> set[str]:
    """The pod names the applied PyTorchJobs make."""
    names = set()
    for obj in state:
        if obj["kind"] == "PyTorchJob":
            for replica, spec in obj["spec"]["pytorchReplicaSpecs"].items():
                names |= {f"{obj['metadata']['name']}-{replica.lower()}-{i}" for i in range(spec.get("replicas", 1))}
    return names


def job_selectors(state: list[dict[str, Any]]) -> set[str]:
    """The label selectors the applied jobs' pods answer to."""
    out = set()
    for obj in state:
        name = obj["metadata"]["name"]
        if obj["kind"] == "TrainJob":
            out.add(f"jobset.sigs.k8s.io/jobset-name={name}")
        elif obj["kind"] == "PyTorchJob":
            out.add(f"training.kubeflow.org/job-name={name}")
    return out


def apply(args: list[str], state: list[dict[str, Any]]) -> None:
    if args[:1] != ["-f"] or len(args) != 2:
        raise Refused(f"apply takes -f FILE or -f -: {args}")
    text = sys.stdin.read() if args[1] == "-" else Path(args[1]).read_text()
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    if not docs:
        raise Refused("apply was given no object")
    for obj in docs:
        check_object(obj, state)
        state[:] = [o for o in state if (o["kind"], o["metadata"]["name"]) != (obj["kind"], obj["metadata"]["name"])]
        state.append(obj)


def split_pod_path(arg: str) -> tuple[str, str] | None:
    if ":" in arg and not arg.startswith(("/", ".")):
        pod, path = arg.split(":", 1)
        return pod, path
    return None


def cp(args: list[str], state: list[dict[str, Any]]) -> None:
    if len(args) != 2:
        raise Refused(f"cp takes SRC DST: {args}")
    src, dst = split_pod_path(args[0]), split_pod_path(args[1])
    if (src is None) == (dst is None):
        raise Refused(f"cp copies between this machine and one pod: {args}")
    pod, path = src or dst  # type: ignore[misc]
    spec = pod_specs(find(state, "Pod", pod))[0]
    on = [(where, m) for where, m in mounts(spec).items() if m["claim"]]
    inside = [(w, m) for w, m in on if PurePosixPath(path).is_relative_to(w)]
    if not inside:
        raise Refused(f"{pod}:{path} is on no claim the pod mounts ({', '.join(w for w, _ in on)})")
    if dst is not None:
        if inside[0][1]["read_only"]:
            raise Refused(f"{pod} mounts {inside[0][0]} read-only")
        if not Path(args[0]).exists():
            raise Refused(f"{args[0]} does not exist here")
    else:
        Path(args[1]).mkdir(parents=True, exist_ok=True)


def named(args: list[str], state: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """KIND NAME [NAME...] or KIND/NAME, as `get`, `wait` and `delete` take them."""
    words = [a for a in args if not a.startswith("-")]
    if len(words) == 1 and "/" in words[0]:
        kind, name = words[0].split("/", 1)
        return [(kind_of(kind), name)]
    if len(words) >= 2:
        return [(kind_of(words[0]), n) for n in words[1:]]
    raise Refused(f"name a kind and an object: {args}")


def selector(args: list[str]) -> str | None:
    for i, a in enumerate(args):
        if a == "-l":
            return args[i + 1]
        if a.startswith("-l=") or a.startswith("--selector="):
            return a.split("=", 1)[1]
    return None


def wait(args: list[str], state: list[dict[str, Any]]) -> None:
    wanted = [a.split("=", 2)[2] for a in args if a.startswith("--for=condition=")]
    if len(wanted) != 1:
        raise Refused(f"wait for one condition: {args}")
    sel = selector(args)
    if sel is not None:
        if sel not in job_selectors(state):
            raise Refused(f"no applied job's pods carry {sel}")
        kind = "Pod"
    else:
        ((kind, name),) = named([a for a in args if not a.startswith("--")], state)
        find(state, kind, name)
    if wanted[0] not in CONDITIONS[kind]:
        raise Refused(f"a {kind} has no condition {wanted[0]} ({', '.join(sorted(CONDITIONS[kind]))})")


def logs(args: list[str], state: list[dict[str, Any]]) -> None:
    sel = selector(args)
    if sel is not None:
        if sel not in job_selectors(state):
            raise Refused(f"no applied job's pods carry {sel}")
        return
    (pod,) = [a for a in args if not a.startswith("-")]
    pods = job_pods(state) | {o["metadata"]["name"] for o in state if o["kind"] == "Pod"}
    if pod not in pods:
        raise Refused(f"no applied object makes a pod {pod} ({', '.join(sorted(pods))})")


def exec_(args: list[str], state: list[dict[str, Any]]) -> None:
    find(state, "Pod", args[0])
    if "--" not in args:
        raise Refused("exec POD -- COMMAND")


def get(args: list[str], state: list[dict[str, Any]]) -> None:
    for kind, name in named(args, state):
        find(state, kind, name)


def delete(args: list[str], state: list[dict[str, Any]]) -> None:
    for kind, name in named(args, state):
        state.remove(find(state, kind, name))


VERBS = {"apply": apply, "get": get, "wait": wait, "cp": cp, "exec": exec_, "logs": logs, "delete": delete}


def main(argv: list[str]) -> int:
    state_file = Path(os.environ.get("KUBECTL_CHECK_STATE", ".kubectl-check.json"))
    state = load_state(state_file)
    try:
        if not argv or argv[0] not in VERBS:
            raise Refused("not a command this check knows")
        VERBS[argv[0]](argv[1:], state)
    except (Refused, KeyError, ValueError, IndexError) as e:
        print(f"kubectl-check: {' '.join(argv)}: {e}", file=sys.stderr)
        return 1
    state_file.write_text(json.dumps(state))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
