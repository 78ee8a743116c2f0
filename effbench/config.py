"""Typed, validated run configuration.

`RunConfig` is what the user asked for, with every default resolved, so that `config.json` alone
says how to rerun. Validation happens here, where the fields are declared, and every error names
the CLI option (`--batch-size`), never the Python field. No torch import: `effbench --help` and
config errors stay instant.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effbench.datasets import (
    DATASETS,
    DEFAULT_IMAGE_SIZE,
    dataset_aliases,
    dataset_names,
    dataset_spec,
    with_image_files,
)
from effbench.errors import EffbenchError

# Native input resolution of each EfficientNet (Tan & Le 2019, Table 1 / efficientnet-pytorch's
# `efficientnet_params`).
EFFICIENTNET_NATIVE_SIZE = {
    "efficientnet-b0": 224,
    "efficientnet-b1": 240,
    "efficientnet-b2": 260,
    "efficientnet-b3": 300,
    "efficientnet-b4": 380,
    "efficientnet-b5": 456,
    "efficientnet-b6": 528,
    "efficientnet-b7": 600,
}
ARCHS = (*EFFICIENTNET_NATIVE_SIZE, "resnet18")
ARCH_ALIASES = {f"b{i}": f"efficientnet-b{i}" for i in range(8)}

OPTIMIZERS = ("sgd", "sgd-nesterov", "adagrad", "adadelta", "adam", "adamw")
# Starting learning rates per optimizer: 0.1 for SGD on CIFAR ResNets (He et al. 2016, and the
# seed lab's lab2.py); the library defaults of torch.optim for the adaptive ones.
DEFAULT_LR = {
    "sgd": 0.1,
    "sgd-nesterov": 0.1,
    "adagrad": 0.01,
    "adadelta": 1.0,
    "adam": 1e-3,
    "adamw": 1e-3,
}
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
STRATEGIES = ("ddp", "dp")
SCALING_MODES = ("weak", "strong")
DEVICES = ("auto", "cpu", "cuda")
# auto resolves to fast: faster than torchvision on every dataset measured (docs/PERFORMANCE.md).
LOADERS = ("auto", "fast", "torchvision")
OPTIMIZER_IMPLS = ("auto", "fused", "foreach", "for-loop")
# Optimizers with a fused kernel per device type in torch >= 2.4 (torch.optim docs: SGD, Adam, AdamW
# on CUDA and CPU; Adagrad on CPU only).
FUSED_OPTIMIZERS = {
    "cuda": ("sgd", "sgd-nesterov", "adam", "adamw"),
    "cpu": ("sgd", "sgd-nesterov", "adam", "adamw", "adagrad"),
}
WEIGHTS_KEYWORDS = ("imagenet", "none")

DEFAULT_RDZV_PORT = 29500  # torchrun's own default master port

_FREEZE_RE = re.compile(r"^(classifier|none|last:(\d+))$")


def option_name(field_name: str) -> str:
    """The CLI spelling of a config field: batch_size -> --batch-size."""
    return "--" + field_name.replace("_", "-")


def _choice(option: str, value: str, choices: tuple[str, ...], aliases: dict[str, str]) -> str:
    key = value.strip().lower()
    key = aliases.get(key, key)
    if key not in choices:
        listed = ", ".join(list(choices) + sorted(aliases))
        raise EffbenchError(option, f"unknown value {value!r}; choose one of {listed}")
    return key


def canonical_arch(value: str) -> str:
    return _choice("--arch", value, ARCHS, ARCH_ALIASES)


def canonical_dataset(value: str) -> str:
    return _choice("--dataset", value, dataset_names(), dataset_aliases())


def parse_endpoint(text: str) -> tuple[str, int]:
    """`host:port` (or `[v6::addr]:port`) -> (host, port) for c10d rendezvous."""
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([A-Za-z0-9_.-]+):(\d+)", text.strip())
    if not m:
        raise EffbenchError(
            "--rdzv-endpoint",
            f"{text!r} is not HOST:PORT; use e.g. node01:{DEFAULT_RDZV_PORT} or 127.0.0.1:{DEFAULT_RDZV_PORT}",
        )
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4))
    if not 1 <= port <= 65535:
        raise EffbenchError("--rdzv-endpoint", f"port {port} is out of range; use 1..65535")
    return host, port


def is_loopback(host: str) -> bool:
    """localhost, 127.x.y.z, ::1: a name each node resolves to itself, so nodes can never meet there."""
    h = host.strip().lower()
    return h == "localhost" or h.endswith(".localhost") or h == "::1" or re.fullmatch(r"127(\.\d+){3}", h) is not None


def check_rendezvous(nnodes: int, rdzv_endpoint: str | None) -> None:
    """A multi-node launch needs an endpoint every node can reach: never none, never loopback."""
    if nnodes > 1 and rdzv_endpoint is None:
        raise EffbenchError(
            "--rdzv-endpoint",
            f"--nnodes {nnodes} needs a rendezvous host every node can reach; pass --rdzv-endpoint HOST:PORT "
            "(under srun, Slurm names it from SLURM_JOB_NODELIST, which is not set here)",
        )
    if rdzv_endpoint is not None:
        host, _ = parse_endpoint(rdzv_endpoint)
        if nnodes > 1 and is_loopback(host):
            raise EffbenchError(
                "--rdzv-endpoint",
                f"{rdzv_endpoint} is this machine's loopback; the other {nnodes - 1} node(s) cannot reach it. "
                "Pass the first node's hostname or IP, e.g. node01:29500",
            )


def parse_freeze(value: str) -> tuple[str, int]:
    """`classifier` | `none` | `last:N` -> (mode, N); N is 0 unless mode is `last`."""
    m = _FREEZE_RE.match(value.strip().lower())
    if not m:
        raise EffbenchError("--freeze", f"bad spec {value!r}; use classifier, none, or last:N with N >= 1 blocks")
    if m.group(2) is None:
        return m.group(1), 0
    n = int(m.group(2))
    if n < 1:
        raise EffbenchError("--freeze", f"last:{n} trains no block; use last:N with N >= 1, or classifier")
    return "last", n


@dataclass(frozen=True)
class RunConfig:
    """One training benchmark run, fully resolved. Field names match the CLI options."""

    arch: str = "efficientnet-b0"
    """Model: efficientnet-b0..b7 (aliases b0..b7) or resnet18."""
    dataset: str = "cifar100"
    """A name of the dataset catalog (effbench/datasets.py): cifar100 (cifar), cifar10, food101 (food), imagefolder,
    synthetic."""
    data_dir: Path = Path("data")
    """Folder holding the extracted datasets (cifar-100-python/, cifar-10-batches-py/, food-101/)
    or, for imagefolder, the class-per-folder tree itself (train/ and val/ inside, or classes)."""
    download: bool = False
    """Download a missing dataset from its official URL (or EFFBENCH_MIRROR)."""
    val_fraction: float | None = None
    """Carve a seeded validation split of this fraction from the training set; None uses the
    official test split."""
    image_size: int | None = None
    """Input resolution in pixels; None resolves to the architecture's native size."""
    loader: str = "auto"
    """fast (uint8 batches, augmentation batched on the device; CIFAR held on the device),
    torchvision (per-sample PIL transforms in DataLoader workers, as the seeds ran), or auto (fast)."""
    gpu_decode: bool = False
    """Fast loader on food101/imagefolder: decode JPEGs on the GPU (nvjpeg) instead of in the workers."""
    data_only: bool = False
    """Iterate the loader (augmentation and copy to the device included) without a model: images/s delivered."""
    workers: int = 2
    """DataLoader worker processes (0 loads in the training process)."""
    batch_size: int | None = None
    """Images per device per step; None resolves to 64 (EfficientNet) or 128 (ResNet-18)."""
    epochs: int = 5
    """Passes over the training split."""
    max_steps: int | None = None
    """Cap on training steps per epoch (None: the whole split)."""
    max_val_steps: int | None = None
    """Cap on validation batches per epoch (None: the whole validation split)."""
    warmup_steps: int = 5
    """Steps at the start of the first epoch excluded from throughput and reported apart."""
    optimizer: str = "sgd"
    """sgd, sgd-nesterov, adagrad, adadelta, adam, adamw."""
    lr: float | None = None
    """Peak learning rate; None resolves per optimizer (DEFAULT_LR)."""
    momentum: float = 0.9
    """Momentum for sgd and sgd-nesterov."""
    weight_decay: float = 5e-4
    """L2 weight decay (decoupled for adamw)."""
    precision: str = "auto"
    """auto (bf16 autocast on CUDA devices that support it, fp32 on CPU), fp32, bf16, fp16."""
    channels_last: bool | None = None
    """Run the model and its inputs in channels_last memory format; None: on for CUDA, off on the CPU."""
    cudnn_benchmark: bool | None = None
    """torch.backends.cudnn.benchmark (autotune convolutions in the warm-up steps); None: on for CUDA."""
    pin_memory: bool | None = None
    """Page-locked loader batches, copied with non_blocking=True; None: on for CUDA."""
    optimizer_impl: str = "auto"
    """fused, foreach or for-loop optimizer kernels; auto: fused on CUDA where the optimizer has one,
    else foreach on CUDA, for-loop on the CPU (measured fastest there, docs/PERFORMANCE.md)."""
    compile: bool = False
    """torch.compile the model; compilation happens in the warm-up steps and is reported apart."""
    device: str = "auto"
    """auto (cuda when visible), cpu or cuda."""
    seed: int = 0
    """Seed for weights init, data order, splits and augmentation."""
    freeze: str | None = None
    """classifier (train only the new head; the base runs without autograd, BN stats fixed),
    none (full fine-tune) or last:N; None resolves to classifier with pretrained weights, else none."""
    weights: str | None = None
    """imagenet, none, or a local file; None resolves to imagenet for EfficientNet, none for ResNet-18."""
    batch_norm: bool = True
    """Build resnet18 with BatchNorm (False: --no-batch-norm, the seed lab's C7)."""
    gpus: int | None = None
    """GPUs to use, one process each (torchrun + DDP when more than one); None: every visible GPU."""
    nproc: int | None = None
    """CPU processes (torchrun + gloo DDP) for --device cpu; None: one."""
    strategy: str = "ddp"
    """ddp (one process per device under torchrun) or dp (DataParallel in one process, as the seeds ran)."""
    scaling: str = "weak"
    """weak: --batch-size is per device; strong: --batch-size is global and split across devices."""
    nnodes: int = 1
    """Nodes in a multi-node run (Slurm fills this in)."""
    node_rank: int | None = None
    """This node's rank in a multi-node run (Slurm's SLURM_NODEID)."""
    rdzv_endpoint: str | None = None
    """HOST:PORT of the c10d rendezvous for multi-node runs (Slurm: the first host of the job)."""
    rdzv_id: str | None = None
    """Rendezvous id shared by the nodes of one run (Slurm: SLURM_JOB_ID)."""
    pg_timeout_s: float = 300.0
    """Process-group timeout: how long a rank waits on a dead peer inside a collective."""
    output: Path = Path("results")
    """Parent folder of run folders."""
    profile: bool = True
    """Run the profiling pass (torch.profiler) after the timed training."""
    profile_steps: int = 3
    """Active steps recorded by the profiling pass (after 1 wait and 1 warm-up step)."""
    sample_interval_s: float = 0.5
    """Interval of the utilisation sampler (GPU via NVML, host via psutil)."""
    log_interval: int = 10
    """Steps between progress lines and device-to-host metric reads."""
    repeats: int | None = None
    """Throughput windows: the measured steps split into this many for a median and 95% CI
    (effbench/analysis/windows.py); None: min(5, measured steps)."""
    smoke: bool = False
    """The offline 2-core smoke preset was applied."""

    # --- derived helpers (not options) -------------------------------------------------------
    @property
    def freeze_mode(self) -> tuple[str, int]:
        return parse_freeze(self.freeze or "none")

    @property
    def is_efficientnet(self) -> bool:
        return self.arch.startswith("efficientnet-")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k, v in d.items():
            if isinstance(v, Path):
                d[k] = str(v)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        for k in ("data_dir", "output"):
            if k in kw and kw[k] is not None:
                kw[k] = Path(kw[k])
        return cls(**kw)

    # --- validation and defaults --------------------------------------------------------------
    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        set_("arch", canonical_arch(self.arch))
        set_("dataset", canonical_dataset(self.dataset))
        set_("optimizer", _choice("--optimizer", self.optimizer, OPTIMIZERS, {}))
        set_("precision", _choice("--precision", self.precision, PRECISIONS, {}))
        set_("device", _choice("--device", self.device, DEVICES, {}))
        set_("loader", _choice("--loader", self.loader, LOADERS, {}))
        set_("optimizer_impl", _choice("--optimizer-impl", self.optimizer_impl, OPTIMIZER_IMPLS, {}))
        set_("strategy", _choice("--strategy", self.strategy, STRATEGIES, {}))
        set_("scaling", _choice("--scaling", self.scaling, SCALING_MODES, {}))

        for name in ("epochs", "log_interval", "nnodes", "profile_steps"):
            _positive(name, getattr(self, name))
        for name in ("batch_size", "max_steps", "max_val_steps", "image_size", "gpus", "nproc", "repeats"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        for name in ("workers", "warmup_steps"):
            if getattr(self, name) < 0:
                raise EffbenchError(option_name(name), f"must be 0 or more (got {getattr(self, name)})")
        if self.image_size is not None and self.image_size < 16:
            raise EffbenchError("--image-size", f"{self.image_size} px is too small; use 16 or more")
        if self.val_fraction is not None and not 0.0 < self.val_fraction < 1.0:
            raise EffbenchError("--val-fraction", f"must be between 0 and 1 exclusive (got {self.val_fraction})")
        if self.lr is not None and not self.lr > 0:
            raise EffbenchError("--lr", f"must be greater than 0 (got {self.lr})")
        if not 0.0 <= self.momentum < 1.0:
            raise EffbenchError("--momentum", f"must be in [0, 1) (got {self.momentum})")
        if self.weight_decay < 0:
            raise EffbenchError("--weight-decay", f"must be 0 or more (got {self.weight_decay})")
        if self.gpus is not None and self.device == "cpu":
            raise EffbenchError("--gpus", "counts GPUs, but --device cpu was given; use --nproc N for CPU processes")
        if self.nproc is not None and self.device == "cuda":
            raise EffbenchError("--nproc", "counts CPU processes, but --device cuda was given; use --gpus N on GPUs")
        if self.strategy == "dp" and self.device == "cpu":
            raise EffbenchError("--strategy", "dp (DataParallel) needs CUDA GPUs; use --strategy ddp with --device cpu")
        if self.node_rank is not None and not 0 <= self.node_rank < self.nnodes:
            raise EffbenchError(
                "--node-rank", f"{self.node_rank} is outside 0..{self.nnodes - 1} for --nnodes {self.nnodes}"
            )
        check_rendezvous(self.nnodes, self.rdzv_endpoint)
        if not self.sample_interval_s >= 0.05:
            raise EffbenchError("--sample-interval-s", f"must be at least 0.05 s (got {self.sample_interval_s})")
        if not self.pg_timeout_s > 0:
            raise EffbenchError("--pg-timeout-s", f"must be greater than 0 (got {self.pg_timeout_s})")
        if not self.batch_norm and self.arch != "resnet18":
            raise EffbenchError("--no-batch-norm", "only applies to --arch resnet18; EfficientNet needs its BatchNorm")
        if self.loader == "auto":
            set_("loader", "fast")
        if (
            self.repeats is not None
            and self.max_steps is not None
            and self.repeats > self.epochs * self.max_steps - self.warmup_steps
        ):
            raise EffbenchError(
                "--repeats",
                f"{self.repeats} windows need as many measured steps; raise --max-steps or --epochs, or lower --repeats",
            )
        if self.gpu_decode and (self.loader != "fast" or not dataset_spec(self.dataset).image_files):
            raise EffbenchError(
                "--gpu-decode",
                "decodes image files in the fast loader; use it with --loader fast and --dataset "
                + " or ".join(with_image_files()),
            )
        if self.compile and self.data_only:
            raise EffbenchError(
                "--compile", "--data-only runs no model, so there is nothing to compile; drop one of them"
            )
        if self.compile and self.warmup_steps < 1:
            raise EffbenchError(
                "--warmup-steps",
                "--compile compiles in the first step; use at least 1 warm-up step so it is not measured",
            )

        # Defaults that depend on other fields, resolved once so config.json is explicit.
        if self.weights is None:
            set_("weights", "imagenet" if self.is_efficientnet else "none")
        elif self.weights.strip().lower() in WEIGHTS_KEYWORDS:
            set_("weights", self.weights.strip().lower())
        if self.freeze is None:
            set_("freeze", "classifier" if self.weights != "none" else "none")
        mode, n = parse_freeze(self.freeze)
        set_("freeze", f"last:{n}" if mode == "last" else mode)
        if self.batch_size is None:
            set_("batch_size", 64 if self.is_efficientnet else 128)
        if self.lr is None:
            set_("lr", DEFAULT_LR[self.optimizer])
        if self.image_size is None:
            set_("image_size", default_image_size(self.arch, self.dataset))
        set_("data_dir", Path(self.data_dir))
        set_("output", Path(self.output))


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise EffbenchError(option_name(name), f"must be 1 or more (got {value})")


def default_image_size(arch: str, dataset: str) -> int:
    """The architecture's native resolution; resnet18 keeps CIFAR's 32 px on CIFAR."""
    if arch == "resnet18":
        return dataset_spec(dataset).native_size or DEFAULT_IMAGE_SIZE
    return EFFICIENTNET_NATIVE_SIZE[arch]


def smoke_overrides() -> dict[str, Any]:
    """`--smoke`: a full report on a 2-core CPU with no network in well under a minute."""
    return dict(
        arch="efficientnet-b0",
        dataset="synthetic",
        weights="none",
        freeze="none",
        image_size=32,
        batch_size=16,
        epochs=1,
        max_steps=12,
        warmup_steps=2,
        workers=0,
        device="cpu",
        log_interval=4,
        smoke=True,
    )


def resolve_for_device(cfg: RunConfig, device_type: str) -> RunConfig:
    """The device-dependent defaults made explicit, so config.json says what ran. Pure (no torch).

    On CUDA: channels_last, cudnn.benchmark and pinned memory on, fused optimizers where the
    optimizer has one (else foreach). On the CPU they are off and the optimizer loops per tensor:
    on 2 cores, b0's SGD step took 5.0 ms for-loop, 6.2 ms foreach, 5.0 ms fused (docs/PERFORMANCE.md).
    """
    cuda = device_type == "cuda"
    impl = cfg.optimizer_impl
    if impl == "auto":
        impl = ("fused" if cfg.optimizer in FUSED_OPTIMIZERS["cuda"] else "foreach") if cuda else "for-loop"
    elif impl == "fused" and cfg.optimizer not in FUSED_OPTIMIZERS.get(device_type, ()):
        has = ", ".join(FUSED_OPTIMIZERS.get(device_type, ())) or "none"
        raise EffbenchError(
            "--optimizer-impl",
            f"{cfg.optimizer} has no fused kernel on {device_type} (fused: {has}); use foreach or for-loop",
        )
    return dataclasses.replace(
        cfg,
        channels_last=cuda if cfg.channels_last is None else cfg.channels_last,
        cudnn_benchmark=cuda if cfg.cudnn_benchmark is None else cfg.cudnn_benchmark,
        pin_memory=cuda if cfg.pin_memory is None else cfg.pin_memory,
        optimizer_impl=impl,
    )


def env_default(name: str, fallback: str) -> str:
    """Environment defaults for paths (EFFBENCH_DATA, EFFBENCH_OUTPUT)."""
    return os.environ.get(name) or fallback


__all__ = [
    "ARCHS",
    "DATASETS",
    "OPTIMIZERS",
    "RunConfig",
    "canonical_arch",
    "canonical_dataset",
    "default_image_size",
    "option_name",
    "parse_freeze",
    "resolve_for_device",
    "smoke_overrides",
]
