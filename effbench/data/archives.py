"""Where each downloadable dataset comes from, and the one-time download + safe extraction.

The dataset catalog (effbench/datasets.py) is the single source of URLs and checksums. The
checksum is verified once, right after the download; loads never re-hash the files. Nothing
appears under --data-dir until the archive verified and extracted completely: extraction goes to
a hidden temporary folder that is renamed into place, and the archive is always removed.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from effbench.datasets import CATALOG, Archive
from effbench.system.download import fetch, mirrored_url
from effbench.errors import EffbenchError

MIRROR_ENV = "EFFBENCH_MIRROR"


# Derived from the dataset catalog; tests patch an entry (its md5) here.
ARCHIVES: dict[str, Archive] = {spec.name: spec.archive for spec in CATALOG.values() if spec.archive is not None}


def ensure_present(name: str, data_dir: Path, *, download: bool) -> dict[str, object]:
    """Return download facts for the record; download only when asked and the folder is absent."""
    archive = ARCHIVES[name]
    target = Path(data_dir) / archive.folder
    missing = missing_parts(archive, Path(data_dir))
    if not missing:
        return {"downloaded": False}
    if not download:
        if not target.is_dir():
            raise EffbenchError(
                "--data-dir",
                f"{archive.title} ({archive.folder}/) not found under {data_dir}; pass --download, "
                "point --data-dir (or EFFBENCH_DATA) at it, or use --dataset synthetic",
            )
        raise EffbenchError(
            "--data-dir",
            f"{target / missing[0]} is missing; rerun with --download to fetch {archive.title} again, or restore it",
        )
    return download_and_extract(archive, Path(data_dir))


def missing_parts(archive: Archive, data_dir: Path) -> list[str]:
    target = data_dir / archive.folder
    return [p for p in archive.required if not (target / p).exists()]


def download_and_extract(archive: Archive, data_dir: Path) -> dict[str, object]:
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EffbenchError("--data-dir", f"cannot create {data_dir} ({e.strerror}); pick a writable folder") from None
    # Under torchrun every rank may get here at once: one downloads, the others wait and reuse it.
    with _folder_lock(data_dir):
        if not missing_parts(archive, data_dir):
            return {"downloaded": False, "waited_for_download": True}
        url = mirrored_url(archive.url, MIRROR_ENV)
        path = data_dir / archive.url.rsplit("/", 1)[-1]
        _remove_leftovers(data_dir, path.name, archive.folder)
        t0 = time.perf_counter()
        try:
            fetch(url, path, option="--download", md5=archive.md5)
            fetched_s = time.perf_counter() - t0
            extract(path, data_dir, archive.folder)
        finally:
            if path.is_file() and not path.is_symlink():  # the archive fetched; anything else there fetch refused
                path.unlink()
    return {
        "downloaded": True,
        "url": url,
        "md5": archive.md5,
        "download_s": round(fetched_s, 3),
        "extract_s": round(time.perf_counter() - t0 - fetched_s, 3),
    }


def extract(path: Path, data_dir: Path, folder: str) -> Path:
    """Extract `folder/` from the tar at `path` into data_dir, all or nothing.

    tarfile's "data" filter (PEP 706) refuses absolute paths, `..`, links leaving the destination
    and device files, so a hostile archive cannot write outside the temporary folder.
    """
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder}.", suffix=".extracting", dir=data_dir))
    try:
        try:
            with tarfile.open(path, "r:*") as tar:
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise EffbenchError(
                "--download",
                f"could not extract {path.name} ({e}); check free space under {data_dir} and rerun --download",
            ) from None
        src = tmp / folder
        if not src.is_dir():
            raise EffbenchError(
                "--download",
                f"{path.name} holds no {folder}/ folder; make sure {MIRROR_ENV} serves the official archive",
            )
        target = data_dir / folder
        if target.exists():  # an incomplete copy the user asked to replace: swap, then delete it
            os.replace(target, tmp / ".previous")
        os.replace(src, target)
        return target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_leftovers(data_dir: Path, archive_name: str, folder: str) -> None:
    """Partial files of a download that was killed (fetch's .part, extract's temporary folder).
    Only called under the lock, so none of them belongs to a live download."""
    for part in data_dir.glob(f"{archive_name}.*.part"):
        part.unlink(missing_ok=True)
    for tmp in data_dir.glob(f".{folder}.*.extracting"):
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive flock on the folder itself (no lock file to leave behind). Where the file
    system has no flock (some network mounts), go on unlocked: the final rename keeps a racing
    download from ever exposing a partial folder; it only costs a second download."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        with suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
