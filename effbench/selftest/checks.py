"""The selftest's checks: each runs effbench (or one of its functions) and holds the figure against
a reference from `reference.py` or `probe.py`, which share none of effbench's measuring code.

    run_selftest(SelftestConfig(device="cpu", output=Path("results")))  -> SelftestOutcome

Each check returns `Check` rows: PASS / FAIL with measured, reference and tolerance, or SKIP with
the reason (a GPU check on a CPU machine). A check that raises is a FAIL naming the exception.
"""

from __future__ import annotations

import csv
import datetime as dt
import difflib
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from effbench.analysis import stats
from effbench.config import RunConfig, check_path
from effbench.errors import EffbenchError

if TYPE_CHECKING:
    from effbench import results, schema
    from effbench.data.build import DataBundle
    from effbench.run.timing import DeviceClock

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
DEVICES = ("auto", "cpu", "cuda")
# Pairs are judged in blocks of consecutive pairs (compare_interleaved_steps); a 95% signed-rank interval
# needs 6 blocks
PAIRS_PER_BLOCK = 20
MIN_PAIRS = 6 * PAIRS_PER_BLOCK
DTYPE_OF_PRECISION = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
SELFTEST_FILE = "selftest.json"
GPU_ONLY = ("timing vs CUDA events", "precision: dp", "NVML", "pipelined loop")
"""Name prefixes of the checks that need CUDA: on the CPU each SKIPs with its reason, and every other check
must PASS (the CPU selftest test and CI's selftest step read this list)."""


@dataclass
class Check:
    name: str
    status: str
    measured: Any = None
    reference: Any = None
    tolerance: str | None = None
    reason: str = ""


# The data path check's default pair and its goal (the fast loader at least 0.9x torchvision); another pair
# is compared on the same recipe and images, its ratio reported without a goal.
DATA_LOADERS = ("fast", "torchvision")
FILE_LOADERS = ("fast", "torchvision", "dali")


@dataclass
class SelftestConfig:
    device: str = "auto"
    """auto, cpu or cuda: where the training checks run (auto = cuda when visible)."""
    output: Path | str = Path("results")
    """Parent folder of the selftest folder (selftest.json and the runs it made); the text as typed is checked."""
    pairs: int = 600
    """Measured steps a side of the harness / bare-loop check, interleaved step by step (H B B H ...); at most
    one synthetic epoch (6,248 at the CPU's batch 8, 388 at CUDA's batch 128)."""
    steps: int = 20
    """Measured steps of the other checks' runs on CUDA (after `warmup_steps`)."""
    warmup_steps: int = 2
    """Steps excluded from every timed figure."""
    only: tuple[str, ...] = ()
    """Run only the checks whose names start with one of these (empty: all); each must select a check."""
    data_loaders: tuple[str, ...] = DATA_LOADERS
    """The two loaders the data path check compares on the same recipe (--data-loaders fast,dali)."""

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise EffbenchError("--device", f"{self.device!r} is not one of {', '.join(DEVICES)}")
        if int(self.pairs) < MIN_PAIRS:  # fewer step pairs have no 95% interval of their ratio
            raise EffbenchError("--pairs", f"must be at least {MIN_PAIRS}, got {self.pairs}")
        for name in ("steps", "warmup_steps"):
            if int(getattr(self, name)) < 1:
                raise EffbenchError(f"--{name.replace('_', '-')}", f"must be at least 1, got {getattr(self, name)}")
        check_path("--output", self.output)
        self.output = Path(self.output)
        self._check_only()
        self._check_data_loaders()

    def _check_data_loaders(self) -> None:
        pair = tuple(self.data_loaders)
        choices = ", ".join(FILE_LOADERS)
        if len(pair) != 2 or pair[0] == pair[1] or any(x not in FILE_LOADERS for x in pair):
            raise EffbenchError(
                "--data-loaders", f"{','.join(pair)!r} must name two different loaders of {choices}, like fast,dali"
            )
        self.data_loaders = (pair[0], pair[1])

    def _check_only(self) -> None:
        """--only as given: no empty item (`--only ,` ran every check), each once, each selecting a check
        (`--only flopz` ran none, wrote an empty selftest.json and exited 0, a pass that checked nothing)."""
        names = list(CHECKS)
        for i, item in enumerate(self.only):
            if not item:
                raise EffbenchError("--only", f"{','.join(self.only)!r} has an empty item; name checks like flops,ddp")
            if item in self.only[:i]:
                raise EffbenchError("--only", f"lists {item} twice; name each check once")
            if not any(key.startswith(item) for key in names):
                near = difflib.get_close_matches(item, names, n=1)
                hint = f"did you mean {near[0]}? " if near else ""
                raise EffbenchError("--only", f"{item!r} names no check; {hint}choose from {', '.join(names)}")


@dataclass
class Context:
    cfg: SelftestConfig
    device: Any  # torch.device
    folder: Path
    echo: Callable[[str], None]
    gpus: int = 0
    notes: dict[str, Any] = field(default_factory=dict)
    said_warnings: set[str] = field(default_factory=set)
    """Preflight warnings its runs printed: each once for the whole selftest, not once per run."""

    @property
    def runs(self) -> Path:
        return self.folder / "runs"

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


@dataclass
class SelftestOutcome:
    folder: Path
    checks: list[Check]
    env: dict[str, Any]

    @property
    def exit_code(self) -> int:
        return 1 if any(c.status == FAIL for c in self.checks) else 0


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------
HARNESS_MODEL: dict[str, Any] = {
    "arch": "resnet18",
    "image_size": 32,
    "batch_size": 16,
}  # ~0.08 s a step on one idle CPU core: long enough that timer jitter is a small part of it
# The precision and DDP runs only need a few real steps: CPU bf16 convolutions are emulated (~10x fp32)
# On CUDA, steps long enough (~10 ms) that host overhead outside the forward..step span stays far below 3%
CUDA_RUN: dict[str, Any] = {"image_size": 64, "batch_size": 128}
# The CPU harness / bare-loop pairs: ~35 ms a step on one core of the 2-vCPU development VM. Short steps
# give per-step costs their largest share, and neighbouring steps meet the same moment of a noisy machine:
# resnet18 at 64 px (350 ms a step) needed ~4 min of pairs for a +-1.5% interval, this 50 s for +-1%
PAIRED_CPU_RUN: dict[str, Any] = {"arch": "torchvision:shufflenet_v2_x0_5", "image_size": 32, "batch_size": 8}
# The data-path check's speed: its two loaders' batches taken in turn in this process (interleaved_batches).
# Whole --data-only rounds of each, alternated, drifted 30-50% from round to round on CI's shared 2-vCPU
# machine and judged a 1.1x loader 0.77x; batch beside batch, 400 pairs read 1.12x (95% 1.11..1.13) in ~10 s
# idle and 1.19x (1.14..1.24) beside two busy processes on the 2-vCPU development VM.
DATA_PAIRS = 400
DATA_WARMUP = 20  # batches a side before the pairs: the first epochs' page cache and allocator
DATA_RUN: dict[str, Any] = dict(
    dataset="imagefolder", data_only=True, image_size=32, batch_size=16, max_steps=None, warmup_steps=1,
    val_fraction=0.25, augment="seed",
)  # fmt: skip
TINY_RUN: dict[str, Any] = {"image_size": 16, "batch_size": 2, "max_steps": 3, "warmup_steps": 1}


