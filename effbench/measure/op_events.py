"""The profiling pass's ops for the roofline (analysis/roofline.py), read off torch.profiler's events.

    trace = collect(prof.events(), on_cuda=False)   # OpTrace: the ops, the data wait, the steps

Which time an op gets: every event inside a `step` range and outside its `data_wait` range is charged to its
*head*, the outermost op (aten::, c10d:: and the backends' collectives) above it or itself, so an aten::conv2d
carries the time of the aten::convolution / mkldnn_convolution it calls and their FLOPs are counted once. On
the CPU an event adds its self CPU time, on the step's thread (where autograd runs a CPU backward); on CUDA the
device time of the kernels it launched (the profiler links each kernel to the op that launched it), from any
thread (autograd's device threads run the backward). Time under a torch.compile region in no op goes to the
region; time in no op at all (Python, the autograd engine, the profiler's own ranges) to no one: it is the
table's unattributed remainder, reported beside it. On CUDA each kind's kernel spans are kept too, so that a kind
with no roof (an all-reduce on NCCL's stream) is held to the part of its time no other kind's kernel overlapped.

FLOPs are the validated counter's (measure/flops.py): torch's flop_registry, with effbench's grouped-conv
backward (`step_flop_mapping`), applied to each op's recorded shapes and arguments, counting the outermost
counted op under a head once, as FlopCounterMode counts the outermost op it sees. A forward convolution's
output shape, which the profiler does not record, comes from its arguments (analysis.roofline.conv_output_shape).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from effbench.analysis import roofline
from effbench.measure.labels import DATA_WAIT, PHASES, STEP

OP_PREFIXES = ("aten::", "c10d::", "_c10d_functional::", "c10d_functional::", "torchvision::", "nccl:", "gloo:")
CPU_BASIS = "self CPU time of each op and its callees, on the step's thread"
CUDA_BASIS = "device time of the kernels each op and its callees launched"


@dataclass
class OpTrace:
    """The profiled steps' ops (each identical call once, with its count), their data wait and step count."""

    ops: list[roofline.OpEvent]
    steps: int
    data_wait_s: float
    """Host time in `data_wait` over all the profiled steps, s."""
    time_basis: str
    step_windows_s: float = 0.0
    """Host time in `step` ranges over the profiled steps, s."""
    exposed_s: dict[str, float] = field(default_factory=dict)
    """CUDA: per kind with no roof (roofline.NO_ROOF), over the profiled steps, the time its kernels ran with no
    other kind's kernel on their device (exposed_by_kind), s."""


Span = tuple[Any, float, float]
"""A device event's (device, start us, end us)."""


@dataclass
class _Unit:
    evt: Any
    time_us: float = 0.0
    flops: float = 0.0
    callees: set[str] = field(default_factory=set)
    spans: list[Span] = field(default_factory=list)


def _on_cpu(evt: Any) -> bool:
    return str(getattr(evt, "device_type", "CPU")).rsplit(".", 1)[-1] == "CPU"


@functools.lru_cache(maxsize=4096)
def is_op(name: str) -> bool:
    """An op a head can be: aten::, c10d:: and the backends' collectives (by name, once per name)."""
    return name.startswith(OP_PREFIXES) or roofline.is_communication(name)


@functools.lru_cache(maxsize=4096)
def _is_fused(name: str) -> bool:
    return roofline.is_fused(name)


def _frozen(v: Any) -> Any:
    """Lists as tuples, all the way down (the event's inputs as a hashable key)."""
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(x) for x in v)
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)


DtypesOf = Callable[[Any], "list[str] | None"]
"""An event's input dtypes from elsewhere, for a torch whose events do not carry them (kineto_dtypes)."""


def kineto_dtypes(prof: Any, events: list[Any]) -> DtypesOf | None:
    """Each op's input dtypes read off the profiler's KinetoEvents, for a torch whose FunctionEvents have no
    `input_dtypes` (torch 2.11 on the first GPU run: torch added the field in 2026, pytorch PR 179714; the
    KinetoEvent has had `dtypes()` since 2021). Without them every op read as carrying no tensor: no FLOPs,
    no bytes, a roofline of zeros. An event is matched by its thread, its start in ns from the trace's start
    (what torch/autograd/profiler.py _parse_kineto_results turns into `time_range.start` in us) and its
    name. None when the events carry their own dtypes or the profiler keeps no KinetoEvents."""
    if not events or hasattr(events[0], "input_dtypes"):
        return None
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is None:
        return None
    t0 = results.trace_start_ns()
    table = {(k.start_thread_id(), k.start_ns() - t0, k.name()): list(k.dtypes()) for k in results.events()}

    def dtypes_of(evt: Any) -> list[str] | None:
        return table.get((evt.thread, round(float(evt.time_range.start) * 1000), evt.name))

    return dtypes_of


