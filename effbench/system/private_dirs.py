"""Folders effbench makes under a folder other users share (the temp dir): private, and checked whole-path.

    make_private(Path("/tmp"), Path("/tmp/effbench-1000/home"), option="HOME")   # -> the folder, or one error line

With HOME unwritable, the run's home and caches go to $TMPDIR/effbench-<uid>/... (preflight). In a 1777 temp
dir another local user can make `effbench-<uid>` first, or put a link where a folder should be, and so receive
the run's caches or plant its own (fake cached roofs). So every folder from the shared one down to the leaf is
made 0700 when missing and, found or made, checked with lstat (a link is never followed): a folder, owned by
this uid, writable by no one else. Once that holds, no one else can rename or swap anything below the shared
folder (a sticky shared folder keeps others from renaming our entry in it), so the path stays ours.
Torch-free.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from effbench.errors import EffbenchError

FIX = "set TMPDIR to a folder of your own (or remove the folder if it is yours)"


def _refuse(option: str, what: str) -> EffbenchError:
    return EffbenchError(option, f"{what}: the run's home and caches would not be private; {FIX}")


def _check(path: Path, option: str, uid: int) -> None:
    st = os.lstat(path)  # the entry itself: a link is refused, never followed
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(option, f"{path} is a link (to {os.readlink(path)}), not a folder")
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(option, f"{path} is not a folder")
    if st.st_uid != uid:
        raise _refuse(option, f"{path} belongs to uid {st.st_uid}, not to this user (uid {uid})")
    if st.st_mode & 0o022:
        raise _refuse(option, f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})")


def make_private(shared: Path, path: Path, *, option: str, uid: int | None = None) -> Path:
    """`path`, below the `shared` folder, made (0700) and checked one folder at a time from `shared` down:
    each a real folder (no link), owned by `uid` (this process's), writable by no one else. Anything else is
    one EffbenchError naming `option` (the variable being redirected) and the folder."""
    uid = os.getuid() if uid is None else uid
    try:
        here = shared
        st = os.stat(shared)  # the shared folder may be a link (macOS /tmp): its target is what is shared
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:  # then others may rename our folder in it
            raise _refuse(option, f"{shared} is writable by others without the sticky bit")
        for part in path.relative_to(shared).parts:
            here = here / part
            with contextlib.suppress(FileExistsError):  # found: ours from an earlier run, or not (checked below)
                os.mkdir(here, 0o700)
            _check(here, option, uid)
    except OSError as e:  # gone, full, read-only: one line, as for any folder effbench cannot make
        raise EffbenchError(option, f"cannot make {here} ({e.strerror}); {FIX}") from None
    return path