class Harnessed(NamedTuple):
    """A harness run: its record (results.json, typed) and the folder it wrote (steps.csv, utilization.csv)."""

    record: schema.Results
    run_dir: Path


def harness_config(ctx: Context, **overrides: Any) -> RunConfig:
    """The RunConfig of a selftest run: the harness's defaults, then `overrides`."""
    base: dict[str, Any] = dict(
        dataset="synthetic", weights="none", freeze="none", epochs=1, max_val_steps=1, workers=0,
        profile=False, log_interval=10_000, output=ctx.runs, device=ctx.device.type,
        max_steps=ctx.cfg.warmup_steps + ctx.cfg.steps, warmup_steps=ctx.cfg.warmup_steps, **HARNESS_MODEL,
    )  # fmt: skip
    base.update(overrides)
    if base["device"] == "cuda" and "gpus" not in overrides:
        base["gpus"] = 1  # one GPU, in this process: on a multi-GPU machine a run takes every GPU under torchrun
    return RunConfig(**base)


def harness(ctx: Context, **overrides: Any) -> Harnessed:
    """One `effbench run` (in-process or under torchrun, as the CLI would), its record typed."""
    from effbench.report.run_reports import RUN_REPORTS
    from effbench.run import launch

    cfg = harness_config(ctx, **overrides)
    from effbench.analysis.export import SELFTEST_COMMAND  # export and the leaderboard tell these runs by it

    outcome = launch.run(
        cfg,
        command=list(SELFTEST_COMMAND),
        echo=None,
        progress=False,
        said_warnings=ctx.said_warnings,
        reports=RUN_REPORTS,
    )

    record = outcome.results
    if record.status != "ok":
        err = record.error
        raise RuntimeError(
            f"the run ended {record.status}: {err.type if err else None}: {err.message if err else None}"
        )
    return Harnessed(record, Path(str(outcome.run_dir)))


@contextmanager
def probed(ctx: Context, name: str) -> Iterator[tuple[Any, Path]]:
    """A probe in this process and, through sitecustomize on PYTHONPATH, in every torchrun rank."""
    from effbench.selftest.probe import PROBE_DIR_ENV, SITECUSTOMIZE, Probe

    folder = ctx.folder / "probes" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    saved = {k: os.environ.get(k) for k in (PROBE_DIR_ENV, "PYTHONPATH")}
    os.environ[PROBE_DIR_ENV] = str(folder)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), saved["PYTHONPATH"]) if p)
    probe = Probe().install()
    try:
        yield probe, folder
    finally:
        probe.remove()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def rank_probes(folder: Path) -> list[dict[str, Any]]:
    import json

    return [json.loads(p.read_text()) for p in sorted(folder.glob("probe-*.json"))]


def precision_row(name: str, recorded: str | None, dtypes_seen: list[dict[str, int]]) -> Check:
    expected = DTYPE_OF_PRECISION.get(str(recorded))
    seen = sorted({d for dt_counts in dtypes_seen for d in dt_counts})
    measured = ", ".join(seen) or "no training forward seen"
    ok = expected is not None and seen == [expected] and all(dtypes_seen)
    return Check(
        name, PASS if ok else FAIL, measured, f"{expected} (results.json precision {recorded})", "equal",
        f"dtype of every Conv2d/Linear output in training forwards, {len(dtypes_seen)} process(es)",
    )  # fmt: skip


def measured_steps(steps_csv: Path) -> list[tuple[int, float, float]]:
    """(images, data wait s, compute s) of each measured step of a run, from its steps.csv (warm-up excluded)."""
    return [(int(r.images), r.data_time_s, r.compute_time_s) for r in _measured_rows(steps_csv)]


def _measured_rows(steps_csv: Path) -> list[results.StepRow]:
    from effbench import results

    with open(steps_csv) as f:
        return [row for row in (results.StepRow.of(r) for r in csv.DictReader(f)) if not row.warmup]


@contextmanager
def one_core(*, enabled: bool = True) -> Iterator[int | None]:
    """This thread, and the threads it starts, on one core with one OpenMP thread (the harness reads both:
    launch/plan.py), restored after; yields the core. On the 2-vCPU development VM two threads put both
    cores' neighbours into every step (adjacent resnet18 steps scattered 18% with two threads, 9-14% pinned
    to one); the harness's side threads share the core, so their cost still lands on the steps. No-op where
    the OS has no affinity call."""
    if not enabled or not hasattr(os, "sched_setaffinity"):
        yield None
        return
    cores, omp = os.sched_getaffinity(0), os.environ.get("OMP_NUM_THREADS")
    core = min(cores)
    os.sched_setaffinity(0, {core})
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        yield core
    finally:
        os.sched_setaffinity(0, cores)
        if omp is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp


@dataclass
class _Call:
    wall_in: float
    wall_out: float
    side_cpu_in: float  # the CPU seconds of this process's other Python threads so far (SideThreads)


def _thread_cpu_s(native_id: int) -> float | None:
    """CPU seconds of one thread of this process: schedstat's nanoseconds, else stat's clock ticks."""
    task = f"/proc/self/task/{native_id}"
    try:
        with open(f"{task}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"{task}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)
    except (OSError, ValueError, IndexError):
        return None


class SideThreads:
    """CPU seconds of this process's Python threads other than the caller's, summed over every one seen so far:
    the harness's side work (the utilisation sampler; pin-memory and queue-feeder threads where a loader has
    them). A thread that ended keeps its last reading, so the sum never drops. Threads that Python did not start
    are left out: torch's intra-op pool and, on CUDA, autograd's device thread, which runs every backward of the
    harness and of the bare loop alike (0.43 cores of the first GPU run, charged to the harness as its own).
    `total_s()` is None where /proc/self/task is not there to read threads by."""

    def __init__(self) -> None:
        self._last: dict[Any, float] = {}  # threading.Thread -> its CPU seconds when last read

    def total_s(self) -> float | None:
        import threading

        if not os.path.isdir("/proc/self/task"):
            return None
        me = threading.get_ident()
        for t in threading.enumerate():
            if t.ident == me or t.native_id is None:
                continue
            cpu = _thread_cpu_s(t.native_id)
            if cpu is not None:  # None: gone since it was listed; it keeps its last reading
                self._last[t] = cpu
        return sum(self._last.values())