def _inputs(evt: Any, dtypes_of: DtypesOf | None = None) -> tuple[tuple[Any, ...], tuple[str, ...], tuple[Any, ...]]:
    """(shapes, dtypes, concrete args) as recorded: structured shapes give a tensor list's shapes too."""
    shapes = getattr(evt, "structured_input_shapes", None) or getattr(evt, "input_shapes", None) or []
    dtypes = getattr(evt, "input_dtypes", None) or (dtypes_of(evt) if dtypes_of is not None else None) or []
    args = getattr(evt, "concrete_inputs", None) or []
    return _frozen(shapes), tuple(str(d) for d in dtypes), _frozen(args)


def _within(t: float, starts: list[float], spans: list[tuple[float, float]]) -> bool:
    i = bisect.bisect_right(starts, t) - 1
    return i >= 0 and spans[i][0] <= t <= spans[i][1]


def _device_spans(events: list[Any]) -> dict[int, list[Span]]:
    """The device events (kernels, copies, sets) by the id of the CPU op that launched them: the pinned torch links
    each to it by `linked_correlation_id` == the op's `id` and appends them to its `kernels` with their duration
    alone (torch/autograd/profiler.py _parse_kineto_results: device_corr_map, fe.append_kernel)."""
    out: dict[int, list[Span]] = {}
    for d in events:
        corr = getattr(d, "linked_correlation_id", 0) or 0
        if _on_cpu(d) or corr <= 0 or getattr(d, "is_user_annotation", False):
            continue
        span = (getattr(d, "device_index", 0), float(d.time_range.start), float(d.time_range.end))
        out.setdefault(corr, []).append(span)
    return out


