"""Food-101 in its official layout (Bossard et al. 2014, the food-101.tar.gz archive).

    food-101/images/<class>/<id>.jpg
    food-101/meta/classes.txt           one class name a line; the line order is the label order
    food-101/meta/{train,test}.json     {"<class>": ["<class>/<id>", ...]}, ids without ".jpg"

750 training and 250 test images per class. Image files are not opened here; one that turns out
unreadable is skipped and counted at load time (effbench.data.images). Each listed file passes
images.ImageFiles first: an id that leads out of images/ (`../../../outside/secret`, an absolute path, a
link out), a FIFO, a device or an oversized file is left out and counted with its reason.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from effbench.config import RunConfig
from effbench.data.archives import ARCHIVES, ensure_present
from effbench.data.images import FileExamples, ImageFiles, nothing_readable
from effbench.data.source import Source
from effbench import safe_files
from effbench.errors import EffbenchError


def _broken(path: Path, why: str) -> EffbenchError:
    return EffbenchError(
        "--data-dir", f"{path} is malformed ({why}); delete it and rerun with --download, or restore it"
    )


def read_classes(path: Path) -> list[str]:
    try:
        text = safe_files.read_bytes(path, fix="delete it and rerun with --download, or restore it").decode("utf-8")
        names = [line.strip() for line in text.splitlines() if line.strip()]
    except FileNotFoundError:
        raise EffbenchError("--data-dir", f"{path} is missing; rerun with --download, or restore it") from None
    except EffbenchError as e:
        raise _broken(path, e.message.split("; ")[0]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise _broken(path, str(e)) from None
    if not names:
        raise _broken(path, "no class names")
    if len(set(names)) != len(names):
        raise _broken(path, "a class is listed twice")
    return names


def read_split(path: Path, classes: list[str], images_dir: Path) -> FileExamples:
    """The image paths and labels listed in train.json or test.json, in classes.txt order."""
    try:  # a regular file, bounded in size, depth and numbers (safe_files)
        listing = safe_files.load_json(path, fix="delete it and rerun with --download, or restore it")
    except FileNotFoundError:
        raise EffbenchError("--data-dir", f"{path} is missing; rerun with --download, or restore it") from None
    except EffbenchError as e:
        raise _broken(path, e.message.split("; ")[0]) from None
    if not isinstance(listing, dict):
        raise _broken(path, f"expected an object of class -> ids, found {type(listing).__name__}")
    unknown = sorted(set(listing) - set(classes))
    if unknown:
        raise _broken(path, f"classes not in classes.txt: {', '.join(unknown[:3])}")
    paths: list[str] = []
    labels: list[int] = []
    files, listed = ImageFiles(images_dir), 0
    for label, name in enumerate(classes):
        ids = listing.get(name, [])
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise _broken(path, f"{name!r} is not a list of image ids")
        listed += len(ids)
        for i in ids:
            image = str(images_dir / f"{i}.jpg")  # an absolute id replaces images_dir: ImageFiles refuses it
            if files.check(image) is not None:
                paths.append(image)
                labels.append(label)
    if not listed:
        raise _broken(path, "lists no images")
    if not paths:
        raise EffbenchError(
            "--data-dir",
            f"none of the {listed:,} images {path} lists can be read{nothing_readable(files.refused)}; "
            "delete the dataset folder and rerun with --download, or restore it",
        )
    return FileExamples(tuple(paths), np.asarray(labels, dtype=np.int64), refused=files.refused)


def load(data_dir: Path, *, download: bool) -> Source:
    download_info = ensure_present("food101", data_dir, download=download)
    root = Path(data_dir) / ARCHIVES["food101"].folder
    classes = read_classes(root / "meta" / "classes.txt")
    images = root / "images"
    train = read_split(root / "meta" / "train.json", classes, images)
    val = read_split(root / "meta" / "test.json", classes, images)
    return Source(
        name="food101",
        num_classes=len(classes),
        root=root,
        train=train,
        val=val,
        val_label="official test split",
        info={"download": download_info},
        refused={**train.refused, **val.refused},
    )


def load_for(cfg: RunConfig) -> Source:
    """The catalog's loader entry (effbench/datasets.py)."""
    return load(cfg.data_dir, download=cfg.download)