class Interleave:
    """Called by the harness after each of its steps (run/train.py `between_steps`), in its untimed gap.

    After each warm-up step of the harness: one untimed step of the bare loop (its warm-up). Then, over
    the measured steps, two timed bare steps after every even one and none after the odd ones, so the
    order runs H B B H | H B B H: harness step i and bare step i are neighbours, and within each block
    the harness goes first once and second once, which cancels a steady drift of the machine's speed.
    The clocks read at each call give the harness's own wall time between steps and its side threads' CPU.
    """

    def __init__(self, loop: Any, *, warmup: int) -> None:
        self.loop, self.warmup = loop, warmup
        self.bare_img_s: list[float] = []
        self.calls: list[_Call] = []
        self.side = SideThreads()

    def __call__(self) -> None:
        import time

        wall_in, side_cpu_in = time.perf_counter(), self.side.total_s()
        if side_cpu_in is None:  # no /proc: every thread but this one, torch's pools included
            side_cpu_in = time.process_time() - time.thread_time()
        measured_index = len(self.calls) - self.warmup  # of the harness step that just ended
        if measured_index < 0:
            self.loop.step()
        elif measured_index % 2 == 0:
            self.bare_img_s += [self.loop.timed_step_img_s(), self.loop.timed_step_img_s()]
        self.calls.append(_Call(wall_in, time.perf_counter(), side_cpu_in))

    def _measured_span(self) -> tuple[_Call, _Call]:
        """The calls after the last warm-up step and after the last measured step (clocks read as each began)."""
        if len(self.calls) <= self.warmup:
            raise RuntimeError(f"the harness ran {len(self.calls)} step(s), no measured one")
        return self.calls[self.warmup - 1], self.calls[-1]

    def untimed_share(self, timed_step_s: list[float]) -> float:
        """1 - (the harness's timed measured steps) / (its wall time between the calls around them)."""
        measured = self.calls[self.warmup - 1 :]
        if len(measured) - 1 != len(timed_step_s):
            raise RuntimeError(f"{len(measured) - 1} harness steps between calls, {len(timed_step_s)} in steps.csv")
        wall = sum(b.wall_in - a.wall_out for a, b in pairwise(measured))
        return 1 - sum(timed_step_s) / wall

    def side_threads_cores(self) -> float:
        """CPU seconds of the harness's side threads (SideThreads) per wall second, over the measured span."""
        first, last = self._measured_span()
        return (last.side_cpu_in - first.side_cpu_in) / (last.wall_in - first.wall_in)


def compare_interleaved_steps(
    measured_img_s: list[float],
    reference_img_s: list[float],
    *,
    min_ratio: float,
    extra_cost_share: float = 0.0,
    rerun: str = "rerun it idle or with more --pairs",
) -> tuple[str, float, float, float, str]:
    """(status, ratio, its 95% low, high, why) from per-step img/s taken in interleaved pairs.

    Step i of each side ran next to the other's step i, so the machine's drift is common to a pair and cancels
    in its ratio. Neighbouring pairs still share more than that (a noisy neighbour's phase lasts seconds), so
    the pairs are read in blocks of PAIRS_PER_BLOCK (batch means): each block's Hodges-Lehmann centre of its
    log ratios is one sample, and the ratio is the centre of those with its Wilcoxon signed-rank 95% interval
    (analysis/stats.signed_rank_interval; a block's log ratio is symmetric about the true one, as the two
    sides swap first and second from pair to pair, and one wild step barely moves it). The measured side's
    costs that the pairs cannot see (`extra_cost_share` of its time) scale the ratio and its interval by
    (1 - extra_cost_share). PASS when the whole interval is >= min_ratio, FAIL when all of it is below, else
    SKIP (this machine cannot resolve the tolerance now): never a verdict on noise.
    """
    n = min(len(measured_img_s), len(reference_img_s))
    logs = [math.log(m / r) for m, r in zip(measured_img_s[:n], reference_img_s[:n], strict=True)]
    k = PAIRS_PER_BLOCK
    blocks = [centre_of(logs[i : i + k]) for i in range(0, n - k + 1, k)]
    centre = stats.signed_rank_interval(blocks)
    if centre is None:
        return (
            SKIP,
            float("nan"),
            float("nan"),
            float("nan"),
            (f"{n} step pairs: too few for a 95% interval (needs {MIN_PAIRS}, {k} a block)"),
        )
    keep = 1 - extra_cost_share
    ratio, low, high = (math.exp(v) * keep for v in centre)
    status = PASS if low >= min_ratio else FAIL if high < min_ratio else SKIP
    why = f"95% interval {low:.3f}..{high:.3f} over {len(blocks)} blocks of {k} pairs"
    if status == SKIP:
        why = f"inconclusive: {why} straddles {min_ratio}; this machine is too noisy now, {rerun}"
    return status, ratio, low, high, why


def centre_of(xs: list[float]) -> float:
    """Hodges-Lehmann centre of a block (its signed-rank interval is not needed)."""
    got = stats.signed_rank_interval(xs)
    return got[0] if got is not None else stats.median(xs)


def compare_fastest_steps(
    measured_rounds: list[list[float]], reference_rounds: list[list[float]], *, min_ratio: float
) -> tuple[str, float, float, float, str]:
    """(status, ratio, measured best, reference best, why) from per-step img/s of alternating rounds.

    Each side is judged by its fastest step over all rounds: on a shared machine the OS only ever adds time
    to a step, while a cost of the code itself is in every step. How far a side's best may be off is read
    from the machine itself: the gap to the best of its *other* rounds (a best that no other round comes
    near was luck or noise). The ratio's range is then [ratio x (1 - reference gap), ratio / (1 - measured
    gap)]: PASS when all of it is >= min_ratio, FAIL when all of it is below, else SKIP (this machine cannot
    resolve the tolerance now) -- never a verdict on noise. Pure: numbers in, verdict out.
    """
    bests, gaps, shown = [], [], []
    for rounds in (measured_rounds, reference_rounds):
        per_round = sorted((max(r) for r in rounds if r), reverse=True)
        if len(per_round) < 2:
            return SKIP, float("nan"), float("nan"), float("nan"), "fewer than 2 rounds with a measured step"
        bests.append(per_round[0])
        gaps.append(1 - per_round[1] / per_round[0])
        shown.append("/".join(f"{max(r):.4g}" for r in rounds if r))
    ratio = bests[0] / bests[1]
    low, high = ratio * (1 - gaps[1]), ratio / (1 - gaps[0]) if gaps[0] < 1 else float("inf")
    status = PASS if low >= min_ratio else FAIL if high < min_ratio else SKIP
    why = (
        f"ratio range {low:.3f}..{high:.3f} from the gap of each side's best to its next round "
        f"({gaps[0]:.1%}, {gaps[1]:.1%}; round bests {shown[0]} vs {shown[1]} img/s)"
    )
    if status == SKIP:
        why = f"inconclusive: {why} straddles {min_ratio}; this machine is too noisy now, rerun it idle"
    return status, ratio, bests[0], bests[1], why


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else float("inf")


