"""Typed, validated run configuration.

`RunConfig` is what the user asked for, with every default resolved, so that `config.json` alone
says how to rerun. Validation happens here, where the fields are declared, and every error names
the CLI option (`--batch-size`), never the Python field. No torch import: `effbench --help` and
config errors stay instant.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from effbench.datasets import (
    DATASETS,
    DEFAULT_IMAGE_SIZE,
    dataset_aliases,
    dataset_names,
    dataset_spec,
    datasets_help,
    with_image_files,
)
from effbench.archs import ARCH_ALIASES, ARCHS, EFFICIENTNET_NATIVE_SIZE
from effbench.errors import EffbenchError
from effbench.recipes import AUGMENTS


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
# synthetic: the loader of generated data (--dataset synthetic), what auto resolves to there; no other
# loader applies to it, so config.json records it as the loader that ran whatever was asked.
LOADERS = ("auto", "fast", "torchvision", "synthetic", "dali")
OPTIMIZER_IMPLS = ("auto", "fused", "foreach", "for-loop")
TIMINGS = ("pipelined", "per-step")  # run/timing.py
OMP_WAIT_POLICIES = ("auto", "passive", "active")  # system/wait_policy.py
# Optimizers with a fused kernel per device type in torch >= 2.4 (torch.optim docs: SGD, Adam, AdamW
# on CUDA and CPU; Adagrad on CPU only).
FUSED_OPTIMIZERS = {
    "cuda": ("sgd", "sgd-nesterov", "adam", "adamw"),
    "cpu": ("sgd", "sgd-nesterov", "adam", "adamw", "adagrad"),
}
WEIGHTS_KEYWORDS = ("imagenet", "none")

DEFAULT_RDZV_PORT = 29500  # torchrun's own default master port

_FREEZE_RE = re.compile(r"^(classifier|none|last:(\d+))$")


@dataclass(frozen=True)
class Range:
    """The values a numeric option accepts, declared once on its RunConfig field and used both to
    validate and in the CLI help (`[range: 1..100000]`). Bounds are inclusive unless marked open."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False

    def text(self) -> str:
        if self.lo_open or self.hi_open:
            return f"{'(' if self.lo_open else '['}{_num(self.lo)}, {_num(self.hi)}{')' if self.hi_open else ']'}"
        return f"{_num(self.lo)}..{_num(self.hi)}"

    def contains(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):  # nan compares False both ways
            return False
        above = value > self.lo if self.lo_open else value >= self.lo
        below = value < self.hi if self.hi_open else value <= self.hi
        return above and below


def _num(x: float) -> str:
    """A bound or value as typed: 18446744073709551615 and 1000, not 1.84467e+19 and 1000.0."""
    if isinstance(x, int) or (math.isfinite(x) and x.is_integer() and abs(x) < 1e15):
        return str(int(x))
    return f"{x:g}"


def _ranged(default: Any, lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False, **cli: Any) -> Any:
    return field(default=default, metadata={"range": Range(lo, hi, lo_open, hi_open), **cli})


def _cli(default: Any, **cli: Any) -> Any:
    """A field with what its CLI option needs beyond name, type and docstring (effbench/cli/options.py):
    env (an environment default), metavar, names (a callable listing the accepted names, appended to the help)."""
    return field(default=default, metadata=cli)


# torch.manual_seed accepts [-0x8000_0000_0000_0000, 0xffff_ffff_ffff_ffff] (torch/random.py); the
# non-negative half, so every seed means one generator state.
SEED_MAX = 0xFFFF_FFFF_FFFF_FFFF
# A week: datetime.timedelta (the process-group timeout) overflows on inf, and no collective waits longer.
PG_TIMEOUT_MAX_S = 7 * 24 * 3600.0
STEPS_MAX = 10**9


def default_loader(dataset: str) -> str:
    """What --loader auto runs: generated data has one loader of its own; files default to fast."""
    return "synthetic" if dataset_spec(dataset).storage == "generated" else "fast"


def offset_seed(seed: int, k: int) -> int:
    """seed + k kept inside torch.manual_seed's range (a --seed near the top would overflow it)."""
    return (seed + k) % (SEED_MAX + 1)


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
    """effbench's own names here (no import); torchvision:/timm: names and bare torchvision names
    through the model catalog, which imports torchvision (and timm) only then."""
    key = value.strip().lower()
    if ARCH_ALIASES.get(key, key) in ARCHS:
        return ARCH_ALIASES.get(key, key)
    from effbench.archs import resolve

    return resolve(value)


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


