"""Any class-per-folder image tree, in one of two shapes:

    DIR/train/<class>/**/<image>  + DIR/val/<class>/... (or DIR/test/...)   official split
    DIR/<class>/**/<image>                                                  needs --val-fraction

Class folders are sorted by name to give labels (as torchvision's ImageFolder does); hidden
folders are ignored. Image files are not opened here; unreadable ones are skipped and counted at
load time (effbench.data.images).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from torchvision.datasets.folder import IMG_EXTENSIONS

from effbench.config import RunConfig
from effbench.data.images import FileExamples
from effbench.data.source import Source
from effbench.errors import EffbenchError

VAL_FOLDERS = ("val", "test")


def class_folders(root: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))


def scan(root: Path, classes: list[str]) -> FileExamples:
    """Every image file under root/<class>/, walked in sorted order so labels and order are stable.
    Linked folders are followed, but each real folder and each real file counts once: a link back
    up the tree (`loop -> .`) would otherwise list its files again at every level until ELOOP."""
    paths: list[str] = []
    labels: list[int] = []
    seen_dirs: set[tuple[int, int]] = set()
    seen_files: set[tuple[int, int]] = set()
    for label, name in enumerate(classes):
        folder = root / name
        if not folder.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
            st = os.stat(dirpath)
            if (st.st_dev, st.st_ino) in seen_dirs:
                dirnames[:] = []
                continue
            seen_dirs.add((st.st_dev, st.st_ino))
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for f in sorted(filenames):
                if f.lower().endswith(IMG_EXTENSIONS) and not f.startswith("."):
                    path = os.path.join(dirpath, f)
                    try:
                        fst = os.stat(path)
                    except OSError:  # a dangling link: listed, then skipped and counted at load time
                        fst = None
                    if fst is not None and (fst.st_dev, fst.st_ino) in seen_files:
                        continue
                    if fst is not None:
                        seen_files.add((fst.st_dev, fst.st_ino))
                    paths.append(path)
                    labels.append(label)
    return FileExamples(tuple(paths), np.asarray(labels, dtype=np.int64))


def _no_images(root: Path) -> EffbenchError:
    kinds = ", ".join(sorted({e.lstrip(".") for e in IMG_EXTENSIONS}))
    return EffbenchError(
        "--data-dir", f"no images found in {root}; it must hold one folder per class with {kinds} files inside"
    )


def load(data_dir: Path, *, val_fraction: float | None) -> Source:
    root = Path(data_dir)
    if not root.is_dir():
        raise EffbenchError("--data-dir", f"{root} is not a folder; point --data-dir at a class-per-folder image tree")
    train_dir = root / "train"
    split = train_dir.is_dir()
    if not split:
        train_dir = root
    classes = class_folders(train_dir)
    train = scan(train_dir, classes)
    if len(train) == 0:
        raise _no_images(train_dir)

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
        val = scan(val_dir, classes)
        if len(val) == 0:
            raise _no_images(val_dir)
        val_label = f"{val_dir.name}/ folder"
    return Source(
        name="imagefolder",
        num_classes=len(classes),
        root=root,
        train=train,
        val=val,
        val_label=val_label,
        info={"train_dir": str(train_dir), "val_dir": str(val_dir) if val is not None else None},
    )


def load_for(cfg: RunConfig) -> Source:
    """The catalog's loader entry (effbench/datasets.py)."""
    return load(cfg.data_dir, val_fraction=cfg.val_fraction)
