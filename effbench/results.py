"""Versioned result records and atomic file I/O for run folders.

Every file is written to a temporary name in the same folder, flushed, fsynced and renamed over
the target, so a reader (or `effbench report` after a SIGKILL) sees the old file or the new one,
never half of one. A rename replaces only a regular file (or takes a new name): a device or a FIFO
(`-o /dev/null`, `/dev/stdout`, a pipe) is written through, and a link to a file, a folder or
anything else is refused in one line (output_file). No torch import.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import math
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

from effbench.errors import EffbenchError

if TYPE_CHECKING:
    from effbench import schema

SCHEMA_VERSION = 1
STATUSES = ("running", "ok", "failed", "interrupted", "oom", "diverged")
RESULTS_FILE = "results.json"
CONFIG_FILE = "config.json"
ENV_FILE = "env.json"
EPOCHS_FILE = "epochs.csv"
STEPS_FILE = "steps.csv"
UTILIZATION_FILE = "utilization.csv"
REPORT_TXT = "report.txt"
REPORT_MD = "report.md"

# Files are created readable by all, writable by the owner only, whatever the umask.
FILE_MODE = 0o644

EPOCH_FIELDS = (
    "epoch",
    "steps",
    "images",
    "data_time_s",
    "compute_time_s",
    "total_time_s",
    "train_loss",
    "train_top1",
    "val_loss",
    "val_top1",
    "val_time_s",
    "val_images",
    "warmup_steps",
    "warmup_time_s",
    "measured_images",
    "measured_time_s",
    "measured_data_time_s",
    "measured_compute_time_s",
    "throughput_img_s",
    "skipped_steps",
    "val_warmup_time_s",
)
# epoch: 1-based everywhere (progress lines, tables, epochs.csv, steps.csv, results.json, plots).
# data_time_s / compute_time_s / total_time_s: every step of the epoch, warm-up included; measured_*: its
# measured steps only (warm-up excluded), the headline's definition, which the epoch table and chart show.
# throughput_img_s: the epoch's measured steps only (warm-up excluded), analysis/throughput.job_throughput.
# val_time_s: the validation pass without its warm-up (val_warmup_time_s: the first forward at each new input shape).
# skipped_steps: fp16 only (empty otherwise), the steps the loss scaler skipped, inside every figure above.
STEP_FIELDS = ("epoch", "step", "warmup", "images", "loss", "top1", "data_time_s", "compute_time_s")


class StepRow(NamedTuple):
    """One training step, typed: a row of steps.csv (its columns are STEP_FIELDS, in order) or of the training
    loop. `of` reads either (numbers, or steps.csv's strings); a column it lacks is None (0 for the figures)."""

    epoch: int | None
    step: int | None
    warmup: bool
    images: float
    loss: float | None
    top1: float | None
    data_time_s: float
    compute_time_s: float

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> StepRow:
        """The row typed; a figure (images, seconds) that is no finite number raises StepValueError naming it
        (steps.csv is input: a hand-edited file too). loss and top1 may be nan (a diverged run writes it)."""
        return cls(*(parse(name, row.get(name)) for name, parse in zip(cls._fields, _STEP_PARSERS, strict=True)))


assert StepRow._fields == STEP_FIELDS  # steps.csv's columns are the typed row's fields


class StepValueError(ValueError):
    """A steps.csv figure that is not a finite number: `column` and the `value` found."""

    def __init__(self, column: str, value: Any) -> None:
        super().__init__(f"column {column}: {value!r} is not a finite number")
        self.column, self.value = column, value


def _step_int(_: str, v: Any) -> int | None:
    try:
        return int(float(v)) if v not in (None, "") else None
    except (TypeError, ValueError):
        return None  # a count no figure is computed from: a hand-edited value is shown as unknown


def _step_bool(_: str, v: Any) -> bool:
    return v if isinstance(v, bool) else str(v).strip().lower() in ("true", "1", "yes")


def _step_figure(name: str, v: Any) -> float:
    from effbench import safe_files

    if v in (None, ""):
        return 0.0
    try:
        value = float(v)
    except (TypeError, ValueError):
        raise StepValueError(name, v) from None
    if not safe_files.check_figure(value):
        raise StepValueError(name, v)
    return value


def _step_optional(_: str, v: Any) -> float | None:
    try:
        return float(v) if v not in (None, "") else None
    except (TypeError, ValueError):
        return None


# StepRow's fields in order: epoch, step, warmup, images, loss, top1, data_time_s, compute_time_s
_STEP_PARSERS: tuple[Callable[[str, Any], Any], ...] = (
    _step_int, _step_int, _step_bool, _step_figure, _step_optional, _step_optional, _step_figure, _step_figure,
)  # fmt: skip


# How long a write into a FIFO waits for a reader to open it (`mkfifo p; effbench export -o p & cat p` starts
# both at once): opening a FIFO for writing blocks until a reader comes, and a FIFO no reader opens (one
# planted in a run folder) would hang the command.
FIFO_READER_WAIT_S = 5.0


def _writes_through(path: Path) -> bool:
    """Whether `path` is a stream (a character device or a FIFO, reached directly or through links), written
    through; False for a regular file or nothing there, replaced by a rename. Anything else is refused in one
    line naming it: a link to a file, a folder or nowhere (never written through, never replaced), a folder,
    a socket, a block device."""
    from effbench.safe_files import file_kind

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISREG(st.st_mode):
        return False
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return True
    if stat.S_ISLNK(st.st_mode):
        try:
            st = os.stat(path)
        except OSError as e:
            raise EffbenchError(
                str(path), f"is a link that leads nowhere ({e.strerror}); effbench never writes through a link to a "
                "file nor replaces one: remove the link or write elsewhere",
            ) from None  # fmt: skip
        if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            return True
        raise EffbenchError(
            str(path), f"is a link to {os.path.realpath(path)} ({file_kind(st.st_mode)}); effbench never writes "
            "through a link to a file nor replaces one: pass the file itself, remove the link, or write elsewhere",
        )  # fmt: skip
    raise EffbenchError(
        str(path),
        f"is {file_kind(st.st_mode)}; effbench writes a regular file (or streams into a device or a FIFO): "
        "remove it or write elsewhere",
    )


def _open_stream(path: Path) -> int:
    """A write descriptor on the device or FIFO at `path`, which must still be one once open (a file swapped
    in meanwhile is left untouched: no O_TRUNC, no O_CREAT)."""
    from effbench.safe_files import file_kind

    deadline = time.monotonic() + FIFO_READER_WAIT_S
    while True:
        try:  # O_NONBLOCK: a FIFO with no reader fails with ENXIO instead of blocking
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            break
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            if time.monotonic() >= deadline:
                raise EffbenchError(
                    str(path), f"is a FIFO no reader opened within {FIFO_READER_WAIT_S:g} s; start its reader first"
                ) from None
            time.sleep(0.05)
    st = os.fstat(fd)
    if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        os.close(fd)
        raise EffbenchError(str(path), f"became {file_kind(st.st_mode)} while effbench opened it; write elsewhere")
    os.set_blocking(fd, True)  # the writes wait for a slow reader
    return fd


def _stream_error(path: Path, e: OSError) -> EffbenchError:
    """A write into a device or FIFO that failed, in one line."""
    if e.errno in NO_SPACE_ERRNOS:  # /dev/full: a NoSpaceError, as a full disk is
        return NoSpaceError(str(path), "refused the write: no space left on the device (ENOSPC); write elsewhere")
    if e.errno == errno.EPIPE:
        return EffbenchError(str(path), "its reader closed it before everything was written; keep the reader open")
    return EffbenchError(str(path), f"cannot be written ({e.strerror}); write elsewhere")


@contextmanager
def output_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file to write `path` through, whole or not at all.

    A regular file or a new name: a temporary file in the same folder (mkstemp: O_EXCL, never through a link
    planted at its name), flushed, fsynced, 0644, renamed over `path`. A character device or a FIFO, directly
    or through links (`/dev/null`, `/dev/full`, `/dev/stdout`, a pipe): written through, never replaced. Any
    other thing at `path` (a link to a file, a folder, a socket) is refused (_writes_through). A full disk is
    a NoSpaceError naming the file."""
    path = Path(path)
    if _writes_through(path):
        try:
            with os.fdopen(_open_stream(path), "wb") as f:
                yield f
        except OSError as e:
            raise _stream_error(path, e) from None
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno in NO_SPACE_ERRNOS:
            raise no_space_error(path) from None
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """`data` as the file at `path`, whole or not at all; streamed into a device or FIFO (output_file)."""
    with output_file(path) as f:
        f.write(data)


# A full disk or an exhausted quota is the user's to fix, so it gets a one-line error, not a trace.
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class NoSpaceError(EffbenchError):
    """A full disk or quota while effbench wrote a file: one line naming the file, as for a bad input."""


def no_space_error(path: Path) -> EffbenchError:
    return NoSpaceError(
        "--output", f"no space left on the device of {Path(path).parent} while writing {Path(path).name}; "
        "free space there or point --output at a larger filesystem"
    )  # fmt: skip


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def json_safe(obj: Any) -> Any:
    """NaN and inf are not JSON: store them as null so every reader can parse the file."""
    from pydantic import BaseModel

    if isinstance(obj, BaseModel):  # a typed record: the fields it was given, as written
        obj = obj.model_dump(exclude_unset=True)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(json_safe(obj), indent=2, sort_keys=False) + "\n")


def write_record(run_dir: Path, record: schema.Results) -> None:
    """A run's results.json, stamped with the time of this write (`updated_at`: when a run later found dead
    was last written, effbench/liveness.py); atomic, as every file."""
    import datetime as dt

    record.updated_at = dt.datetime.now(dt.timezone.utc).isoformat()
    write_json(Path(run_dir) / RESULTS_FILE, record)


def write_csv(path: Path, fields: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in fields})
    atomic_write_text(path, buf.getvalue())


def read_json_file(path: Path, *, missing: str, fix: str) -> Any:
    """The JSON in a file effbench wrote (results.json, sweep.json); the shape is the caller's to check.

    A missing file is one EffbenchError naming it and `missing` (what to pass instead); an unreadable one
    (permissions, bad UTF-8, broken JSON) names it, the reason and `fix`."""
    from effbench import safe_files  # a regular file, bounded in size, depth and numbers

    try:
        return safe_files.load_json(path, fix=fix)
    except FileNotFoundError:
        raise EffbenchError(str(path), f"not found; {missing}") from None


def load_record(path: Path) -> schema.Results:
    """A run folder's results.json (or the file itself), checked and typed: what every reader uses."""
    return _read_checked(path)[1]