def check_rendezvous(nnodes: int, rdzv_endpoint: str | None) -> None:
    """A multi-node launch needs an endpoint: never guessed (a partial Slurm environment names no host)."""
    if nnodes > 1 and rdzv_endpoint is None:
        raise EffbenchError(
            "--rdzv-endpoint",
            f"--nnodes {nnodes} needs a rendezvous host every node can reach; pass --rdzv-endpoint HOST:PORT "
            "(under srun, Slurm names it from SLURM_JOB_NODELIST, which is not set here)",
        )
    if rdzv_endpoint is not None:
        # A loopback endpoint stays allowed with --nnodes > 1: node agents on one machine (tests,
        # tests/e2e/test_distributed.py::test_two_nodes_on_loopback_complete_one_run) meet there.
        parse_endpoint(rdzv_endpoint)


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
    """One training benchmark run, fully resolved. Field names match the CLI options.

    Every field is an option of `effbench run` (and of `sweep` and `doctor` where they take it): the options
    are generated from these fields (effbench/cli/options.py). A field's docstring is its help: the first
    paragraph is the `--help` text, a `[default: ...]` in it says a default that needs words (else the value
    is shown), and later paragraphs add detail for the options table of docs/cli.md only."""

    arch: str = "efficientnet-b0"
    """The model to train: efficientnet-b0..b7, resnet18, torchvision:NAME or timm:NAME; `effbench models` lists
    them.

    b0..b7 is short for efficientnet-b0..b7. A bare torchvision name works too, as resnet50. efficientnet-b0..b7 come
    from efficientnet-pytorch. resnet18 is effbench's own, written after He et al. with a CIFAR stem at 32 px."""
    dataset: str = _cli("cifar100", names=datasets_help)
    """The dataset to train on:

    effbench/datasets.py holds the catalog. `effbench datasets` says which are here."""
    data_dir: Path = _cli(Path("data"), env="EFFBENCH_DATA")
    """Folder that holds the extracted datasets.

    Give the folder that holds the dataset's folder: ./data, not ./data/cifar-100-python. Pointed at the latter, the
    error says to use its parent. For imagefolder, give the class-per-folder tree itself, with train/ and val/ inside
    or the classes."""
    download: bool = False
    """Download a missing dataset, from the base URL in EFFBENCH_MIRROR when set.

    Without EFFBENCH_MIRROR it comes from its official URL. The checksum is verified."""
    val_fraction: float | None = _ranged(None, 0.0, 1.0, lo_open=True, hi_open=True)
    """Validate on a seeded fraction of the training set instead of the official test split. [default: the official
    test split]"""
    image_size: int | None = _ranged(None, 16, 8192)
    """Input size in px. [default: the arch's native size; resnet18 32 on CIFAR and synthetic, 224 on
    synthetic-imagenet]

    Native sizes: b0 224, b3 300, b5 456. torchvision and timm models take their weights' size, listed by `effbench
    models`. synthetic is CIFAR-shaped."""
    loader: str = "auto"
    """The input pipeline: auto, fast, torchvision, dali or synthetic. [default: auto = fast; synthetic on --dataset
    synthetic]

    fast augments uint8 batches on the device. It holds CIFAR whole on the device, and decodes JPEGs small with
    decode_jpeg in the workers. torchvision runs the seeds' per-sample PIL transforms in DataLoader workers. dali
    runs an NVIDIA DALI pipeline on image files; it needs effbench[dali], see docs/dali.md. synthetic is the only
    loader of generated data. fast or torchvision on generated data has no effect: effbench warns, and config.json
    records synthetic."""
    augment: str = "seed"
    """The training recipe, the same in both loaders: seed, imagenet or none.

    seed is the seeds' recipe. On CIFAR it crops with a 4 px pad and flips at 32 px, then upscales. On image files it
    resizes, crops, flips and rotates by up to 10 degrees either way. imagenet is a random-resized crop and a flip.
    none resizes and crops the center. effbench/recipes.py holds the recipes. docs/recipes.md says which dataset gets
    what and how to compare loaders fairly."""
    gpu_decode: bool = False
    """Decode JPEGs on the GPU with nvjpeg, in the fast loader on food101 or imagefolder.

    This replaces decoding in the loader's workers. Without CUDA it is an error. See docs/decoding.md."""
    data_only: bool = False
    """Measure the loader alone: iterate it and copy to the device, with no model.

    Augmentation and the copy to the device are included. throughput_img_s is then the images/s delivered, and
    results.json says data_only: true."""
    workers: int = _ranged(2, 0, 1024)
    """DataLoader worker processes.

    0 loads in the training process. More workers than the CPU cores this process may use all start, and stderr says
    so once. They share the cores; the workers experiment measures that. results.json's data.workers is the number
    started."""
    batch_size: int | None = _ranged(None, 1, 65536)
    """Images per device per step. [default: 64 EfficientNet, 128 resnet18]"""
    epochs: int = _ranged(5, 1, 100_000)
    """Passes over the training split."""
    max_steps: int | None = _ranged(None, 1, STEPS_MAX)
    """Cap on training steps per epoch. [default: the whole split]"""
    max_val_steps: int | None = _ranged(None, 1, STEPS_MAX)
    """Cap on validation batches per epoch. [default: the whole validation split]"""
    warmup_steps: int | None = _ranged(None, 0, STEPS_MAX, text=True, metavar="auto|N")
    """First steps excluded from throughput and reported apart: auto or a count N. [default: auto, at most half the
    steps]

    auto ends the warm-up when the step times settle. It checks every 5 steps with MSER-5, after White, Cobb & Spratt
    2000. The warm-up ends at the first check that finds the times settled, or at half the run's steps.
    results.json's warmup_rule says which and why; docs/methodology.md explains the rule. A count N keeps exactly N."""
    optimizer: str = "sgd"
    """The optimizer: sgd, sgd-nesterov, adagrad, adadelta, adam or adamw.

    The learning rate is cosine-annealed per step."""
    lr: float | None = _ranged(None, 0.0, 1000.0, lo_open=True)
    """Peak learning rate of the cosine schedule. [default: per optimizer: sgd 0.1, adagrad 0.01, adadelta 1.0, adam
    and adamw 1e-3]

    sgd-nesterov starts at 0.1, as sgd. DEFAULT_LR in effbench/config.py holds the defaults."""
    momentum: float = _ranged(0.9, 0.0, 1.0, hi_open=True)
    """SGD momentum, for sgd and sgd-nesterov."""
    weight_decay: float = _ranged(5e-4, 0.0, 10.0)
    """Weight decay: L2, decoupled for adamw."""
    label_smoothing: float = _ranged(0.0, 0.0, 1.0, hi_open=True)
    """Label smoothing of the training loss.

    0.1 is the value in MLPerf's and timm's ImageNet recipes. The validation loss stays plain cross-entropy,
    comparable across values."""
    precision: str = "auto"
    """Numeric precision: auto, fp32, bf16 or fp16. [default: auto = bf16 on capable CUDA, fp32 on CPU]

    auto is bf16 autocast on CUDA devices that support it."""
    channels_last: bool | None = None
    """Use the channels_last memory format. [default: on for CUDA, off on the CPU]

    It applies to the model and its inputs. config.json records the resolved value."""
    cudnn_benchmark: bool | None = None
    """Let cudnn.benchmark autotune the convolutions during the warm-up steps. [default: on for CUDA]"""
    pin_memory: bool | None = None
    """Pin loader batches in memory and copy them with non_blocking. [default: on for CUDA]"""
    optimizer_impl: str = "auto"
    """Optimizer kernel: fused, foreach, for-loop or auto. [default: auto = fused on CUDA where available, else
    foreach; for-loop on CPU]

    Fused kernels exist on CUDA for sgd, sgd-nesterov, adam and adamw. for-loop was measured fastest on the CPU; see
    docs/PERFORMANCE.md."""
    compile: bool = False
    """Compile the model with torch.compile.

    Compilation happens in the warm-up steps, at least 1. Its time is reported apart, as compile_time_s."""
    device: str = "auto"
    """Device to run on: auto, cpu or cuda.

    auto is cuda when a GPU is visible. cuda without one is an error."""
    seed: int = _ranged(0, 0, SEED_MAX)
    """Random seed for weight init, data order, splits and augmentation."""
    freeze: str | None = None
    """What stays frozen: classifier, none or last:N. [default: classifier with pretrained weights, else none]

    classifier trains only the new head. The base runs without autograd, and its BN stats stay fixed. none fine-tunes
    every layer. last:N trains the last N blocks."""
    weights: str | None = None
    """Starting weights: imagenet, none or a local file. [default: imagenet for EfficientNet, none for resnet18]

    A local file is loaded with weights_only=True."""
    batch_norm: bool = True
    """Build resnet18 with BatchNorm.

    --no-batch-norm is the seed lab's C7; EfficientNet needs its BatchNorm."""
    gpus: int | None = _ranged(None, 1, 1024)
    """GPUs to use, one process each. [default: all visible]

    More than 1 runs under torchrun with DDP."""
    nproc: int | None = _ranged(None, 1, 1024)
    """CPU processes to use with --device cpu. [default: 1]

    They run under torchrun with gloo."""
    strategy: str = "ddp"
    """How to use several GPUs: ddp or dp.

    ddp runs one process per device. dp is DataParallel, as the seeds ran."""
    scaling: str = "weak"
    """How --batch-size meets several devices: weak or strong.

    weak: --batch-size is per device. strong: --batch-size is global, split across the devices."""
    nnodes: int = _ranged(1, 1, 100_000)
    """Nodes in a multi-node run. [default: 1; SLURM_NNODES under srun]"""
    node_rank: int | None = _ranged(None, 0, 99_999)
    """This node's rank. [default: SLURM_NODEID under srun]"""
    rdzv_endpoint: str | None = None
    """HOST:PORT of the c10d rendezvous. [default: under srun, the first Slurm host, port $MASTER_PORT or
    20000 + SLURM_JOB_ID % 10000]"""
    rdzv_id: str | None = None
    """Rendezvous id shared by the nodes. [default: SLURM_JOB_ID under srun]"""
    pg_timeout_s: float = _ranged(300.0, 0.0, PG_TIMEOUT_MAX_S, lo_open=True)
    """Process-group timeout in seconds.

    A dead peer ends the job within it."""
    output: Path = _cli(Path("results"), env="EFFBENCH_OUTPUT")
    """Parent folder of run folders."""
    profile: bool = True
    """Run a torch.profiler pass after the timed training."""
    profile_steps: int = _ranged(3, 1, 1000)
    """Active steps in the profiling pass.

    They follow 1 wait step and 1 warm-up step."""
    sample_interval_s: float = _ranged(0.5, 0.05, 3600.0)
    """Seconds between utilisation samples.

    GPUs are sampled via NVML, the host via psutil."""
    log_interval: int = _ranged(10, 1, STEPS_MAX)
    """Steps between progress lines.

    Each line reads the metrics from the device. Under pipelined timing that read is the one wait."""
    omp_wait_policy: str = "auto"
    """OpenMP's wait policy for CPU runs: auto, passive or active. [default: auto]

    auto sets OMP_WAIT_POLICY=PASSIVE when the host is busier than its cores at start and the variable is unset.
    passive or active set it. PASSIVE makes waiting threads sleep instead of spinning. On a loaded 2-core VM a CPU
    run went 10x faster with it, on an idle one somewhat slower; see docs/troubleshooting.md#shared-cpu. torch reads
    the policy once, when it loads, so effbench sets it before. env.json records the value the run had."""
    timing: str = "pipelined"
    """How steps are timed: pipelined or per-step.

    pipelined waits once per --log-interval steps and reads the spans from CUDA events. per-step waits twice a step:
    it attributes each step exactly, and is slower on a GPU. On the CPU both give the same figures. On a GPU,
    per-step drains the device twice a step, which costs 5-9% of efficientnet-b0's throughput on an H200.
    docs/methodology.md says what each span holds under each. `compare` refuses to call runs of different timing like
    for like."""
    repeats: int | None = _ranged(None, 1, 1000)
    """Throughput windows: the measured steps split into K for a median and a 95% CI. [default: min(5, measured
    steps)]

    The K windows are contiguous and as equal as the count allows. The first n mod K are one step longer: 7 steps in
    5 windows are 2, 2, 1, 1, 1. results.json holds the median and the 95% CI of the mean. throughput_windows holds
    each window, window_steps its steps. effbench/analysis/windows.py computes them."""
    smoke: bool = False
    """Whether the offline 2-core smoke preset was applied.

    This is the CLI's --smoke, which the commands declare themselves."""
    target_top1: float | None = _ranged(None, 0.0, 1.0, lo_open=True, metavar="F")
    """Time-to-accuracy: record the training time and epochs to the first val top-1 >= F.

    See docs/time-to-accuracy.md."""
    stop_at_target: bool = False
    """End the run at the epoch that reaches --target-top1."""
    until: str | None = None
    """Measure until the throughput's 95% interval is within X of it, capped at the run's steps: ci:X%, as
    ci:1%.

    It is checked at each --log-interval window once 10 windows are measured. The interval is widened when the
    windows drift together; see docs/methodology.md. results.json's `until` records the interval reached, the
    steps it took and whether the cap ended it."""

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
        # In this order, so the first error a user sees is the same as it always was: names, ranges,
        # combinations, paths; then the defaults that depend on other fields.
        self._canonicalize()
        self._set("warmup_steps", parse_warmup_steps(self.warmup_steps))
        for f in dataclasses.fields(self):  # every numeric option: finite and inside its declared range
            value = getattr(self, f.name)
            if "range" in f.metadata and value is not None:
                _check_range(f.name, value, f.metadata["range"])
                if value == 0:  # -0.0 (`--momentum -0`) is 0, and recorded so
                    self._set(f.name, type(value)(0))
        _check_rules(self, _LAUNCH_RULES)
        check_rendezvous(self.nnodes, self.rdzv_endpoint)
        _check_rules(self, _FEATURE_RULES)
        for name in ("data_dir", "output"):  # as typed: the CLI passes the text, so an empty one is seen
            check_path(option_name(name), getattr(self, name))
        if self.weights is not None and self.weights.strip().lower() not in WEIGHTS_KEYWORDS:
            check_path("--weights", self.weights)
        self._resolve_defaults()

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # frozen

    def _canonicalize(self) -> None:
        """Every name-valued option to its canonical spelling (aliases, case), or one error naming it."""
        self._set("arch", canonical_arch(self.arch))
        self._set("dataset", canonical_dataset(self.dataset))
        for name, choices in _CHOICES.items():
            self._set(name, _choice(option_name(name), getattr(self, name), choices, {}))
        if self.loader == "auto":
            self._set("loader", default_loader(self.dataset))
        if self.until is not None:
            from effbench.analysis.steady_state import parse_until

            self._set("until", f"ci:{100 * parse_until(self.until):g}%")

    def _resolve_defaults(self) -> None:
        """Defaults that depend on other fields, resolved once so config.json is explicit. A default
        warm-up (None) stays None: the runner resolves it from the steps the data really has (a small
        dataset can have fewer than --max-steps), and config.json records the value used."""
        if self.weights is None:
            self._set("weights", "imagenet" if self.is_efficientnet else "none")
        elif self.weights.strip().lower() in WEIGHTS_KEYWORDS:
            self._set("weights", self.weights.strip().lower())
        if self.freeze is None:
            self._set("freeze", "classifier" if self.weights != "none" else "none")
        assert self.freeze is not None  # set just above
        mode, n = parse_freeze(self.freeze)
        self._set("freeze", f"last:{n}" if mode == "last" else mode)
        if self.batch_size is None:
            self._set("batch_size", 64 if self.is_efficientnet else 128)
        if self.lr is None:
            self._set("lr", DEFAULT_LR[self.optimizer])
        if self.image_size is None:
            self._set("image_size", default_image_size(self.arch, self.dataset))
        self._set("data_dir", Path(self.data_dir))
        self._set("output", Path(self.output))


