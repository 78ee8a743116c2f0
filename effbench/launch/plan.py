"""Pure: config + environment (visible GPUs, cores, Slurm) -> how to launch, as a torchrun argv.

torchrun (torch.distributed.run) is the distributed engine; this module only builds its argument
list (never a shell string). Examples of what it produces:

    one GPU, or --nproc 1 on the CPU:  run in this process, no torchrun
    4 visible GPUs:                    python -m torch.distributed.run --standalone --nproc-per-node 4 ...
    --device cpu --nproc 2:            python -m torch.distributed.run --standalone --nproc-per-node 2 ... (gloo)
    Slurm, 2 nodes x 4 GPUs:           ... --nnodes 2 --node-rank $SLURM_NODEID --rdzv-backend c10d
                                           --rdzv-endpoint <first host>:<port> --rdzv-id $SLURM_JOB_ID ...
                                       (<port>: $MASTER_PORT, else 20000 + SLURM_JOB_ID % 10000)
    Kubeflow (PyTorchJob / TrainJob), 2 pods: ... --nnodes $PET_NNODES --node-rank $PET_NODE_RANK --rdzv-backend c10d
                                           --rdzv-endpoint $PET_MASTER_ADDR:$PET_MASTER_PORT --rdzv-id $PET_MASTER_ADDR

Before any of that, check_launch_env refuses a job environment that cannot be followed (a rank variable that is
not a number, Slurm's and Kubeflow's variables naming different jobs), and child_env keeps the job's launcher
variables away from effbench's own children (torchrun gets them in its argv, an isolated worker is one process).
"""

from __future__ import annotations

import ipaddress
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from effbench.config import check_rendezvous, parse_endpoint  # noqa: F401 (parse_endpoint: re-exported, tests use it here)
from effbench.errors import EffbenchError

# Under Slurm the rendezvous port is per job, so two jobs whose first node is the same do not meet in one
# c10d store: $MASTER_PORT when the user (or the site) set it, else RDZV_PORT_BASE + job id % RDZV_PORT_SPAN.
# 20000-29999 sits below Linux's ephemeral range (net.ipv4.ip_local_port_range defaults to 32768-60999),
# so an outgoing connection never holds the port; ten thousand jobs apart share one only by wrapping.
RDZV_PORT_BASE = 20000
RDZV_PORT_SPAN = 10000

_WHOLE = re.compile(r"[0-9]+")  # ASCII digits: str.isdigit() also takes '²', which int() refuses


@dataclass(frozen=True)
class SlurmSettings:
    """What a Slurm allocation says about the multi-node launch (srun --ntasks-per-node=1)."""

    nnodes: int
    node_rank: int
    rdzv_host: str | None  # first host of the node list; None when the allocation does not name one
    job_id: str
    rdzv_port: int | None = None
    """$MASTER_PORT, else derived from the job id (slurm_rdzv_port); None on one node, which meets no other
    node (torchrun --standalone picks its own port), so a MASTER_PORT it never uses cannot fail it."""

    @property
    def rdzv_endpoint(self) -> str | None:
        """HOST:PORT of the c10d rendezvous; None when the allocation names no host, or on one node."""
        if self.rdzv_host is None or self.rdzv_port is None:
            return None
        return f"{self.rdzv_host}:{self.rdzv_port}"


@dataclass(frozen=True)
class LaunchPlan:
    mode: str  # "inprocess" | "torchrun" | "dp"
    device_type: str  # "cpu" | "cuda"
    nproc_per_node: int
    nnodes: int
    threads_per_proc: int
    argv: list[str] | None = None  # torchrun argv for mode "torchrun"
    env: dict[str, str] = field(default_factory=dict)  # extra environment for the children

    @property
    def world_size(self) -> int:
        return 1 if self.mode == "dp" else self.nproc_per_node * self.nnodes

    @property
    def devices(self) -> int:
        """Devices (GPUs or CPU processes) that share the work; DataParallel counts its GPUs."""
        return self.nproc_per_node * self.nnodes

    def job_devices(self, world_size: int) -> int:
        """The devices of the job once its process group exists (`world_size`, every node's ranks):
        `devices` is this node's count times the nodes, and another node may run more or fewer ranks
        (its own visible GPUs or --gpus). DataParallel's GPUs are one process's, so its own count."""
        return self.devices if self.mode == "dp" else world_size


