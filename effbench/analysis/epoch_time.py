"""Pure: where a run's training time went, by the headline's definition (measured steps, warm-up apart).

    epoch_measured(epoch)   (data, compute) seconds of one epoch's measured steps (the run report's epoch table)
    epoch_warmup_s(epoch)   that epoch's warm-up seconds
    per_epoch(record)       a run's measured data, compute and warm-up seconds per epoch (a sweep's tables and
                            charts, the scaling table), with the source they came from
    source_note(split, who) the line a table prints under itself when that source is not the epochs' own split

The headline's throughput and data wait share count the measured steps only (warm-up excluded); an epoch's
`data_time_s` / `compute_time_s` / `total_time_s` count every step, warm-up included, so they are never
shown as the split of the measured time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from effbench import schema

# per_epoch's sources: the epochs' own measured split (results.json since epochs held it), else the run's
# measured and warm-up totals (results.json `measured` / `warmup`: the headline's own steps) over its epochs
FROM_EPOCHS = "epochs"
FROM_RUN_TOTALS = "run totals"
UNRECORDED = "unrecorded"  # epochs ran but nothing tells their measured steps from the warm-up


def epoch_measured(e: schema.Epoch) -> tuple[float | None, float | None]:
    """(data, compute) seconds of an epoch's measured steps: the headline's definition (warm-up excluded).

    A record written before the epochs held them: the epoch's own times when it had no warm-up step (then
    every step was measured), else unknown (None), never the warm-up-included split passed off as it."""
    if e.measured_data_time_s is not None:
        return e.measured_data_time_s, e.measured_compute_time_s
    if e.warmup_steps == 0:
        return e.data_time_s, e.compute_time_s
    return None, None


def epoch_warmup_s(e: schema.Epoch) -> float | None:
    """The epoch's warm-up seconds: recorded, or all its time less the measured time for an older record."""
    if e.warmup_time_s is not None:
        return e.warmup_time_s
    total, measured = e.total_time_s, e.measured_time_s
    return total - measured if total is not None and measured is not None else None


def _mean(xs: list[float | None]) -> float | None:
    return None if not xs or any(x is None for x in xs) else sum(x for x in xs if x is not None) / len(xs)


def per_epoch(record: schema.Results) -> dict[str, Any]:
    """A run's seconds per epoch (the mean over its epochs) of its measured steps' data wait and compute, and
    of its warm-up steps apart, with `time_split` naming the source:

    - FROM_EPOCHS: every epoch holds its measured split (`epoch_measured`): the run report's epoch table
      rows, averaged;
    - FROM_RUN_TOTALS: a record written before the epochs held it: the run's `measured` and `warmup`
      totals (the steps of the headline) over its epochs, the same steps and definition from another field;
    - UNRECORDED: neither: every figure None, never the warm-up-included epoch times in their place;
    - None: the run finished no epoch (nothing to split)."""
    epochs = record.epochs
    out: dict[str, Any] = {
        "measured_data_time_per_epoch_s": None,
        "measured_compute_time_per_epoch_s": None,
        "warmup_time_per_epoch_s": None,
        "time_split": None,
    }
    if not epochs:
        return out
    split = [epoch_measured(e) for e in epochs]
    if all(d is not None and c is not None for d, c in split):
        return {
            "measured_data_time_per_epoch_s": _mean([d for d, _ in split]),
            "measured_compute_time_per_epoch_s": _mean([c for _, c in split]),
            "warmup_time_per_epoch_s": _mean([epoch_warmup_s(e) for e in epochs]),
            "time_split": FROM_EPOCHS,
        }
    measured = record.measured
    if measured is None:  # a tally's data and compute seconds are required: it has both or is absent
        return {**out, "time_split": UNRECORDED}
    n = len(epochs)
    warm = record.warmup.time_s if record.warmup is not None else None
    return {
        "measured_data_time_per_epoch_s": measured.data_time_s / n,
        "measured_compute_time_per_epoch_s": measured.compute_time_s / n,
        "warmup_time_per_epoch_s": warm / n if warm is not None else None,
        "time_split": FROM_RUN_TOTALS,
    }


# Said under every table of seconds per epoch (a sweep's cells, the scaling table, the sweep page).
TIME_NOTE = (
    "Data, compute and (where shown) total s/epoch count the measured steps (warm-up excluded, as img/s and data %: the run "
    "report's epoch table, averaged over the epochs); warm-up s/epoch is the warm-up steps' seconds over the "
    "epochs, apart."
)


def source_note(time_split: str | None, who: str) -> str | None:
    """The line naming where `who`'s seconds per epoch come from when not from its epochs' measured split
    (per_epoch's `time_split`), so no table or chart mixes definitions silently; None when they do."""
    if time_split == FROM_RUN_TOTALS:
        return (
            f"{who}: recorded before its epochs held their measured split; its data, compute and warm-up s/epoch "
            "are the run's measured and warm-up totals (the headline's steps) over its epochs"
        )
    if time_split == UNRECORDED:
        return (
            f"{who}: no measured split recorded (its epoch times include the warm-up), so no data, compute or "
            "warm-up s/epoch and no bar in a time chart"
        )
    return None
