"""The driver's CUDA, the image's CUDA, and whether forward compatibility bridges them.

torch's CUDA 13.0 wheels need a driver that runs CUDA 13.0 (the R580 branch or newer). On a data-center
GPU an older production or long-term branch (R535, R550, R570) can still run them through forward
compatibility: the nvidia/cuda base images install the cuda-compat package, a newer user-mode driver
(libcuda.so.<version>) under /usr/local/cuda/compat, and once the loader finds it ahead of the host's
libcuda (the NVIDIA Container Toolkit puts it on the path when the host driver is older, or
LD_LIBRARY_PATH does) CUDA 13 code runs on the old kernel driver. It cannot help on a GeForce / TITAN
card (forward compatibility is for data-center GPUs: CUDA Compatibility guide, "Forward Compatibility";
CUDA error 804 otherwise), nor on a driver branch the compat package was not made for (the branches
the image's NVIDIA_REQUIRE_CUDA lists; CUDA error 803 otherwise).

`read_image_cuda()` and `read_driver()` read the system; `forward_compat()` is pure, so tests feed it
a new driver, an old one on a data-center GPU and an old one on a GeForce.

    effbench doctor        # the "forward compat" line, and a failing driver check with its fix
    effbench --version     # the same facts in one line
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import Any

COMPAT_DIR = "/usr/local/cuda/compat"
# NVML brands (pynvml.py, NVML_BRAND_*) of consumer cards, on which forward compatibility does not work.
CONSUMER_BRANDS = {5: "GeForce", 6: "TITAN", 15: "GeForce RTX", 16: "TITAN RTX"}
# The first driver branch whose own CUDA is 13.0 (CUDA 13.0 release notes, "CUDA Toolkit and Corresponding
# Driver Versions": >= 580.65.06 on Linux): what the fix asks for when the image names no compat branch.
CUDA13_DRIVER_BRANCH = 580
FIX_CU126 = (
    "or build the CUDA 12.6 flavour, which any R525+ driver runs: docker build --build-arg FLAVOUR=cu126 "
    "--build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 ... (docs/containers.md)"
)


@dataclass(frozen=True)
class ImageCuda:
    """The CUDA this process was built for and the compat libraries it carries."""

    torch_cuda: str | None = None
    """torch.version.cuda, e.g. "13.0"; None for a CPU-only build."""
    base_cuda: str | None = None
    """$CUDA_VERSION, which the nvidia/cuda bases set (e.g. "13.0.1"); None on another base or the host."""
    require_cuda: str | None = None
    """$NVIDIA_REQUIRE_CUDA of the nvidia/cuda base: `cuda>=13.0 brand=tesla,driver>=535,driver<536 ...`."""
    compat_driver: str | None = None
    """Version of the forward-compatibility libcuda (libcuda.so.<version> in COMPAT_DIR); None without one."""
    compat_on_path: bool = False
    """The loader finds the compat libcuda first (LD_LIBRARY_PATH, /etc/ld.so.conf.d, or it is mapped)."""


@dataclass(frozen=True)
class DriverFacts:
    """The host driver as NVML reports it."""

    version: str | None = None
    """nvmlSystemGetDriverVersion, e.g. "535.183.01"."""
    cuda: tuple[int, int] | None = None
    """nvmlSystemGetCudaDriverVersion (1000 * major + 10 * minor), the CUDA version nvidia-smi prints."""
    brands: tuple[int, ...] = ()
    """nvmlDeviceGetBrand per GPU."""
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompatVerdict:
    state: str
    """not-needed | in-use | consumer-gpu | driver-unsupported | not-enabled | no-compat | unknown"""
    ok: bool
    message: str
    fix: str | None = None


def parse_cuda(text: str | None) -> tuple[int, int] | None:
    m = re.match(r"^(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def compat_branches(require: str | None) -> set[int]:
    """The driver branches NVIDIA_REQUIRE_CUDA accepts besides `cuda>=X` (each `driver>=535,driver<536`)."""
    return {int(m) for m in re.findall(r"driver>=(\d+),driver<\d+", require or "")}


def forward_compat(driver: DriverFacts, image: ImageCuda) -> CompatVerdict:
    """Whether this driver runs the image's CUDA, directly or through forward compatibility, in one line."""
    need, have = parse_cuda(image.torch_cuda), driver.cuda
    if need is None or have is None or not driver.version:
        why = "no NVIDIA driver visible (no NVML)" if not driver.version else "a CPU-only torch build"
        return CompatVerdict("unknown", True, f"not applicable: {why}")
    branch = int(driver.version.split(".")[0]) if driver.version.split(".")[0].isdigit() else 0
    compat_branch = int(image.compat_driver.split(".")[0]) if image.compat_driver else None
    need_s, have_s = f"{need[0]}.{need[1]}", f"{have[0]}.{have[1]}"
    where = f"driver {driver.version} (CUDA {have_s})"
    bridged = image.compat_on_path and compat_branch is not None and branch < compat_branch
    if have[0] >= need[0] and not bridged:
        return CompatVerdict("not-needed", True, f"not needed: {where} runs torch's CUDA {need_s} itself")
    names = driver.names if len(driver.names) == len(driver.brands) else ("",) * len(driver.brands)
    consumer = [
        name or CONSUMER_BRANDS[b] for name, b in zip(names, driver.brands, strict=True) if b in CONSUMER_BRANDS
    ]
    want = min((b for b in compat_branches(image.require_cuda) if b > branch), default=CUDA13_DRIVER_BRANCH)
    update = f"update the host driver to R{CUDA13_DRIVER_BRANCH} or newer (CUDA {need_s}), {FIX_CU126}"
    if consumer:
        card = consumer[0]
        return CompatVerdict(
            "consumer-gpu", False,
            f"{where} is older than torch's CUDA {need_s}, and forward compatibility works on data-center GPUs "
            f"only, not the {card}", update,
        )  # fmt: skip
    if compat_branch is None:
        return CompatVerdict(
            "no-compat", False,
            f"{where} is older than torch's CUDA {need_s}, and this image has no forward-compatibility "
            f"libraries ({COMPAT_DIR}: its base is not nvidia/cuda)",
            f"rebuild on the default nvidia/cuda base (forward compatibility on data-center GPUs), {update}",
        )  # fmt: skip
    branches = compat_branches(image.require_cuda)
    if branches and branch not in branches:
        listed = ", ".join(f"R{b}" for b in sorted(branches))
        return CompatVerdict(
            "driver-unsupported", False,
            f"{where} is older than torch's CUDA {need_s}, and the image's forward-compatibility package "
            f"{image.compat_driver} supports the {listed} branches only (NVIDIA_REQUIRE_CUDA), not R{branch}",
            f"update the host driver to R{want} or newer, {FIX_CU126}",
        )  # fmt: skip
    if not image.compat_on_path:
        return CompatVerdict(
            "not-enabled", False,
            f"{where} is older than torch's CUDA {need_s}; the image's forward-compatibility libraries "
            f"({COMPAT_DIR}, {image.compat_driver}) would run it on this GPU but are not on the loader path",
            "NVIDIA Container Toolkit 1.17.4 or newer adds them by itself (update it); or run with "
            f"-e LD_LIBRARY_PATH={COMPAT_DIR}:/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
        )  # fmt: skip
    return CompatVerdict(
        "in-use", True,
        f"in use: the image's cuda-compat {image.compat_driver} ({COMPAT_DIR}) runs torch's CUDA {need_s} on {where}",
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Readers (the system): each returns what it finds, never raises
# --------------------------------------------------------------------------------------------------
def _compat_libcuda(folder: Path) -> str | None:
    """The version in the compat libcuda's file name (libcuda.so.580.82.07 -> "580.82.07")."""
    try:
        names = [p.name for p in folder.iterdir()]
    except OSError:
        return None
    versions = [m.group(1) for n in names if (m := re.fullmatch(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)", n))]
    return max(versions, key=lambda v: tuple(int(x) for x in v.split("."))) if versions else None


def _on_loader_path(root: Path, env: Mapping[str, str], folder: Path) -> bool:
    """The compat folder is where the loader looks first: LD_LIBRARY_PATH, an ld.so.conf.d entry (the
    toolkit's enable-cuda-compat hook writes one), or a libcuda from it already mapped in this process."""
    real = os.path.realpath(folder)
    if any(p and os.path.realpath(root / p.lstrip("/")) == real for p in env.get("LD_LIBRARY_PATH", "").split(":")):
        return True
    for conf in sorted((root / "etc" / "ld.so.conf.d").glob("*.conf")):
        try:
            lines = conf.read_text().split()
        except OSError:
            continue
        if any(os.path.realpath(root / ln.lstrip("/")) == real for ln in lines if ln.startswith("/")):
            return True
    try:
        maps = (root / "proc" / "self" / "maps").read_text()
    except OSError:
        return False
    return any("libcuda.so" in ln and "/compat/" in ln for ln in maps.splitlines())


def read_image_cuda(
    root: str | Path = "/", environ: Mapping[str, str] | None = None, torch_cuda: str | None = None
) -> ImageCuda:
    env = os.environ if environ is None else environ
    root = Path(root)
    folder = root / COMPAT_DIR.lstrip("/")
    compat = _compat_libcuda(folder)
    return ImageCuda(
        torch_cuda=torch_cuda,
        base_cuda=env.get("CUDA_VERSION") or None,
        require_cuda=env.get("NVIDIA_REQUIRE_CUDA") or None,
        compat_driver=compat,
        compat_on_path=compat is not None and _on_loader_path(root, env, folder),
    )


def read_driver() -> DriverFacts:
    """NVML's view of the driver; empty without NVML (no driver, no GPU), never an exception."""
    from effbench.system.nvml import nvml_session

    def text(v: object) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    with nvml_session() as nvml:
        if nvml is None:
            return DriverFacts()
        try:
            version = text(nvml.nvmlSystemGetDriverVersion())
            v = int(nvml.nvmlSystemGetCudaDriverVersion())  # 12020 for CUDA 12.2
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
            brands = tuple(int(nvml.nvmlDeviceGetBrand(h)) for h in handles)
            names = tuple(text(nvml.nvmlDeviceGetName(h)) for h in handles)
            return DriverFacts(version, (v // 1000, v % 1000 // 10), brands, names)
        except Exception:  # an NVML error: the facts are missing, not wrong
            return DriverFacts()


def summary(driver: DriverFacts, image: ImageCuda) -> dict[str, Any]:
    """env.json's `cuda_compat`: the facts and the verdict."""
    verdict = forward_compat(driver, image)
    return {
        "driver_version": driver.version,
        "driver_cuda": f"{driver.cuda[0]}.{driver.cuda[1]}" if driver.cuda else None,
        **asdict(image),
        "forward_compat": verdict.state,
    }
