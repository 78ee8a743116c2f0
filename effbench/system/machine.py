"""Which machine a run ran on, as the leaderboard and the export compare machines (env.json `machine`).

The hostname names a machine, except where a container engine made it up: `docker run` and `podman run` name
each container by the first 12 hex digits of its id, so every run on one box reads as a new machine and its
repeated runs are never pooled; a Kubernetes pod is named after the pod (`effbench-master-0` for every job
named effbench, on whichever node it lands). There the machine is told by what does not change between
containers:

1. `EFFBENCH_MACHINE`, when set: the name the user gives it (`docker run -e EFFBENCH_MACHINE=$(hostname) ...`,
   a pod's node name through the downward API: entrypoint/kubeflow-*.yaml);
2. the hostname, unless it is such a generated one or a pod's;
3. the run's GPUs: `GPU-<first 8 hex digits of the lowest UUID>`, `+N` for N more (a GPU's UUID is its own and
   fixed; `nvidia-smi -L` lists them);
4. the host kernel's boot id (/proc/sys/kernel/random/boot_id: the kernel's, so every container on the host
   reads the same one until the host reboots): `boot-<first 8 hex digits>`;
5. the generated hostname, when nothing else is known (a record written before these fields).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from effbench.errors import EffbenchError

NAME_VAR = "EFFBENCH_MACHINE"
ENGINES_THAT_NAME = ("docker", "podman")  # apptainer keeps the host's name (hardware.container_runtime's values)
GENERATED = re.compile(r"[0-9a-f]{12}")  # the container id's first 12 hex digits (docker and podman's default)
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
MAX_NAME = 100


@dataclass(frozen=True)
class Machine:
    name: str
    source: str
    """Where the name came from: EFFBENCH_MACHINE, hostname, GPU UUIDs or host boot id."""


def given_name(environ: Mapping[str, str]) -> str | None:
    """EFFBENCH_MACHINE, stripped (empty counts as unset); one with a control character or over MAX_NAME characters
    is an EffbenchError naming it: it is printed in every table that compares machines."""
    name = environ.get(NAME_VAR, "").strip()
    if not name:
        return None
    if len(name) > MAX_NAME or any(not ch.isprintable() for ch in name):
        raise EffbenchError(
            NAME_VAR,
            f"{name[:40]!r} is not a short printable name; set it to at most {MAX_NAME} printable characters, "
            "e.g. -e EFFBENCH_MACHINE=$(hostname)",
        )
    return name


def is_generated(hostname: str, container_runtime: str | None) -> bool:
    """Whether a container engine made this hostname up for one container (so it names no machine)."""
    return container_runtime in ENGINES_THAT_NAME and GENERATED.fullmatch(hostname) is not None


def in_pod(environ: Mapping[str, str]) -> bool:
    """Whether this is a Kubernetes pod: the kubelet gives every container KUBERNETES_SERVICE_HOST, and a pod's
    hostname is its own name, not its node's."""
    return bool(environ.get("KUBERNETES_SERVICE_HOST"))


def _bare(uuid: str) -> str:
    """A UUID without NVML's GPU-/MIG- prefix (torch spells it bare: system/hardware.py nvml_uuid_candidates)."""
    u = uuid.strip().lower()
    return u.split("-", 1)[1] if u.startswith(("gpu-", "mig-")) else u


def identify(
    hostname: str | None,
    container_runtime: str | None,
    gpu_uuids: Iterable[str | None] = (),
    boot_id: str | None = None,
    named: str | None = None,
    pod: bool = False,
) -> Machine | None:
    """The machine, by the first of the module docstring's rules that applies; None when nothing names it.
    `pod`: the run is in a Kubernetes pod (in_pod), whose hostname is the pod's."""
    if named:
        return Machine(named, NAME_VAR)
    if hostname and not pod and not is_generated(hostname, container_runtime):
        return Machine(hostname, "hostname")
    uuids = sorted(_bare(u) for u in gpu_uuids if u and u.strip())
    if uuids:
        more = f"+{len(uuids) - 1}" if len(uuids) > 1 else ""
        return Machine(f"GPU-{uuids[0][:8]}{more}", "GPU UUIDs")
    if boot_id and boot_id.strip():
        return Machine(f"boot-{boot_id.strip().lower()[:8]}", "host boot id")
    return Machine(hostname, "hostname") if hostname else None


def read_boot_id(path: Path = BOOT_ID) -> str | None:
    """The host kernel's boot id; None where the file is absent or unreadable (not Linux, a sandboxed kernel)."""
    try:
        return path.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None