# The options whose value is one of a fixed list (arch and dataset have aliases and catalogs of their own).
_CHOICES: dict[str, tuple[str, ...]] = {
    "optimizer": OPTIMIZERS,
    "precision": PRECISIONS,
    "device": DEVICES,
    "loader": LOADERS,
    "augment": AUGMENTS,
    "optimizer_impl": OPTIMIZER_IMPLS,
    "strategy": STRATEGIES,
    "scaling": SCALING_MODES,
    "timing": TIMINGS,
    "omp_wait_policy": OMP_WAIT_POLICIES,
}


@dataclass(frozen=True)
class _Rule:
    """Options that cannot go together: when `broken(cfg)`, one error naming `option`, saying `message(cfg)`."""

    option: str
    broken: Callable[[RunConfig], bool]
    message: Callable[[RunConfig], str]


def _check_rules(cfg: RunConfig, rules: tuple[_Rule, ...]) -> None:
    for rule in rules:
        if rule.broken(cfg):
            raise EffbenchError(rule.option, rule.message(cfg))


def _no_measured_step(c: RunConfig) -> bool:
    """An explicit warm-up that fills every step --max-steps allows (the data may allow fewer: the runner
    checks again once it knows them)."""
    return c.warmup_steps is not None and c.max_steps is not None and c.warmup_steps >= c.epochs * c.max_steps


