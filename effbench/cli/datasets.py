"""`effbench datasets`: the dataset catalog, where each one goes on disk, and whether it is there.

    effbench datasets                        # under ./data (or $EFFBENCH_DATA)
    effbench datasets --data-dir /mnt/data   # under another folder

torch-free: it reads effbench/datasets.py's catalog and looks at the disk. docs/datasets.md has the layouts
in full.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from effbench.cli.common import opt as _opt
from effbench.cli.common import say
from effbench.datasets import CATALOG, DatasetSpec

# Wide enough for the longest layout line; tabulate wraps longer text.
COLUMN_WIDTHS = [20, 32, 48, 48]


@dataclass(frozen=True)
class DatasetStatus:
    name: str
    """`--dataset` value, with its aliases: "cifar100 (cifar)"."""
    present: bool | None
    """On disk under --data-dir; None where nothing is read (generated) or --data-dir is the user's own tree."""
    status: str
    """present / missing (what) / generated, in words."""
    layout: str
    """Where its files go."""
    get: str
    """How to get it."""


def dataset_status(spec: DatasetSpec, data_dir: Path) -> DatasetStatus:
    """One catalog entry as it stands under `data_dir` (reads the disk: exists() only, no file opened)."""
    name = f"{spec.name} ({', '.join(spec.aliases)})" if spec.aliases else spec.name
    if spec.storage == "generated":
        size = f"{spec.native_size} px, " if spec.native_size else ""
        return DatasetStatus(
            name, None, f"generated ({size}{spec.num_classes} classes)", "nothing on disk: made on the device",
            "nothing to get",
        )  # fmt: skip
    if spec.storage == "folder":
        split = (data_dir / "train").is_dir()
        return DatasetStatus(
            name, split or None,
            "present (train/)" if split else "--data-dir is your own tree",
            "DIR/train/<class>/<image> + DIR/val/<class>/<image>, or DIR/<class>/<image> with --val-fraction",
            "your images, one folder per class: --data-dir DIR",
        )  # fmt: skip
    archive = spec.archive
    assert archive is not None, "an archive dataset declares its archive"
    from effbench.system.preflight import _archives  # torch-free, as preflight reads it

    missing = _archives().missing_parts(archive, data_dir)
    if not missing:
        status = "present"
    elif len(missing) == len(archive.required):
        status = "missing"
    else:
        status = f"incomplete: lacks {', '.join(missing)}"
    return DatasetStatus(
        name, not missing, status, f"DATA_DIR/{archive.folder}/ (the archive extracted)",
        f"--download on a run, or extract {archive.url.rsplit('/', 1)[-1]} into DATA_DIR",
    )  # fmt: skip


def catalog_status(data_dir: Path) -> list[DatasetStatus]:
    return [dataset_status(spec, data_dir) for spec in CATALOG.values()]


def status_table(rows: list[DatasetStatus]) -> str:
    """dataset | status | on disk | how to get (pure: rows in, text out)."""
    from tabulate import tabulate

    return tabulate(
        [(r.name, r.status, r.layout, r.get) for r in rows],
        headers=["dataset", "status", "on disk", "how to get"],
        tablefmt="simple",
        maxcolwidths=COLUMN_WIDTHS,
    )


def datasets(
    data_dir: Annotated[
        str | None,
        _opt("Folder that holds the extracted datasets. [default: ./data; env EFFBENCH_DATA]", envvar="EFFBENCH_DATA"),
    ] = None,
) -> None:
    """The dataset catalog: names, where each goes on disk, whether it is under --data-dir, how to get it."""
    from effbench.config import RunConfig, check_path

    if data_dir is not None:
        check_path("--data-dir", data_dir)
    root = Path(data_dir) if data_dir is not None else RunConfig.data_dir
    say(f"datasets under --data-dir {root} (DATA_DIR below; docs/datasets.md has the layouts):\n")
    say(status_table(catalog_status(root)))
    say("\nrun one: effbench run --dataset NAME --data-dir DATA_DIR [--download]")
