"""Where the reports are written: only inside the folder they are for, and one line when they cannot be.

A run or sweep folder is input (copied, shared, edited): a `plots` link to another folder made `effbench report`
overwrite PNGs there. Every report file is written through `file()` / `folder()`, which refuse a path whose
folder resolves outside the root (a link that leaves it); a link in a file's own place is safe, as
results.atomic_write_bytes renames over the link and never writes through it. `writing()` turns a write the
filesystem refuses (a read-only mount, no permission) into one line naming the place and `--output DIR`.
No torch import.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from effbench import results
from effbench.errors import EffbenchError


def _leaves(root: Path, path: Path) -> EffbenchError:
    link = next((p for p in [path, *path.parents] if p.is_symlink()), path)
    return EffbenchError(
        str(link),
        f"is a link to {link.resolve()}, outside {root}; effbench writes only inside the folder it reports on: "
        "remove the link, or render elsewhere with --output DIR",
    )


def folder(root: Path, name: str) -> Path:
    """`root / name` as a folder to write in, refused (one line) when it resolves outside `root`."""
    root, path = Path(root), Path(root) / name
    if not path.resolve().is_relative_to(root.resolve()):
        raise _leaves(root, path)
    return path


def file(root: Path, name: str) -> Path:
    """`root / name` as a file to write, refused (one line) when the folder that holds it resolves outside `root`."""
    root, path = Path(root), Path(root) / name
    if not path.parent.resolve().is_relative_to(root.resolve()):
        raise _leaves(root, path)
    return path


@contextmanager
def writing(where: Path) -> Iterator[None]:
    """A write the filesystem refuses (read-only, permissions, not a folder) is one line naming the file."""
    try:
        yield
    except OSError as e:
        if e.errno in results.NO_SPACE_ERRNOS:
            raise results.no_space_error(Path(e.filename or where)) from None
        place = e.filename or where
        hint = "a read-only mount" if e.errno == errno.EROFS else e.strerror
        raise EffbenchError(
            str(place), f"cannot be written ({hint}); render the reports elsewhere with --output DIR"
        ) from None
