"""Where initial weights come from, and loading them so that a bad file fails in one line.

Three sources: `imagenet` (the official file, cached where torch.hub caches it), `none`, or a local
path. Files are read with `torch.load(weights_only=True)` only, so a checkpoint can never run code.
A file must match the model tensor for tensor; the one allowed difference is the classifier, which
is left freshly initialised when its shape does not fit the number of classes.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from effbench.system.download import fetch, file_digest, mirrored_url
from effbench.errors import EffbenchError
from effbench.models.staged import FreezableStages

OPTION = "--weights"
MIRROR_ENV = "EFFBENCH_WEIGHTS_MIRROR"
WRAPPER_KEYS = ("state_dict", "model")
"""Keys under which training scripts commonly nest the state_dict (timm, Lightning, torchvision refs)."""
KEY_PREFIXES = ("module.", "_orig_mod.")
"""Added by DataParallel / DistributedDataParallel and by torch.compile."""
SHA_SHOWN = 8
"""Hex digits of sha256 recorded for a local file, as torch-hub file names carry."""


def official_sha256_prefix(filename: str) -> str:
    """The sha256 prefix a torch-hub style name carries: resnet18-f37072fd.pth -> f37072fd.

    The one place the expected checksum of an official file is decided (tests patch it).
    """
    return Path(filename).stem.rsplit("-", 1)[-1]


def imagenet_cache_path(url: str, filename: str | None = None) -> Path:
    """torch.hub's cache (honours TORCH_HOME), so files torch.hub already fetched are reused."""
    return Path(torch.hub.get_dir()) / "checkpoints" / (filename or url.rsplit("/", 1)[-1])


def fetch_imagenet(arch: str, url: str, filename: str | None = None) -> tuple[Path, str | None]:
    """The cached official file for `arch`, downloaded (or from EFFBENCH_WEIGHTS_MIRROR) if absent.

    `filename` names the cache (and mirror) file when the URL's own name is not unique: timm's files
    on the Hugging Face hub are all `model.safetensors` and carry no checksum in their name, so the
    returned expected sha256 prefix is None for them (the caller records the file's own digest).
    """
    dest = imagenet_cache_path(url, filename)
    prefix = None if filename else official_sha256_prefix(dest.name)
    if dest.is_file():
        return dest, prefix
    source = mirrored_url(url, MIRROR_ENV)
    if source != url:  # the mirror serves the cache's file name
        source = source.rsplit("/", 1)[0] + "/" + dest.name
    try:
        fetch(source, dest, option=OPTION, sha256_prefix=prefix)
    except EffbenchError as e:
        reason = e.message.split("; ")[0]  # fetch's own advice names a different fix
        raise EffbenchError(
            OPTION,
            f"ImageNet weights for {arch} are not cached at {dest} and could not be downloaded ({reason}); "
            f"copy {dest.name} there, or use --weights none",
        ) from None
    return dest, prefix


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """A flat {name: tensor} from a checkpoint file, without ever running code from it."""
    if not path.exists():
        raise EffbenchError(OPTION, f"{path} not found; give an existing checkpoint file, imagenet, or none")
    if not path.is_file():
        raise EffbenchError(OPTION, f"{path} is not a file; give a checkpoint file, imagenet, or none")
    try:
        if path.suffix == ".safetensors":  # timm's format: tensors only, no code by construction
            from safetensors.torch import load_file

            obj = load_file(str(path), device="cpu")
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # e.g. "Detected pickle protocol 4": the error says more
                obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure to unpickle means "not a checkpoint"
        raise EffbenchError(
            OPTION,
            f"{path} is not a PyTorch checkpoint ({_load_failure(e)}); "
            "save one with torch.save(model.state_dict(), path)",
        ) from None
    return check_values(_unwrap(obj, path), path)