def parse_counts(option: str, text: str) -> list[int]:
    """`"1,2,4"` -> [1, 2, 4]: a process or GPU count, or a list of them for a scaling run."""
    items = [t.strip() for t in str(text).split(",")]
    if any(not t for t in items):
        raise EffbenchError(option, f"{text!r} has an empty item; use a count like 2 or a list like 1,2,4")
    counts = []
    for t in items:
        if not re.fullmatch(r"\d+", t):
            raise EffbenchError(option, f"{t!r} is not a whole number; use a count like 2 or a list like 1,2,4")
        n = int(t)
        if n < 1:
            raise EffbenchError(option, f"{n} must be 1 or more")
        counts.append(n)
    if len(set(counts)) != len(counts):
        raise EffbenchError(option, f"{text!r} repeats a count; list each count once")
    return counts


def first_host(nodelist: str) -> str:
    """First host of a Slurm node list: 'gpu[01-04,07],cpu3' -> 'gpu01'; 'a,b' -> 'a'."""
    nodelist = nodelist.strip()
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist)
    if not m or not m.group(1):
        raise EffbenchError("SLURM_JOB_NODELIST", f"cannot read a host from {nodelist!r}")
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def _tasks_per_node(env: Mapping[str, str]) -> int | None:
    if env.get("SLURM_NTASKS_PER_NODE"):
        try:
            return int(env["SLURM_NTASKS_PER_NODE"])
        except ValueError:
            pass
    # SLURM_TASKS_PER_NODE looks like "2(x3),1": the largest count is what matters here
    spec = env.get("SLURM_TASKS_PER_NODE")
    if spec:
        counts = [int(m) for m in re.findall(r"(\d+)(?:\(x\d+\))?", spec)]
        if counts:
            return max(counts)
    return None


def slurm_rdzv_port(env: Mapping[str, str]) -> int:
    """The job's rendezvous port: MASTER_PORT if set (torch.distributed's own variable), else one
    derived from SLURM_JOB_ID (a non-numeric id through crc32), never the fixed 29500 two jobs would share."""
    text = env.get("MASTER_PORT", "").strip()
    if text:
        if not _WHOLE.fullmatch(text) or not 1 <= int(text) <= 65535:
            raise EffbenchError("MASTER_PORT", f"{text!r} is not a port (1-65535); unset it or set e.g. 29501")
        return int(text)
    job = env.get("SLURM_JOB_ID", "").strip()
    key = int(job) if job.isdigit() else zlib.crc32(job.encode())
    return RDZV_PORT_BASE + key % RDZV_PORT_SPAN


def slurm_settings(env: Mapping[str, str]) -> SlurmSettings | None:
    """Read a Slurm job step (inside srun); None outside one. One task per node is required
    (torchrun spawns the rest). A plain sbatch script without srun is a single-node run."""
    if not env.get("SLURM_JOB_ID") or not env.get("SLURM_NNODES") or "SLURM_PROCID" not in env:
        return None
    tasks = _tasks_per_node(env)
    if tasks is not None and tasks > 1:
        raise EffbenchError(
            "srun",
            f"{tasks} Slurm tasks per node; effbench starts one process per GPU itself, so use "
            "`srun --ntasks-per-node=1 effbench run ...` (and #SBATCH --ntasks-per-node=1)",
        )
    return _slurm_step(env)


def _slurm_step(env: Mapping[str, str]) -> SlurmSettings | None:
    """slurm_settings without the one-task-per-node rule."""
    if not env.get("SLURM_JOB_ID") or not env.get("SLURM_NNODES") or "SLURM_PROCID" not in env:
        return None
    try:
        nnodes = int(env["SLURM_NNODES"])
        node_rank = int(env.get("SLURM_NODEID", "0"))
    except ValueError:
        raise EffbenchError("SLURM_NNODES", "Slurm variables are not numbers; run under srun or unset them") from None
    # No node list: no host can be named. Never guess localhost: the other nodes would wait on a
    # rendezvous that is not there until killed; plan_launch refuses a multi-node run without one.
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    return SlurmSettings(
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_host=first_host(nodelist) if nodelist else None,
        job_id=env["SLURM_JOB_ID"],
        rdzv_port=slurm_rdzv_port(env) if nnodes > 1 else None,
    )


