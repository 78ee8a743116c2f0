"""The typed record's producers (observe.summarize, merge_utilization) called on fixtures written as
results.json holds them (dicts), with their output read back the same way: a test states its figures
once, in the file's own shape, and the producer is checked on what it would write."""

from __future__ import annotations

from typing import Any

from effbench import results, schema
from effbench.measure import observe
from effbench.measure.profiling import Comm, ProfileInfo

_TALLY = {"steps": 0, "images": 0, "data_time_s": 0.0, "compute_time_s": 0.0, "time_s": 0.0}


def record(d: dict[str, Any]) -> schema.Results:
    """A fixture record (a few fields) as the typed model; a Tally's figures not given are 0."""
    d = {"schema_version": 1, "status": "ok", **d}
    if d.get("measured") is not None:
        d["measured"] = {**_TALLY, **d["measured"]}
    d["epochs"] = [{"epoch": i + 1, **e} for i, e in enumerate(d.get("epochs") or [])]
    return results.record_of(d)


def utilization(d: dict[str, Any] | None) -> schema.Utilization | None:
    return None if d is None else schema.Utilization.model_validate(d)


def memory(d: dict[str, Any] | observe.PeakMemory | None) -> observe.PeakMemory | None:
    """A GPU's peaks from a fixture's {"peak_mem_allocated_gib", "peak_mem_reserved_gib", "mem_total_gib"}."""
    if d is None or isinstance(d, observe.PeakMemory):
        return d
    return observe.PeakMemory(
        cuda_index=d.get("cuda_index", 0),
        allocated_gib=d["peak_mem_allocated_gib"],
        reserved_gib=d["peak_mem_reserved_gib"],
        total_gib=d["mem_total_gib"],
    )


def profile_info(d: dict[str, Any] | ProfileInfo | None) -> ProfileInfo | None:
    """The profiling pass's info from a fixture dict (the phases as results.json holds them)."""
    if d is None or isinstance(d, ProfileInfo):
        return d
    times = list(d.get("profiled_step_times_s") or [])
    comm_keys = ("comm_kernel_s", "exposed_comm_s", "exposed_comm_error")
    comm = {k: d[k] for k in comm_keys if k in d}
    return ProfileInfo(
        phases=[schema.ProfilePhase(**p) for p in d.get("phases") or []],
        phase_table="",
        tables=d.get("tables") or {},
        trace=d.get("trace"),
        profiled_step_time_s=d.get("profiled_step_time_s"),
        profiled_step_times_s=times,
        active_steps=d.get("active_steps", len(times)),
        wait_steps=1,
        warmup_steps=1,
        device_table=False,
        comm=Comm(**comm) if comm else None,
    )


def summarize(rec: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """observe.summarize on a fixture record: the fields it added, as results.json would hold them."""
    if "utilization" in kw:
        kw["utilization"] = utilization(kw["utilization"])
    if "memory" in kw:
        kw["memory"] = [memory(m) for m in kw["memory"]]
    if "profile_info" in kw:
        kw["profile_info"] = profile_info(kw["profile_info"])
    typed = record(rec)
    out = observe.summarize(typed, **kw).model_dump(exclude_unset=True)
    before = typed.model_dump(exclude_unset=True)
    assert all(out[k] == v for k, v in before.items())  # the record's own fields are kept as they were
    return {k: v for k, v in out.items() if k not in before}


def merge(*summaries: dict[str, Any] | None) -> dict[str, Any] | None:
    """observe.merge_utilization over rank summaries given as results.json holds them."""
    merged = observe.merge_utilization([utilization(s) for s in summaries])
    return None if merged is None else merged.model_dump(exclude_unset=True)