def check_values(state: dict[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
    """Refuse weights that load but cannot train: complex or data-less tensors, nan or inf values
    (they would turn every loss nan from the first step and the run would measure nothing)."""
    for name, t in state.items():
        if t.is_complex():
            raise EffbenchError(OPTION, f"{path}: tensor '{name}' is {t.dtype}, not real; weights must be real numbers")
        if t.device.type == "meta":
            raise EffbenchError(OPTION, f"{path}: tensor '{name}' holds no data (a meta tensor)")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise EffbenchError(
                OPTION,
                f"{path}: tensor '{name}' holds {bad} nan/inf value(s); use a checkpoint saved before it diverged",
            )
    return state


def _load_failure(e: Exception) -> str:
    """The informative line of a torch.load error (the weights_only one opens with boilerplate)."""
    text, label = str(e), type(e).__name__
    if text.startswith("Weights only load failed"):
        label = "weights_only refused it"
        text = text.split("\n", 1)[-1].split("Check the documentation", 1)[0]
        text = text.split("WeightsUnpickler error:", 1)[-1]
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"{label}: {line[:200]}" if line else label  # cut: the error must stay one readable line


def _unwrap(obj: Any, path: Path) -> dict[str, torch.Tensor]:
    if isinstance(obj, Mapping) and not _is_state_dict(obj):
        for key in WRAPPER_KEYS:
            if isinstance(obj.get(key), Mapping):
                obj = obj[key]
                break
    if not isinstance(obj, Mapping) or not obj or not _is_state_dict(obj):
        if isinstance(obj, Mapping):
            what = f"a dict with keys {sorted(map(str, obj))[:5]}"  # a few, to recognise the file by
        else:
            what = f"a {type(obj).__name__}"
        raise EffbenchError(
            OPTION, f"{path} holds {what}, not a state_dict; save one with torch.save(model.state_dict(), path)"
        )
    state = dict(obj)
    for prefix in KEY_PREFIXES:
        if all(k.startswith(prefix) for k in state):
            state = {k[len(prefix) :]: v for k, v in state.items()}
    return state


def _is_state_dict(obj: Mapping[Any, Any]) -> bool:
    return all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())


def _shape(t: torch.Tensor) -> str:
    return str(tuple(t.shape))


def load_into(model: FreezableStages, state: dict[str, torch.Tensor], *, arch: str, path: Path) -> str:
    """Copy `state` into `model`; return "loaded" or "reinitialised" for the classifier.

    Raises EffbenchError naming the first tensor (in model order) that the file lacks or shapes
    differently, then the first one the model lacks.
    """
    expected = model.state_dict()
    if model.effbench_checkpoint_ignores:
        state = {k: v for k, v in state.items() if not k.startswith(model.effbench_checkpoint_ignores)}
    head = f"{model.effbench_head_name}."
    head_fits = all(k in state and state[k].shape == v.shape for k, v in expected.items() if k.startswith(head))
    unfit = f"{path} does not fit {arch}:"
    for name, tensor in expected.items():
        if name.startswith(head) and not head_fits and name in state:
            continue  # another task's classifier: dropped, ours keeps its fresh init
        if name not in state:
            if name.endswith(".num_batches_tracked"):
                continue  # older files predate this counter; it only matters with momentum=None
            raise EffbenchError(OPTION, f"{unfit} it is missing tensor '{name}' (was it saved from another --arch?)")
        if state[name].shape != tensor.shape:
            raise EffbenchError(
                OPTION,
                f"{unfit} tensor '{name}' has shape {_shape(state[name])} in the file "
                f"but {_shape(tensor)} in the model",
            )
    for name in state:
        if name not in expected:
            raise EffbenchError(OPTION, f"{unfit} it has tensor '{name}' that the model lacks")
    keep = {k: v for k, v in state.items() if head_fits or not k.startswith(head)}
    model.load_state_dict(keep, strict=False)
    return "loaded" if head_fits else "reinitialised"


def load_weights(
    model: FreezableStages, weights: str, *, arch: str, imagenet_url: str, imagenet_file: str | None = None
) -> dict[str, object]:
    """Apply `--weights` to a freshly built model; return what to record about it."""
    if weights == "none":
        return {"weights": "none", "head": "random"}
    if weights == "imagenet":
        path, expected = fetch_imagenet(arch, imagenet_url, imagenet_file)
        prefix = expected or file_digest(path, "sha256")[:SHA_SHOWN]
        try:
            state = read_state_dict(path)
        except EffbenchError as e:  # a cached file is not re-verified; say how to refresh it
            raise EffbenchError(OPTION, f"{e.message.split('; ')[0]}; delete it to download it again") from None
        head = load_into(model, state, arch=arch, path=path)
        return {"weights": "imagenet", "weights_file": str(path), "weights_sha256_prefix": prefix, "head": head}
    path = Path(weights).expanduser()
    state = read_state_dict(path)
    head = load_into(model, state, arch=arch, path=path)
    return {
        "weights": str(path),
        "weights_file": str(path.resolve()),
        "weights_sha256_prefix": file_digest(path, "sha256")[:SHA_SHOWN],
        "head": head,
    }