@dataclass(frozen=True)
class KubeflowSettings:
    """What a Kubeflow pod's environment says about the multi-node launch. The training operator sets it on
    every pod of a PyTorchJob (training-operator pkg/controller.v1/pytorch/envvar.go: PET_NNODES = replicas,
    PET_NODE_RANK = RANK = the pod's index, master 0, PET_NPROC_PER_NODE = spec.nprocPerNode, default "auto",
    WORLD_SIZE = replicas x nprocPerNode, MASTER_* and PET_MASTER_* from the master's service) and of a TrainJob
    (trainer pkg/runtime/framework/plugins/torch: PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK from the job
    completion index, PET_MASTER_ADDR/PORT)."""

    nnodes: int
    node_rank: int
    rdzv_endpoint: str | None  # PET_MASTER_ADDR:PET_MASTER_PORT; None on one node (torchrun --standalone)
    rdzv_id: str
    nproc_per_node: int | None  # PET_NPROC_PER_NODE when a number; None for auto / gpu / cpu (the visible GPUs)


def _pet_int(env: Mapping[str, str], name: str, fix: str) -> int:
    text = env.get(name, "").strip()
    if not _WHOLE.fullmatch(text):
        raise EffbenchError(name, f"{text!r} is not a whole number; {fix}")
    return int(text)


def _one_of(env: Mapping[str, str], pet: str, plain: str) -> str | None:
    """PET_X, or X where only that is set; the two disagreeing is a broken pod spec, never a guess."""
    a, b = env.get(pet, "").strip(), env.get(plain, "").strip()
    if a and b and a != b:
        raise EffbenchError(pet, f"{pet}={a} but {plain}={b}; the pod's environment must name one rendezvous")
    return a or b or None


def kubeflow_settings(env: Mapping[str, str]) -> KubeflowSettings | None:
    """Read a Kubeflow pod's PET_* environment; None outside one (no PET_NNODES). An incomplete or
    contradictory set is an EffbenchError: with PET_NNODES > 1 a single-node run would be a silent wrong answer."""
    if not env.get("PET_NNODES", "").strip():
        return None
    fix = "it is set by the Kubeflow training operator; do not override it in the pod spec"
    text = env["PET_NNODES"].strip()
    low, _, high = text.partition(":")  # elastic jobs get MIN:MAX (envvar.go)
    if high and low != high:
        raise EffbenchError(
            "PET_NNODES",
            f"{text} is an elastic range; a benchmark needs a fixed node count: drop elasticPolicy or set "
            "minReplicas = maxReplicas",
        )
    nnodes = _pet_int({"PET_NNODES": low}, "PET_NNODES", fix)
    if nnodes < 1:
        raise EffbenchError("PET_NNODES", f"{nnodes} nodes; {fix}")
    node_rank_text = _one_of(env, "PET_NODE_RANK", "RANK")
    if node_rank_text is None:
        if nnodes > 1:
            raise EffbenchError(
                "PET_NODE_RANK", f"is not set with PET_NNODES={nnodes}, so this pod's node rank is unknown; {fix}"
            )
        node_rank_text = "0"
    node_rank = _pet_int({"PET_NODE_RANK": node_rank_text}, "PET_NODE_RANK", fix)
    if node_rank >= nnodes:
        raise EffbenchError("PET_NODE_RANK", f"{node_rank} is not below PET_NNODES={nnodes}; {fix}")
    nproc_text = env.get("PET_NPROC_PER_NODE", "").strip()
    nproc = int(nproc_text) if _WHOLE.fullmatch(nproc_text) else None
    if nproc_text and nproc is None and nproc_text not in ("auto", "gpu", "cpu"):
        raise EffbenchError("PET_NPROC_PER_NODE", f"{nproc_text!r} is not a number, auto, gpu or cpu; {fix}")
    if nproc == 0:
        raise EffbenchError("PET_NPROC_PER_NODE", "0 processes per node; set nprocPerNode to 1 or more, or auto")
    world = env.get("WORLD_SIZE", "").strip()  # the operator's replicas x nprocPerNode (1 when not a number)
    if world and world != str(nnodes * (nproc or 1)):
        raise EffbenchError(
            "WORLD_SIZE",
            f"{world} does not match PET_NNODES={nnodes} x PET_NPROC_PER_NODE={nproc_text or 'auto'}; {fix}",
        )
    endpoint = None
    if nnodes > 1:
        host = _one_of(env, "PET_MASTER_ADDR", "MASTER_ADDR")
        port = _one_of(env, "PET_MASTER_PORT", "MASTER_PORT")
        if host is None or port is None:
            missing = "PET_MASTER_ADDR" if host is None else "PET_MASTER_PORT"
            raise EffbenchError(missing, f"is not set with PET_NNODES={nnodes}, so no node can find the others; {fix}")
        port_var = "PET_MASTER_PORT" if env.get("PET_MASTER_PORT", "").strip() else "MASTER_PORT"
        if not _WHOLE.fullmatch(port) or not 1 <= int(port) <= 65535:
            raise EffbenchError(port_var, f"{port!r} is not a port (1-65535); {fix}")
        endpoint = f"{host}:{port}"
        check_rendezvous(nnodes, endpoint)  # HOST:PORT (a host a URL could hold)
    rdzv_id = env.get("PET_RDZV_ID", "").strip() or env.get("PET_MASTER_ADDR", "").strip() or "effbench"
    return KubeflowSettings(nnodes, node_rank, endpoint, rdzv_id, nproc)


