"""What this effbench is: its version, the image it runs in (revision, lock digest), torch and CUDA,
read without importing torch so `effbench --version` answers at once.

    effbench --version
    docker run --rm effbench --version

The image writes IMAGE_INFO at build time (Dockerfile, last stage): the git revision it was built
from, the flavour and the sha256 of the lock file its `pip freeze` was checked against. env.json
records the same, so a result names the image that made it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
from pathlib import Path
from typing import Any

IMAGE_INFO = Path("/etc/effbench/image.json")
IMAGE_INFO_ENV = "EFFBENCH_IMAGE_INFO"  # another path, for tests and for images laid out differently


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_cuda_build() -> str | None:
    """torch's CUDA version from torch/version.py as text: torch writes it there at build time as
    `cuda: Optional[str] = '13.0'` (torch 2.14.1, line 6), None on a CPU-only wheel."""
    spec = importlib.util.find_spec("torch")  # finds the package without running its __init__
    if spec is None or spec.origin is None:
        return None
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return None
    m = re.search(r"^cuda\s*(?::[^=]*)?=\s*'([^']*)'", text, re.M)
    return m.group(1) if m else None


def source_commit() -> str | None:
    """The git commit of the checkout this effbench's package sits in, or None: installed from a wheel, no git,
    or git refuses (a checkout another user owns). The user's GIT_DIR or GIT_WORK_TREE never redirects it."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--verify", "HEAD"],
            capture_output=True, text=True, timeout=10, env=env, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", sha) else None


def image_info(environ: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The image's identity file, or None outside the image (or when it cannot be read)."""
    env = os.environ if environ is None else environ
    path = Path(env.get(IMAGE_INFO_ENV) or IMAGE_INFO)
    from effbench import safe_files
    from effbench.errors import EffbenchError

    try:  # a regular file of plain JSON only (safe_files): never a hang on a FIFO, never a RecursionError
        data = safe_files.load_json(path, fix="rebuild the image")
    except (OSError, EffbenchError):
        return None
    return data if isinstance(data, dict) else None


def version_text(environ: dict[str, str] | None = None) -> str:
    """`effbench --version`: one line per fact, none of them needing torch to be imported."""
    info = image_info(environ)
    torch_version = _dist_version("torch")
    cuda = torch_cuda_build() if torch_version else None
    lines = [f"effbench {_dist_version('effbench') or 'unknown (not installed)'}"]
    if info is not None:
        lines.append(
            f"image revision {info.get('revision', 'unknown')}, flavour {info.get('flavour', 'unknown')}, "
            f"lock sha256 {str(info.get('lock_sha256', 'unknown'))[:16]}, built {info.get('created', 'unknown')}"
        )
    else:
        lines.append("image: none (not running in the effbench image)")
    lines.append(f"torch {torch_version or 'not installed'}, CUDA {cuda or 'none (CPU-only build)'}")
    lines.append(f"torchvision {_dist_version('torchvision') or 'not installed'}")
    lines.append(cuda_line(cuda))
    return "\n".join(lines)


def cuda_line(torch_cuda: str | None) -> str:
    """The driver's CUDA (NVML, no torch), the base's CUDA_VERSION and forward compatibility, in one line."""
    from effbench.system import cuda_compat

    driver, image = cuda_compat.read_driver(), cuda_compat.read_image_cuda(torch_cuda=torch_cuda)
    have = (
        f"driver {driver.version} (CUDA {driver.cuda[0]}.{driver.cuda[1]})"
        if driver.version and driver.cuda
        else "no NVIDIA driver"
    )
    return (
        f"{have}, image CUDA {image.base_cuda or 'none (base is not nvidia/cuda)'}, forward compatibility "
        + cuda_compat.forward_compat(driver, image).message
    )
