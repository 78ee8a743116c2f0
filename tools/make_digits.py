"""Write scikit-learn's bundled handwritten digits as an image folder effbench can train on, offline.

    .venv/bin/python tools/make_digits.py digits          # digits/train/<0-9>/*.png, digits/val/<0-9>/*.png

1,797 8x8 grey images (Alpaydin & Kaynak 1998, shipped inside scikit-learn: no download), scaled to 16 px
RGB PNGs, a seeded 80/20 split. Real images nothing in this project made: docs/time-to-accuracy.md trains
on them, and tests/e2e/test_digits_learns.py checks effbench learns them as a plain PyTorch loop does.
scikit-learn is in effbench's dev extra (`make run` installs it).
"""

from __future__ import annotations

import sys
from pathlib import Path

SIZE = 16  # the PNGs' side
SEED = 0  # the split's


def write_digits(root: Path, size: int = SIZE, seed: int = SEED) -> Path:
    """digits as root/{train,val}/<digit>/<i>.png, `size` px RGB, a seeded 80/20 split."""
    import numpy as np
    from PIL import Image
    from sklearn import datasets

    digits = datasets.load_digits()
    images = (digits.images * (255.0 / 16.0)).round().astype(np.uint8)  # values 0..16 -> 0..255
    labels = digits.target.copy()
    order = np.random.default_rng(seed).permutation(len(images))
    n_val = len(images) // 5
    for split, idx in (("val", order[:n_val]), ("train", order[n_val:])):
        for i in idx:
            folder = root / split / str(labels[i])
            folder.mkdir(parents=True, exist_ok=True)
            im = Image.fromarray(images[i], mode="L").resize((size, size), Image.Resampling.NEAREST)
            im.convert("RGB").save(folder / f"{i:04d}.png")
    return root


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make_digits.py FOLDER", file=sys.stderr)
        return 2
    root = write_digits(Path(argv[0]))
    counts = {split: sum(1 for _ in (root / split).rglob("*.png")) for split in ("train", "val")}
    print(f"{root}: {counts['train']} train and {counts['val']} val images of the 10 digits, {SIZE} px")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
