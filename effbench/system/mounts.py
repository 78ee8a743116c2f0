"""Where a folder's files really live inside a container, from /proc/self/mountinfo.

`docker run --rm effbench run` without `-v ...:/results` writes the results into an anonymous
volume (the image declares VOLUME /results) that `--rm` deletes with the container; without the
VOLUME line they would land in the container's writable layer, deleted the same way. Both look like
a normal folder from inside, so the only witness is the mount table: a bind mount of a host folder
or a named volume survives the container, an anonymous volume, the root overlay or a tmpfs do not.

Whether this process is in a container at all is read from the same table and from PID 1's cgroup
(`container_signs`): /.dockerenv alone is only a hint, since a VM image made from a container export
keeps the file while its root is a block device whose files outlive everything.

Pure parsing (text in, verdict out) so tests feed recorded mount tables; `read_mountinfo()` is the
one call that touches the system.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
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


# Words in PID 1's cgroup path that container engines use for a container's cgroup (cgroup v1, or v2
# without a cgroup namespace: /docker/<id>, /kubepods/..., /system.slice/containerd-..., libpod-<id>,
# crio-<id>, /lxc/<name>). Under cgroup v2 with a namespace (Docker's default there) it reads "0::/",
# which says nothing either way.
CONTAINER_CGROUP = re.compile(r"docker|kubepods|containerd|libpod|crio|/lxc")
# Files Docker, podman and the Kubernetes runtimes (containerd, CRI-O) bind-mount into every container
# (moby daemon/container_operations_unix.go, podman's libpod/container_internal_linux.go, the CRI's
# hostname/hosts/resolv.conf mounts); a host's /etc files are never mount points of their own.
ENGINE_BINDS = ("/etc/hostname", "/etc/hosts", "/etc/resolv.conf")
ROOT_LAYER_FSTYPES = {"overlay", "aufs", "fuse-overlayfs"}


def container_signs(
    mountinfo: str | None, pid1_cgroup: str | None, environ: Mapping[str, str], containerenv: bool
) -> list[str] | None:
    """The signs that this process runs in a container, each in a few words; [] when the mount table was
    read and shows a host (root on a block device, no engine bind mounts), None when there is nothing to
    decide from (no readable table and no other sign): the caller's hint (/.dockerenv) then stands."""
    signs = []
    if environ.get("container"):  # podman, systemd-nspawn and LXC set it in the container's environment
        signs.append(f"container={environ['container']} in the environment")
    if containerenv:
        signs.append("/run/.containerenv")
    mounts = parse_mountinfo(mountinfo or "")
    root = mount_of("/", mounts)
    if root is not None and root.fstype in ROOT_LAYER_FSTYPES:
        signs.append(f"/ is an {root.fstype} of image layers")
    binds = sorted({m.mount_point for m in mounts if m.mount_point in ENGINE_BINDS})
    if binds:
        signs.append(f"{', '.join(binds)} mounted by the engine")
    if pid1_cgroup and CONTAINER_CGROUP.search(pid1_cgroup):
        line = next(ln for ln in pid1_cgroup.splitlines() if CONTAINER_CGROUP.search(ln))
        signs.append(f"PID 1's cgroup {line.strip()}")
    if not signs and root is None:
        return None
    return signs


MOUNTINFO_ENV = "EFFBENCH_MOUNTINFO"  # another table to read; the tests point it at an empty file


def read_mountinfo() -> str | None:
    """The mount table as text. Its paths are bytes (a host folder named in latin-1 is not UTF-8): decoded as
    Python decodes file names (os.fsdecode, surrogateescape), so they still match the paths they hold."""
    try:
        return os.fsdecode(Path(os.environ.get(MOUNTINFO_ENV) or "/proc/self/mountinfo").read_bytes())
    except OSError:
        return None
