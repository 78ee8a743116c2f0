"""The sweep manifest (`sweep.json`): the cells of a sweep, their status and run folder, atomically.

The manifest is rewritten (temporary file, fsync, rename: results.write_json) before and after every
cell, so a sweep killed at any moment (SIGTERM, SIGKILL, power loss) leaves the last complete
version: every finished cell `ok`/`oom`/`failed` with its run folder, at most one cell `running`.
Resuming reruns every cell that is not `ok`; each cell appears once, whatever the attempts.

Its `fingerprint` is a hash of every cell's resolved configuration (output folder excluded): a
sweep folder only ever holds one configuration. No torch import.
"""

from __future__ import annotations

import copy
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import stat
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from effbench import results
from effbench.errors import EffbenchError
from effbench.sweep.spec import ROUND

if TYPE_CHECKING:
    from effbench import schema

MANIFEST_FILE = "sweep.json"
# A broken sweep.json: deleting the sweep folder would throw the finished cells away; without its manifest the
# sweep's command rebuilds one from the cells' run folders (sweep/runner.py adopt_finished) and keeps them.
BROKEN_FIX = (
    f"move {MANIFEST_FILE} aside (e.g. to {MANIFEST_FILE}.broken) and run the sweep's command again: it rebuilds "
    f"{MANIFEST_FILE} from the cells' run folders and keeps the finished ones"
)
LOCK_FILE = ".sweep.lock"  # held (flock) by the sweep running in the folder, for its whole life
MANIFEST_SCHEMA = 1
CELL_STATUSES = ("pending", "running", "ok", "oom", "diverged", "failed", "interrupted", "skipped")
DONE = "ok"


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