def _too_many_repeats(c: RunConfig) -> bool:
    if c.repeats is None or c.max_steps is None:
        return False
    total = c.epochs * c.max_steps
    return c.repeats > total - resolve_warmup(c.warmup_steps, total, c.compile)


def _real_datasets() -> list[str]:
    return [n for n in dataset_names() if dataset_spec(n).storage != "generated"]


# Time-to-accuracy needs a top-1 that means something, measured on the whole validation split every epoch.
_TARGET_RULES = (
    _Rule("--stop-at-target", lambda c: c.stop_at_target and c.target_top1 is None,
          lambda c: "stops at the epoch that reaches --target-top1, which was not given; add --target-top1 F "
          "(e.g. 0.9) or drop --stop-at-target"),
    _Rule("--target-top1", lambda c: c.target_top1 is not None and c.data_only,
          lambda c: "--data-only runs no model, so nothing is validated; drop one of them"),
    _Rule("--target-top1", lambda c: c.target_top1 is not None and dataset_spec(c.dataset).storage == "generated",
          lambda c: f"{c.dataset} data has random labels, so no top-1 is reached by learning; use real data "
          f"(--dataset {' or '.join(_real_datasets())}) or drop --target-top1"),
    # a capped validation scores a part of the split, and a time to reach it is not the time to the target
    _Rule("--target-top1", lambda c: c.target_top1 is not None and c.max_val_steps is not None,
          lambda c: f"needs the whole validation split each epoch, but --max-val-steps {c.max_val_steps} scores "
          "only part of it; drop --max-val-steps (or use --val-fraction for a smaller split)"),
)  # fmt: skip

