"""Pure: time-to-accuracy (MLPerf Training's metric, airbench's headline) from a run's epoch rows.

    summarize(epochs, target_top1, stop_at_target=..., configured_epochs=...)  -> results.json's time_to_accuracy
    reached(epoch_row, target_top1)                                            -> did this validation reach it

The time is the training steps' own timed seconds (each step's data wait + compute, ending with a device sync:
run/timing.py), summed over the epochs up to and including the first one whose validation top-1 is at or above
the target: epochs.csv's total_time_s. Warm-up steps count (they train the model; how much of the time they
took is recorded beside it), validation does not (its seconds, val_time_s plus the first validation's
warm-up val_warmup_time_s, are recorded apart, with the warm-up's share), nor does anything outside
the steps (model build, data open, the profiling pass). Under DDP an epoch row is already the job's: the
slowest rank's time and the top-1 over every rank's validation images (run/record.merge_epoch).
docs/time-to-accuracy.md describes the fields. No torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from effbench import schema


def _row(epoch: Mapping[str, Any] | schema.Epoch) -> schema.Epoch:
    """An epoch row: the producer's typed one (run/record.merge_epoch), or a mapping read through the model's
    names, unvalidated (in memory it may hold a nan loss, which the file stores as null: results.write_json)."""
    from effbench import schema

    return epoch if isinstance(epoch, schema.Epoch) else schema.Epoch.model_construct(**epoch)


def reached(epoch: Mapping[str, Any] | schema.Epoch, target_top1: float) -> bool:
    """The epoch's validation top-1 is at or above the target (an epoch with no validation never is)."""
    top1 = _row(epoch).val_top1
    return top1 is not None and top1 >= target_top1


def _train_s(e: schema.Epoch) -> float:
    total = e.total_time_s
    if total is None:  # an older row: its two parts
        total = (e.data_time_s or 0.0) + (e.compute_time_s or 0.0)
    return float(total)


def summarize(
    epochs: Sequence[Mapping[str, Any] | schema.Epoch],
    target_top1: float | None,
    *,
    stop_at_target: bool = False,
    configured_epochs: int | None = None,
) -> schema.TimeToAccuracy | None:
    """results.json's `time_to_accuracy` for the epochs run so far; None without a target."""
    from effbench import schema

    if target_top1 is None:
        return None
    train_s = val_s = warmup_s = val_warmup_s = 0.0
    best: float | None = None
    best_epoch: int | None = None
    for i, row in enumerate(epochs):
        e = _row(row)
        train_s += _train_s(e)
        # every validation second, its warm-up included (recorded apart per epoch: val_warmup_time_s)
        val_s += (e.val_time_s or 0.0) + (e.val_warmup_time_s or 0.0)
        val_warmup_s += e.val_warmup_time_s or 0.0
        warmup_s += e.warmup_time_s or 0.0
        top1 = e.val_top1
        if top1 is not None and (best is None or top1 > best):
            best, best_epoch = top1, i + 1
        if top1 is not None and top1 >= target_top1:
            return schema.TimeToAccuracy(
                target_top1=target_top1,
                reached_target=True,
                epochs_to_target=i + 1,
                train_time_to_target_s=train_s,
                val_time_to_target_s=val_s,
                warmup_time_included_s=warmup_s,
                val_warmup_time_included_s=val_warmup_s,
                best_val_top1=best,
                best_epoch=best_epoch,
                epochs_run=len(epochs),
                # the run ended here rather than at --epochs
                stopped_at_target=bool(stop_at_target) and configured_epochs is not None and i + 1 < configured_epochs,
            )
    return schema.TimeToAccuracy(
        target_top1=target_top1,
        reached_target=False,
        epochs_to_target=None,
        train_time_to_target_s=None,
        val_time_to_target_s=None,
        warmup_time_included_s=None,
        val_warmup_time_included_s=None,
        best_val_top1=best,
        best_epoch=best_epoch,
        epochs_run=len(epochs),
        stopped_at_target=False,
    )


def describe(tta: schema.TimeToAccuracy | None) -> str | None:
    """One line for the reports: `61.2 s train (+4.1 s validation) in 3 epochs to val top-1 >= 0.9`, or
    `not reached in 5 epochs (best val top-1 0.8123, epoch 4)`; None without a target."""
    if tta is None:
        return None
    target = f"val top-1 >= {tta.target_top1:g}"
    if tta.reached_target:
        stopped = ", run stopped there" if tta.stopped_at_target else ""
        train_s, val_s = tta.train_time_to_target_s, tta.val_time_to_target_s
        took = "no time recorded" if train_s is None else f"{train_s:.3f} s training (+{val_s or 0.0:.3f} s validation)"
        return f"{took} in {tta.epochs_to_target} epoch(s) to {target}{stopped}"
    best = tta.best_val_top1
    best_text = "no validation" if best is None else f"best val top-1 {best:.4f}, epoch {tta.best_epoch}"
    return f"{target} not reached in {tta.epochs_run} epoch(s) ({best_text})"


def cell_fields(record: schema.Results) -> dict[str, Any]:
    """The flat figures a sweep row, an export row and a leaderboard row carry (all None without a target);
    the column names are the model's fields, but time_to_target_s (train_time_to_target_s: training alone)."""
    from effbench import schema

    tta = record.time_to_accuracy

    def name(getter: Any) -> str:
        return schema.field_path(schema.TimeToAccuracy, getter)

    return {
        name(lambda t: t.target_top1): tta.target_top1 if tta else None,
        name(lambda t: t.reached_target): tta.reached_target if tta else None,
        "time_to_target_s": tta.train_time_to_target_s if tta else None,
        name(lambda t: t.epochs_to_target): tta.epochs_to_target if tta else None,
        name(lambda t: t.best_val_top1): tta.best_val_top1 if tta else None,
    }
