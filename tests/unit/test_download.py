"""--download against a loopback HTTP mirror (EFFBENCH_MIRROR): verify, extract safely, clean up."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import tarfile
from pathlib import Path

import pytest
import torch

import fakedata
from effbench.config import RunConfig
from effbench.data.build import build_data, prepare_data
from effbench.data import archives
from effbench.errors import EffbenchError

ARCHIVE = "cifar-10-python.tar.gz"


def cfg(data_dir: Path, **kw) -> RunConfig:
    return RunConfig(
        arch="resnet18", dataset="cifar10", data_dir=data_dir, download=True, batch_size=4, workers=0, **kw
    )


def serve_cifar10(http_server, tmp_path: Path, monkeypatch, *, md5: str | None = None) -> Path:
    """A tiny CIFAR-10 archive on the mirror, with the table's md5 patched to match it (or to `md5`)."""
    src = fakedata.make_cifar(tmp_path / "src", "cifar10", n_train=20, n_test=8) / "cifar-10-batches-py"
    archive = fakedata.make_tar_gz(src, http_server.root / ARCHIVE)
    real = hashlib.md5(archive.read_bytes()).hexdigest()
    patch_md5(monkeypatch, md5 or real)
    monkeypatch.setenv("EFFBENCH_MIRROR", http_server.url)
    return archive


def patch_md5(monkeypatch, md5: str) -> None:
    monkeypatch.setitem(archives.ARCHIVES, "cifar10", dataclasses.replace(archives.ARCHIVES["cifar10"], md5=md5))


def test_download_from_the_mirror_ends_with_a_loadable_dataset(http_server, tmp_path, monkeypatch):
    served = serve_cifar10(http_server, tmp_path, monkeypatch)
    data_dir = tmp_path / "data"
    data = build_data(cfg(data_dir), torch.device("cpu"))
    assert data.train_size == 20 and data.val_size == 8 and len(list(data.train)) == 5
    dl = data.info["download"]
    assert dl["downloaded"] is True and dl["url"] == f"{http_server.url}/{ARCHIVE}"
    assert [p.name for p in data_dir.iterdir()] == ["cifar-10-batches-py"]  # archive and temp folders gone

    served.unlink()  # a second run must not fetch again (nor re-hash: the md5 no longer matters)
    patch_md5(monkeypatch, "0" * 32)
    again = build_data(cfg(data_dir), torch.device("cpu"))
    assert again.info["download"] == {"downloaded": False} and again.train_size == 20


def test_wrong_checksum_leaves_nothing_behind(http_server, tmp_path, monkeypatch):
    serve_cifar10(http_server, tmp_path, monkeypatch, md5="0" * 32)
    data_dir = tmp_path / "data"
    with pytest.raises(EffbenchError) as info:
        build_data(cfg(data_dir), torch.device("cpu"))
    assert info.value.option == "--download" and "md5" in info.value.message
    assert list(data_dir.iterdir()) == []


def test_unreachable_mirror_is_one_line_naming_download(tmp_path, monkeypatch, http_server):
    monkeypatch.setenv("EFFBENCH_MIRROR", http_server.url + "/nothing-here")
    with pytest.raises(EffbenchError) as info:
        build_data(cfg(tmp_path / "data"), torch.device("cpu"))
    assert info.value.option == "--download" and "could not download" in info.value.message
    assert not (tmp_path / "data" / "cifar-10-batches-py").exists()


def test_incomplete_copy_is_fetched_again_and_replaced(http_server, tmp_path, monkeypatch):
    serve_cifar10(http_server, tmp_path, monkeypatch)
    data_dir = fakedata.make_cifar(tmp_path / "data", "cifar10", n_train=10, n_test=4)
    (data_dir / "cifar-10-batches-py" / "test_batch").unlink()
    data = build_data(cfg(data_dir), torch.device("cpu"))
    assert data.info["download"]["downloaded"] is True and data.train_size == 20  # the served copy
    assert [p.name for p in data_dir.iterdir()] == ["cifar-10-batches-py"]