# Devices and processes (checked before the rendezvous endpoint).
_LAUNCH_RULES = (
    _Rule("--gpus", lambda c: c.gpus is not None and c.device == "cpu",
          lambda c: "counts GPUs, but --device cpu was given; use --nproc N for CPU processes"),
    _Rule("--nproc", lambda c: c.nproc is not None and c.device == "cuda",
          lambda c: "counts CPU processes, but --device cuda was given; use --gpus N on GPUs"),
    _Rule("--strategy", lambda c: c.strategy == "dp" and c.device == "cpu",
          lambda c: "dp (DataParallel) needs CUDA GPUs; use --strategy ddp with --device cpu"),
    _Rule("--node-rank", lambda c: c.node_rank is not None and not 0 <= c.node_rank < c.nnodes,
          lambda c: f"{c.node_rank} is outside 0..{c.nnodes - 1} for --nnodes {c.nnodes}"),
    # what the runtime would refuse after preflight has printed its warnings (two lines) or, in a sweep, in
    # every cell (exit 1, a folder of failed cells): refused here, before anything
    _Rule("--precision", lambda c: c.precision == "fp16" and c.device == "cpu",
          lambda c: "fp16 needs a CUDA device (loss scaling); use --precision bf16 or fp32 on the CPU"),
)  # fmt: skip