def record_of(data: Mapping[str, Any] | schema.Results) -> schema.Results:
    """A record held in memory (a producer's dict, a test's fixture) as the typed model; a bad value raises."""
    from effbench import schema

    if isinstance(data, schema.Results):
        return data
    # as write_json stores it (NaN and inf as null: an epoch with no step holds a nan loss in memory)
    return schema.Results.model_validate(json_safe(dict(data)))


def read_results(path: Path) -> dict[str, Any]:
    """A results.json as its file holds it (the keys written, none filled in), checked like load_record's."""
    return _read_checked(path)[0]


def _read_checked(path: Path) -> tuple[dict[str, Any], schema.Results]:
    """Read and check a results.json, validated once: (its JSON, the typed record); any problem is an
    EffbenchError naming the file."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    # a file given by hand under another name (steps.csv, a CI baseline) may be the wrong file, not a broken run:
    # deleting its folder is no fix for that
    fix = "rerun the benchmark or delete the folder"
    if path.name != RESULTS_FILE:
        fix = f"pass a run folder or the results.json in it (a copy such as a CI baseline: restore it from {RESULTS_FILE})"
    data = read_json_file(path, missing="pass a run folder that holds results.json", fix=fix)
    if not isinstance(data, dict):
        raise EffbenchError(str(path), f"is not a results object; {fix}")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise EffbenchError(str(path), "has no integer schema_version; it was not written by effbench")
    if version > SCHEMA_VERSION:
        raise EffbenchError(
            str(path), f"uses schema_version {version}, newer than this effbench ({SCHEMA_VERSION}); upgrade effbench"
        )
    if data.get("status") not in STATUSES:
        raise EffbenchError(
            str(path), f"has an unknown status {data.get('status')!r}; expected one of {', '.join(STATUSES)}"
        )
    from effbench import schema  # pydantic: only when a file is read

    typed = schema.check(schema.Results, data, path, "rerun the benchmark, or restore the file effbench wrote")
    profile = typed.profile
    files = [] if profile is None else [*(profile.tables.items() if profile.tables else ()), ("trace", profile.trace)]
    folder = path.parent.resolve() if files else None
    for name, value in files:
        # Relative names are resolved inside the folder; absolute ones were written by effbench into
        # the folder it ran in (the folder may have moved since) and are never followed.
        if value and not Path(value).is_absolute():
            field = f"profile.{'tables.' if name != 'trace' else ''}{name}"
            schema.inside(path.parent, value, field, path, resolved=folder)
    return data, typed


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def in_run_dir(run_dir: Path, recorded: str | None) -> Path | None:
    """A file path recorded in results.json (relative to the run folder), resolved against that folder."""
    if not recorded:
        return None
    p = Path(recorded)
    return p if p.is_absolute() else Path(run_dir) / p


def safe_name(text: str, max_len: int = 120) -> str:
    """A file-name component from any text: no separators, no dot-only names, bounded length."""
    name = _UNSAFE.sub("-", text).strip("-.")
    return (name or "run")[:max_len]


def create_run_dir(output: Path, name: str) -> Path:
    """Make a fresh run folder under `output` (never an existing one, never outside it)."""
    base = safe_name(name)
    for i in range(1000):
        candidate = output / (base if i == 0 else f"{base}-{i}")
        try:
            candidate.mkdir(mode=0o755)
        except FileExistsError:
            continue
        return candidate
    raise EffbenchError("--output", f"could not create a new run folder named {base} in {output}; clean it up")


def check_output_writable(output: Path) -> None:
    """Fail before any work if `output` cannot hold run folders."""
    output = Path(output)
    if output.exists() and not output.is_dir():  # /dev/null too: a folder is made there, nothing streamed
        from effbench.safe_files import file_kind

        kind = file_kind(output.stat().st_mode)
        raise EffbenchError("--output", f"{output} is {kind}, not a folder; pass a folder path")
    try:
        output.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".effbench-write-test-", dir=output)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise EffbenchError(
            "--output",
            f"{output} is not writable by uid {os.getuid()} ({e.strerror}); choose another --output or fix its permissions",
        ) from None


def overwrite_json_in_place(path: Path, obj: Any) -> None:
    """The last resort on a full disk, once an atomic write of `path` failed: its bytes replaced where they lie
    (truncating frees its blocks, the new bytes reuse them), compact, so a record no bigger than the one there
    fits. Not atomic: a failure halfway leaves a truncated file, which the reader refuses in one line."""
    data = (json.dumps(json_safe(obj), separators=(",", ":")) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def timing_of(record: schema.Results) -> str:
    """How the run's measured steps were timed (--timing): the record's, else the config's; a record from
    before the option names neither, and was timed per-step."""
    if record.measured is not None and record.measured.timing:
        return record.measured.timing
    return record.config.timing or "per-step"
