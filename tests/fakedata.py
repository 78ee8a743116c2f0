"""Small datasets written in the real on-disk formats, for tests of every layer.

    make_cifar(root, "cifar100")   root/cifar-100-python/{train,test,meta}
    make_cifar(root, "cifar10")    root/cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}
    make_food101(root)             root/food-101/{images/<class>/<id>.jpg, meta/...}
    make_imagefolder(root)         root/<class>/*.jpg|png  (split=True: root/train/..., root/val/...)
    make_tar_gz(src_dir, archive)  archive with src_dir's name as its top folder

Each returns the folder to pass as --data-dir. The CIFAR pickles are written the way the official
ones were (Python 2 cPickle, protocol 2, byte strings as py2 `str`, numpy under numpy.core), so the
reader is tested against the format it will meet, not against what today's pickle writes.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
FOOD_NAMES = ["apple_pie", "baby_back_ribs", "baklava", "beef_carpaccio", "beef_tartare", "beet_salad"]
CIFAR_FOLDERS = {"cifar100": "cifar-100-python", "cifar10": "cifar-10-batches-py"}


# --------------------------------------------------------------------------------------------------
# CIFAR
# --------------------------------------------------------------------------------------------------
class _Py2Pickler(pickle._Pickler):  # the pure-Python pickler, whose dispatch table can be extended
    """Protocol 2 as Python 2's cPickle wrote it: bytes as `str` opcodes (no _codecs.encode) and
    numpy's internals named numpy.core (numpy 2 names them numpy._core)."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_py2_str(self, obj: bytes) -> None:
        n = len(obj)
        if n < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([n]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", n) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str

    def save_global(self, obj, name=None) -> None:
        module = getattr(obj, "__module__", "") or ""
        if module.startswith("numpy._core"):
            path = module.replace("numpy._core", "numpy.core") + "\n" + (name or obj.__name__) + "\n"
            self.write(pickle.GLOBAL + path.encode())
            self.memoize(obj)
            return
        super().save_global(obj, name)


def py2_pickle(obj: object) -> bytes:
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def _b(d: dict) -> dict:
    """Keys and strings as py2 `str` (bytes here), as in the official files."""
    out = {}
    for k, v in d.items():
        if isinstance(v, list) and v and isinstance(v[0], str):
            v = [s.encode() for s in v]
        elif isinstance(v, str):
            v = v.encode()
        out[k.encode()] = v
    return out


def cifar_images(n: int, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """N x 3072 uint8 rows (R plane, G plane, B plane); a class-dependent tint plus noise."""
    tint = (labels[:, None] * 37 % 256).astype(np.int16)
    noise = rng.integers(-60, 60, size=(n, 3072), dtype=np.int16)
    return np.clip(tint + 96 + noise, 0, 255).astype(np.uint8)


def make_cifar(root: Path, variant: str = "cifar100", n_train: int = 64, n_test: int = 32, seed: int = 0) -> Path:
    root = Path(root)
    folder = root / CIFAR_FOLDERS[variant]
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    classes = 100 if variant == "cifar100" else 10

    def batch(n: int, label: str) -> dict:
        labels = rng.integers(0, classes, size=n)
        d = {
            "batch_label": label,
            "data": cifar_images(n, labels, rng),
            "filenames": [f"img_{i:05d}.png" for i in range(n)],
        }
        if variant == "cifar100":
            d.update(fine_labels=labels.tolist(), coarse_labels=(labels // 5).tolist())
        else:
            d["labels"] = labels.tolist()
        return _b(d)

    if variant == "cifar100":
        (folder / "train").write_bytes(py2_pickle(batch(n_train, "training batch 1 of 1")))
        (folder / "test").write_bytes(py2_pickle(batch(n_test, "testing batch 1 of 1")))
        meta = {
            "fine_label_names": [f"fine_{i:02d}" for i in range(100)],
            "coarse_label_names": [f"coarse_{i:02d}" for i in range(20)],
        }
        (folder / "meta").write_bytes(py2_pickle(_b(meta)))
    else:
        assert n_train >= 5, "CIFAR-10 spreads training images over 5 batch files"
        for i, part in enumerate(np.array_split(np.arange(n_train), 5), start=1):
            (folder / f"data_batch_{i}").write_bytes(py2_pickle(batch(len(part), f"training batch {i} of 5")))
        (folder / "test_batch").write_bytes(py2_pickle(batch(n_test, "testing batch 1 of 1")))
        meta = {"num_cases_per_batch": n_train // 5, "label_names": CIFAR10_NAMES, "num_vis": 3072}
        (folder / "batches.meta").write_bytes(py2_pickle(_b(meta)))
    return root


def read_cifar_raw(path: Path) -> dict:
    """Test helper: a CIFAR pickle read with the plain (unrestricted) unpickler."""
    with open(path, "rb") as f:
        return pickle.load(f, encoding="latin1")


# --------------------------------------------------------------------------------------------------
# Image files
# --------------------------------------------------------------------------------------------------
def write_image(path: Path, size: int, color: tuple[int, int, int], rng: np.random.Generator) -> None:
    """A tinted noisy image, as JPEG or PNG by suffix; slightly non-square like real photos."""
    h, w = size, size + size // 4
    arr = np.clip(np.array(color, dtype=np.int16) + rng.integers(-40, 40, size=(h, w, 3)), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path, quality=90) if path.suffix == ".jpg" else Image.fromarray(arr).save(path)


def _color(label: int) -> tuple[int, int, int]:
    return (label * 80 % 256, 255 - label * 50 % 256, label * 120 % 256)


def make_food101(root: Path, classes: int = 3, per_class: int = 8, size: int = 64, seed: int = 0) -> Path:
    """Food-101 layout; a quarter of each class goes to the test split, as in the official 750/250."""
    root = Path(root)
    base = root / "food-101"
    rng = np.random.default_rng(seed)
    names = [FOOD_NAMES[i] if i < len(FOOD_NAMES) else f"food_{i}" for i in range(classes)]
    train: dict[str, list[str]] = {}
    test: dict[str, list[str]] = {}
    for label, name in enumerate(names):
        ids = [f"{name}/{int(x)}" for x in rng.choice(np.arange(100_000, 4_000_000), per_class, replace=False)]
        n_test = max(1, per_class // 4)
        train[name], test[name] = ids[n_test:], ids[:n_test]
        for i in ids:
            write_image(base / "images" / f"{i}.jpg", size, _color(label), rng)
    meta = base / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / "classes.txt").write_text("\n".join(names) + "\n")
    (meta / "labels.txt").write_text("\n".join(n.replace("_", " ").title() for n in names) + "\n")
    (meta / "train.json").write_text(json.dumps(train))
    (meta / "test.json").write_text(json.dumps(test))
    (meta / "train.txt").write_text("".join(f"{i}\n" for ids in train.values() for i in ids))
    (meta / "test.txt").write_text("".join(f"{i}\n" for ids in test.values() for i in ids))
    return root


def make_imagefolder(
    root: Path,
    classes: int = 3,
    per_class: int = 6,
    size: int = 40,
    split: bool = False,
    val_per_class: int = 2,
    seed: int = 0,
) -> Path:
    """Class folders directly under root, or under root/train and root/val with split=True.
    Every third image is a PNG so more than one decoder is exercised."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    parts = {"train": per_class, "val": val_per_class} if split else {"": per_class}
    for part, n in parts.items():
        for label in range(classes):
            for i in range(n):
                suffix = ".png" if i % 3 == 2 else ".jpg"
                write_image(root / part / f"class_{label}" / f"img_{i:03d}{suffix}", size, _color(label), rng)
    return root


def corrupt_file(path: Path) -> None:
    """Keep the JPEG header, cut the rest: PIL identifies the file but cannot decode it."""
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: min(200, len(data) // 3)])


# --------------------------------------------------------------------------------------------------
# Archives
# --------------------------------------------------------------------------------------------------
def make_tar_gz(src_dir: Path, archive_path: Path) -> Path:
    """A .tar.gz holding src_dir as its top-level folder, like the official dataset archives."""
    archive_path = Path(archive_path)
    archive_path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive_path, "w:gz") as tar:
        tar.add(src_dir, arcname=Path(src_dir).name)
    return archive_path