# What the model, the measurement and the loader can do together (checked after it).
_FEATURE_RULES = (
    _Rule("--no-batch-norm", lambda c: not c.batch_norm and c.arch != "resnet18",
          lambda c: "only applies to --arch resnet18; EfficientNet needs its BatchNorm"),
    _Rule("--warmup-steps", _no_measured_step,
          lambda c: f"{c.warmup_steps} warm-up steps leave no measured step in {c.epochs} epoch(s) of at most "
          f"{c.max_steps} steps (--max-steps); lower --warmup-steps or raise --max-steps / --epochs"),
    _Rule("--repeats", _too_many_repeats,
          lambda c: f"{c.repeats} windows need as many measured steps; raise --max-steps or --epochs, or lower --repeats"),
    _Rule("--loader", lambda c: c.loader == "synthetic" and dataset_spec(c.dataset).storage != "generated",
          lambda c: f"synthetic is the loader of generated data (--dataset synthetic), not of {c.dataset}; "
          "use fast or torchvision"),
    # DALI reads files (fn.readers.file); CIFAR's pickled arrays go through the loaders that take arrays
    _Rule("--loader", lambda c: c.loader == "dali" and dataset_spec(c.dataset).storage != "generated"
          and not dataset_spec(c.dataset).image_files,
          lambda c: f"dali reads image files, not {c.dataset}'s arrays; use --loader fast or torchvision, or a "
          + " or ".join(with_image_files()) + " dataset"),
    _Rule("--gpu-decode", lambda c: c.gpu_decode and (c.loader != "fast" or not dataset_spec(c.dataset).image_files),
          lambda c: "decodes image files in the fast loader; use it with --loader fast and --dataset "
          + " or ".join(with_image_files())),
    _Rule("--compile", lambda c: c.compile and c.data_only,
          lambda c: "--data-only runs no model, so there is nothing to compile; drop one of them"),
    # torch.compile(DataParallel(m)) would trace the wrapper, while DataParallel runs its replicas in threads
    # (torch/nn/parallel/parallel_apply.py) that nothing shows to be compiled; refuse rather than record
    # "compiled" for an uncompiled run.
    _Rule("--compile", lambda c: c.compile and c.strategy == "dp",
          lambda c: "is not supported with --strategy dp (DataParallel); use --strategy ddp or drop --compile"),
    _Rule("--warmup-steps", lambda c: c.compile and c.warmup_steps is not None and c.warmup_steps < 1,
          lambda c: "--compile compiles in the first step; use at least 1 warm-up step so it is not measured"),
    *_TARGET_RULES,
)  # fmt: skip


def check_field_range(name: str, value: Any) -> None:
    """`value` for RunConfig field `name` checked against its declared range, with `run`'s message (a sweep's
    list items are checked so too); a field without a range takes any value."""
    rng = RunConfig.__dataclass_fields__[name].metadata.get("range")
    if rng is not None:
        _check_range(name, value, rng)