def fingerprint(cell_configs: Sequence[Mapping[str, Any]]) -> str:
    text = json.dumps([dict(c) for c in cell_configs], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def new_manifest(
    *,
    name: str,
    preset: str | None,
    dims: Mapping[str, Sequence[Any]],
    zipped: bool,
    cells: Sequence[Mapping[str, Any]],
    command: Sequence[str],
) -> dict[str, Any]:
    """A fresh manifest; `cells` are {key, params, config} with config the identity (no output)."""
    return {
        "schema_version": MANIFEST_SCHEMA,
        "kind": "sweep",
        "name": name,
        "preset": preset,
        "dims": {k: list(v) for k, v in dims.items()},
        "zip": zipped,
        "fingerprint": fingerprint([c["config"] for c in cells]),
        "command": list(command),
        "created_at": now(),
        "updated_at": now(),
        "cells": [
            {
                "index": i,
                "key": c["key"],
                "params": dict(c["params"]),
                "config": dict(c["config"]),
                "status": "pending",
                "run_dir": None,
                "attempts": 0,
                "error": None,
                "summary": None,
            }
            for i, c in enumerate(cells)
        ],  # fmt: skip
    }


def read_manifest(folder: Path) -> dict[str, Any]:
    """Read and check sweep.json; any problem is an EffbenchError naming the file."""
    path = Path(folder) / MANIFEST_FILE
    data = results.read_json_file(path, missing="pass a sweep folder (it holds sweep.json)", fix=BROKEN_FIX)
    if not isinstance(data, dict) or data.get("kind") != "sweep":
        raise EffbenchError(str(path), "is not an effbench sweep manifest; pass a sweep folder")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version > MANIFEST_SCHEMA:
        raise EffbenchError(
            str(path), f"has schema_version {version!r}; this effbench reads {MANIFEST_SCHEMA}: upgrade effbench"
        )
    from effbench import schema  # pydantic: only when a file is read

    schema.check(schema.Manifest, data, path, BROKEN_FIX)
    for i, cell in enumerate(data["cells"]):
        if cell["status"] not in CELL_STATUSES:
            raise EffbenchError(
                str(path), f"field cells.{i}.status: {cell['status']!r} is not one of {', '.join(CELL_STATUSES)}"
            )
        if cell.get("run_dir") is not None:  # report writes into each cell's folder: it must be in the sweep
            schema.inside(path.parent, cell["run_dir"], f"cells.{i}.run_dir", path)
    return data


def load_manifest(folder: Path) -> schema.Manifest:
    """sweep.json checked (read_manifest) and typed: what every reader uses; the sweep runner keeps the dict it
    writes."""
    return typed(read_manifest(folder))


def typed(manifest: Mapping[str, Any]) -> schema.Manifest:
    """A manifest held in memory (the one a sweep writes) as the typed model."""
    from effbench import schema

    return schema.Manifest.model_validate(dict(manifest))


def write_manifest(folder: Path, manifest: Mapping[str, Any]) -> None:
    results.write_json(Path(folder) / MANIFEST_FILE, {**manifest, "updated_at": now()})


def rounds_of(manifest: Mapping[str, Any]) -> int:
    """How many rounds a sweep runs (--rounds; 1 without)."""
    return len(manifest.get("dims", {}).get(ROUND, [1]))


def _more_rounds(existing: Mapping[str, Any], fresh: Mapping[str, Any]) -> dict[str, Any] | None:
    """`existing` grown by the rounds `fresh` adds, when fresh is the same sweep with more rounds (its first cells
    are existing's, key for key and config for config: planning is deterministic and each round's order depends
    only on its number), else None. A sweep of one round has no round in its keys, so it cannot grow."""
    was, now_ = rounds_of(existing), rounds_of(fresh)
    old_cells, new_cells = existing.get("cells", []), fresh["cells"]
    if not 1 < was < now_ or len(new_cells) <= len(old_cells):
        return None
    same = all(a["key"] == b["key"] and a["config"] == b["config"] for a, b in zip(old_cells, new_cells, strict=False))
    if not same:
        return None
    grown = copy.deepcopy(dict(existing))
    grown["cells"] += copy.deepcopy(new_cells[len(old_cells) :])
    grown.update(dims=copy.deepcopy(fresh["dims"]), fingerprint=fresh["fingerprint"], command=fresh["command"])
    return grown


def _first_difference(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    was, now_ = rounds_of(old), rounds_of(new)
    if was != now_:
        more = " or more to add rounds" if was > 1 else ""
        return f"{was} round(s) there, --rounds {now_} now; pass --rounds {was}{more} to resume it"
    if old.get("dims") != new.get("dims"):
        return f"swept {old.get('dims')} there, {new.get('dims')} now"
    for a, b in zip(old.get("cells", []), new.get("cells", []), strict=False):
        for k in sorted(set(a["config"]) | set(b["config"])):
            if a["config"].get(k) != b["config"].get(k):
                return f"{k} was {a['config'].get(k)!r}, now {b['config'].get(k)!r}"
    return "its cells differ"


def resume(existing: Mapping[str, Any] | None, fresh: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The manifest to run: `fresh` when there is none, else the existing one (same fingerprint only), or the
    existing one grown by the rounds a larger --rounds adds."""
    if existing is None:
        return fresh
    grown = _more_rounds(existing, fresh) if existing.get("fingerprint") != fresh["fingerprint"] else None
    if grown is not None:  # the same sweep with more rounds: the rounds run so far are kept
        return grown
    if existing.get("fingerprint") != fresh["fingerprint"]:
        raise EffbenchError(
            str(folder),
            f"holds a different sweep ({_first_difference(existing, fresh)}); start a new one with --name NEW "
            "or another --output, or delete that folder to start over",
        )
    merged = copy.deepcopy(dict(existing))
    merged["command"] = fresh["command"]
    return merged


def to_run(manifest: Mapping[str, Any]) -> list[str]:
    """Keys of the cells a (re)run must still run: every cell that is not ok, in order."""
    return [c["key"] for c in manifest["cells"] if c["status"] != DONE]


def lost(manifest: Mapping[str, Any], folder: Path) -> list[dict[str, Any]]:
    """The cells `ok` here whose run folder (its results.json) is gone: they are not ok any more."""
    done = [c for c in manifest["cells"] if c["status"] == DONE and c.get("run_dir")]
    return [c for c in done if not os.path.lexists(Path(folder) / c["run_dir"] / results.RESULTS_FILE)]


def update_cell(manifest: Mapping[str, Any], key: str, **changes: Any) -> dict[str, Any]:
    """A copy of the manifest with one cell's fields changed."""
    out = copy.deepcopy(dict(manifest))
    for cell in out["cells"]:
        if cell["key"] == key:
            cell.update(changes)
            return out
    raise KeyError(key)


def cell(manifest: Mapping[str, Any], key: str) -> dict[str, Any]:
    return next(c for c in manifest["cells"] if c["key"] == key)


def counts(manifest: schema.Manifest) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in manifest.cells:
        out[c.status] = out.get(c.status, 0) + 1
    return out


def _open_lock(path: Path) -> int:
    """LOCK_FILE, opened (made when absent) as the regular file it must be: never through a link (O_NOFOLLOW),
    never a folder, FIFO or device planted under its name, each one line naming it."""
    fd: int | None
    try:  # O_NONBLOCK: a FIFO planted there opens at once
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise EffbenchError(str(path), f"cannot be opened ({e.strerror}); fix its permissions") from None
        fd = None
    if fd is not None and stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    if fd is not None:
        os.close(fd)
    kind = "a symbolic link" if path.is_symlink() else "a folder" if path.is_dir() else "not a regular file"
    raise EffbenchError(
        str(path), f"is {kind}, not the lock file a sweep makes there; remove it and run the sweep again"
    )


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold the sweep folder for one sweep: an exclusive flock on LOCK_FILE in it, taken without waiting.

    A second sweep into a folder in use is refused in one line: it would take the first one's cell in flight
    for a dead attempt and move its live run folder to attempts/. The kernel drops the lock when the holder
    exits, SIGKILL included, so a stale lock file never blocks a resume. Where the filesystem has no locks
    (ENOLCK, some network mounts) the sweep goes on, saying so."""
    path = Path(folder) / LOCK_FILE
    fd = _open_lock(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            raise EffbenchError(
                str(folder),
                f"is in use by another sweep{f' (pid {holder})' if holder.isdigit() else ''}; wait for it to "
                "finish and run this command again to resume, or pass another --name or --output",
            ) from None
        except OSError as e:
            print(f"warning: {folder}: cannot lock the sweep folder ({e.strerror}); do not start a second sweep "
                  "into it while this one runs", file=sys.stderr)  # fmt: skip
        else:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would race a sweep that opened it)
