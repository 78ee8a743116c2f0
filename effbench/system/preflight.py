"""Preflight: will this run work here? Checked before any folder exists, each failure with its fix.

    effbench doctor                                   # every check as a table; exit 2 if one fails
    effbench doctor --gpus 4 --workers 8 --batch-size 256 --image-size 224
    raise_on_errors(run_checks(cfg))                  # what `effbench run` does before it starts

Most failures here are container settings, so each message names the fix for Docker, compose and
Apptainer: a read-only or foreign-owned /results, a uid with no home, Docker's 64 MiB /dev/shm
(DataLoader workers then *hang* instead of failing), a missing `--gpus` / `--nv`,
NVIDIA_DRIVER_CAPABILITIES without `compute`, a host driver older than the image's CUDA build, a GPU
the torch build has no kernels for, a dataset that is not mounted on a machine with no network.

Everything the checks read is injected: the environment, the root of the file tree (`root/dev/shm`),
the GPU state (`GpuState`, from `probe_gpus()`), and the probes that touch the system (`Probes`), so
tests run on fake inputs. torch and NVML are imported lazily; their absence is a finding, never a crash.
HOME and cache folders that cannot be written are not errors: the finding carries a redirect to a
private folder under the temp dir, which `raise_on_errors` applies to the environment and announces.
"""

from __future__ import annotations

import errno
import ipaddress
import math
import os
import re
import resource
import socket
import sys
import tempfile
import threading
import urllib.parse
import warnings
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO, TypedDict

from effbench.config import RunConfig
from effbench.system.download import MIRROR_FIX, mirror_problem
from effbench.datasets import dataset_spec
from effbench.errors import EffbenchError
from effbench import troubleshooting
from effbench.fmt import GIB, MIB, printable
from effbench.system.cuda_compat import CompatVerdict, DriverFacts, ImageCuda, forward_compat, read_image_cuda
from effbench.launch.plan import threads_per_process
from effbench.system.hardware import CpuLoad, allowed_cores, container_runtime, usable_cores
from effbench.system.mounts import lost_with_container, read_mountinfo
from effbench.system.private_dirs import make_private

Level = Literal["error", "warning", "ok"]


@dataclass(frozen=True)
class Finding:
    """One check's verdict. `fix` is the exact change that makes it pass; `option` is what the user
    typed that an error blames; `env` holds environment redirects (HOME, caches) to apply, folders made under
    `shared` (the temp dir other users share)."""

    level: Level
    check: str
    message: str
    fix: str = ""
    option: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    shared: Path | None = None

    @property
    def fix_line(self) -> str:
        """The fix as printed: a failure's fix ends with its docs/troubleshooting.md section where it has one."""
        return self.fix if self.level == "ok" else troubleshooting.pointed(self.fix, SEE.get(self.check))


# The docs/troubleshooting.md section for a failure of each check (by Finding.check).
SEE = {
    "shm": troubleshooting.SHM,
    "driver": troubleshooting.OLD_DRIVER,
    "arch": troubleshooting.OLD_DRIVER,
    "gpu": troubleshooting.NO_GPU,
    "memlock": troubleshooting.NCCL,
    "dataset": troubleshooting.DATASET,
    "memory": troubleshooting.OOM,
}


@dataclass(frozen=True)
class GpuDevice:
    name: str
    capability: tuple[int, int]
    """Compute capability (major, minor): (8, 0) is sm_80."""
    total_memory_bytes: int | None = None
    """torch.cuda.get_device_properties(i).total_memory (torch/_C/__init__.pyi: _CudaDeviceProperties)."""


@dataclass(frozen=True)
class GpuState:
    """What torch and NVML see. Built by `probe_gpus()`; tests build it by hand."""

    torch_version: str | None = None
    """None when torch does not import (`torch_error` says why)."""
    torch_error: str | None = None
    cuda_build: str | None = None
    """torch.version.cuda, e.g. "13.0"; None for a CPU-only torch build."""
    arch_list: tuple[str, ...] = ()
    """torch.cuda.get_arch_list(): the sm_XY (SASS) and compute_XY (PTX) targets torch was built for."""
    devices: tuple[GpuDevice, ...] = ()
    """The GPUs torch can use (CUDA_VISIBLE_DEVICES applied)."""
    cuda_error: str | None = None
    """Why torch.cuda.is_available() is False, when CUDA said (its warning text)."""
    driver_version: str | None = None
    """NVML's driver version, e.g. "580.65.06"; None without NVML."""
    driver_cuda: tuple[int, int] | None = None
    """Newest CUDA the driver supports (nvmlSystemGetCudaDriverVersion), e.g. (12, 4)."""
    nvml_gpus: int | None = None
    """GPUs NVML sees (all of the container's, before CUDA_VISIBLE_DEVICES); None without NVML."""
    driver_brands: tuple[int, ...] = ()
    """nvmlDeviceGetBrand per GPU (GeForce cards get no forward compatibility: system/cuda_compat.py)."""
    driver_names: tuple[str, ...] = ()
    """nvmlDeviceGetName per GPU (torch sees none when the driver is too old)."""
    image_cuda: ImageCuda | None = None
    """The base's CUDA and its forward-compatibility libraries (read_image_cuda); None: not read."""

    @property
    def visible(self) -> int:
        return len(self.devices)