# ----------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------
def check_harness_vs_bare(ctx: Context) -> list[Check]:
    import torch

    from effbench.data.synthetic import NUM_CLASSES
    from effbench.models import build_model
    from effbench.run.train import between_steps
    from effbench.selftest.reference import BareLoop

    cfg = ctx.cfg
    shape = dict({"arch": "resnet18", **CUDA_RUN} if ctx.cuda else PAIRED_CPU_RUN)
    threads_before = torch.get_num_threads()
    with one_core(enabled=not ctx.cuda) as core:
        rc = RunConfig(dataset="synthetic", weights="none", freeze="none", **shape)
        # the same model the harness trains (with the synthetic dataset's classes: its head is part of the
        # step), in a loop of the selftest's own
        loop = BareLoop(
            build_model(rc, NUM_CLASSES).model, batch=shape["batch_size"], image_size=shape["image_size"],
            classes=NUM_CLASSES, device=ctx.device,
        )  # fmt: skip
        gap = Interleave(loop, warmup=cfg.warmup_steps)
        with between_steps(gap):
            res = harness(
                ctx, precision="fp32", **shape, channels_last=False,
                max_steps=cfg.warmup_steps + cfg.pairs, warmup_steps=cfg.warmup_steps,
                # the bare loop's optimizer kernel (foreach on CUDA, the per-parameter loop on the CPU): same math
                optimizer_impl="foreach" if ctx.cuda else "for-loop",
            )  # fmt: skip
        threads = res.record.launch.threads_per_proc
        if threads is None:
            raise RuntimeError("the harness run recorded no launch.threads_per_proc")
    torch.set_num_threads(threads_before)
    steps = measured_steps(res.run_dir / "steps.csv")
    harness_img_s = [images / (data_s + compute_s) for images, data_s, compute_s in steps]
    # what interleaving hides from the step ratio, measured apart and charged to the harness: its wall time
    # outside the step timers, and its side threads' CPU (on the shared core, both sides' steps paid it)
    untimed = gap.untimed_share([d + c for _, d, c in steps])
    side_cores = gap.side_threads_cores()
    extra = 1 - (1 - untimed) * (1 - side_cores / threads)
    status, ratio, low, high, why = compare_interleaved_steps(
        harness_img_s, gap.bare_img_s, min_ratio=0.97, extra_cost_share=extra
    )
    where = (
        f"{step_split(steps, gap.bare_img_s, shape['batch_size'])}; "
        f"{shape['arch']} {shape['image_size']} px batch {shape['batch_size']} fp32, {len(steps)} steps a side after "
        f"{cfg.warmup_steps}, {threads} thread(s)" + (f" on core {core}" if core is not None else "")
    )
    return [
        Check(
            "harness vs bare loop", status, f"{ratio:.3f}x (95% {low:.3f}..{high:.3f})",
            f"{stats.median(gap.bare_img_s):.1f} img/s bare, {stats.median(harness_img_s):.1f} harness",
            "ratio >= 0.97",
            f"step-by-step ratios, each harness step beside a bare one (H B B H), their Hodges-Lehmann centre times 1 - the "
            f"harness's costs outside its steps ({untimed:.3%} of its wall time untimed, side threads "
            f"{side_cores:.4f} cores: the utilisation sampler); {why}; {where}",
        ),
    ]  # fmt: skip


def step_split(steps: list[tuple[int, float, float]], bare_img_s: list[float], batch: int) -> str:
    """Where a harness step's time sits beside a bare step's, as medians in ms: which span to read when the two
    differ (the first GPU run's 0.952 step ratio could not say whether data or compute held the gap)."""
    data_ms = stats.median([d for _, d, _ in steps]) * 1e3
    compute_ms = stats.median([c for _, _, c in steps]) * 1e3
    bare_ms = batch / stats.median(bare_img_s) * 1e3
    return f"median step: harness {data_ms:.3f} ms data + {compute_ms:.3f} ms compute, bare {bare_ms:.3f} ms"


def check_flops(ctx: Context) -> list[Check]:
    import torch

    from effbench.measure.flops import step_flops
    from effbench.models import build_model
    from effbench.selftest.reference import depthwise_net, layer_flops

    # shapes are all either side needs: the meta device counts without arithmetic (seconds on any CPU)
    x, y = torch.empty(2, 3, 32, 32, device="meta"), torch.zeros(2, dtype=torch.long, device="meta")
    with torch.device("meta"):
        resnet = build_model(RunConfig(arch="resnet18", dataset="synthetic", weights="none", image_size=32), 10).model
        depthwise = depthwise_net()
    rows = []
    for name, model in (("depthwise net", depthwise), ("resnet18 32 px", resnet)):
        ref_step, ref_fwd = layer_flops(model, x, y)
        got = step_flops(model, x, y)
        ok = _rel(got.per_image, ref_step) <= 1e-6 and _rel(got.forward_per_image, ref_fwd) <= 1e-6
        rows.append(
            Check(
                f"FLOPs: {name}",
                PASS if ok else FAIL,
                f"{got.per_image:.4g} step / {got.forward_per_image:.4g} fwd",
                f"{ref_step:.4g} step / {ref_fwd:.4g} fwd",
                "1e-6 relative",
                "FLOPs per image of effbench's counter vs per-layer formulas (2*N*Cout*Hout*Wout*Cin/g*k*k)",
            )  # fmt: skip
        )
    return rows


def check_precision_and_timing(ctx: Context) -> list[Check]:
    """One in-process run under the probe: the forward's dtype, and on CUDA its timed steps vs CUDA events."""
    precision = "auto" if ctx.cuda else "bf16"  # the CPU runs bf16 only when asked; fp32 would show nothing
    with probed(ctx, "in-process") as (probe, _folder):
        res = harness(ctx, precision=precision, **(CUDA_RUN if ctx.cuda else TINY_RUN))
    rows = [precision_row("precision: in-process", res.record.precision, [probe.dtypes])]
    if not ctx.cuda:
        rows.append(
            Check(
                "timing vs CUDA events",
                SKIP,
                reason="no CUDA device: step timing on the CPU has no device queue to check",
            )
        )
        return rows
    tally = res.record.measured
    if tally is None:
        raise RuntimeError("the harness run recorded no measured steps")
    rows.append(timing_vs_events(tally.steps, tally.compute_time_s, probe.step_times_s()[ctx.cfg.warmup_steps :]))
    return rows


def timing_vs_events(measured_steps: int, compute_time_s: float, event_step_times_s: list[float]) -> Check:
    """The harness's compute time of its measured steps vs the probe's CUDA events over the same steps (from
    the model's forward to the end of optimizer.step): PASS within 3% with one event interval per step."""
    ref = sum(event_step_times_s)
    ok = len(event_step_times_s) == measured_steps and _rel(compute_time_s, ref) <= 0.03
    return Check(
        "timing vs CUDA events",
        PASS if ok else FAIL,
        f"{compute_time_s:.4f} s",
        f"{ref:.4f} s",
        "3%",
        f"compute time of {measured_steps} measured steps vs CUDA events from the model's forward to the end of "
        f"optimizer.step ({len(event_step_times_s)} steps)",
    )


def check_dp_precision(ctx: Context) -> list[Check]:
    if ctx.gpus < 2:
        return [
            Check(
                "precision: dp",
                SKIP,
                reason=f"DataParallel runs replicas in threads only with 2+ GPUs; {ctx.gpus} visible",
            )
        ]
    with probed(ctx, "dp") as (probe, _folder):
        res = harness(ctx, precision="auto", strategy="dp", gpus=2, batch_size=64)
    return [precision_row("precision: dp", res.record.precision, [probe.dtypes])]