def _check_range(name: str, value: Any, rng: Range) -> None:
    option = option_name(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EffbenchError(option, f"{value!r} is not a number; use a value in {rng.text()}")
    if isinstance(value, float) and not math.isfinite(value):
        raise EffbenchError(option, f"must be a finite number in {rng.text()} (got {value})")
    if not rng.contains(value):
        if rng.lo == 1 and not rng.lo_open and value < 1:  # the common case, said plainly
            raise EffbenchError(option, f"must be 1 or more (got {value}); range {rng.text()}")
        if rng.lo == 0 and rng.hi == 1 and 1 < value <= 100:  # a percentage typed for a fraction: --target-top1 90
            raise EffbenchError(
                option,
                f"{_num(value)} is outside {rng.text()}: it is a fraction; for {_num(value)}% use {value / 100:g}",
            )
        raise EffbenchError(option, f"{_num(value)} is outside {rng.text()}; use a value in that range")


_PATH_EXAMPLES = {"--data-dir": "--data-dir ./data", "--weights": "--weights ./model.pt, or --weights imagenet / none"}

# Linux limits (limits.h NAME_MAX and PATH_MAX, the same on ext4, xfs, btrfs, tmpfs, overlayfs): a longer
# name is ENAMETOOLONG from the first stat, so it is refused here with the option named.
NAME_MAX_BYTES = 255
PATH_MAX_BYTES = 4096


def check_path(option: str, path: str | Path, example: str | None = None) -> None:
    """A path option as typed: not empty (Path("") is ".", so `--output "$UNSET"` would write into the current
    folder), and inside the OS's name and path lengths."""
    if not str(path).strip():
        example = example or _PATH_EXAMPLES.get(option, f"{option} ./results")
        raise EffbenchError(option, f"is empty; pass a path, e.g. {example}")
    control = next((c for c in str(path) if ord(c) < 32 or ord(c) == 127), None)
    if control is not None:  # a newline in a folder name splits every line that prints it, and every log
        raise EffbenchError(option, f"holds the control character {control!r}; pass a path without newlines or tabs")
    path = Path(path)
    raw = os.fsencode(path)
    if len(raw) >= PATH_MAX_BYTES:
        raise EffbenchError(option, f"the path is {len(raw)} bytes long; the OS allows {PATH_MAX_BYTES - 1}")
    long_part = next((p for p in path.parts if len(os.fsencode(p)) > NAME_MAX_BYTES), None)
    if long_part is not None:
        raise EffbenchError(
            option,
            f"the name {long_part[:32]}... is {len(os.fsencode(long_part))} bytes; the OS allows {NAME_MAX_BYTES} "
            "per folder or file name (ENAMETOOLONG)",
        )


# 5 warm-up steps unless the run is too short for them: then half the steps, so a short run still
# measures (cudnn autotuning and the first allocations fall in the first steps).


WARMUP_AUTO = "auto"


def parse_warmup_steps(value: Any) -> int | None:
    """--warmup-steps as typed: `auto` (None) or a whole number; a number passes through to the range check."""
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if text == WARMUP_AUTO:
        return None
    try:
        return int(text)
    except ValueError:
        raise EffbenchError(
            "--warmup-steps", f"{value!r} is neither auto nor a whole number; use auto (the default) or e.g. 5"
        ) from None


FEW_STEPS_WARMUP = 5
"""auto on a run too short for the rule: the warm-up every run had before it (at most half the steps)."""
AUTO_MIN_STEPS = 2 * (1 + 3 * 5)
"""The fewest steps a run needs for auto to judge: MSER-5 (analysis/steady_state.py) needs its floor of 1 and 3
batches of 5 before it can cut at all, and cuts in the first half of what it sees."""


def few_steps_warmup(total_steps: int, compile: bool) -> int:
    """auto's warm-up on a run of fewer than AUTO_MIN_STEPS steps: 5, at most half the steps, at least the
    compiled first step."""
    return max(min(FEW_STEPS_WARMUP, total_steps // 2), 1 if compile and total_steps > 1 else 0)


def auto_warmup_cap(total_steps: int) -> int:
    """The most steps `auto` may spend on warm-up: half the run's steps, as the fixed default was bounded, so
    at least half the run is measured."""
    return total_steps // 2


def resolve_warmup(warmup_steps: int | None, total_steps: int, compile: bool = False) -> int:
    """The most warm-up steps the run can take: an explicit count as given (the runner refuses one that leaves no
    measured step); auto (None) at most half the steps (run/steady.auto_warmup_cap), its floor of 1 covering
    --compile's first step. For the estimates made before the run (the default --repeats)."""
    if warmup_steps is not None:
        return warmup_steps
    return few_steps_warmup(total_steps, compile) if total_steps < AUTO_MIN_STEPS else auto_warmup_cap(total_steps)


def default_image_size(arch: str, dataset: str) -> int:
    """The architecture's native resolution; resnet18 keeps CIFAR's 32 px on CIFAR."""
    if arch == "resnet18":
        return dataset_spec(dataset).native_size or DEFAULT_IMAGE_SIZE
    if arch in EFFICIENTNET_NATIVE_SIZE:
        return EFFICIENTNET_NATIVE_SIZE[arch]
    from effbench.archs import native_image_size  # torchvision's / timm's own metadata

    return native_image_size(arch)


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


def preset_conflicts(explicit: dict[str, Any], *, gpus: str | None) -> None:
    """--smoke chose --device cpu; a GPU option the user gave must not be blamed on a --device
    they never typed (RunConfig's own message says "--device cpu was given")."""
    if gpus is not None and "device" not in explicit:
        raise EffbenchError(
            "--gpus", "counts GPUs, but --smoke runs on the CPU (the preset's --device cpu); add --device cuda "
            "to run the smoke preset on GPUs, or use --nproc N for CPU processes"
        )  # fmt: skip


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


def resolved_record(
    cfg: RunConfig, *, device_type: str, precision: str, repeats: int, data_info: dict[str, Any]
) -> dict[str, Any]:
    """config.json: what ran, not what was asked. Pure (no torch).

    `device`, `precision` and `repeats` hold the resolved values; a value the user asked for that differs
    is kept under `requested` (so `auto` never reads as a setting of the run). An option the run could
    not use (`--workers 4` or `--loader torchvision` on data made on the device) holds the value that
    took effect, and `no_effect` says which option and why, so a reader and a sweep know it changed
    nothing. Every value stays a valid option value, so the dict still loads as a RunConfig (results.json's
    `data.loader` says what fed the run in full: "synthetic (on device)").
    """
    d = cfg.to_dict()
    resolved = {"device": device_type, "precision": precision, "repeats": repeats}
    requested = {k: d[k] for k, v in resolved.items() if d.get(k) != v}
    d.update(resolved)
    no_effect: dict[str, str] = {}
    workers = data_info.get("workers")
    if workers is not None and workers != cfg.workers:
        loader = data_info.get("loader") or cfg.loader
        # the one reason a run starts other than --workers: a loader with no worker processes (more workers than
        # cores all start: data.say_workers_beyond_cores)
        no_effect["workers"] = (
            f"{loader} starts no DataLoader worker processes, so --workers {cfg.workers} ran as {workers}"
        )
        requested["workers"] = cfg.workers
        d["workers"] = workers
    loader = data_info.get("loader")
    ran = str(loader).split(" ")[0]  # "synthetic (on device)" -> the option value synthetic
    # __post_init__ resolves auto to the dataset's own loader, so a loader that differs is the user's choice
    if loader is not None and ran in LOADERS and ran != cfg.loader:
        no_effect["loader"] = f"--loader {cfg.loader} does not apply to {cfg.dataset} data: {loader} fed the run"
        requested["loader"] = cfg.loader
        d["loader"] = ran
    for name, (unused, ran_as, why) in _unused_options(cfg, device_type).items():
        if unused:
            no_effect[name] = why
            requested[name] = d[name]
            d[name] = ran_as
    if dataset_spec(cfg.dataset).storage == "generated":  # the one word says the shape; this says it in words
        d["dataset_shape"] = dataset_spec(cfg.dataset).title
    if requested:
        d["requested"] = requested
    if no_effect:
        d["no_effect"] = no_effect
    if data_info.get("augment") is not None:  # the recipe that ran, every parameter beside its name
        d["augment_recipe"] = data_info["augment"]
    return d


def typed_option(command: list[str], field: str) -> bool:
    """Whether the command line names the option of config field `field` (--workers 2, --workers=2, or a
    flag's --no- form). click matches option names whole (no abbreviations), so a token names it or not."""
    name = field.replace("_", "-")
    spellings = (f"--{name}", f"--no-{name}")
    return any(tok in spellings or tok.startswith(f"--{name}=") for tok in command)


def _unused_options(cfg: RunConfig, device_type: str) -> dict[str, tuple[bool, Any, str]]:
    """Options that act only on data read from files or on a CUDA device: field -> (asked for where it cannot
    act, the value that took effect, why)."""
    generated = dataset_spec(cfg.dataset).storage == "generated"
    cpu = device_type != "cuda"
    return {
        "val_fraction": (generated and cfg.val_fraction is not None, None,
                         f"{cfg.dataset} data is generated: it has no training set to split, and validates on "
                         "generated batches of its own"),
        "download": (generated and cfg.download, False, f"{cfg.dataset} data is generated: there is nothing to download"),
        # the default (seed) is not flagged: only a recipe the user chose can have been expected to act
        "augment": (generated and cfg.augment != "seed", "none",
                    f"{cfg.dataset} data is generated on the device, not augmented: no recipe applies"),
        "cudnn_benchmark": (cpu and bool(cfg.cudnn_benchmark), False,
                            "cudnn.benchmark autotunes cuDNN's CUDA convolutions; a CPU run has none"),
        "pin_memory": (cpu and bool(cfg.pin_memory), False,
                       "page-locked batches speed copies to a GPU; a CPU run makes none"),
    }  # fmt: skip


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
    "resolved_record",
    "smoke_overrides",
]