def _overlap_us(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of the merged spans `a` that the merged spans `b` cover (both sorted, disjoint)."""
    total, j = 0.0, 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            total += min(end, b[k][1]) - max(start, b[k][0])
            k += 1
    return total


def exposed_by_kind(spans_by_kind: dict[str, list[Span]]) -> dict[str, float]:
    """Per kind with no roof, the time (s) its device spans ran with no other kind's span on the same device: the
    part of it that lengthened the step. NCCL's all-reduce runs on its own stream beside backward's kernels, so
    its summed kernel time is mostly hidden; a ceiling adding it whole was slower than the step itself."""
    out: dict[str, float] = {}
    for kind in roofline.NO_ROOF:
        if kind not in spans_by_kind:
            continue
        total = 0.0
        devices = {d for d, _, _ in spans_by_kind[kind]}
        for device in devices:
            own = _merged([(s, e) for d, s, e in spans_by_kind[kind] if d == device])
            other = [(s, e) for k, v in spans_by_kind.items() if k != kind for d, s, e in v if d == device]
            total += sum(e - s for s, e in own) - _overlap_us(own, _merged(other))
        out[kind] = total / 1e6
    return out


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def flop_formulas() -> dict[Any, Any]:
    """FlopCounterMode's table as measure/flops.py runs it: torch's flop_registry with effbench's mapping on top,
    each wrapped as FlopCounterMode wraps a custom mapping (torch/utils/flop_counter.py shape_wrapper)."""
    from torch.utils.flop_counter import flop_registry, shape_wrapper

    from effbench.measure.flops import step_flop_mapping

    return {**flop_registry, **{k: shape_wrapper(v) for k, v in step_flop_mapping().items()}}


class Formulas:
    """The counter's formula of each op by its profiler name ("aten::convolution"), looked up once per name."""

    def __init__(self) -> None:
        self.table = flop_formulas()
        self._by_name: dict[str, Any] = {}

    def of(self, name: str) -> Any:
        if name not in self._by_name:
            import torch

            packet = getattr(torch.ops.aten, name[len("aten::") :], None) if name.startswith("aten::") else None
            formula = self.table.get(packet) if packet is not None else None
            # a formula that needs the tensors themselves (attention's varlen forms) cannot run on shapes
            self._by_name[name] = None if getattr(formula, "_get_raw", False) else formula
        return self._by_name[name]


def op_flops(name: str, shapes: tuple[Any, ...], dtypes: tuple[str, ...], args: tuple[Any, ...], formulas: Formulas) -> float | None:  # fmt: skip
    """FLOPs of one call by the counter's formula for the op; None when the op has none (not counted)."""
    formula = formulas.of(name)
    if formula is None:
        return None
    values = [
        list(s) if d in roofline.DTYPE_BYTES and isinstance(s, tuple) else (list(a) if isinstance(a, tuple) else a)
        for s, d, a in zip(shapes, dtypes, args, strict=False)
    ]
    op = roofline.OpEvent(name=name, time_s=0.0, shapes=shapes, dtypes=dtypes, args=args)
    out = roofline.conv_output_shape(op) if roofline.kind_of(op) in (roofline.CONV, roofline.DEPTHWISE) else None
    try:
        return float(formula(*values, out_val=out))
    except Exception:  # noqa: BLE001 - an overload whose inputs the formula cannot read is not counted
        return None


class _Windows:
    """The labelled ranges of the profiled steps (`step`, `data_wait`, the phases), merged, and their threads."""

    def __init__(self, evs: list[Any]) -> None:
        spans: dict[str, list[tuple[float, float]]] = {name: [] for name in (STEP, DATA_WAIT, *PHASES)}
        self.step_threads: set[Any] = set()
        for e in evs:
            if e.name in spans:
                spans[e.name].append((float(e.time_range.start), float(e.time_range.end)))
                if e.name == STEP:
                    self.step_threads.add(e.thread)
        self.spans = {name: _merged(v) for name, v in spans.items()}
        self._starts = {name: [s for s, _ in v] for name, v in self.spans.items()}

    def inside(self, t: float, name: str) -> bool:
        return _within(t, self._starts[name], self.spans[name])

    def total_s(self, name: str) -> float:
        return sum(e - s for s, e in self.spans[name]) / 1e6

    def phase(self, t: float) -> str | None:
        return next((p for p in PHASES if self.inside(t, p)), None)


AUTOCAST_CASTS = ("aten::to", "aten::_to_copy")
"""The casts autocast launches on an op's inputs (torch/include/ATen/autocast_mode.h:324 `cached_cast`, which the
pinned torch's profiler records as aten::to > aten::_to_copy > aten::copy_)."""


def _redispatches(evs: list[Any]) -> dict[int, Any]:
    """id(op) -> its child of the same name: autocast's signature. Its kernel is recorded as the op with the
    caller's (fp32) inputs; it casts them and calls the op again (autocast_mode.h:481-581 `(*F)(cached_cast(...))`),
    which is recorded with the cast (bf16) inputs: aten::conv2d > [aten::to, aten::to, aten::conv2d > ...]."""
    out: dict[int, Any] = {}
    for e in evs:
        p = getattr(e, "cpu_parent", None)
        if p is not None and p.name == e.name and is_op(e.name):
            out[id(p)] = e
    return out


def _innermost(op: Any, redispatched: dict[int, Any]) -> Any:
    """The op as it ran: under autocast the redispatched call, whose inputs are the cast ones."""
    while id(op) in redispatched:
        op = redispatched[id(op)]
    return op


def _head_of(e: Any, memo: dict[int, Any], redispatched: dict[int, Any]) -> Any:
    """The outermost op above `e` (or `e`); else the innermost compiled region above it; else None. A cast that
    autocast launched inside an op is its own head: it is a copy, not part of the convolution or matmul."""
    key = id(e)
    if key not in memo:
        chain, p = [], e
        while p is not None:
            chain.append(p)
            p = getattr(p, "cpu_parent", None)
        i = next((i for i in range(len(chain) - 1, -1, -1) if is_op(chain[i].name)), None)
        if i is None:
            memo[key] = next((x for x in chain if _is_fused(x.name)), None)
        elif i > 0 and id(chain[i]) in redispatched and chain[i - 1].name in AUTOCAST_CASTS:
            memo[key] = chain[i - 1]
        else:
            memo[key] = chain[i]
    return memo[key]


def collect(events: Iterable[Any], *, on_cuda: bool, dtypes_of: DtypesOf | None = None) -> OpTrace:
    """The ops of the profiled steps (`prof.events()` of a pass whose steps are labelled `step` and
    `data_wait`, measure/profiling.py) with their time, FLOPs and the phase each started in. `dtypes_of`:
    the events' input dtypes where torch does not put them on the events (kineto_dtypes)."""
    events = list(events)
    evs = [e for e in events if _on_cpu(e) and not getattr(e, "is_async", False)]
    device_spans = _device_spans(events) if on_cuda else {}
    windows = _Windows(evs)
    formulas = Formulas()
    memo: dict[int, Any] = {}
    redispatched = _redispatches(evs)
    units: dict[int, _Unit] = {}
    for e in evs:
        t0 = float(e.time_range.start)
        if e.name in windows.spans or not windows.inside(t0, STEP) or windows.inside(t0, DATA_WAIT):
            continue
        if not on_cuda and e.thread not in windows.step_threads:
            continue
        head = _head_of(e, memo, redispatched)
        if head is None:
            continue  # in no op: the step's unattributed remainder
        unit = units.setdefault(id(head), _Unit(head))
        if on_cuda:
            unit.time_us += float(sum(k.duration for k in (getattr(e, "kernels", None) or ())))
            unit.spans += device_spans.get(getattr(e, "id", -1), [])
        else:
            unit.time_us += float(e.self_cpu_time_total)
        if e is not head:
            unit.callees.add(e.name)
        # FLOPs: the outermost counted op between e and its head, once
        if formulas.of(e.name) is not None and not _counted_above(e, head, formulas):
            unit.flops += op_flops(e.name, *_inputs(e, dtypes_of), formulas) or 0.0
    calls = [(unit, _op_event(unit, windows, dtypes_of, redispatched)) for unit in units.values()]
    spans_by_kind: dict[str, list[Span]] = {}
    for unit, op in calls:
        if unit.spans:
            spans_by_kind.setdefault(roofline.kind_of(op), []).extend(unit.spans)
    return OpTrace(
        ops=_merged_calls(op for _, op in calls),
        steps=len(windows.spans[STEP]),
        data_wait_s=windows.total_s(DATA_WAIT),
        time_basis=CUDA_BASIS if on_cuda else CPU_BASIS,
        step_windows_s=windows.total_s(STEP),
        exposed_s=exposed_by_kind(spans_by_kind),
    )


def _op_event(unit: _Unit, windows: _Windows, dtypes_of: DtypesOf | None, redispatched: dict[int, Any]) -> roofline.OpEvent:  # fmt: skip
    """One call as an OpEvent; its inputs (dtypes: bytes per element) are the innermost call's, the ones the op
    read after autocast's casts."""
    h = unit.evt
    shapes, dtypes, args = _inputs(_innermost(h, redispatched), dtypes_of)
    return roofline.OpEvent(name=h.name, time_s=unit.time_us / 1e6, shapes=shapes, dtypes=dtypes, args=args,
                            flops=unit.flops, phase=windows.phase(float(h.time_range.start)),
                            callees=frozenset(unit.callees))  # fmt: skip


def _merged_calls(calls: Iterable[roofline.OpEvent]) -> list[roofline.OpEvent]:
    """One OpEvent per distinct call (name, inputs, phase), its time summed and its calls counted."""
    merged: dict[tuple[Any, ...], roofline.OpEvent] = {}
    for op in calls:
        key = (op.name, op.shapes, op.dtypes, op.args, op.phase)
        old = merged.get(key)
        if old is not None:
            op = dataclasses.replace(op, time_s=op.time_s + old.time_s, calls=old.calls + 1,
                                     callees=op.callees | old.callees)  # fmt: skip
        merged[key] = op
    return list(merged.values())


def _counted_above(e: Any, head: Any, formulas: Formulas) -> bool:
    """Whether an op between e (excluded) and its head (included) has a FLOP formula: it counted e's FLOPs."""
    p = getattr(e, "cpu_parent", None)
    while p is not None:
        if formulas.of(p.name) is not None:
            return True
        if p is head:
            return False
        p = getattr(p, "cpu_parent", None)
    return False