def test_prepare_data_downloads_once_for_all_ranks(http_server, tmp_path, monkeypatch):
    serve_cifar10(http_server, tmp_path, monkeypatch)
    assert prepare_data(cfg(tmp_path / "data"))["downloaded"] is True
    assert prepare_data(cfg(tmp_path / "data")) == {"downloaded": False}
    assert prepare_data(RunConfig(dataset="synthetic")) == {"downloaded": False}


def _tar_with(members: dict[str, bytes], path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_archive_escaping_its_folder_is_refused(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    archive = _tar_with({"cifar-10-batches-py/x": b"1", "../../escaped": b"pwned"}, tmp_path / "evil.tar.gz")
    with pytest.raises(EffbenchError) as info:
        archives.extract(archive, data_dir, "cifar-10-batches-py")
    assert info.value.option == "--download" and "could not extract" in info.value.message
    assert not (tmp_path / "escaped").exists() and not (tmp_path.parent / "escaped").exists()
    assert list(data_dir.iterdir()) == []


def test_archive_without_the_dataset_folder_is_refused(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    archive = _tar_with({"something-else/x": b"1"}, tmp_path / "other.tar.gz")
    with pytest.raises(EffbenchError, match="holds no cifar-10-batches-py/"):
        archives.extract(archive, data_dir, "cifar-10-batches-py")
    assert list(data_dir.iterdir()) == []


def test_truncated_archive_is_refused(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    src = fakedata.make_cifar(tmp_path / "src", "cifar10", n_train=10, n_test=4) / "cifar-10-batches-py"
    archive = fakedata.make_tar_gz(src, tmp_path / "a.tar.gz")
    archive.write_bytes(archive.read_bytes()[:-2000])
    with pytest.raises(EffbenchError, match="could not extract"):
        archives.extract(archive, data_dir, "cifar-10-batches-py")
    assert list(data_dir.iterdir()) == []


def test_official_table_matches_the_published_sources():
    t = archives.ARCHIVES
    assert t["cifar10"].url == "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    assert t["cifar10"].md5 == "c58f30108f718f92721af3b95e74349a"
    assert t["cifar100"].md5 == "eb9058c3a382ffc7106e4002c42a8d85"
    assert t["food101"].url == "http://data.vision.ee.ethz.ch/cvl/food-101.tar.gz"
    assert t["food101"].md5 == "85eeb15f3717b99a5da872d97d918f87"


@pytest.mark.parametrize("mirror", ["notaurl", "mirror.local/datasets", "gopher://mirror.local", "http://"])
def test_a_mirror_that_is_not_a_url_is_one_error_naming_the_variable(tmp_path, monkeypatch, capsys, mirror):
    # EFFBENCH_MIRROR=notaurl said "notaurl/cifar-10-python.tar.gz cannot be reached (no network?)", and
    # EFFBENCH_WEIGHTS_MIRROR the same after a DNS lookup of nothing: the variable's value was the fault
    from clitools import invoke

    from effbench.models.weights import MIRROR_ENV
    from effbench.system.download import mirrored_url

    monkeypatch.setenv("EFFBENCH_MIRROR", mirror)
    code, out, err = invoke(["run", "--arch", "resnet18", "--dataset", "cifar10", "--data-dir", tmp_path / "data",
                             "--download", "--device", "cpu", "--output", tmp_path / "out"], capsys)  # fmt: skip
    lines = err.strip().splitlines()
    assert (
        code == 2 and len(lines) == 1 and lines[0].startswith("error: EFFBENCH_MIRROR:") and "is not a base URL" in err
    )
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    monkeypatch.setenv(MIRROR_ENV, mirror)
    with pytest.raises(EffbenchError) as info:
        mirrored_url("https://download.pytorch.org/models/resnet18-f37072fd.pth", MIRROR_ENV)
    assert info.value.option == MIRROR_ENV and "\n" not in str(info.value)
    for good in ("http://127.0.0.1:8000", "https://mirror.local/datasets/", "file:///srv/mirror"):
        monkeypatch.setenv(MIRROR_ENV, good)
        assert mirrored_url("https://x.org/a/b.pth", MIRROR_ENV) == good.rstrip("/") + "/b.pth"