# --------------------------------------------------------------------------------------------------
# The job's environment: refused when it cannot be followed, kept from effbench's children
# --------------------------------------------------------------------------------------------------
# What torch.distributed reads to place a process in a job (torch/distributed/run.py sets them for every
# worker it starts; a job script or the Kubeflow operator may set them for effbench itself), with the lowest
# value each may take.
RANK_VARS = {
    "RANK": 0,
    "WORLD_SIZE": 1,
    "LOCAL_RANK": 0,
    "LOCAL_WORLD_SIZE": 1,
    "GROUP_RANK": 0,
    "GROUP_WORLD_SIZE": 1,
    "ROLE_RANK": 0,
    "ROLE_WORLD_SIZE": 1,
    "NODE_RANK": 0,
}
# Slurm's numbers effbench reads (slurm_settings); Slurm sets them inside a job step
SLURM_VARS = {"SLURM_NNODES": 1, "SLURM_NODEID": 0, "SLURM_PROCID": 0, "SLURM_NTASKS": 1, "SLURM_NTASKS_PER_NODE": 1}
# Kubeflow's numbers (kubeflow_settings checks them in context; here they are checked wherever they are set)
PET_VARS = {"PET_NODE_RANK": 0}
_SLURM_TASKS = re.compile(r"[0-9]+(?:\(x[0-9]+\))?(?:,[0-9]+(?:\(x[0-9]+\))?)*")  # "2(x3),1"
# A rank variable is below its size: (rank, size)
_BELOW = (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE"), ("GROUP_RANK", "GROUP_WORLD_SIZE"),
          ("ROLE_RANK", "ROLE_WORLD_SIZE"), ("SLURM_NODEID", "SLURM_NNODES"), ("SLURM_PROCID", "SLURM_NTASKS"))  # fmt: skip
# What a launcher hands the processes it starts; effbench's children get none of the job's (child_env)
LAUNCHER_VARS = (*RANK_VARS, "MASTER_ADDR", "MASTER_PORT")
LAUNCHER_PREFIXES = ("PET_", "TORCHELASTIC_")

_FIX_TORCH = (
    "it places a process in a distributed job (a job script, torchrun or Kubeflow sets it); unset it: effbench "
    "gives each of its ranks its own"
)
_FIX_SLURM = "Slurm sets it inside a job step; unset it outside Slurm, or start effbench with srun"
_FIX_PET = "it is set by the Kubeflow training operator; do not override it in the pod spec"


def _fix_for(name: str) -> str:
    if name.startswith("SLURM_"):
        return _FIX_SLURM
    return _FIX_PET if name.startswith("PET_") else _FIX_TORCH