def check_nvml(ctx: Context) -> list[Check]:
    from effbench.measure.monitor import POWER_INSTANT
    from effbench.system.nvml import nvml_session

    names = ("NVML: sampled device is the job's (UUID)", "NVML: energy vs integral of power")
    if not ctx.cuda:
        return [Check(n, SKIP, reason="no CUDA device") for n in names]
    with nvml_session() as nvml:
        if nvml is None:
            return [Check(n, SKIP, reason="NVML not available (no driver library)") for n in names]
    import torch

    # long enough for ~40 samples at 0.1 s, so the trapezoid integral has something to integrate
    res = harness(
        ctx,
        precision="auto",
        sample_interval_s=0.1,
        max_steps=ctx.cfg.warmup_steps + 200,
        batch_size=256,
        image_size=64,
    )
    gpus = res.record.utilization.gpus
    if not gpus or gpus[0].index is None:
        return [Check(n, FAIL, reason="the run sampled no GPU") for n in names]
    index = gpus[0].index  # the CUDA index; the sampler found it in NVML by UUID (monitor.py)
    sampled_uuid = str(gpus[0].nvml_uuid)  # what NVML itself reported for the handle it sampled
    job_uuid = str(torch.cuda.get_device_properties(ctx.device).uuid)  # NVML spells it "GPU-<uuid>"
    rows = [
        Check(names[0], PASS if job_uuid in sampled_uuid else FAIL, sampled_uuid, f"GPU-{job_uuid}", "equal",
              f"column gpu{index} sampled; torch device {ctx.device}"),
    ]  # fmt: skip
    with open(res.run_dir / "utilization.csv") as f:
        rows_csv = [r for r in csv.DictReader(f) if r.get(f"gpu{index}_power_w") and r.get(f"gpu{index}_energy_j")]
    t = [float(r["t_s"]) for r in rows_csv]
    p = [float(r[f"gpu{index}_power_w"]) for r in rows_csv]
    e = [float(r[f"gpu{index}_energy_j"]) for r in rows_csv]
    if gpus[0].energy_j is None or not rows_csv:
        rows.append(Check(names[1], SKIP, reason="this GPU has no energy counter (NVML)"))
        return rows
    averaged = gpus[0].power_source != POWER_INSTANT
    found = energy_vs_power(t, p, e, edge_s=AVERAGE_EDGE_S if averaged else 0.0)
    if found is None:
        rows.append(Check(names[1], FAIL, reason=f"under 10 power samples in the block ({len(t)})"))
        return rows
    counter_j, integral_j, n = found
    how = (f"interior of the block ({AVERAGE_EDGE_S:g} s from each end: NVML's 1 s power average lags each change"
           " of load)" if averaged else "whole block, instantaneous power")  # fmt: skip
    rows.append(Check(names[1], PASS if _rel(counter_j, integral_j) <= 0.10 else FAIL, f"{counter_j:.1f} J",
                      f"{integral_j:.1f} J", "10%", f"energy counter vs trapezoid of {n} power samples, {how}"))  # fmt: skip
    return rows


# nvmlDeviceGetPowerUsage is a 1 s average on Ampere and newer: over a block that starts idle, its trapezoid
# lags the counter by about half a second of the load step (~10% of a 4 s block, the check's tolerance).
# 1.5 s from each end leaves the lag out: the average has caught up, and the block's edges hold the steps.
AVERAGE_EDGE_S = 1.5


def energy_vs_power(
    t: list[float], power_w: list[float], energy_j: list[float], *, edge_s: float
) -> tuple[float, float, int] | None:
    """(the energy counter's increase, the trapezoid of the power samples, the samples used) over the samples
    at least `edge_s` from the block's first and last; None with fewer than 10 such samples. The counter is
    read at every sample (monitor.py), so both figures cover the same span."""
    if not t:
        return None
    lo, hi = t[0] + edge_s, t[-1] - edge_s
    idx = [i for i, ti in enumerate(t) if lo <= ti <= hi]
    if len(idx) < 10:
        return None
    integral = sum((t[j] - t[i]) * (power_w[j] + power_w[i]) / 2 for i, j in pairwise(idx))
    return energy_j[idx[-1]] - energy_j[idx[0]], integral, len(idx)


def check_ddp(ctx: Context) -> list[Check]:
    from effbench.selftest.reference import allreduce_busbw_gb_s

    nccl = ctx.cuda and ctx.gpus >= 2
    backend = "nccl" if nccl else "gloo"
    ar = allreduce_busbw_gb_s(str(ctx.folder), backend=backend)
    rows = [
        Check(
            f"DDP: all-reduce over {backend}",
            PASS if ar["correct"] else FAIL,
            f"{ar['busbw_gb_s']:.3f} GB/s busbw",
            "sum of ranks' tensors",
            "exact sum",
            f"2 processes, {ar['bytes'] / 2**20:.0f} MiB fp32, median of 10; busbw = size/time x 2(n-1)/n (nccl-tests)",
        )  # fmt: skip
    ]
    run_kw: dict[str, Any] = {"gpus": 2, "device": "cuda"} if nccl else {"nproc": 2, "device": "cpu"}
    where = "2 GPUs (NCCL)" if nccl else "2 CPU processes (gloo)"
    with probed(ctx, "ddp") as (_probe, folder):
        res = harness(ctx, precision="auto" if nccl else "bf16", **run_kw, **({} if nccl else TINY_RUN))
    ranks = res.record.ranks
    timed = [(r.images, r.time_s) for r in ranks if r.images is not None and r.time_s]
    if len(ranks) == 2 and len(timed) == 2:
        ref = sum(i for i, _ in timed) / max(t for _, t in timed)
        got = res.record.throughput_img_s
        ok = got is not None and _rel(got, ref) <= 1e-9
        rows.append(Check("DDP: 2-rank throughput", PASS if ok else FAIL, got, ref, "1e-9 relative",
                          f"{where}: results.json vs sum of ranks' images / slowest rank's time"))  # fmt: skip
    else:
        rows.append(
            Check(
                "DDP: 2-rank throughput",
                FAIL,
                reason=f"results.json has {len(ranks)} rank rows ({len(timed)} with images and time), 2 expected",
            )
        )
    probes = rank_probes(folder)
    row = precision_row("precision: DDP", res.record.precision, [p["dtypes"] for p in probes])
    if len(probes) != 2:
        row.status, row.reason = FAIL, f"{len(probes)} rank probe(s) came back, 2 expected; " + row.reason
    rows.append(row)
    return rows


class LoaderTurns:
    """One loader's training batches on demand, epoch after epoch, each timed as the training loop's data span
    (run/timing.StepTimer.wait_for: next(), the copy to the device, the training stream's sync). An epoch's end
    and its next iterator are charged to the batch after them, as a run charges its iterator to its first step."""

    def __init__(self, data: DataBundle, clock: DeviceClock, device: Any) -> None:
        from effbench.run.timing import StepTimer

        def deliver(batch: Any) -> Any:
            x, y = batch
            return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

        self._data = data
        self._timer = StepTimer(clock, deliver)
        self._it: Iterator[Any] | None = None
        self.epoch = -1

    def batch_img_s(self) -> float:
        """Images/s of the next batch."""
        while True:
            if self._it is None:
                self.epoch += 1
                self._data.set_epoch(self.epoch)
                self._it = self._timer.time_data(lambda: iter(self._data.train))
            try:
                images = int(self._timer.wait_for(self._it)[1].shape[0])
            except StopIteration:
                self._it = None
                continue
            return images / self._timer.lap().data_s


def interleaved_batches(a: LoaderTurns, b: LoaderTurns, *, pairs: int, warmup: int) -> tuple[list[float], list[float]]:
    """Per-batch img/s of `a` and `b`, batch i of each next to the other's (A B B A ...: each goes first in half
    the pairs), after `warmup` unrecorded batches a side: the machine's drift is common to a pair."""
    for _ in range(warmup):
        a.batch_img_s()
        b.batch_img_s()
    got_a: list[float] = []
    got_b: list[float] = []
    for i in range(pairs):
        if i % 2 == 0:
            got_a.append(a.batch_img_s())
            got_b.append(b.batch_img_s())
        else:
            got_b.append(b.batch_img_s())
            got_a.append(a.batch_img_s())
    return got_a, got_b


