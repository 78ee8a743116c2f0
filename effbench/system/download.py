"""Fetch a file over HTTP(S) into a cache, verify its checksum, then move it into place.

Used for dataset archives and pretrained weights. The base URL of every official source can be
replaced with a mirror (EFFBENCH_MIRROR for datasets, EFFBENCH_WEIGHTS_MIRROR for weights): the
mirror serves the same file names. Nothing lands at its final path before its checksum matches.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from effbench.errors import EffbenchError

CHUNK_BYTES = 1 << 20
TIMEOUT_S = 30.0


# What urllib.request.urlopen fetches from; a file:// mirror is a local folder.
MIRROR_SCHEMES = ("http", "https", "ftp", "file")


def mirror_problem(mirror: str) -> str | None:
    """Why a mirror base URL cannot serve files (not a URL: `mirror.local/data`, `notaurl`), or None."""
    parts = urllib.parse.urlsplit(mirror)
    if parts.scheme.lower() in MIRROR_SCHEMES and (parts.netloc or (parts.scheme.lower() == "file" and parts.path)):
        return None
    return f"{mirror!r} is not a base URL ({', '.join(s + '://' for s in MIRROR_SCHEMES)})"


MIRROR_FIX = "set it to one, e.g. https://mirror.example/files, or unset it"


def mirrored_url(url: str, env_var: str) -> str:
    """Replace everything before the file name with $env_var when it is set (it must be a URL)."""
    mirror = os.environ.get(env_var, "").strip()
    if not mirror:
        return url
    problem = mirror_problem(mirror)
    if problem is not None:
        raise EffbenchError(env_var, f"{problem}; {MIRROR_FIX}")
    return mirror.rstrip("/") + "/" + url.rsplit("/", 1)[-1]


def file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            h.update(chunk)
    return h.hexdigest()


def _replaceable(dest: Path, option: str) -> None:
    """The rename at the end replaces only a regular file (or takes a new name): a FIFO, a device, a folder
    or a link found at `dest` is one line before anything is fetched, and is left there."""
    import stat

    from effbench.safe_files import file_kind

    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        return
    except OSError as e:
        raise EffbenchError(option, f"{dest} cannot be checked ({e.strerror}); remove it and rerun") from None
    if not stat.S_ISREG(st.st_mode):
        raise EffbenchError(
            option, f"{dest} is {file_kind(st.st_mode)}, not a file effbench downloaded; remove it and rerun"
        )


def fetch(
    url: str,
    dest: Path,
    *,
    option: str,
    md5: str | None = None,
    sha256_prefix: str | None = None,
    timeout_s: float = TIMEOUT_S,
) -> Path:
    """Download `url` to `dest` atomically; raise EffbenchError naming `option` on any failure.

    `md5` is a full hex digest (dataset archives publish these); `sha256_prefix` is the hash prefix
    torch-hub style weight files carry in their names. A mismatch leaves no file at `dest`.
    """
    dest = Path(dest)
    _replaceable(dest, option)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout_s) as resp:
                shutil.copyfileobj(resp, out, CHUNK_BYTES)
        except (urllib.error.URLError, OSError, ValueError) as e:
            if isinstance(e, urllib.error.HTTPError):
                e.close()  # an HTTPError holds the open response (a ResourceWarning otherwise)
            reason = getattr(e, "reason", None) or e
            raise EffbenchError(
                option,
                f"could not download {url} ({reason}); check the network or mirror, or place the file at {dest} by hand",
            ) from None
        if md5 is not None:
            got = file_digest(tmp, "md5")
            if got != md5:
                raise EffbenchError(option, f"{url} is corrupt: md5 {got} != expected {md5}; download it again")
        if sha256_prefix is not None:
            got = file_digest(tmp, "sha256")
            if not got.startswith(sha256_prefix):
                raise EffbenchError(
                    option,
                    f"{url} is corrupt: sha256 {got[:12]}... does not start with {sha256_prefix}; download it again",
                )
        os.replace(tmp, dest)
        return dest
    finally:
        tmp.unlink(missing_ok=True)