def _whole_numbers(env: Mapping[str, str], lowest: Mapping[str, int]) -> dict[str, int]:
    """The variables of `lowest` that are set (an empty one counts as unset), as numbers; one that is not a
    whole number at or above its lowest value is an EffbenchError naming it."""
    found = {}
    for name, low in lowest.items():
        text = env.get(name, "").strip()
        if not text:
            continue
        if not _WHOLE.fullmatch(text):
            raise EffbenchError(name, f"{text!r} is not a whole number; {_fix_for(name)}")
        if int(text) < low:
            raise EffbenchError(name, f"{text} is below {low}; {_fix_for(name)}")
        found[name] = int(text)
    return found


def check_launch_env(env: Mapping[str, str]) -> None:
    """Refuse, in one line naming the variable, a job environment effbench cannot follow, before anything starts:
    a rank variable (RANK, WORLD_SIZE, LOCAL_RANK, ...; SLURM_NNODES, SLURM_NODEID, ...; PET_NODE_RANK) that is
    not a whole number or not below its size, and Slurm's and Kubeflow's variables naming different jobs
    (check_schedulers_agree). MASTER_PORT and PET_MASTER_PORT are checked where a rendezvous uses them
    (slurm_rdzv_port, kubeflow_settings): a single-node run never reads them."""
    found = {**_whole_numbers(env, RANK_VARS), **_whole_numbers(env, SLURM_VARS), **_whole_numbers(env, PET_VARS)}
    for rank, size in _BELOW:
        if rank in found and size in found and found[rank] >= found[size]:
            raise EffbenchError(rank, f"{found[rank]} is not below {size}={found[size]}; {_fix_for(rank)}")
    tasks = env.get("SLURM_TASKS_PER_NODE", "").strip()
    if tasks and not _SLURM_TASKS.fullmatch(tasks):
        raise EffbenchError("SLURM_TASKS_PER_NODE", f"{tasks!r} is not a Slurm task count like 2(x3),1; {_FIX_SLURM}")
    nnodes = env.get("PET_NNODES", "").strip()
    if nnodes and not re.fullmatch(r"[0-9]+(?::[0-9]+)?", nnodes):
        raise EffbenchError("PET_NNODES", f"{nnodes!r} is not a whole number (or MIN:MAX); {_FIX_PET}")
    nproc = env.get("PET_NPROC_PER_NODE", "").strip()
    if nproc and not _WHOLE.fullmatch(nproc) and nproc not in ("auto", "gpu", "cpu"):
        raise EffbenchError("PET_NPROC_PER_NODE", f"{nproc!r} is not a number, auto, gpu or cpu; {_FIX_PET}")
    check_schedulers_agree(env)


