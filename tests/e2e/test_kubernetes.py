"""Kubernetes: a Kubeflow pod's PET_* environment makes one multi-node run, as Slurm's does.

The pod environments below are what the training operator writes (training-operator
pkg/controller.v1/pytorch/envvar.go for a PyTorchJob; kubeflow/trainer's torch plugin for a TrainJob)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from effbench.errors import EffbenchError
from effbench.launch.plan import KubeflowSettings, kubeflow_settings

ROOT = Path(__file__).resolve().parents[2]


def pytorchjob_pod(rank: int, *, nodes: int = 2, port: str = "23456", nproc: str = "auto") -> dict[str, str]:
    """One pod of a PyTorchJob with a master and nodes-1 workers: the operator's variables, by hand."""
    world = nodes * (int(nproc) if nproc.isdigit() else 1)
    return {
        "PET_NNODES": str(nodes), "PET_NODE_RANK": str(rank), "PET_NPROC_PER_NODE": nproc,
        "PET_MASTER_ADDR": "bench-master-0", "PET_MASTER_PORT": port,
        "MASTER_ADDR": "bench-master-0", "MASTER_PORT": port, "WORLD_SIZE": str(world), "RANK": str(rank),
    }  # fmt: skip


TRAINJOB_POD = {  # a TrainJob pod: no WORLD_SIZE / RANK, the node rank from the job completion index
    "PET_NNODES": "4", "PET_NODE_RANK": "3", "PET_NPROC_PER_NODE": "8",
    "PET_MASTER_ADDR": "bench-node-0-0.bench", "PET_MASTER_PORT": "29400",
}  # fmt: skip


def test_a_pytorchjob_pod_gives_nodes_rank_and_rendezvous():
    assert kubeflow_settings(pytorchjob_pod(1)) == KubeflowSettings(
        nnodes=2, node_rank=1, rdzv_endpoint="bench-master-0:23456", rdzv_id="bench-master-0", nproc_per_node=None
    )
    assert kubeflow_settings(pytorchjob_pod(0, nproc="4")).nproc_per_node == 4


def test_a_trainjob_pod_gives_nodes_rank_and_rendezvous():
    s = kubeflow_settings(TRAINJOB_POD)
    assert (s.nnodes, s.node_rank, s.rdzv_endpoint, s.nproc_per_node) == (4, 3, "bench-node-0-0.bench:29400", 8)


def test_outside_kubeflow_there_are_no_settings():
    assert kubeflow_settings({}) is None
    assert kubeflow_settings({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "x"}) is None  # plain torch variables
    one = kubeflow_settings({"PET_NNODES": "1", "PET_NPROC_PER_NODE": "auto"})
    assert one.nnodes == 1 and one.rdzv_endpoint is None  # one pod: torchrun --standalone, no master needed


@pytest.mark.parametrize(
    ("change", "option"),
    [
        ({"PET_NODE_RANK": None, "RANK": None}, "PET_NODE_RANK"),  # incomplete: which node is this?
        ({"PET_MASTER_ADDR": None, "MASTER_ADDR": None}, "PET_MASTER_ADDR"),
        ({"PET_MASTER_PORT": None, "MASTER_PORT": None}, "PET_MASTER_PORT"),
        ({"PET_NODE_RANK": "2", "RANK": "2"}, "PET_NODE_RANK"),  # not below PET_NNODES
        ({"RANK": "0"}, "PET_NODE_RANK"),  # contradicts PET_NODE_RANK=1
        ({"MASTER_ADDR": "elsewhere"}, "PET_MASTER_ADDR"),
        ({"WORLD_SIZE": "3"}, "WORLD_SIZE"),
        ({"PET_NNODES": "1:4"}, "PET_NNODES"),  # elastic
        ({"PET_NNODES": "two"}, "PET_NNODES"),
        ({"PET_NPROC_PER_NODE": "many"}, "PET_NPROC_PER_NODE"),
        ({"PET_MASTER_PORT": "99999", "MASTER_PORT": "99999"}, "PET_MASTER_PORT"),  # the variable, not an option
        ({"PET_MASTER_PORT": "port", "MASTER_PORT": "port"}, "PET_MASTER_PORT"),
    ],
)
def test_an_incomplete_or_contradictory_pod_environment_is_refused(change, option):
    env = {k: v for k, v in {**pytorchjob_pod(1), **change}.items() if v is not None}
    with pytest.raises(EffbenchError) as info:
        kubeflow_settings(env)
    assert info.value.option == option