def _decode(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def probe_gpus() -> GpuState:
    """Read torch's and NVML's view of the GPUs; every failure becomes a field, never an exception."""
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install (missing shared library)
        return GpuState(torch_error=f"{type(e).__name__}: {e}")
    cuda_build = torch.version.cuda
    devices: list[GpuDevice] = []
    cuda_error = None
    arch_list: tuple[str, ...] = ()
    if cuda_build:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            available = torch.cuda.is_available()
        if available:
            try:
                for i in range(torch.cuda.device_count()):
                    props = torch.cuda.get_device_properties(i)
                    major, minor = torch.cuda.get_device_capability(i)
                    devices.append(GpuDevice(torch.cuda.get_device_name(i), (major, minor), int(props.total_memory)))
            except Exception as e:  # CUDA error while initialising: report it as the reason
                cuda_error = f"{type(e).__name__}: {e}"
        else:
            cuda_error = (
                " ".join(str(caught[-1].message).split()) if caught else None
            )  # torch warns why CUDA is unusable
        try:
            arch_list = tuple(torch.cuda.get_arch_list()) or tuple((torch._C._cuda_getArchFlags() or "").split())
        except Exception:
            arch_list = ()
    return GpuState(
        torch_version=torch.__version__,
        cuda_build=cuda_build,
        arch_list=arch_list,
        devices=tuple(devices),
        cuda_error=cuda_error,
        image_cuda=read_image_cuda(torch_cuda=cuda_build),
        **_nvml_state(),
    )


class _NvmlState(TypedDict, total=False):
    """GpuState's NVML fields; empty without NVML or when any call fails."""

    driver_version: str
    nvml_gpus: int
    driver_cuda: tuple[int, int]
    driver_brands: tuple[int, ...]
    driver_names: tuple[str, ...]


def _nvml_state() -> _NvmlState:
    from effbench.system.nvml import nvml_session

    with nvml_session() as nvml:
        if nvml is None:
            return {}
        try:
            count = int(nvml.nvmlDeviceGetCount())
            v = int(nvml.nvmlSystemGetCudaDriverVersion())  # e.g. 12040 for CUDA 12.4
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            return _NvmlState(
                driver_version=_decode(nvml.nvmlSystemGetDriverVersion()),
                nvml_gpus=count,
                driver_cuda=(v // 1000, v % 1000 // 10),
                driver_brands=tuple(int(nvml.nvmlDeviceGetBrand(h)) for h in handles),
                driver_names=tuple(_decode(nvml.nvmlDeviceGetName(h)) for h in handles),
            )
        except Exception:
            return {}


def probe_writable(path: Path) -> str | None:
    """None when `path` accepts a new file (or, when it does not exist yet, its nearest existing
    parent does, so it can be created); otherwise the reason. Writes and removes one empty file:
    permission bits alone lie for root, read-only mounts and root-squashed NFS."""
    target = Path(path)
    try:
        while not target.exists() and target.parent != target:
            if target.is_symlink():  # exists() is False for a dangling link and for a loop (ELOOP)
                return f"{target} is a symbolic link that leads nowhere (dangling or a loop)"
            target = target.parent
        if not target.is_dir():  # a regular file, or /dev/null, a FIFO: no folder to write run folders in
            from effbench.safe_files import file_kind

            return f"{target} is {file_kind(target.stat().st_mode)}, not a folder"
    except OSError as e:  # ENAMETOOLONG, ELOOP, EACCES on a parent...: the OS refuses the path itself
        return f"the OS refuses this path ({os.strerror(e.errno) if e.errno else e})"
    try:
        fd, probe = tempfile.mkstemp(prefix=".effbench-write-test-", dir=target)
    except OSError as e:
        reason = e.strerror or str(e)
        return reason if target == Path(path) else f"cannot create it in {target}: {reason}"
    os.close(fd)
    os.unlink(probe)
    return None


def can_reach(url: str, timeout_s: float = 3.0) -> bool:
    """A TCP connection to the URL's host opens within `timeout_s` (no request is sent)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "file" or not parts.hostname:
        return Path(parts.path).exists()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            return True
    except OSError:
        return False


# A lookup or a knock on the rendezvous port may delay a multi-node start by this much, no more: glibc's
# resolver waits resolv.conf's `timeout` (5 s) per attempt when a name server does not answer.
RESOLVE_TIMEOUT_S = 5.0
KNOCK_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Resolved:
    addresses: tuple[str, ...] = ()
    problem: str | None = None
    """Why the name has no address: the resolver's words, or no answer within the bound."""


def resolve_host(host: str, timeout_s: float = RESOLVE_TIMEOUT_S) -> Resolved:
    """The addresses of `host` (socket.getaddrinfo, what c10d's TCPStore client asks too), within `timeout_s`:
    getaddrinfo takes no timeout, so it runs in a daemon thread that is left behind if it does not answer."""
    box: list[Resolved] = []

    def look() -> None:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            box.append(Resolved(tuple(dict.fromkeys(str(info[4][0]) for info in infos))))
        except (OSError, UnicodeError) as e:  # socket.gaierror is an OSError; a label over 63 bytes: UnicodeError
            box.append(Resolved(problem=(e.strerror if isinstance(e, OSError) and e.strerror else str(e))))

    thread = threading.Thread(target=look, name="effbench-resolve", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not box:
        return Resolved(problem=f"no answer from the resolver within {timeout_s:g} s")
    return box[0] if box[0].addresses or box[0].problem else Resolved(problem="no address")


def is_local_address(address: str) -> bool:
    """`address` is this machine's (loopback, or one a socket can bind to): this node hosts the c10d store, as
    torchrun decides from the endpoint (c10d_rendezvous_backend._matches_machine_hostname)."""
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    if ip.is_loopback:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((address, 0))  # EADDRNOTAVAIL unless one of this machine's interfaces holds it
    except OSError:
        return False
    return True


def knock(
    address: str, port: int, timeout_s: float = KNOCK_TIMEOUT_S
) -> tuple[Literal["answered", "unreachable", "silent"], str]:
    """Open a TCP connection to `address`:`port` and close it (nothing is sent). `answered`: it opened, or the
    host refused it (the host is up; its store opens when its node starts); `unreachable`: no route to it
    (EHOSTUNREACH, ENETUNREACH); `silent`: no answer within `timeout_s` (a firewall that drops, a slow network)."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return "answered", "open"
    except ConnectionRefusedError:
        return "answered", "refused: nothing listens yet"
    except TimeoutError:
        return "silent", f"no answer within {timeout_s:g} s"
    except OSError as e:
        if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL):
            return "unreachable", e.strerror or str(e)
        return "silent", e.strerror or str(e)


def host_memory_available() -> int | None:
    """Bytes of host memory available to new allocations (psutil's `available`); None without psutil."""
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def memlock_limit() -> int | None:
    """The soft RLIMIT_MEMLOCK in bytes; None when unlimited."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return None if soft == resource.RLIM_INFINITY else soft


def shm_free_bytes(path: Path) -> int | None:
    """Free bytes on the filesystem at `path` (/dev/shm); None when it does not exist."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _has_passwd_entry(uid: int) -> bool:
    import pwd

    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


@dataclass(frozen=True)
class Probes:
    """The calls that touch the system, replaceable in tests."""

    writable: Callable[[Path], str | None] = probe_writable
    reachable: Callable[[str], bool] = can_reach
    memlock: Callable[[], int | None] = memlock_limit
    host_memory: Callable[[], int | None] = host_memory_available
    shm_free: Callable[[Path], int | None] = shm_free_bytes
    uid: Callable[[], int] = os.getuid
    has_passwd_entry: Callable[[int], bool] = _has_passwd_entry
    mountinfo: Callable[[], str | None] = read_mountinfo
    resolve: Callable[[str], Resolved] = resolve_host
    local_address: Callable[[str], bool] = is_local_address
    knock: Callable[[str, int], tuple[str, str]] = knock
    usable_cores: Callable[[], int] = usable_cores
    """The cores the launch plan divides into threads per process (affinity)."""
    allowed_cores: Callable[[], float] = allowed_cores
    """The cores the run may use (the tighter of the cgroup quota and the affinity), as its verdict holds them."""


# --------------------------------------------------------------------------------------------------
# The fixes, by runtime. One line each: they end up in a one-line EffbenchError.
# --------------------------------------------------------------------------------------------------
FIX_OUTPUT = (
    'Docker: mount a folder you own, writable: -v "$PWD/results:/results" --user "$(id -u):$(id -g)" (no :ro); '
    "compose: RESULTS_DIR=./results with UID and GID exported; "
    'Apptainer: the image is read-only, so pass --output "$PWD/results" or --bind "$PWD/results:/results"; '
    "or pass --output to a folder you can write"
)
FIX_CACHE = (
    "nothing to do for this run; to keep caches between runs, Docker: -v effbench-cache:/cache; "
    'compose: CACHE_DIR=./cache; Apptainer: --bind "$HOME/.cache/effbench:/cache"'
)
FIX_DATASET = (
    "Docker: -v /path/to/datasets:/data:ro; compose: DATA_DIR=/path/to/datasets; "
    "Apptainer: --bind /path/to/datasets:/data or --data-dir /path/to/datasets; "
    "or use --dataset synthetic"
)


def fix_dataset(runtime: str, folder: str | None = None) -> str:
    """The dataset fix for where the user is: a mount in a container, --data-dir on the host."""
    holds = f" (the folder that holds {folder}/)" if folder else ""
    if runtime in ("docker", "podman"):
        return (
            f"mount the datasets folder{holds}: {runtime} run -v /path/to/datasets:/data:ro ...; "
            "compose: DATA_DIR=/path/to/datasets; or use --dataset synthetic"
        )
    if runtime == "apptainer":
        return f"--bind /path/to/datasets:/data or --data-dir /path/to/datasets{holds}; or use --dataset synthetic"
    return f"pass --data-dir /path/to/datasets{holds} or set EFFBENCH_DATA; or use --dataset synthetic"


FIX_NO_GPU = (
    "Docker: docker run --gpus all (needs the NVIDIA Container Toolkit); "
    "compose: docker compose up (the GPU service reserves GPU_COUNT GPUs), not --profile cpu; "
    "Apptainer: apptainer run --nv (Slurm: also --gres=gpu:N); or run on the CPU with --device cpu"
)
FIX_CAPS = (
    "Docker: -e NVIDIA_DRIVER_CAPABILITIES=compute,utility; compose: remove the override of "
    "NVIDIA_DRIVER_CAPABILITIES (the image sets compute,utility); Apptainer: --nv sets it; "
    "or run on the CPU with --device cpu"
)
FIX_FEWER_GPUS = (
    "Docker: --gpus all or --gpus '\"device=0,1,2,3\"'; compose: GPU_COUNT=N (or all); "
    "Apptainer/Slurm: --nv with --gres=gpu:N or --gpus-per-node=N and no narrower CUDA_VISIBLE_DEVICES; "
    "or ask for fewer with --gpus"
)
FIX_MEMLOCK = (
    "Docker: --ulimit memlock=-1:-1; compose: -f compose.yaml -f compose.memlock.yaml (rootful engines); "
    "Apptainer/Slurm: the job inherits the node's limit, ask for `ulimit -l unlimited` "
    "(Slurm: PropagateResourceLimits)"
)


FIX_TMP = (
    "set TMPDIR to a writable folder; Docker: --tmpfs /tmp; compose: tmpfs: [/tmp]; "
    'Apptainer: --writable-tmpfs or --home "$PWD"'
)


def fix_shm(size_gib: int) -> str:
    return (
        f"Docker: --shm-size={size_gib}g (or --ipc=host); compose: SHM_SIZE={size_gib}gb; "
        "Apptainer: it uses the node's /dev/shm, ask for a larger one; "
        "or lower --workers / --batch-size, or --workers 0"
    )


def _fix_build(cuda_major_minor: str) -> str:
    return (
        f"update the host driver to one that supports CUDA {cuda_major_minor}, or build the image for the "
        "driver you have: docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 "
        "--build-arg TORCH_VERSION=<a version that index has> -t effbench:cu126 . "
        "(compose: EFFBENCH_IMAGE=effbench:cu126; Apptainer: rebuild the SIF from that image); or --device cpu"
    )


# --------------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------------
def check_output(output: Path, probes: Probes) -> list[Finding]:
    """The run folders' parent must accept new files (it is created if missing)."""
    reason = probes.writable(output)
    if reason is None:
        return [Finding("ok", "output", f"{output} is writable")]
    return [
        Finding(
            "error",
            "output",
            f"{output} is not writable by uid {probes.uid()} ({reason})",
            FIX_OUTPUT,
            option="--output",
        )
    ]


def check_output_persists(output: Path, runtime: str, probes: Probes) -> list[Finding]:
    """In Docker or podman, a run folder that is not on a host mount (or a named volume) is deleted
    with the container: exit 0, status ok, and nothing left. A warning, since a `docker cp` or a
    `docker commit` can still save it, but said before and after the run (cli/app.py)."""
    if runtime not in ("docker", "podman"):
        return []
    # docker refuses a relative container side in -v ("results" from `--output results`): name the
    # folder as this process sees it, resolved against the cwd, which is where the run writes.
    output = Path(os.path.abspath(output))
    mountinfo = probes.mountinfo()
    why = lost_with_container(output, mountinfo) if mountinfo else None
    if why is None:
        return [Finding("ok", "output-mount", f"{output} is a mount that outlives the container")]
    return [
        Finding(
            "warning",
            "output-mount",
            f"{output} is {why}; the results will be lost",
            f'add -v "$PWD/results:{output}" --user "$(id -u):$(id -g)" to the {runtime} run command '
            f"(compose mounts RESULTS_DIR there)",
            option="--output",
        )
    ]


def output_loss_warning(output: Path, *, env: Mapping[str, str] = os.environ, root: Path = Path("/")) -> str | None:
    """The one-line stderr warning of check_output_persists, or None (for the end of a run)."""
    for f in check_output_persists(output, container_runtime(root, env), Probes()):
        if f.level == "warning":
            return f"warning: {f.check}: {f.message} (fix: {f.fix_line})"
    return None


# Caches that libraries write at run time, with the default each falls back to. Only the ones set
# explicitly are probed: unset, they follow HOME (or the temp dir), which is checked first.
CACHE_VARS = (
    "XDG_CACHE_HOME",
    "TORCH_HOME",
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "MPLCONFIGDIR",
    "CUDA_CACHE_PATH",
)


def check_home_and_caches(env: Mapping[str, str], probes: Probes) -> list[Finding]:
    """HOME and the cache folders must be writable; when not, redirect them under the temp dir.

    A uid with no passwd entry (`docker run --user 1234`) gets HOME=/, and no user name, which
    getpass (used by torch's compile caches) cannot resolve: both are redirected, not fatal.
    """
    uid = probes.uid()
    scratch = Path(env.get("TMPDIR") or "/tmp") / f"effbench-{uid}"
    findings: list[Finding] = []
    if probes.writable(scratch.parent) is not None:
        scratch = None  # type: ignore[assignment]

    home = env.get("HOME", "")
    home_reason = "not set" if not home else probes.writable(Path(home))
    if home_reason is None:
        findings.append(Finding("ok", "home", f"HOME={home} is writable"))
    elif scratch is None:
        return [
            Finding(
                "error",
                "home",
                f"HOME={home or '(unset)'} is not writable ({home_reason}) and neither is the temp dir",
                FIX_TMP,
                option="HOME",
            )
        ]
    else:
        new_home = scratch / "home"
        findings.append(
            Finding(
                "warning",
                "home",
                f"HOME={home or '(unset)'} is not writable by uid {uid} ({home_reason}); using {new_home} for this run",
                "nothing to do for this run; to keep a home, Docker: -e HOME=/tmp (or keep the image's entrypoint); "
                "compose: environment: HOME: /tmp; Apptainer binds your home by default",
                env={"HOME": str(new_home)},
                shared=scratch.parent,
            )
        )

    if not probes.has_passwd_entry(uid) and not (env.get("USER") or env.get("LOGNAME")):
        findings.append(
            Finding(
                "warning",
                "user",
                f"uid {uid} has no name (no passwd entry, USER unset); using USER=uid{uid} for libraries that ask",
                'Docker: -e USER="$(id -un)"; the image\'s entrypoint sets it',
                env={"USER": f"uid{uid}", "LOGNAME": f"uid{uid}"},
            )
        )

    for var in CACHE_VARS:
        value = env.get(var)
        if not value:
            continue
        reason = probes.writable(Path(value))
        if reason is None:
            findings.append(Finding("ok", "cache", f"{var}={value} is writable"))
            continue
        if var == "TORCH_HOME" and any((Path(value) / "hub" / "checkpoints").glob("*")):
            findings.append(
                Finding(
                    "warning",
                    "cache",
                    f"TORCH_HOME={value} is read-only ({reason}); the weights cached there are used, new downloads cannot be saved",
                    FIX_CACHE.replace("nothing to do for this run; to", "to"),
                )
            )
            continue
        if scratch is None:
            findings.append(
                Finding(
                    "error",
                    "cache",
                    f"{var}={value} is not writable ({reason}) and neither is the temp dir",
                    f"set {var} to a writable folder, or {FIX_TMP}",
                    option=var,
                )  # fmt: skip
            )
            continue
        new = scratch / "cache" / var.lower()
        findings.append(
            Finding(
                "warning",
                "cache",
                f"{var}={value} is not writable by uid {uid} ({reason}); using {new} for this run",
                FIX_CACHE,
                env={var: str(new)},
                shared=scratch.parent,
            )
        )
    return findings


# DataLoader's default prefetch_factor: each worker keeps 2 batches in flight (torch.utils.data.DataLoader). The fast
# loader's batch rings on the CPU are sized by it too (effbench.data.batch_ring), well inside the estimate below.
PREFETCH_FACTOR = 2
# Headroom over the raw tensors: pinned-memory copies, collate buffers and fragmentation of the tmpfs.
SHM_SAFETY = 2


def shm_needed_bytes(workers: int, batch_size: int, image_size: int, processes: int = 1) -> int:
    """Shared memory the DataLoader workers of `processes` local ranks hold at once: each worker
    passes PREFETCH_FACTOR float32 batches of 3 x size x size images through /dev/shm."""
    per_batch = batch_size * 3 * image_size * image_size * 4
    return processes * workers * PREFETCH_FACTOR * per_batch * SHM_SAFETY


def _fmt_bytes(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def check_shm(cfg: RunConfig, root: Path, probes: Probes, processes: int = 1) -> list[Finding]:
    """/dev/shm must hold the workers' batches: when it is too small, workers block forever in
    shm allocation (Docker's default is 64 MiB), so this is caught before the first batch."""
    if cfg.workers == 0:
        return [Finding("ok", "shm", "not used (--workers 0 loads in the training process)")]
    if dataset_spec(cfg.dataset).storage == "generated":
        return [Finding("ok", "shm", "not used (synthetic batches are made on the device, without workers)")]
    assert cfg.batch_size is not None and cfg.image_size is not None  # resolved by RunConfig
    need = shm_needed_bytes(cfg.workers, cfg.batch_size, cfg.image_size, processes)
    size_gib = max(1, math.ceil(need / GIB))
    free = probes.shm_free(root / "dev" / "shm")
    what = f"{cfg.workers} DataLoader workers x batch {cfg.batch_size} at {cfg.image_size} px" + (
        f" x {processes} processes" if processes > 1 else ""
    )
    if free is None:
        return [
            Finding("error", "shm", f"there is no /dev/shm, which {what} need", fix_shm(size_gib), option="--workers")
        ]
    if free < need:
        return [
            Finding(
                "error",
                "shm",
                f"/dev/shm has {_fmt_bytes(free)} free but {what} need about {_fmt_bytes(need)} "
                "(too small a /dev/shm makes the workers hang, not fail)",
                fix_shm(size_gib),
                option="--workers",
            )
        ]
    return [Finding("ok", "shm", f"/dev/shm has {_fmt_bytes(free)} free; {what} need about {_fmt_bytes(need)}")]


# A shared CPU (docs/PERFORMANCE.md, "Shared CPUs"). The load average counts the runnable threads of the whole
# machine (proc(5), /proc/loadavg), so it is held against the machine's cores: above them, other processes
# already want every core, and a run's threads queue behind them. On a 2-core VM, runs at load 1.3-1.6 ran at
# full speed and runs at load 3-6 ten times slower with the default OpenMP wait policy (measured from outside the
# project, 3 alternating pairs each). Steal is time the hypervisor gave other VMs: at 10% a tenth of every second
# the run is timed goes to its neighbours (a threshold chosen here, not measured).
STEAL_BUSY_PCT = 10.0
PASSIVE = "PASSIVE"
FIX_WAIT_POLICY = (
    "OMP_WAIT_POLICY=PASSIVE before the command (waiting threads sleep instead of spinning: 10x faster at load 3-6 "
    "on 2 cores, half the speed on idle ones)"
)


def fix_reserve(cores: int) -> str:
    return f"wait until the load is under {cores}, or reserve cores (taskset, docker --cpuset-cpus, Slurm --exclusive)"


def cpu_busy(load: CpuLoad) -> str | None:
    """Why a run started now would measure other processes too (the load over the machine's cores, or steal
    over STEAL_BUSY_PCT); None when neither is so. Pure."""
    reasons = []
    if load.load_1m is not None and load.load_1m > load.machine_cores:
        reasons.append(f"load average {load.load_1m:.2f} over the last minute on {load.machine_cores} cores")
    if load.steal_pct is not None and load.steal_pct >= STEAL_BUSY_PCT:
        reasons.append(f"the hypervisor gave {load.steal_pct:.0f}% of the CPU time to other VMs (steal)")
    if not reasons:
        return None
    return " and ".join(reasons)


def check_threads(processes: int, threads: int, cores: float, *, pinned: bool) -> list[Finding]:
    """A CPU run with more threads than cores: `processes` x `threads` (the launch plan's, plan.threads_per_process)
    over the `cores` it may use. Its threads take turns on the cores, so its figures measure the oversubscription,
    not the CPU (issue 46: `--nproc 8` on 2 cores said nothing before the run). A warning, not an error: the run
    works, and a --nproc scaling series may mean to go past the cores. A fractional quota (docker --cpus 1.5) counts
    as the next whole core: one thread per started core is not oversubscribed. `pinned`: OMP_NUM_THREADS set by the
    user, the cause when the processes alone fit; unpinned, the plan's own threads (the affinity's cores / N, which a
    tighter cgroup quota may not hold) are not the user's to fix, and the verdict names what they did. Pure."""
    whole = max(1, math.ceil(cores - 1e-9))
    ran = processes * threads
    counted = f"{processes} process(es) x {threads} thread(s) = {ran} threads on {cores:g} CPU cores"
    if processes > whole:
        option, said = "--nproc", f"--nproc {processes} runs {counted}"
        fix = f"--nproc {whole} or fewer (each process gets the cores / N threads)"
    elif pinned and ran > whole:
        option, said = "OMP_NUM_THREADS", f"OMP_NUM_THREADS={threads} gives {counted}"
        fix = f"OMP_NUM_THREADS={whole // processes} or unset it (effbench gives each process the cores / N threads)"
    else:
        return []
    return [
        Finding("warning", "threads", f"{said}: they take turns on the cores, so the figures measure that", fix, option)
    ]


def cpu_threads(cfg: RunConfig, env: Mapping[str, str], probes: Probes) -> list[Finding]:
    """check_threads for a CPU run, with the launch plan's threads per process (nothing for a GPU run, whose
    threads mostly wait on the GPU; nothing for an OMP_NUM_THREADS that is not a number, which the plan refuses)."""
    if not trains_on_cpu(cfg):
        return []
    processes = cfg.nproc or 1
    try:
        threads = threads_per_process(probes.usable_cores(), processes, env)
    except EffbenchError:
        return []
    return check_threads(
        processes, threads, probes.allowed_cores(), pinned=bool(env.get("OMP_NUM_THREADS", "").strip())
    )


def wait_policy_applies(device_type: str, env: Mapping[str, str]) -> bool:
    """OMP_WAIT_POLICY=PASSIVE is the fix to offer: a CPU run (its OpenMP threads do the arithmetic) whose
    environment does not already set it."""
    return device_type == "cpu" and env.get("OMP_WAIT_POLICY", "").strip().upper() != PASSIVE


def check_load(load: CpuLoad, *, device_type: str, env: Mapping[str, str]) -> Finding:
    """Will figures measured now be this machine's, or the other processes' too? A warning, never an error: the
    run works, its timings are what a busy machine gives. Pure: `load` comes from hardware.read_cpu_load."""
    allowed = f"{load.allowed_cores:g} allowed to a run"
    busy = cpu_busy(load)
    if busy is None:
        now = f"load average {load.load_1m:.2f}" if load.load_1m is not None else "load average unknown"
        steal = f", steal {load.steal_pct:.0f}%" if load.steal_pct is not None else ""
        return Finding("ok", "load", f"{now} on {load.machine_cores} cores ({allowed}){steal}")
    fix = fix_reserve(load.machine_cores)
    if wait_policy_applies(device_type, env):
        fix = f"{FIX_WAIT_POLICY}; or {fix}"
    return Finding(
        "warning", "load", f"{busy} ({allowed}): other processes want every core, so a run now measures them too", fix
    )


_ARCH_RE = re.compile(r"^(sm|compute)_(\d+)(\d)([a-z]?)$")


def arch_supported(capability: tuple[int, int], arch_list: Iterable[str]) -> bool:
    """Whether a torch build with `arch_list` runs on a GPU of `capability`: SASS for sm_XY runs on
    the same major with an equal or higher minor; PTX for compute_XY is JIT-compiled for any newer
    GPU (CUDA C Programming Guide, "Binary Compatibility" and "PTX Compatibility"). Arch-specific
    targets (sm_90a) run only on their exact GPU."""
    major, minor = capability
    for arch in arch_list:
        m = _ARCH_RE.match(arch.strip())
        if not m:
            continue
        kind, a_major, a_minor, suffix = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if suffix:
            if (a_major, a_minor) == (major, minor):
                return True
        elif (
            kind == "sm"
            and a_major == major
            and a_minor <= minor
            or kind == "compute"
            and (a_major, a_minor) <= (major, minor)
        ):
            return True
    return False


def _parse_cuda(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"^(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def check_gpus(cfg: RunConfig, gpu: GpuState, env: Mapping[str, str], requested: int) -> list[Finding]:
    """GPUs: visible at all, as many as asked, a driver new enough, an architecture torch can run.

    With --device cuda or --gpus N the problems are errors. With --device auto they are warnings:
    auto falls back to the CPU, which is allowed but rarely what a GPU container was started for.
    """
    if gpu.torch_version is None:
        return [Finding("error", "torch", f"torch does not import ({gpu.torch_error})",
                        "Docker/compose: rebuild the image (its build checks torch); Apptainer: rebuild the SIF; "
                        "in a venv: make env", option=None)]  # fmt: skip
    findings = [Finding("ok", "torch", f"torch {gpu.torch_version}, CUDA build {gpu.cuda_build or 'none (CPU only)'}")]
    if cfg.device == "cpu":
        return findings + [Finding("ok", "gpu", "not used (--device cpu)")]
    wanted = cfg.device == "cuda" or requested > 0
    bad: Level = "error" if wanted else "warning"
    option = "--gpus" if requested > 0 and cfg.device != "cuda" else "--device"

    driver, driver_too_old = _check_driver(gpu, bad, option)
    findings += driver
    if gpu.visible == 0:
        if not wanted and not gpu.nvml_gpus:
            return findings + [Finding("ok", "gpu", "no GPU visible; --device auto runs on the CPU")]
        if driver_too_old:  # the driver is why no GPU is visible: said once, above
            return findings
        msg, fix = _why_no_gpu(gpu, env)
        return findings + [Finding(bad, "gpu", msg, fix, option=option)]
    return findings + _check_count(gpu, requested) + _check_arch(gpu, bad, option)


def compat_verdict(gpu: GpuState) -> CompatVerdict:
    """Whether the driver runs this build, directly or through forward compatibility (doctor's line)."""
    driver = DriverFacts(gpu.driver_version, gpu.driver_cuda, gpu.driver_brands, gpu.driver_names)
    return forward_compat(driver, gpu.image_cuda or ImageCuda(torch_cuda=gpu.cuda_build))


def _check_driver(gpu: GpuState, bad: Level, option: str) -> tuple[list[Finding], bool]:
    """The driver's CUDA against the build's: too old a major is `bad` (and True), an older minor a warning."""
    build = _parse_cuda(gpu.cuda_build)
    if not (build and gpu.driver_cuda):
        return [], False
    need = f"{build[0]}.{build[1]}"
    have = f"{gpu.driver_cuda[0]}.{gpu.driver_cuda[1]}"
    # An older driver on a data-center GPU may still run this build through the image's forward-compatibility
    # libraries; on a GeForce, or a driver branch they do not support, or with them off the loader path, the
    # one line says which (system/cuda_compat.py). Without them in the image, the plain message below.
    compat = compat_verdict(gpu)
    if compat.state == "in-use":
        return [Finding("ok", "driver", f"forward compatibility {compat.message}")], False
    if compat.state in ("consumer-gpu", "driver-unsupported", "not-enabled"):
        return [Finding(bad, "driver", compat.message, compat.fix or "", option=option)], True
    if gpu.driver_cuda[0] < build[0]:
        return [
            Finding(
                bad,
                "driver",
                f"the driver ({gpu.driver_version}) supports CUDA up to {have}, "
                f"but this torch was built for CUDA {need}",
                _fix_build(need),
                option=option,
            )  # fmt: skip
        ], True
    if gpu.driver_cuda < build:
        # Same major: CUDA minor-version compatibility runs it, except kernels that need PTX JIT.
        return [
            Finding(
                "warning",
                "driver",
                f"the driver ({gpu.driver_version}) supports CUDA {have}, older than the "
                f"build's {need}: runs under minor-version compatibility, PTX-only kernels may fail",
                _fix_build(need),
            )  # fmt: skip
        ], False
    return [Finding("ok", "driver", f"driver {gpu.driver_version} supports CUDA {have} >= build {need}")], False


def _why_no_gpu(gpu: GpuState, env: Mapping[str, str]) -> tuple[str, str]:
    """Why CUDA sees no GPU, most specific cause first, and its fix."""
    caps = env.get("NVIDIA_DRIVER_CAPABILITIES")
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if not gpu.cuda_build:
        return (
            f"torch {gpu.torch_version} is a CPU-only build",
            "Docker/compose: build the Dockerfile with its default TORCH_INDEX_URL (a CUDA build); "
            "Apptainer: rebuild the SIF from that image; or --device cpu",
        )
    if caps is not None and not ({"compute", "all"} & {c.strip() for c in caps.split(",")}):
        return (
            f"no GPU visible: NVIDIA_DRIVER_CAPABILITIES={caps} lacks compute, so the CUDA driver was not mounted",
            FIX_CAPS,
        )
    if cvd is not None and cvd.strip() in ("", "-1", "none", "NoDevFiles"):
        return (
            f"no GPU visible: CUDA_VISIBLE_DEVICES={cvd!r} hides them",
            "unset CUDA_VISIBLE_DEVICES: Docker: drop -e CUDA_VISIBLE_DEVICES and pass --gpus; compose: set GPU_COUNT "
            "instead; Apptainer/Slurm: --nv with --gres=gpu:N sets it; or --device cpu",
        )
    if gpu.nvml_gpus:
        return (
            f"NVML sees {gpu.nvml_gpus} GPU(s) but CUDA none" + (f": {gpu.cuda_error}" if gpu.cuda_error else ""),
            "check CUDA_VISIBLE_DEVICES and the driver (nvidia-smi on the host); " + FIX_NO_GPU,
        )
    return "no GPU visible in this environment" + (f" ({gpu.cuda_error})" if gpu.cuda_error else ""), FIX_NO_GPU


def _check_count(gpu: GpuState, requested: int) -> list[Finding]:
    if requested > gpu.visible:
        return [
            Finding(
                "error",
                "gpu",
                f"--gpus {requested} asked, but only {gpu.visible} GPU(s) are visible",
                FIX_FEWER_GPUS,
                option="--gpus",
            )  # fmt: skip
        ]
    names = ", ".join(sorted({d.name for d in gpu.devices}))
    return [Finding("ok", "gpu", f"{gpu.visible} GPU(s) visible: {names}")]


def _check_arch(gpu: GpuState, bad: Level, option: str) -> list[Finding]:
    """The first visible GPU whose architecture this torch build has no kernels for, if any."""
    if not gpu.arch_list:
        return []
    for i, d in enumerate(gpu.devices):
        if not arch_supported(d.capability, gpu.arch_list):
            sm = f"sm_{d.capability[0]}{d.capability[1]}"
            return [
                Finding(
                    bad,
                    "arch",
                    f"GPU {i} ({d.name}, {sm}) is not in this torch build's arch list ({' '.join(gpu.arch_list)})",
                    "build the image with a torch that has kernels for it: docker build --build-arg "
                    "TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 --build-arg TORCH_VERSION=<a version that "
                    "index has> -t effbench:cu126 . (older GPUs need an older CUDA build; compose: "
                    "EFFBENCH_IMAGE=effbench:cu126; Apptainer: rebuild the SIF from that image); or --device cpu",
                    option=option,
                )
            ]
    return [Finding("ok", "arch", f"every visible GPU is in the arch list ({' '.join(gpu.arch_list)})")]


def _rendezvous_fix(host_var: str, host: str) -> str:
    if host_var.startswith("SLURM_"):
        return (
            f"run inside the allocation with srun, where every node resolves the others (getent hosts {host}), "
            "or pass --rdzv-endpoint HOST:PORT with a host every node can reach"
        )
    if "MASTER_ADDR" in host_var:
        return (
            "the master pod's Service must resolve from this pod (check the job's master Service and the pod's "
            f"dnsPolicy: getent hosts {host})"
        )
    return f"pass a host every node can resolve (getent hosts {host}) or its address: --rdzv-endpoint ADDRESS:PORT"


def check_rendezvous_host(cfg: RunConfig, env: Mapping[str, str], probes: Probes) -> list[Finding]:
    """A multi-node run's rendezvous host resolves, and, from a node that does not host the store, its port
    answers: else torchrun retries the c10d store for minutes, prints pages of C++ frames and ends in a
    ChildFailedError. The error names the variable the host came from (launch.plan.rendezvous_source).

    Only a missing name or no route is an error. A refusal is an answer: the store opens when the hosting
    node's torchrun starts, which may be later than this node. No answer within KNOCK_TIMEOUT_S is a warning
    (a firewall that drops the port, or a slow network). The hosting node's own port is not tried: a store of
    the same job (two node agents on one machine) may already hold it, which torchrun accepts."""
    if cfg.nnodes <= 1 or not cfg.rdzv_endpoint:
        return []
    from effbench.config import parse_endpoint
    from effbench.launch.plan import rendezvous_source

    host, port = parse_endpoint(cfg.rdzv_endpoint)
    host_var, port_var = rendezvous_source(cfg.rdzv_endpoint, env)
    origin = f"{host_var}={env.get(host_var, '')}" if host_var != "--rdzv-endpoint" else host_var
    resolved = probes.resolve(host)
    if resolved.problem is not None or not resolved.addresses:
        return [
            Finding(
                "error",
                "rendezvous",
                f"the rendezvous host {host!r} (from {origin}) does not resolve here ({resolved.problem}), so "
                f"no node could meet there",
                _rendezvous_fix(host_var, host),
                option=host_var,
            )
        ]
    addresses = resolved.addresses[:3]  # the first few, as TCPStore's client tries them in order
    if any(probes.local_address(a) for a in addresses):
        return [Finding("ok", "rendezvous", f"{host} is this node: it hosts the c10d store on port {port}")]
    said = []
    for address in addresses:
        kind, detail = probes.knock(address, port)
        if kind == "answered":
            return [Finding("ok", "rendezvous", f"{host} ({address}) answers on port {port} ({detail})")]
        said.append((kind, f"{address}: {detail}"))
    where = f"{host}:{port} (host from {origin}, port from {port_var})"
    if all(kind == "unreachable" for kind, _ in said):
        return [
            Finding(
                "error",
                "rendezvous",
                f"{where} cannot be reached from this node ({'; '.join(d for _, d in said)})",
                _rendezvous_fix(host_var, host),
                option=host_var,
            )
        ]
    return [
        Finding(
            "warning",
            "rendezvous",
            f"{where} did not answer ({'; '.join(d for _, d in said)}); if a firewall drops it, the nodes wait "
            "for torchrun's rendezvous timeout",
            f"open TCP port {port} between the nodes",
        )
    ]


def check_memlock(limit: int | None, processes: int, nnodes: int) -> list[Finding]:
    """NCCL over InfiniBand/RoCE registers (pins) memory, which RLIMIT_MEMLOCK caps; Docker's
    default is 8 MiB. Only multi-GPU and multi-node runs use NCCL, so only they are warned."""
    if limit is None:
        return [Finding("ok", "memlock", "unlimited")]
    if processes > 1 or nnodes > 1:
        return [
            Finding(
                "warning",
                "memlock",
                f"locked-memory limit is {_fmt_bytes(limit)}; NCCL over InfiniBand/RoCE can fail or fall back to "
                "slower transports with a low limit",
                FIX_MEMLOCK,
            )
        ]
    return [Finding("ok", "memlock", f"{_fmt_bytes(limit)} (only multi-GPU NCCL needs more)")]


def _archives() -> Any:
    """effbench.data.archives, torch-free (effbench/data/__init__.py imports nothing): a missing dataset is
    reported before torch is loaded."""
    from effbench.data import archives

    return archives


def _parent_hint(root: Path, folder: str) -> str:
    """--data-dir pointed at the dataset's own folder (.../cifar-100-python) instead of its parent."""
    if root.name == folder:
        return f"; --data-dir names the dataset's own folder: point it at its parent, --data-dir {root.parent}"
    return ""


def check_dataset(cfg: RunConfig, env: Mapping[str, str], probes: Probes, runtime: str = "none") -> list[Finding]:
    """The dataset must be on disk (every file effbench.data reads), or downloadable: --download
    and a reachable host (EFFBENCH_MIRROR or the official one) and a writable --data-dir.
    Torch-free, so `effbench run` reports a missing dataset within a second."""
    spec = dataset_spec(cfg.dataset)
    if spec.storage == "generated":
        return [Finding("ok", "dataset", f"{spec.title} (generated, nothing to read)")]
    root = cfg.data_dir
    if spec.storage == "folder":
        if root.is_dir() and any(root.iterdir()):
            return [Finding("ok", "dataset", f"image folder {root}")]
        return [
            Finding(
                "error",
                "dataset",
                f"image folder {root} is missing or empty",
                fix_dataset(runtime).replace("/path/to/datasets", "/path/to/images"),
                option="--data-dir",
            )
        ]
    archives = _archives()
    archive = archives.ARCHIVES[spec.name]
    missing = archives.missing_parts(archive, root)
    if not missing:
        return [Finding("ok", "dataset", f"{archive.title} at {root / archive.folder}")]
    where = root / archive.folder if len(missing) == len(archive.required) else root / archive.folder / missing[0]
    hint = _parent_hint(root, archive.folder)
    fix = fix_dataset(runtime, archive.folder)
    if not cfg.download:
        return [
            Finding(
                "error",
                "dataset",
                f"{archive.title} is not at {where}{hint}",
                fix + ", or pass --download where there is network",
                option="--data-dir",
            )  # fmt: skip
        ]
    file_name = archive.url.rsplit("/", 1)[-1]
    mirror = env.get(archives.MIRROR_ENV, "").strip()
    problem = mirror_problem(mirror) if mirror else None
    if problem is not None:
        return [Finding("error", "dataset", problem, MIRROR_FIX, option=archives.MIRROR_ENV)]
    source = f"{mirror.rstrip('/')}/{file_name}" if mirror else archive.url
    if not probes.reachable(source):
        return [
            Finding(
                "error",
                "dataset",
                f"{archive.title} is not at {where} and {source} cannot be reached (no network?){hint}",
                fix + f", or set {archives.MIRROR_ENV} to a reachable base URL",
                option="--data-dir",
            )  # fmt: skip
        ]
    reason = probes.writable(root)
    if reason is not None:
        return [
            Finding(
                "error",
                "dataset",
                f"{archive.title} would be downloaded into {root}, which is not writable ({reason})",
                "Docker: -v /path/to/datasets:/data without :ro for the first run; compose: pass --data-dir "
                '/cache/datasets (the cache is writable); Apptainer: --data-dir "$PWD/data"; or download on the host',
                option="--data-dir",
            )  # fmt: skip
        ]
    return [Finding("ok", "dataset", f"{archive.title} will be downloaded from {source} into {root}")]


def check_weights(cfg: RunConfig) -> list[Finding]:
    """--weights FILE must exist before torch is imported to read it (models/weights.py loads it)."""
    if cfg.weights in (None, "none", "imagenet"):
        return []
    path = Path(cfg.weights).expanduser()
    if path.is_file():
        return [Finding("ok", "weights", f"{path} exists")]
    return [
        Finding(
            "error",
            "weights",
            f"{path} is not a file" + (" (it is a folder)" if path.is_dir() else ""),
            "pass the path of a state_dict file (torch.save), or --weights imagenet / --weights none",
            option="--weights",
        )
    ]


# the optional extra (pyproject.toml) that brings nvidia-dali for torch's CUDA build
DALI_INSTALL = "pip install 'effbench[dali]' (nvidia-dali-cuda130)"


def module_present(name: str) -> bool:
    """Whether `name` can be imported, without importing it (nor torch with it)."""
    import importlib.util

    if name in sys.modules:
        return sys.modules[name] is not None  # None: import blocked (python -X importtime, tests)
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing
        return False


def check_loader(cfg: RunConfig, present: Callable[[str], bool] = module_present) -> list[Finding]:
    """--loader dali needs the optional nvidia-dali wheel: said before torch loads, with the install line."""
    if cfg.loader != "dali" or not dataset_spec(cfg.dataset).image_files:  # generated data ignores --loader
        return []
    if present("nvidia.dali"):
        return [Finding("ok", "loader", "NVIDIA DALI is installed")]
    return [
        Finding("error", "loader", "dali needs NVIDIA DALI, which is not installed", DALI_INSTALL, option="--loader")
    ]


def check_gpu_decode(cfg: RunConfig, gpu: GpuState | None) -> list[Finding]:
    """--gpu-decode decodes with nvjpeg: refused before the run when the run will be on the CPU."""
    if not cfg.gpu_decode or (cfg.device != "cpu" and gpu is not None and gpu.visible):
        return []
    where = "--device cpu was given" if cfg.device == "cpu" else "no GPU is visible"
    fix = "drop --gpu-decode, or run on a CUDA device (--device cuda)"
    return [
        Finding(
            "error",
            "gpu-decode",
            f"decodes JPEGs with nvjpeg on a CUDA device, but {where}",
            fix,
            option="--gpu-decode",
        )
    ]


def batch_bytes(batch_size: int, image_size: int) -> int:
    """One float32 input batch of 3 x size x size images: the least a step must hold in memory."""
    return batch_size * 3 * image_size * image_size * 4


def check_batch_memory(
    cfg: RunConfig, host_available: int | None, gpu: GpuState | None, processes: int
) -> list[Finding]:
    """A batch that cannot fit even once (in host memory, where it is made or decoded, or on the GPU)
    is refused before anything is allocated, naming the options that size it."""
    assert cfg.batch_size is not None and cfg.image_size is not None  # resolved by RunConfig
    one = batch_bytes(cfg.batch_size, cfg.image_size)
    what = f"one batch of {cfg.batch_size} x 3 x {cfg.image_size} x {cfg.image_size} float32 is {_fmt_bytes(one)}"
    fix = "lower --image-size or --batch-size"
    option = "--image-size" if cfg.image_size > default_size_for(cfg) else "--batch-size"
    if host_available is not None and one * processes > host_available:
        where = f" x {processes} processes" if processes > 1 else ""
        return [
            Finding(
                "error",
                "memory",
                f"{what}{where}, more than the {_fmt_bytes(host_available)} of host memory available",
                fix,
                option=option,
            )
        ]
    if gpu is not None and not trains_on_cpu(cfg) and gpu.devices:
        smallest = min((d.total_memory_bytes for d in gpu.devices if d.total_memory_bytes), default=None)
        if smallest is not None and one > smallest:
            return [
                Finding("error", "memory", f"{what}, more than the GPU's {_fmt_bytes(smallest)}", fix, option=option)
            ]
    return [Finding("ok", "memory", f"{what}; it fits")]


def default_size_for(cfg: RunConfig) -> int:
    from effbench.config import default_image_size

    return default_image_size(cfg.arch, cfg.dataset)


def trains_on_cpu(cfg: RunConfig) -> bool:
    """The launch plan's rule (launch/plan.py plan_launch): --device cpu, or --nproc N without --device cuda
    (--nproc counts CPU processes, even where GPUs are visible)."""
    return cfg.device == "cpu" or (cfg.device != "cuda" and cfg.nproc is not None)


def local_processes(cfg: RunConfig, gpus_requested: int, gpu: GpuState | None) -> int:
    """Training processes on this node: one per GPU (DDP), per --nproc on the CPU, else one."""
    if trains_on_cpu(cfg):
        return cfg.nproc or 1
    if cfg.strategy == "dp":
        return 1
    n = max(gpus_requested, cfg.gpus or 0)
    if n == 0 and gpu is not None:
        n = gpu.visible
    return max(n, 1)


def run_checks(
    cfg: RunConfig,
    *,
    gpus_requested: int = 0,
    env: Mapping[str, str] = os.environ,
    root: Path = Path("/"),
    gpu: GpuState | None = None,
    probes: Probes | None = None,
    check_data: bool = True,
) -> list[Finding]:
    """Every preflight check for `cfg`, in order; errors first in their group. `check_data=False` leaves the
    dataset out (`effbench doctor` with no dataset asked for lists the catalog instead). `gpu` defaults to
    `probe_gpus()` (not called for --device cpu, so a CPU run does not touch CUDA). The torch-free
    checks run first: when one fails, the GPU probe (which imports torch) is skipped, so a bad
    folder or a missing dataset is reported in about a second instead of after torch loads."""
    probes = probes or Probes()
    runtime = container_runtime(root, env)
    requested = max(gpus_requested, cfg.gpus or 0)
    findings = check_output(cfg.output, probes)
    findings += check_output_persists(cfg.output, runtime, probes)
    findings += check_home_and_caches(env, probes)
    findings += check_rendezvous_host(cfg, env, probes)
    late = (check_dataset(cfg, env, probes, runtime) if check_data else []) + check_weights(cfg) + check_loader(cfg)
    if gpu is None and cfg.device != "cpu":
        if errors(findings + late):
            return findings + late
        gpu = probe_gpus()
    processes = local_processes(cfg, requested, gpu)
    findings += check_shm(cfg, root, probes, processes)
    findings += check_batch_memory(cfg, probes.host_memory(), gpu, processes)
    findings += cpu_threads(cfg, env, probes)
    if gpu is not None:
        findings += check_gpus(cfg, gpu, env, requested)
        if not trains_on_cpu(cfg) and gpu.visible:  # NCCL's pinned buffers: GPU processes only
            findings += check_memlock(probes.memlock(), processes, cfg.nnodes)
    findings += check_gpu_decode(cfg, gpu)
    return findings + late


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.level == "error"]


def apply_redirects(findings: Iterable[Finding], environ: MutableMapping[str, str]) -> list[Path]:
    """Set the redirected HOME/cache variables in `environ` and create their folders: private (0700), each
    folder below the shared temp dir checked (no link, ours, writable by no one else; private_dirs.py), else
    one EffbenchError naming the variable."""
    made = []
    for f in findings:
        for name, value in f.env.items():
            if name in ("USER", "LOGNAME"):
                environ[name] = value
                continue
            assert f.shared is not None  # every folder redirect is made under the temp dir
            made.append(make_private(f.shared, Path(value), option=name))
            environ[name] = value
    return made


def raise_on_errors(
    findings: list[Finding],
    *,
    environ: MutableMapping[str, str] = os.environ,
    stream: TextIO | None = None,
    said: set[str] | None = None,
) -> None:
    """Raise an EffbenchError for the first error (its message ends with the fix); otherwise apply
    the HOME/cache redirects to `environ` and print each warning on one line to stderr.

    `said`: the warning lines already printed by a command that runs many runs (a sweep, a scaling series,
    the selftest): each is printed once, not once per run; the lines printed here are added to it."""
    for f in findings:
        if f.level == "error":
            raise EffbenchError(f.option, f"{f.message}; fix: {f.fix_line}" if f.fix_line else f.message)
    apply_redirects(findings, environ)
    out = stream if stream is not None else sys.stderr
    for f in findings:
        if f.level != "warning":
            continue
        line = f"warning: {f.check}: {f.message}" + (f" (fix: {f.fix_line})" if f.fix_line else "")
        if said is not None:
            if line in said:
                continue
            said.add(line)
        print(printable(line), file=out)  # a path from the environment or the disk: shown, not obeyed