def check_data_path(ctx: Context) -> list[Check]:
    """Two loaders on the same work (default fast vs torchvision; --data-loaders picks them): both train
    the same --augment recipe (the seed recipe of image files: resize, random crop, flip, rotation). A
    `--data-only` run of each records its recipe and image count, compared, so the speedup never compares two
    amounts of work; the speed is then read batch beside batch from the same loaders, built as the runs
    built them (interleaved_batches, judged as the harness check's pairs)."""
    from effbench.data.build import build_data
    from effbench.recipes import resolve
    from effbench.run.timing import device_clock
    from effbench.selftest.reference import decode_ceiling_s, write_image_folder

    a, b = ctx.cfg.data_loaders
    goal = (a, b) == DATA_LOADERS
    root = write_image_folder(ctx.folder / "images", classes=4, per_class=48, size=40)
    runs: dict[str, Any] = {}
    for loader in (a, b):
        res = harness(ctx, data_dir=root, loader=loader, **DATA_RUN)
        if res.record.measured is None:
            raise RuntimeError(f"the {loader} run recorded no measured steps")
        runs[loader] = res.record
    images = {loader: r.measured.images for loader, r in runs.items()}
    recipes = {loader: r.data.augment for loader, r in runs.items()}
    same = images[a] == images[b]
    same_recipe = recipes[a] is not None and recipes[a] == recipes[b]
    clock = device_clock(ctx.device)
    turns = [
        LoaderTurns(build_data(harness_config(ctx, data_dir=root, loader=loader, **DATA_RUN), ctx.device),
                    clock, ctx.device)
        for loader in (a, b)
    ]  # fmt: skip
    got_a, got_b = interleaved_batches(*turns, pairs=DATA_PAIRS, warmup=DATA_WARMUP)
    # another pair has no goal: min_ratio 0 makes the ratio's interval a report, the images and recipe the check
    status, ratio, _low, _high, why = compare_interleaved_steps(
        got_a, got_b, min_ratio=0.9 if goal else 0.0, rerun="rerun it idle"
    )
    med_a, med_b = stats.median(got_a), stats.median(got_b)
    # the decode ceiling of the same files: 0 workers, so one process decodes (reference.decode_ceiling_s)
    ceiling = 1.0 / decode_ceiling_s(sorted(root.rglob("*.jpg")), resolve("seed", "imagefolder", 32).base)
    steps = recipes[a].steps if recipes[a] is not None and recipes[a].steps is not None else "no recipe recorded"
    return [
        Check(
            f"data path: {a} vs {b} loader",
            status if same and same_recipe else FAIL,
            f"{med_a:.1f} img/s ({ratio:.3f}x)",
            f"{med_b:.1f} img/s",
            "ratio >= 0.9, same images, same recipe" if goal else "same images, same recipe (ratio reported)",
            f"median batch of {DATA_PAIRS} interleaved batch pairs after {DATA_WARMUP} a side, each the loop's data "
            f"span; {why}; {root.name}/: 192 generated JPEGs 40 px (144 train), batch 16, 0 workers, both loaders "
            f"--augment {steps}; decode ceiling {ceiling:.1f} img/s (read + decode + resize + centre square, one "
            f"thread): {a} {med_a / ceiling:.0%} and {b} {med_b / ceiling:.0%} of it"
            + ("" if same else f"; the loaders delivered different image counts {images}")
            + ("" if same_recipe else f"; the loaders recorded different recipes {recipes}")
            # DALI runs ahead on its own threads (prefetch_queue_depth 2), also while the other loader has its turn
            + (
                "; dali prefetches 2 batches on its own threads, so its batch time leaves out work done ahead"
                if "dali" in (a, b)
                else ""
            ),
        )  # fmt: skip
    ]


PIPELINED_NAME = "pipelined loop vs harness"
# CIFAR-sized resnet18 steps of a few ms on a datacenter GPU: where one host sync per step costs most
PIPELINED_RUN: dict[str, Any] = {"arch": "resnet18", "image_size": 32, "batch_size": 128}
PIPELINED_WINDOW = 10  # steps per window: the pipelined loop syncs once per window; the harness is cut alike
# alternating rounds a side: a side's best is read against its next round's (compare_fastest_steps)
PIPELINED_ROUNDS = 4
PIPELINED_CPU_SKIP = (
    "CUDA only: on the CPU each op runs to completion on the host before the next is issued, so a loop has "
    "nothing to pipeline and the harness's per-step sync costs nothing"
)


def window_img_s(steps: list[tuple[int, float, float]], window: int) -> list[float]:
    """Images/s of consecutive windows of `window` measured steps (images, data s, compute s), a last part
    window dropped: the harness's steps cut as the pipelined loop's windows are."""
    out = []
    for i in range(0, len(steps) - window + 1, window):
        part = steps[i : i + window]
        out.append(sum(n for n, _, _ in part) / sum(d + c for _, d, c in part))
    return out