def _pod_env(monkeypatch, env: dict[str, str]) -> None:
    torch_vars = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    for k in [k for k in os.environ if k.startswith(("SLURM_", "PET_")) or k in torch_vars]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def test_a_partial_pod_environment_is_one_line_and_exit_2_never_a_single_node_run(monkeypatch, capsys, tmp_path):
    from clitools import invoke

    env = pytorchjob_pod(1)
    del env["PET_NODE_RANK"], env["RANK"]
    _pod_env(monkeypatch, env)
    code, out, err = invoke(["run", "--smoke", "--output", tmp_path], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: PET_NODE_RANK:"), err
    assert not list(tmp_path.iterdir())


def test_the_run_command_takes_the_rendezvous_from_the_pod(monkeypatch, capsys, tmp_path):
    """The CLI is a thin adapter: what it hands the runner is the pod's plan (nodes, rank, endpoint, and
    nprocPerNode as the CPU process count of a --device cpu run)."""
    from clitools import invoke

    from effbench.run import launch

    seen = []

    class Stop(Exception):
        pass

    def fake_run(cfg, **_kw):
        seen.append(cfg)
        raise Stop

    monkeypatch.setattr(launch, "run", fake_run)
    _pod_env(monkeypatch, pytorchjob_pod(1, nproc="2"))
    with pytest.raises(Stop):
        invoke(["run", "--smoke", "--output", tmp_path], capsys)
    (cfg,) = seen
    assert (cfg.nnodes, cfg.node_rank, cfg.rdzv_endpoint) == (2, 1, "bench-master-0:23456")
    assert cfg.rdzv_id == "bench-master-0"
    assert cfg.nproc == 2 and cfg.gpus is None and cfg.device == "cpu"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # two torchrun agents and a gloo group on a loaded 2-core machine: 1-4 minutes
def test_two_pods_make_one_two_node_run(tmp_path):
    """Two processes, each with one pod's environment and nothing else telling them about each other, run
    `effbench run --smoke --device cpu`: one run folder, world_size 2, status ok (before PET_* was read
    they made two single-node runs)."""
    port = str(free_port())
    out = tmp_path / "results"
    loopback = {"PET_MASTER_ADDR": "127.0.0.1", "MASTER_ADDR": "127.0.0.1"}  # both pods on this machine
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PET_"))}
    cmd = [sys.executable, "-m", "effbench", "run", "--smoke", "--device", "cpu", "--quiet", "--no-profile",
           "--arch", "resnet18", "--image-size", "16", "--max-steps", "3", "--output", str(out)]  # fmt: skip
    pods = [
        subprocess.Popen(
            cmd,
            env={**base, **pytorchjob_pod(rank, port=port, nproc="1"), **loopback},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outs = [p.communicate(timeout=600) for p in pods]
    assert [p.returncode for p in pods] == [0, 0], [o[1][-2000:] for o in outs]
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    r = json.loads((run / "results.json").read_text())
    assert r["status"] == "ok" and r["world_size"] == 2 and len(r["ranks"]) == 2


# --- the manifests ---------------------------------------------------------------------------------
def _node_name_is_the_machine(env: list[dict]) -> bool:
    """A pod's hostname is the pod's name, new with every job: EFFBENCH_MACHINE names its node instead
    (system/machine.py), through the downward API (core/v1 EnvVarSource.fieldRef)."""
    (var,) = [e for e in env if e["name"] == "EFFBENCH_MACHINE"]
    return var["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_the_pytorchjob_manifest_parses_and_runs_the_image_s_entry():
    (job,) = list(yaml.safe_load_all((ROOT / "entrypoint" / "kubeflow-pytorchjob.yaml").read_text()))
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PyTorchJob"
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert set(specs) == {"Master", "Worker"} and specs["Master"]["replicas"] == 1
    assert job["spec"]["nprocPerNode"] == "auto" and "elasticPolicy" not in job["spec"]  # a fixed node count
    for spec in specs.values():
        pod = spec["template"]["spec"]
        (c,) = pod["containers"]
        # the operator sets PET_* on the container of that name (PytorchJobDefaultContainerName)
        assert c["name"] == "pytorch" and "effbench" in c["image"]
        assert "command" not in c, "the image's ENTRYPOINT (effbench-entrypoint) must stay"
        assert c["args"][0] == "run"
        assert _node_name_is_the_machine(c["env"])
        limits = c["resources"]["limits"]
        assert int(limits["nvidia.com/gpu"]) >= 1
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        assert {"/dev/shm", "/results", "/data"} <= set(mounts) and mounts["/data"].get("readOnly") is True
        volumes = {v["name"]: v for v in pod["volumes"]}
        shm = volumes[mounts["/dev/shm"]["name"]]
        assert shm["emptyDir"]["medium"] == "Memory" and shm["emptyDir"]["sizeLimit"]
        assert "persistentVolumeClaim" in volumes[mounts["/results"]["name"]]


def test_the_trainjob_manifest_parses_and_runs_the_image_s_entry():
    docs = list(yaml.safe_load_all((ROOT / "entrypoint" / "kubeflow-trainjob.yaml").read_text()))
    (job,) = [d for d in docs if d["kind"] == "TrainJob"]
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] >= 2 and trainer["args"][0] == "run" and "effbench" in trainer["image"]
    assert int(trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"]) >= 1
    assert "command" not in trainer
    assert _node_name_is_the_machine(trainer["env"])
