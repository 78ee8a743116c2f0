"""The dataset catalog is the one place that knows datasets: a new entry plus its loader function is enough for
config validation, every --help, preflight and loading (issue 14: adding a dataset touches 2 package files)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from effbench import datasets
from effbench.config import RunConfig
from effbench.data.cifar import ArrayExamples
from effbench.data.source import Source
from effbench.errors import EffbenchError

REPO = Path(__file__).resolve().parents[2]
TINY = datasets.DatasetSpec("tinyset", "Tiny set", "folder", "test_catalog:load_tiny", aliases=("tiny",), num_classes=3)


def load_tiny(cfg: RunConfig) -> Source:
    """12 training and 6 validation random 16x16 images of 3 classes."""
    rng = np.random.default_rng(0)
    make = lambda n: ArrayExamples(rng.integers(0, 255, (n, 16, 16, 3), dtype=np.uint8), np.arange(n) % 3)  # noqa: E731
    return Source("tinyset", 3, Path(cfg.data_dir), make(12), make(6), "official test split")


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setitem(datasets.CATALOG, TINY.name, TINY)
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.png").write_bytes(b"")
    return tmp_path


def test_a_new_entry_is_a_valid_dataset_with_its_alias(tiny):
    assert RunConfig(dataset="tiny", data_dir=tiny).dataset == "tinyset"
    with pytest.raises(EffbenchError, match="tinyset"):  # listed among the choices of a typo
        RunConfig(dataset="tinyst")


def test_the_build_path_loads_a_new_entry_through_its_loader(tiny):
    import torch

    from effbench.data.build import build_data, load_source

    cfg = RunConfig(dataset="tinyset", data_dir=tiny, batch_size=4, image_size=16, loader="torchvision", workers=0)
    assert load_source(cfg).name == "tinyset"
    data = build_data(cfg, torch.device("cpu"))
    images, labels = next(iter(data.train))
    assert (data.name, data.num_classes, tuple(images.shape), data.steps_per_epoch) == ("tinyset", 3, (4, 3, 16, 16), 3)


def test_preflight_reads_the_entry_storage(tiny):
    from effbench.system.preflight import Probes, check_dataset

    (finding,) = check_dataset(RunConfig(dataset="tinyset", data_dir=tiny), {}, Probes())
    assert finding.level == "ok" and str(tiny) in finding.message
    (missing,) = check_dataset(RunConfig(dataset="tinyset", data_dir=tiny / "nope"), {}, Probes())
    assert missing.level == "error" and missing.option == "--data-dir"


@pytest.mark.parametrize("command", ["run", "sweep", "doctor"])
def test_every_help_lists_a_new_entry(command):
    # A fresh interpreter: help texts are built when the CLI modules are imported, after the entry is added.
    code = textwrap.dedent(f"""
        import sys
        from effbench import datasets
        datasets.CATALOG["tinyset"] = datasets.DatasetSpec("tinyset", "Tiny", "folder", None, aliases=("tiny",))
        from effbench.cli import main
        sys.argv = ["effbench", "{command}", "--help"]
        main()
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"COLUMNS": "200", "PATH": ""}, cwd=REPO
    )
    assert "tinyset (tiny)" in " ".join(out.stdout.split()), out.stdout + out.stderr  # click wraps the text


def test_every_shipped_entry_is_consistent():
    for spec in datasets.CATALOG.values():
        assert (spec.archive is not None) == (spec.storage == "archive"), spec.name
        assert (spec.loader is None) == (spec.storage == "generated"), spec.name
        if spec.loader:
            module, _, function = spec.loader.partition(":")
            import importlib

            assert callable(getattr(importlib.import_module(module), function)), spec.loader