def _short(host: str) -> str:
    return host.strip().lower().split(".")[0]


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def check_schedulers_agree(env: Mapping[str, str]) -> None:
    """Slurm's variables and Kubeflow's (PET_*), or the plain torch ones a job script exported, that describe
    different jobs: one line naming both, never a silent choice (effbench follows Slurm's inside srun). Where
    both schedulers' variables are set and agree, the run goes on.

    Compared: PET_NNODES / SLURM_NNODES and PET_NODE_RANK / SLURM_NODEID wherever both are set; inside a
    multi-node srun step, PET_MASTER_ADDR / PET_MASTER_PORT with Slurm's rendezvous, MASTER_ADDR (a host name:
    its first label, so `gpu01.cluster` is `gpu01`; an address cannot be compared without a lookup) with the
    first node of the node list, and WORLD_SIZE, which must be a multiple of SLURM_NNODES (each node runs the
    same number of ranks). RANK and a WORLD_SIZE that are a multiple are what `export RANK=$SLURM_PROCID` and
    `WORLD_SIZE=$SLURM_NTASKS` give; torchrun sets every rank's own, so they are not compared further."""
    fix = (
        "Slurm's and Kubeflow's variables describe different jobs; unset the PET_* ones outside a Kubeflow pod, "
        "or start effbench outside srun"
    )
    pairs = (("PET_NNODES", "SLURM_NNODES"), ("PET_NODE_RANK", "SLURM_NODEID"))
    for pet, slurm_var in pairs:
        a, b = env.get(pet, "").strip(), env.get(slurm_var, "").strip()
        if a and b and a.partition(":")[0] != b:  # PET_NNODES may be N or N:N (kubeflow_settings)
            raise EffbenchError(pet, f"{pet}={a} but {slurm_var}={b}; {fix}")
    slurm = _slurm_step(env)  # several tasks per node: slurm_settings' own line, from the caller
    if slurm is None or slurm.nnodes < 2 or slurm.rdzv_host is None:
        return
    where = "SLURM_JOB_NODELIST" if env.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
    pet_host = env.get("PET_MASTER_ADDR", "").strip()
    if pet_host and pet_host != slurm.rdzv_host:
        raise EffbenchError(
            "PET_MASTER_ADDR",
            f"{pet_host} but Slurm's rendezvous is on {slurm.rdzv_host} (the first node of {where}); {fix}",
        )
    pet_port = env.get("PET_MASTER_PORT", "").strip()
    if pet_port and pet_port != str(slurm.rdzv_port):
        source = "MASTER_PORT" if env.get("MASTER_PORT", "").strip() else "from SLURM_JOB_ID"
        raise EffbenchError(
            "PET_MASTER_PORT", f"{pet_port} but Slurm's rendezvous port is {slurm.rdzv_port} ({source}); {fix}"
        )
    master = env.get("MASTER_ADDR", "").strip()
    if master and not _is_address(master) and _short(master) != _short(slurm.rdzv_host):
        raise EffbenchError(
            "MASTER_ADDR",
            f"{master} but Slurm's rendezvous is on {slurm.rdzv_host}, the first node of {where}, where effbench "
            f"meets; unset MASTER_ADDR or set it to {slurm.rdzv_host}",
        )
    world = env.get("WORLD_SIZE", "").strip()
    if world and _WHOLE.fullmatch(world) and int(world) % slurm.nnodes:
        raise EffbenchError(
            "WORLD_SIZE",
            f"{world} is not a multiple of SLURM_NNODES={slurm.nnodes} (every node runs as many ranks); unset it: "
            "effbench gives each rank its own",
        )


def rendezvous_source(endpoint: str, env: Mapping[str, str]) -> tuple[str, str]:
    """Where the run's rendezvous HOST:PORT came from, as (the host's variable or option, the port's): Slurm's
    node list and MASTER_PORT or job id, Kubeflow's PET_MASTER_ADDR / PET_MASTER_PORT (or the MASTER_* ones),
    else --rdzv-endpoint, as cli/app.py fills it in. For messages only: a malformed environment reads as the
    option."""
    try:
        slurm = slurm_settings(env)
        if slurm is not None:
            if slurm.rdzv_endpoint == endpoint:
                host_var = "SLURM_JOB_NODELIST" if env.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
                return host_var, "MASTER_PORT" if env.get("MASTER_PORT", "").strip() else "SLURM_JOB_ID"
        else:
            kube = kubeflow_settings(env)
            if kube is not None and kube.rdzv_endpoint == endpoint:
                host_var = "PET_MASTER_ADDR" if env.get("PET_MASTER_ADDR", "").strip() else "MASTER_ADDR"
                return host_var, "PET_MASTER_PORT" if env.get("PET_MASTER_PORT", "").strip() else "MASTER_PORT"
    except EffbenchError:
        pass
    return "--rdzv-endpoint", "--rdzv-endpoint"


