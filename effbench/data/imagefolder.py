"""Any class-per-folder image tree, in one of two shapes:

    DIR/train/<class>/**/<image>  + DIR/val/<class>/... (or DIR/test/...)   official split
    DIR/<class>/**/<image>                                                  needs --val-fraction

Class folders are sorted by name to give labels (as torchvision's ImageFolder does); hidden
folders are ignored. Image files are not opened here; unreadable ones are skipped and counted at
load time (effbench.data.images).

Linked folders are followed while they stay inside --data-dir; one that leaves it (a class folder linked to
`/` walked the whole filesystem) is refused in one line naming the link. Image files pass images.ImageFiles as
they are listed: a linked file is read where it points while that stays inside --data-dir; one that leads out,
and anything not a regular file of at most images.MAX_IMAGE_BYTES (a FIFO, `x.jpg -> /dev/zero`), is left out
and counted as skipped with its reason. Class folders without an image still count as classes (the head's
width), with one warning naming a few.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
from torchvision.datasets.folder import IMG_EXTENSIONS

from effbench.config import RunConfig
from effbench.data.images import FileExamples, ImageFiles, nothing_readable
from effbench.data.source import Source
from effbench.errors import EffbenchError
from effbench.fmt import printable

VAL_FOLDERS = ("val", "test")


def class_folders(root: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))


def _outside(link: str, boundary: Path) -> EffbenchError:
    return EffbenchError(
        "--data-dir",
        f"{link} is a link to {os.path.realpath(link)}, outside {boundary}; effbench follows folder links only "
        "inside --data-dir: move or copy that folder in, or point --data-dir at a folder holding both",
    )


def scan(root: Path, classes: list[str], boundary: Path | None = None) -> FileExamples:
    """Every image file under root/<class>/, walked in sorted order so labels and order are stable.
    Linked folders are followed inside `boundary` (--data-dir; default root) and refused outside it, and
    each real folder and each real file counts once: a link back up the tree (`loop -> .`) would otherwise
    list its files again at every level until ELOOP."""
    paths: list[str] = []
    labels: list[int] = []
    seen_dirs: set[tuple[int, int]] = set()
    seen_files: set[tuple[int, int]] = set()
    files = ImageFiles(boundary if boundary is not None else root)
    inside = files.inside
    for label, name in enumerate(classes):
        folder = root / name
        if not folder.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
            if not Path(os.path.realpath(dirpath)).is_relative_to(inside):  # checked before anything below is listed
                raise _outside(dirpath, Path(boundary if boundary is not None else root))
            st = os.stat(dirpath)
            if (st.st_dev, st.st_ino) in seen_dirs:
                dirnames[:] = []
                continue
            seen_dirs.add((st.st_dev, st.st_ino))
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for f in sorted(filenames):
                if f.lower().endswith(IMG_EXTENSIONS) and not f.startswith("."):
                    path = os.path.join(dirpath, f)
                    fst = files.check(path)  # None: refused (a FIFO, a device, a link out...), kept with why
                    if fst is None or (fst.st_dev, fst.st_ino) in seen_files:
                        continue
                    seen_files.add((fst.st_dev, fst.st_ino))
                    paths.append(path)
                    labels.append(label)
    return FileExamples(tuple(paths), np.asarray(labels, dtype=np.int64), refused=files.refused)


def _no_images(root: Path, examples: FileExamples) -> EffbenchError:
    kinds = ", ".join(sorted({e.lstrip(".") for e in IMG_EXTENSIONS}))
    loose = _loose_images(root)
    if loose:  # images, but not in class folders: say so, not "no images"
        return EffbenchError(
            "--data-dir",
            f"{root} holds {loose} image file(s) directly but no class folder with images in it; move them into "
            f"one folder per class ({root}/<class>/<image>), the folder's name being the label",
        )
    return EffbenchError(
        "--data-dir",
        f"no images found in {root}{nothing_readable(examples.refused)}; it must hold one folder per "
        f"class with {kinds} files inside",
    )


def _loose_images(root: Path) -> int:
    """Image files directly in `root` (not in a class folder), counted without opening one."""
    try:
        names = os.listdir(root)
    except OSError:
        return 0
    return sum(1 for n in names if n.lower().endswith(IMG_EXTENSIONS) and not n.startswith("."))


def warn_empty_classes(where: Path, classes: list[str], examples: FileExamples) -> str | None:
    """The warning for class folders that hold no image (they still widen the head), or None."""
    counts = np.bincount(examples.labels, minlength=len(classes)) if len(classes) else np.zeros(0, dtype=np.int64)
    empty = [classes[i] for i in np.flatnonzero(counts == 0)]
    if not empty:
        return None
    few = ", ".join(printable(name) for name in empty[:3]) + (", ..." if len(empty) > 3 else "")
    return (
        f"warning: --data-dir: {len(empty):,} of {len(classes):,} class folders in {printable(where)} hold no "
        f"image ({few}); "
        f"they still count as classes (a {len(classes):,}-way head): remove them or add their images"
    )


def load(data_dir: Path, *, val_fraction: float | None) -> Source:
    root = Path(data_dir)
    if not root.is_dir():
        raise EffbenchError("--data-dir", f"{root} is not a folder; point --data-dir at a class-per-folder image tree")
    train_dir = root / "train"
    split = train_dir.is_dir()
    if not split:
        train_dir = root
    if not Path(os.path.realpath(train_dir)).is_relative_to(Path(os.path.realpath(root))):
        raise _outside(str(train_dir), root)
    classes = class_folders(train_dir)
    train = scan(train_dir, classes, boundary=root)
    if len(train) == 0:
        raise _no_images(train_dir, train)
    message = warn_empty_classes(train_dir, classes, train)
    if message and os.environ.get("RANK", "0") == "0":  # once per job, not once per rank
        print(message, file=sys.stderr)

    val, val_label = None, ""
    val_dir = next((root / v for v in VAL_FOLDERS if (root / v).is_dir()), None) if split else None
    if val_fraction is None:
        if val_dir is None:
            where = (
                f"{root} has train/ but no val/ or test/"
                if split
                else f"{root} holds class folders but no train/ and val/"
            )
            raise EffbenchError(
                "--val-fraction", f"{where}; pass --val-fraction (e.g. 0.2) to carve a seeded validation split from it"
            )
        extra = sorted(set(class_folders(val_dir)) - set(classes))
        if extra:
            raise EffbenchError(
                "--data-dir",
                f"{val_dir} has class folders missing from {train_dir}: {', '.join(extra[:3])}; make the class sets match",
            )
        if not Path(os.path.realpath(val_dir)).is_relative_to(Path(os.path.realpath(root))):
            raise _outside(str(val_dir), root)
        val = scan(val_dir, classes, boundary=root)
        if len(val) == 0:
            raise _no_images(val_dir, val)
        val_label = f"{val_dir.name}/ folder"
    return Source(
        name="imagefolder",
        num_classes=len(classes),
        root=root,
        train=train,
        val=val,
        val_label=val_label,
        info={"train_dir": str(train_dir), "val_dir": str(val_dir) if val is not None else None},
        refused={**train.refused, **(val.refused if val is not None else {})},
    )


def load_for(cfg: RunConfig) -> Source:
    """The catalog's loader entry (effbench/datasets.py)."""
    return load(cfg.data_dir, val_fraction=cfg.val_fraction)
