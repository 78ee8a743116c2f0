"""Where a folder's files really live inside a container, from /proc/self/mountinfo.

`docker run --rm effbench run` without `-v ...:/results` writes the results into an anonymous
volume (the image declares VOLUME /results) that `--rm` deletes with the container; without the
VOLUME line they would land in the container's writable layer, deleted the same way. Both look like
a normal folder from inside, so the only witness is the mount table: a bind mount of a host folder
or a named volume survives the container, an anonymous volume, the root overlay or a tmpfs do not.

Pure parsing (text in, verdict out) so tests feed recorded mount tables; `read_mountinfo()` is the
one call that touches the system.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

# Docker keeps volumes at <data-root>/volumes/<name>/_data and podman at
# <graphroot>/volumes/<name>/_data; an anonymous volume's name is 64 hex digits (the id both
# engines generate), a named one is what the user typed. The mountinfo `root` field is that path
# relative to the filesystem holding it, so only the tail is matched.
ANONYMOUS_VOLUME = re.compile(r"(^|/)volumes/[0-9a-f]{64}/_data$")
# Filesystems whose content ends with the container (or with the machine).
EPHEMERAL_FSTYPES = {"overlay", "tmpfs", "aufs", "fuse-overlayfs"}


@dataclass(frozen=True)
class Mount:
    root: str
    """The path inside the mounted filesystem that appears at `mount_point` (field 4)."""
    mount_point: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    # The kernel writes space, tab, newline and backslash as octal escapes (fs/proc_namespace.c, show_mountinfo).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """`id parent major:minor root mount_point options [optional...] - fstype source superoptions`
    (proc(5)), one Mount per well-formed line, in the table's order (later mounts shadow earlier)."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or len(tail) < 2:
            continue
        mounts.append(Mount(_unescape(fields[3]), _unescape(fields[4]), tail[0], _unescape(tail[1])))
    return mounts


def mount_of(path: str | Path, mounts: list[Mount]) -> Mount | None:
    """The mount that holds `path` (absolute, need not exist): the longest mount point that is a
    prefix of it, the last listed on a tie (a later mount on the same point hides the earlier)."""
    target = os.path.normpath(os.path.abspath(path))
    best: Mount | None = None
    for m in mounts:
        point = m.mount_point.rstrip("/") or "/"
        inside = target == point or target.startswith(point + "/") or point == "/"
        if inside and (best is None or len(point) >= len(best.mount_point.rstrip("/") or "/")):
            best = m
    return best


def lost_with_container(path: str | Path, mountinfo: str) -> str | None:
    """Why files written under `path` disappear with the container, or None when they persist
    (a bind mount from the host, a named volume, or an unreadable mount table: no guess)."""
    mounts = parse_mountinfo(mountinfo)
    m = mount_of(path, mounts)
    if m is None:
        return None
    if ANONYMOUS_VOLUME.search(m.root):
        return "an anonymous volume, which `docker run --rm` deletes with the container"
    if m.mount_point == "/" or m.fstype in EPHEMERAL_FSTYPES:
        where = "the container's own filesystem" if m.mount_point == "/" else f"a {m.fstype} mount"
        return f"{where}, not a folder mounted from the host: it ends with the container"
    return None


MOUNTINFO_ENV = "EFFBENCH_MOUNTINFO"  # another table to read; the tests point it at an empty file


def read_mountinfo() -> str | None:
    """The mount table as text. Its paths are bytes (a host folder named in latin-1 is not UTF-8): decoded as
    Python decodes file names (os.fsdecode, surrogateescape), so they still match the paths they hold."""
    try:
        return os.fsdecode(Path(os.environ.get(MOUNTINFO_ENV) or "/proc/self/mountinfo").read_bytes())
    except OSError:
        return None