def child_env(env: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a child effbench starts (torchrun, or an isolated worker): `env` without the job's
    launcher variables (LAUNCHER_VARS, PET_*, TORCHELASTIC_*), then `extra`.

    An isolated `effbench worker` (a scaling series member) is one process: with a pod's RANK=1 WORLD_SIZE=2
    it would wait in init_process_group for a rank 0 that is not there (distributed.process_group joins a group
    when RANK and WORLD_SIZE say so). torchrun sets every rank's own RANK, WORLD_SIZE, MASTER_* and
    TORCHELASTIC_*, and takes every option effbench relies on from its argv; it would read PET_<OPTION> as the
    default of an option it is not given (torch/distributed/argparse_util.py `env`), so PET_NNODES=2 beside
    --standalone would make a one-node run wait for a second node."""
    kept = {k: v for k, v in env.items() if k not in LAUNCHER_VARS and not k.startswith(LAUNCHER_PREFIXES)}
    return {**kept, **extra}


def threads_per_process(cores: int, nproc_per_node: int, env: Mapping[str, str]) -> int:
    """cores / processes, unless the user pinned OMP_NUM_THREADS (then that, as they asked)."""
    pinned = env.get("OMP_NUM_THREADS", "").strip()
    if pinned:
        try:
            return max(1, int(pinned))
        except ValueError:
            raise EffbenchError(
                "OMP_NUM_THREADS", f"{pinned!r} is not a whole number; unset it or set e.g. 4"
            ) from None
    return max(1, cores // max(1, nproc_per_node))


def torchrun_argv(
    *,
    python: str,
    nproc_per_node: int,
    nnodes: int,
    node_rank: int | None,
    rdzv_endpoint: str | None,
    rdzv_id: str | None,
    worker_args: Sequence[str],
) -> list[str]:
    argv = [python, "-m", "torch.distributed.run"]
    if nnodes == 1 and rdzv_endpoint is None:
        argv.append("--standalone")
    else:
        argv += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", str(rdzv_endpoint)]
        argv += ["--rdzv-id", rdzv_id or "effbench"]
        if node_rank is not None:
            argv += ["--node-rank", str(node_rank)]
    argv += ["--nproc-per-node", str(nproc_per_node), "--max-restarts", "0", "-m", *worker_args]
    return argv


def plan_launch(
    *,
    device: str,
    gpus: int | None,
    nproc: int | None,
    strategy: str,
    nnodes: int,
    node_rank: int | None,
    rdzv_endpoint: str | None,
    rdzv_id: str | None,
    visible_gpus: int,
    cores: int,
    env: Mapping[str, str],
    python: str,
    worker_args: Sequence[str],
) -> LaunchPlan:
    """Decide in-process vs torchrun vs DataParallel, and the argv, from what is visible."""
    if device == "cuda" or (device == "auto" and visible_gpus > 0 and nproc is None):
        device_type = "cuda"
        if nproc is not None:
            raise EffbenchError("--nproc", "counts CPU processes; on GPUs use --gpus N (one process per GPU)")
        if visible_gpus == 0:
            raise EffbenchError(
                "--device",
                "cuda was requested but no GPU is visible; pass --device cpu, or expose GPUs (docker --gpus, apptainer --nv)",
            )
        n = gpus if gpus is not None else visible_gpus
        if n > visible_gpus:
            cvd = env.get("CUDA_VISIBLE_DEVICES")
            limit = f"CUDA_VISIBLE_DEVICES={cvd}" if cvd is not None else "the driver / container"
            raise EffbenchError(
                "--gpus",
                f"{n} GPUs requested but {visible_gpus} visible (limited by {limit}, or Slurm's --gpus-per-node); "
                f"use --gpus {visible_gpus} or less, or request more GPUs",
            )
    else:
        device_type = "cpu"
        if gpus is not None:
            raise EffbenchError("--gpus", "counts GPUs, but this run is on the CPU; use --nproc N for CPU processes")
        if strategy == "dp":
            raise EffbenchError("--strategy", "dp (DataParallel) needs CUDA GPUs; use --strategy ddp on the CPU")
        n = nproc if nproc is not None else 1

    # one process per GPU (or CPU rank) on this node shares its cores, beside its loader workers; DataParallel
    # drives all its GPUs from one process
    threads = threads_per_process(cores, 1 if strategy == "dp" else n, env)
    child_env = {"OMP_NUM_THREADS": str(threads)}
    if strategy == "dp":
        if nnodes > 1:
            raise EffbenchError("--strategy", "dp (DataParallel) is single-node; use --strategy ddp with --nnodes")
        return LaunchPlan("dp", device_type, n, 1, threads, None, child_env)
    if n == 1 and nnodes == 1:
        return LaunchPlan("inprocess", device_type, 1, 1, threads, None, child_env)
    check_rendezvous(nnodes, rdzv_endpoint)
    argv = torchrun_argv(
        python=python,
        nproc_per_node=n,
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        rdzv_id=rdzv_id,
        worker_args=worker_args,
    )
    return LaunchPlan("torchrun", device_type, n, nnodes, threads, argv, child_env)