def check_pipelined(ctx: Context) -> list[Check]:
    """The headline's timing (run/timing.py: pipelined by default, one wait per --log-interval steps) beside
    the selftest's own pipelined loop of the same model (one sync per PIPELINED_WINDOW steps): the harness's
    own cost on the GPU. A measurement with its range, not a defect: PASS unless the
    pipelined loop is slower beyond the range (which would mean the comparison itself is broken)."""
    if not ctx.cuda:
        return [Check(PIPELINED_NAME, SKIP, reason=PIPELINED_CPU_SKIP)]
    from effbench.data.synthetic import NUM_CLASSES
    from effbench.models import build_model
    from effbench.selftest.reference import BareLoop

    cfg, shape = ctx.cfg, dict(PIPELINED_RUN)
    windows = max(5, cfg.steps // PIPELINED_WINDOW)  # 50+ steps a round: a few ms each on a GPU
    rc = RunConfig(dataset="synthetic", weights="none", freeze="none", **shape)
    loop = BareLoop(build_model(rc, NUM_CLASSES).model, batch=shape["batch_size"], image_size=shape["image_size"],
                    classes=NUM_CLASSES, device=ctx.device)  # fmt: skip
    for _ in range(cfg.warmup_steps):
        loop.step()
    harness_rounds: list[list[float]] = []
    pipelined_rounds: list[list[float]] = []
    for _ in range(PIPELINED_ROUNDS):  # alternating, so both sides meet the same moments of the machine
        res = harness(ctx, precision="fp32", channels_last=False, optimizer_impl="foreach", **shape,
                      max_steps=cfg.warmup_steps + windows * PIPELINED_WINDOW, warmup_steps=cfg.warmup_steps)  # fmt: skip
        harness_rounds.append(window_img_s(measured_steps(res.run_dir / "steps.csv"), PIPELINED_WINDOW))
        pipelined_rounds.append([loop.pipelined_img_s(PIPELINED_WINDOW) for _ in range(windows)])
    status, ratio, best_p, best_h, why = compare_fastest_steps(pipelined_rounds, harness_rounds, min_ratio=0.97)
    return [
        Check(
            PIPELINED_NAME,
            FAIL if status == FAIL else PASS,
            f"{best_p:.1f} img/s pipelined ({ratio - 1:+.1%} vs the harness)",
            f"{best_h:.1f} img/s harness",
            "gap reported; FAIL only if pipelined < 0.97x",
            f"fastest window of {PIPELINED_WINDOW} steps, {PIPELINED_ROUNDS} alternating rounds a side; {why}; the "
            f"harness timed {res.record.config.timing}; {shape['arch']} "
            f"{shape['image_size']} px batch {shape['batch_size']} fp32",
        )  # fmt: skip
    ]


# The roofs check: the roof against a plain matmul / copy of the selftest's own (reference.py), rep beside rep
# (interleaved, so a busy machine slows both alike) and compared by their medians. The references are smaller or
# differently written (a @ b at 3/4 of the roof's N; dst[:] = src of the same size), so they may run somewhat below
# or above the roof; one far below it (under ROOF_REF_RANGE[0]) says the roof is not what this device attains, one
# far above it that the roof is too low. On a GPU the measured roofs also sit inside the datasheet's (DATASHEET_RANGE): an H100's
# 8192^3 bf16 matmul reaches ~70-80% of its dense datasheet peak and a 1 GiB copy ~80-90% of its bandwidth.
ROOF_REF_RANGE = (0.5, 1.5)
DATASHEET_RANGE = (0.3, 1.05)
ROOF_ROUNDS = 5
ROOF_ATTEMPTS = 3


def _roof_vs_reference(roof_rate: Callable[[], float], ref_rate: Callable[[], float]) -> tuple[float, float, float]:
    """(median roof rate, median reference rate, their ratio) over ROOF_ROUNDS interleaved rounds; the best of
    ROOF_ATTEMPTS when a burst of load lands on one side."""
    best: tuple[float, float, float] | None = None
    for _ in range(ROOF_ATTEMPTS):
        roof, ref = [], []
        for _ in range(ROOF_ROUNDS):
            roof.append(roof_rate())
            ref.append(ref_rate())
        r, f = stats.median(roof), stats.median(ref)
        got = (r, f, f / r)
        if best is None or abs(math.log(got[2])) < abs(math.log(best[2])):
            best = got
        if ROOF_REF_RANGE[0] <= got[2] <= ROOF_REF_RANGE[1]:
            break
    assert best is not None
    return best


def _roof_row(
    name: str,
    shown: str,
    attained: float,
    datasheet: float | None,
    unit: str,
    reference: str,
    ratio: float,
    how: str | None,
) -> Check:
    """A roof's verdict: its plain reference within ROOF_REF_RANGE of it (`ratio` = reference / roof), the roof
    above zero and, where the device has a datasheet figure, `attained` within DATASHEET_RANGE of it."""
    ok = ROOF_REF_RANGE[0] <= ratio <= ROOF_REF_RANGE[1] and attained > 0
    tolerance, sheet = f"{ROOF_REF_RANGE[0]}..{ROOF_REF_RANGE[1]}x", ""
    if datasheet:
        share = attained / datasheet
        ok = ok and DATASHEET_RANGE[0] <= share <= DATASHEET_RANGE[1]
        tolerance += f", datasheet {DATASHEET_RANGE[0]}..{DATASHEET_RANGE[1]}x"
        sheet = f"; {share:.0%} of the datasheet's {datasheet:g} {unit}"
    return Check(
        name,
        PASS if ok else FAIL,
        shown,
        reference,
        tolerance,
        f"{how}{sheet}; medians of {ROOF_ROUNDS} interleaved reps",
    )


def check_roofs(ctx: Context) -> list[Check]:
    """This machine's roofs (measure/roofs.py, measured afresh: no cache), each against a plain matmul or copy
    timed by the host clock (reference.py), and on a GPU against its datasheet."""
    import torch

    from effbench.measure import roofs
    from effbench.selftest.reference import PlainCopy, PlainMatmul

    device = ctx.device
    cuda = ctx.cuda
    precisions = ["bf16", "fp32"] if cuda and torch.cuda.is_bf16_supported() else ["fp32"]
    measured = roofs.measure_roofs(device, precisions=precisions, sm_count=(
        torch.cuda.get_device_properties(device).multi_processor_count if cuda else None))  # fmt: skip
    rows = []
    for c in measured.compute:
        n = (roofs.GPU_MATMUL_N if cuda else roofs.CPU_MATMUL_N) * 3 // 4
        ref = PlainMatmul(device, getattr(torch, roofs.DTYPE_OF[c.precision]), n)
        roof_r, ref_r, ratio = _roof_vs_reference(lambda p=c.precision: roofs.matmul_tflops(device, p, reps=1)[0] * 1e12, ref.once)  # fmt: skip
        rows.append(_roof_row(
            f"roofs: {c.precision} matmul", f"{(c.tflops or 0) * 1e3:,.1f} GFLOP/s", c.tflops or 0,
            c.datasheet_tflops, "TFLOP/s",
            f"a @ b {n}x{n}: {ref_r / 1e9:,.1f} GFLOP/s ({ratio:.2f}x the roof's {roof_r / 1e9:,.1f}, interleaved)",
            ratio, c.how,
        ))  # fmt: skip
    copy_bytes = roofs.GPU_COPY_BYTES if cuda else roofs.CPU_COPY_BYTES  # the same size: the same share of it in cache
    plain = PlainCopy(device, copy_bytes)
    roof_r, ref_r, ratio = _roof_vs_reference(lambda: roofs.copy_gb_s(device, reps=1)[0] * 1e9, plain.once)
    rows.append(_roof_row(
        "roofs: memory bandwidth", f"{measured.memory_gb_s or 0:,.1f} GB/s", measured.memory_gb_s or 0,
        measured.memory_datasheet_gb_s, "GB/s",
        f"dst[:] = src {copy_bytes / 2**20:,.0f} MiB: {ref_r / 1e9:,.1f} GB/s ({ratio:.2f}x the roof's {roof_r / 1e9:,.1f}, interleaved)",
        ratio, measured.memory_how,
    ))  # fmt: skip
    return rows


# The roofline check (issue 35): a matmul-only model reaches >= 70% of the compute roof and is called compute-bound;
# an element-wise-only model >= 50% of the memory roof and is called memory-bound (docs/methodology.md, "Roofline").
ROOFLINE_GOALS = {"matmul-only model": 0.70, "elementwise-only model": 0.50}


@contextmanager
def _threads(n: int | None) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def model_against_roofs(
    device: Any,
    step: Callable[[Any], Any],
    kind: str,
    *,
    precision: str,
    matmul_n: int,
    copy_bytes: int,
    out_dir: Path,
    goal: float,
    attempts: int = ROOF_ATTEMPTS,
) -> tuple[list[float], str]:
    """The fraction of its roof that `kind` reaches in `step` under the profiling pass (effbench's roofline,
    analysis/roofline.py), against the roofs measured in the same loop: each profiled step's data wait (no
    kind's time) runs the two microbenchmarks, so roof and model meet the same load; the roof is the median of
    those reps. Up to `attempts` passes, stopping at the first that reaches `goal` (a burst of load on one side
    can only lower the fraction). Returns every attempt's fraction and the last bound."""
    from effbench import schema
    from effbench.measure import observe, roofs
    from effbench.measure.profiling import run_profile_pass

    fractions: list[float] = []
    bound = ""
    for attempt in range(attempts):
        compute: list[float] = []
        memory: list[float] = []

        def interleaved(compute: list[float] = compute, memory: list[float] = memory) -> Iterator[None]:
            while True:
                compute.append(roofs.matmul_tflops(device, precision, n=matmul_n, reps=2)[0])
                memory.append(roofs.copy_gb_s(device, nbytes=copy_bytes, reps=2)[0])
                yield None

        info = run_profile_pass(step, interleaved(), device_type=device.type, out_dir=out_dir / f"attempt{attempt}",
                                wait=0, warmup=1, active=3)  # fmt: skip
        measured = schema.Roofs(
            compute=[schema.ComputeRoof(precision=precision, tflops=stats.median(compute))],
            memory_gb_s=stats.median(memory),
        )
        r = observe.roofline_of(info, measured, precision, device_type=device.type, conv_tf32=False,
                                matmul_tf32=precision == "tf32")  # fmt: skip
        row = next((k for k in r.kinds if k.kind == kind), None)
        if row is None:
            raise RuntimeError(f"the profiled step has no {kind} ops: {[k.kind for k in r.kinds]}")
        bound = row.bound or ""
        fractions.append(row.roof_fraction or 0.0)
        if max(fractions) >= goal:
            break
    return fractions, bound


def check_roofline(ctx: Context) -> list[Check]:
    """A matmul-only and an element-wise-only model (reference.py) through the profiling pass's roofline, each
    against the roofs measured beside it: the one >= 70% of the compute roof and compute-bound, the other >= 50%
    of the memory roof and memory-bound. On the CPU on one thread (two on a shared 2-core machine stall each other)."""
    import torch

    from effbench.analysis import roofline
    from effbench.measure import roofs
    from effbench.selftest.reference import ElementwiseOnly, MatmulOnly

    device, cuda = ctx.device, ctx.cuda
    precision = "bf16" if cuda and torch.cuda.is_bf16_supported() else "fp32"
    n = roofs.GPU_MATMUL_N if cuda else roofs.CPU_MATMUL_N
    size = roofs.GPU_COPY_BYTES if cuda else 64 * 2**20  # the CPU's: twice a 32 MiB L3, as the roof's copy
    rows = []
    with _threads(None if cuda else 1):
        cases = (
            ("matmul-only model", lambda: MatmulOnly(device, getattr(torch, roofs.DTYPE_OF[precision]), n),
             roofline.MATMUL, "compute"),
            ("elementwise-only model", lambda: ElementwiseOnly(device, size), roofline.ELEMENTWISE, "memory"),
        )  # fmt: skip
        for name, build, kind, want in cases:
            goal = ROOFLINE_GOALS[name]
            model = build()
            fractions, bound = model_against_roofs(
                device, model, kind, precision=precision, matmul_n=n if kind == roofline.MATMUL else n // 2,
                copy_bytes=size, out_dir=ctx.folder / "roofline" / name.split()[0], goal=goal,
            )  # fmt: skip
            del model
            ok = max(fractions) >= goal and bound == want
            rows.append(Check(
                f"roofline: {name}", PASS if ok else FAIL, f"{max(fractions):.0%} of the {bound} roof, {bound}-bound",
                f"the {want} roof measured in the same loop", f">= {goal:.0%}, {want}-bound",
                f"{kind} ops under the profiling pass, {precision}; attempts {', '.join(f'{f:.0%}' for f in fractions)}",
            ))  # fmt: skip
    return rows


CHECKS: dict[str, Callable[[Context], list[Check]]] = {
    "flops": check_flops,
    "harness": check_harness_vs_bare,
    "precision": check_precision_and_timing,
    "dp": check_dp_precision,
    "nvml": check_nvml,
    "ddp": check_ddp,
    "data": check_data_path,
    "pipelined": check_pipelined,
    "roofs": check_roofs,
    "roofline": check_roofline,
}


# ----------------------------------------------------------------------------------------------
# Running, the table, the file
# ----------------------------------------------------------------------------------------------
def resolve_device(requested: str) -> Any:
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise EffbenchError("--device", "cuda was asked for but no CUDA device is visible; use --device cpu or auto")
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(requested, 0) if requested == "cuda" else torch.device("cpu")


def run_checks(ctx: Context, checks: dict[str, Callable[[Context], list[Check]]]) -> list[Check]:
    out: list[Check] = []
    for key, fn in checks.items():
        if ctx.cfg.only and not any(key.startswith(o) for o in ctx.cfg.only):
            continue
        ctx.echo(f"selftest: {key} ...")
        try:
            rows = fn(ctx)
        except Exception as e:  # noqa: BLE001 - one broken check is a FAIL row, the others still run
            rows = [Check(key, FAIL, reason=f"{type(e).__name__}: {e}".splitlines()[0])]
        out.extend(rows)
    return out


def run_selftest(
    cfg: SelftestConfig,
    *,
    echo: Callable[[str], None] = print,
    checks: dict[str, Callable[[Context], list[Check]]] | None = None,
) -> SelftestOutcome:
    """Every check, its folder under cfg.output (selftest.json, the runs it made), and the env."""
    import torch

    from effbench import results
    from effbench.system.hardware import env_snapshot

    device = resolve_device(cfg.device)
    results.check_output_writable(cfg.output)
    folder = results.create_run_dir(cfg.output, f"{dt.datetime.now():%Y%m%d-%H%M%S}_selftest_{device.type}")
    gpus = torch.cuda.device_count() if device.type == "cuda" else 0
    ctx = Context(cfg=cfg, device=device, folder=folder, echo=echo, gpus=gpus)
    threads = torch.get_num_threads()
    try:
        rows = run_checks(ctx, CHECKS if checks is None else checks)
    finally:
        torch.set_num_threads(threads)
    env = env_snapshot()
    results.write_json(folder / SELFTEST_FILE, {"checks": [asdict(c) for c in rows], "env": env, "config": asdict(cfg)})
    return SelftestOutcome(folder, rows, env)


# The widths each column wraps at; and, on a terminal too narrow for all of them, the columns left out first
# (selftest.json holds every value).
COLUMN_WIDTHS = (24, 6, 22, 24, 14, 60)
TERMINAL_DROP = ("tolerance", "reference")


def table(rows: list[Check], width: int | None = None) -> str:
    """check | status | measured | reference | tolerance | reason (pure: rows in, text out); `width`: fitted to a
    terminal that many columns wide (fewer columns, narrower wraps), the columns left out named under it."""
    from effbench.fmt import fit_table

    def cell(v: Any) -> str:
        return "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))

    body = [(c.name, c.status, cell(c.measured), cell(c.reference), c.tolerance or "-", c.reason) for c in rows]
    headers = ["check", "status", "measured", "reference", "tolerance", "reason"]
    text, left = fit_table(headers, body, width, drop=TERMINAL_DROP, maxcolwidths=COLUMN_WIDTHS)
    return text + (f"\n\n{' and '.join(left)} left out to fit {width} columns: selftest.json has them" if left else "")


def summary_line(rows: list[Check]) -> str:
    """The selftest's last line, as doctor ends: `selftest: 8 PASS, 5 SKIP, 0 FAIL`."""
    counts = {status: sum(c.status == status for c in rows) for status in (PASS, SKIP, FAIL)}
    return "selftest: " + ", ".join(f"{n} {status}" for status, n in counts.items())
