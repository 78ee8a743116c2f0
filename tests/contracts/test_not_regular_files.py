"""Files that are not files (issue 33, sections 1 and 2): outputs onto devices, FIFOs, links and stdout; dataset
inputs that are FIFOs, devices, links out of --data-dir, or listed outside it.

Outputs (effbench/results.py: output_file): a regular file or a new name is replaced by a rename; a character
device or a FIFO, reached directly or through links, is written through; any other link is refused in one line.
Inputs (effbench/data/images.py: ImageFiles, read_image_bytes): only regular files inside --data-dir, of at most
MAX_IMAGE_BYTES, are read; the rest are skipped and counted with their reason, by every loader.

The devices written to are copies of /dev/null and /dev/full made with mknod in tmp_path (same major and minor):
a regression that replaced the node would replace the copy, never the machine's /dev/full.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from clitools import invoke, only_run
from test_across_runs import make_run
from test_hostile_files_and_links import one_error_line

from effbench import results
from effbench.errors import EffbenchError

ROOT = Path(__file__).resolve().parents[2]


def _device(tmp_path: Path, name: str, major: int, minor: int) -> Path:
    """A character device node like /dev/<name> in tmp_path (root and a mount that allows devices), else skip."""
    path = tmp_path / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
        os.close(os.open(path, os.O_WRONLY))
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot make a device node here ({e})")
    return path


def _is_device(path: Path, major: int, minor: int) -> bool:
    st = os.lstat(path)
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(major, minor)


class _Reader(threading.Thread):
    """Reads a FIFO (or a pipe's read end) to its end in a thread: what a `cat FIFO` beside effbench would get."""

    def __init__(self, path: Path | int) -> None:
        super().__init__(daemon=True)
        self.path, self.data = path, b""

    def run(self) -> None:
        with open(self.path, "rb") as f:
            self.data = f.read()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path / "runs" / "r", [100.0, 100.0, 100.0])


# --- 1. Writing onto something that is not a regular file ------------------------------------------
def test_export_onto_dev_null_writes_through_and_keeps_the_device(tmp_path, capsys, run_dir):
    null = _device(tmp_path, "null", 1, 3)
    code, _, err = invoke(["export", run_dir, "-o", null], capsys)
    assert code == 0, err
    assert _is_device(null, 1, 3), "the device node was replaced"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".null.")], "a temporary file was left"


def test_export_onto_dev_full_is_one_no_space_line_and_keeps_the_device(tmp_path, capsys, run_dir):
    full = _device(tmp_path, "full", 1, 7)
    code, _, err = invoke(["export", run_dir, "-o", full], capsys)
    line = one_error_line(err)
    assert code == 2 and str(full) in line and "no space left" in line and "ENOSPC" in line, line
    assert _is_device(full, 1, 7), "the device node was replaced"


def test_export_into_a_fifo_streams_to_its_reader_and_keeps_the_fifo(tmp_path, capsys, run_dir):
    fifo = tmp_path / "runs.fifo"
    os.mkfifo(fifo)
    reader = _Reader(fifo)
    reader.start()
    code, _, err = invoke(["export", run_dir, "-o", fifo], capsys)
    reader.join(timeout=30)
    assert code == 0, err
    assert reader.data.startswith(b"path,") and str(run_dir).encode() in reader.data
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced"


def test_a_fifo_no_reader_opens_is_one_line_after_a_bounded_wait(tmp_path, capsys, monkeypatch, run_dir):
    fifo = tmp_path / "runs.fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(results, "FIFO_READER_WAIT_S", 0.2)
    code, _, err = invoke(["export", run_dir, "-o", fifo], capsys)
    line = one_error_line(err)
    assert code == 2 and str(fifo) in line and "no reader" in line, line
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_link_to_an_open_descriptor_is_written_through_and_stays_a_link(tmp_path, capsys, run_dir):
    """`-o` a link to /proc/self/fd/N (N: a pipe's write end, as fd 1 is under `| cat`)."""
    r, w = os.pipe()
    link = tmp_path / "out.csv"
    link.symlink_to(f"/proc/self/fd/{w}")
    reader = _Reader(r)
    reader.start()
    try:
        code, _, err = invoke(["export", run_dir, "-o", link], capsys)
    finally:
        os.close(w)
    reader.join(timeout=30)
    assert code == 0, err
    assert reader.data.startswith(b"path,")
    assert link.is_symlink() and os.readlink(link) == f"/proc/self/fd/{w}"


def test_a_link_to_proc_self_fd_1_writes_to_stdout_in_a_real_process(tmp_path, run_dir):
    link = tmp_path / "stdout.csv"
    link.symlink_to("/proc/self/fd/1")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "effbench", "export", str(run_dir), "-o", str(link)],
                          capture_output=True, env=env, cwd=tmp_path, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"path,") and link.is_symlink()


def test_a_link_to_a_file_is_refused_and_neither_is_touched(tmp_path, capsys, run_dir):
    victim = tmp_path / "victim.csv"
    victim.write_text("precious")
    link = tmp_path / "out.csv"
    link.symlink_to(victim)
    code, _, err = invoke(["export", run_dir, "-o", link], capsys)
    line = one_error_line(err)
    assert code == 2 and str(link) in line and "link" in line, line
    assert victim.read_text() == "precious" and link.is_symlink() and os.readlink(link) == str(victim)


def test_dash_is_stdout(tmp_path, capsys, run_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke(["export", run_dir, "-o", "-"], capsys)
    assert code == 0, err
    assert out.startswith("path,") and not (tmp_path / "-").exists()


@pytest.mark.parametrize("kind", ["dangling link", "link to a folder", "folder"])
def test_other_things_at_an_output_path_are_refused_and_left(tmp_path, kind):
    """The helper under every writer: nothing at the path changes, no file is created through a link."""
    target = tmp_path / "out.txt"
    if kind == "dangling link":
        target.symlink_to(tmp_path / "nowhere" / "x.txt")
    elif kind == "link to a folder":
        (tmp_path / "d").mkdir()
        target.symlink_to(tmp_path / "d")
    else:
        target.mkdir()
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(EffbenchError, match=str(target)):
        results.atomic_write_text(target, "x")
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_report_streams_into_a_fifo_and_a_device_planted_in_its_output_folder(tmp_path, capsys, run_dir):
    """The files a command names itself go through the same helper: report.md a FIFO, a chart a device."""
    out = tmp_path / "rendered"
    (out / "plots").mkdir(parents=True)
    null = _device(out / "plots", "time_per_epoch.png", 1, 3)
    fifo = out / "report.md"
    os.mkfifo(fifo)
    reader = _Reader(fifo)
    reader.start()
    code, _, err = invoke(["report", run_dir, "--output", out], capsys)
    reader.join(timeout=30)
    assert code == 0, err
    assert reader.data.startswith(b"#") and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _is_device(null, 1, 3)
    assert (out / "report.txt").is_file() and not (out / "report.txt").is_symlink()


def test_stdout_that_refuses_the_write_is_one_line(tmp_path, run_dir):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with open("/dev/full", "wb") as full:  # opened for writing only: the node itself is never touched
        done = subprocess.run([sys.executable, "-m", "effbench", "export", str(run_dir), "-o", "-"],
                              stdout=full, stderr=subprocess.PIPE, env=env, cwd=tmp_path, timeout=120)  # fmt: skip
    err = done.stderr.decode()
    assert done.returncode == 2 and one_error_line(err).startswith("error: stdout:") and "ENOSPC" in err, err


def test_a_download_never_renames_over_a_fifo_or_a_link_at_its_destination(tmp_path):
    """download.fetch renames its checked file into place: only over a regular file or a new name."""
    from effbench.system import download

    fifo, link = tmp_path / "w.pth", tmp_path / "l.pth"
    os.mkfifo(fifo)
    link.symlink_to(tmp_path / "elsewhere.pth")
    for dest, kind in ((fifo, "a FIFO"), (link, "a link")):
        with pytest.raises(EffbenchError, match=f"{dest} is {kind}"):
            download.fetch("http://127.0.0.1:9/never-fetched", dest, option="--weights")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink() and not (tmp_path / "elsewhere.pth").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.pth", "w.pth"]


# --- 2. Reading something that is not a regular file, or outside the data folder -------------------
IMAGE_RUN = ["run", "--dataset", "imagefolder", "--arch", "resnet18", "--image-size", "16", "--weights", "none",
             "--device", "cpu", "--workers", "0", "--max-steps", "2", "--warmup-steps", "1", "--epochs", "1",
             "--batch-size", "2", "--no-profile", "--quiet"]  # fmt: skip
FIFO_REASON = "a FIFO, not a regular file"
DEVICE_REASON = "a character device, not a regular file"


def _build(root: Path, loader: str, **kw):
    """One rank's bundle of an image folder for `loader` (DALI: its CPU pipeline, one thread)."""
    import torch

    from effbench.config import RunConfig
    from effbench.data.build import build_data

    if loader == "dali":
        pytest.importorskip("nvidia.dali")
    cfg = RunConfig(arch="resnet18", dataset="imagefolder", data_dir=root, image_size=16, batch_size=2,
                    workers=1 if loader == "dali" else 0, loader=loader, device="cpu", **kw)  # fmt: skip
    return build_data(cfg, torch.device("cpu"))


def _epoch(data) -> int:
    """Images in one training and one validation pass."""
    data.set_epoch(0)
    return sum(len(y) for _, y in data.train) + sum(len(y) for _, y in data.val)


@pytest.mark.timeout(120)  # a loader that opened the FIFO would wait for a writer forever: fail, not hang
@pytest.mark.parametrize("loader", ["torchvision", "fast", pytest.param("dali", marks=pytest.mark.dali)])
def test_a_fifo_named_like_an_image_hangs_no_loader_and_is_counted(imagefolder_split_dir, loader):
    fifo = imagefolder_split_dir / "train" / "class_0" / "x.jpg"
    os.mkfifo(fifo)
    val_fifo = imagefolder_split_dir / "val" / "class_1" / "y.png"
    os.mkfifo(val_fifo)
    data = _build(imagefolder_split_dir, loader)
    assert data.train_size == 18 and data.val_size == 6  # the fakedata images, the FIFOs left out when listed
    assert _epoch(data) > 0
    stats = data.stats()
    assert stats["corrupt_images_skipped"] == 2
    assert stats["corrupt_image_reasons"] == {str(fifo): FIFO_REASON, str(val_fifo): FIFO_REASON}


def test_an_image_linked_to_dev_zero_is_refused_when_listed_and_never_read(imagefolder_split_dir):
    from effbench.data import images

    link = imagefolder_split_dir / "train" / "class_2" / "zero.jpg"
    link.symlink_to("/dev/zero")
    data = _build(imagefolder_split_dir, "torchvision")
    assert data.stats()["corrupt_image_reasons"] == {str(link): f"a link to /dev/zero, outside {imagefolder_split_dir}"}
    # the skip reason's re-read and the loaders' read: bounded, refused on the open descriptor
    assert images.skip_reason(str(link)) == DEVICE_REASON
    with pytest.raises(images.NotAnImageFile, match="character device"):
        images.read_image_bytes(str(link))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("loader", ["torchvision", "fast"])
def test_a_file_swapped_for_a_fifo_or_a_device_after_listing_is_skipped_when_read(imagefolder_split_dir, loader):
    """The read checks what it opened (O_NONBLOCK, fstat): the listing's check cannot see a later swap."""
    data = _build(imagefolder_split_dir, loader)
    swapped = [imagefolder_split_dir / "train" / "class_0" / "img_000.jpg", imagefolder_split_dir / "val" / "class_0"]
    swapped[0].unlink()
    os.mkfifo(swapped[0])
    val_file = sorted(p for p in swapped[1].iterdir())[0]
    val_file.unlink()
    val_file.symlink_to("/dev/zero")
    assert _epoch(data) > 0
    assert data.stats()["corrupt_image_reasons"] == {str(swapped[0]): FIFO_REASON, str(val_file): DEVICE_REASON}


def test_an_image_over_the_size_bound_is_skipped_with_its_size(imagefolder_split_dir, monkeypatch):
    from effbench.data import images

    big = sorted((imagefolder_split_dir / "train" / "class_1").iterdir())[0]
    big.write_bytes(big.read_bytes() + bytes(100_000))  # bytes after a JPEG's end: it still decodes
    size = big.stat().st_size
    monkeypatch.setattr(images, "MAX_IMAGE_BYTES", size - 1)
    data = _build(imagefolder_split_dir, "torchvision")
    assert data.stats()["corrupt_image_reasons"] == {
        str(big): f"{size:,} bytes, over the {size - 1:,}-byte limit for an image file"
    }


def test_image_links_are_followed_inside_the_data_dir_and_refused_outside(tmp_path):
    from fakedata import make_imagefolder, write_image

    import numpy as np

    from effbench.data import imagefolder

    root = make_imagefolder(tmp_path / "img", classes=2, per_class=3, size=16, split=True, val_per_class=1)
    (root / "store").mkdir()
    write_image(root / "store" / "kept.png", 16, (10, 200, 30), np.random.default_rng(0))
    write_image(tmp_path / "outside.png", 16, (200, 10, 30), np.random.default_rng(1))
    inside = root / "train" / "class_0" / "in.png"
    inside.symlink_to(root / "store" / "kept.png")
    out = root / "train" / "class_1" / "out.png"
    out.symlink_to(tmp_path / "outside.png")
    src = imagefolder.load(root, val_fraction=None)
    assert str(inside) in src.train.paths and str(out) not in src.train.paths
    assert src.refused == {str(out): f"a link to {tmp_path / 'outside.png'}, outside {root}"}


def _food(tmp_path: Path) -> tuple[Path, Path]:
    """A Food-101 copy under tmp_path/data and a real JPEG beside it at tmp_path/outside/secret.jpg."""
    from fakedata import make_food101, write_image

    import numpy as np

    root = make_food101(tmp_path / "data", classes=2, per_class=4, size=32)
    (tmp_path / "outside").mkdir()
    write_image(tmp_path / "outside" / "secret.jpg", 32, (1, 2, 3), np.random.default_rng(0))
    return root, tmp_path / "outside" / "secret.jpg"


def test_food101_ids_that_leave_images_are_refused_and_counted(tmp_path):
    import json

    from effbench.data import food101

    root, secret = _food(tmp_path)
    meta = root / "food-101" / "meta"
    listing = json.loads((meta / "train.json").read_text())
    listed = sum(len(ids) for ids in listing.values())
    first = sorted(listing)[0]
    images = root / "food-101" / "images"
    (images / first / "linked.jpg").symlink_to(secret)
    listing[first] += ["../../../outside/secret", str(secret.with_suffix("")), f"{first}/linked"]
    (meta / "train.json").write_text(json.dumps(listing))
    src = food101.load(root, download=False)
    assert not any("secret" in p or "linked" in p for p in src.train.paths)
    assert len(src.train) == listed  # the listing's own images
    refused = src.refused
    assert set(refused) == {
        str(images / "../../../outside/secret.jpg"),
        str(secret),
        str(images / first / "linked.jpg"),
    }
    assert all("outside" in why for why in refused.values()), refused


def test_a_food101_listing_with_no_readable_image_is_one_line(tmp_path, capsys):
    import json

    root, secret = _food(tmp_path)
    meta = root / "food-101" / "meta"
    listing = {name: [str(secret.with_suffix(""))] for name in json.loads((meta / "train.json").read_text())}
    (meta / "train.json").write_text(json.dumps(listing))
    code, _, err = invoke([*IMAGE_RUN[:2], "food101", *IMAGE_RUN[3:], "--data-dir", root, "--output", tmp_path / "o"],
                          capsys)  # fmt: skip
    line = one_error_line(err)
    assert code == 2 and "--data-dir" in line and "none of the 2 images" in line and str(secret) in line, line


@pytest.mark.timeout(120)
def test_a_cifar_batch_that_is_a_fifo_is_one_line_at_once(tmp_path, capsys):
    from fakedata import make_cifar

    root = make_cifar(tmp_path / "data", "cifar10", n_train=10, n_test=10)
    batch = root / "cifar-10-batches-py" / "data_batch_1"
    batch.unlink()
    os.mkfifo(batch)
    code, _, err = invoke([*IMAGE_RUN[:2], "cifar10", *IMAGE_RUN[3:], "--data-dir", root, "--output", tmp_path / "o"],
                          capsys)  # fmt: skip
    line = one_error_line(err)
    assert code == 2 and str(batch) in line and "FIFO" in line, line


@pytest.mark.timeout(240)
def test_a_run_over_a_folder_with_a_fifo_and_a_dev_zero_link_finishes_ok_with_both_counted(tmp_path, capsys):
    from fakedata import make_imagefolder

    root = make_imagefolder(tmp_path / "img", classes=2, per_class=4, size=16, split=True, val_per_class=1)
    os.mkfifo(root / "train" / "class_0" / "x.jpg")
    (root / "train" / "class_1" / "z.jpg").symlink_to("/dev/zero")
    code, _, err = invoke([*IMAGE_RUN, "--data-dir", root, "--output", tmp_path / "out"], capsys)
    assert code == 0, err
    record = results.read_results(only_run(tmp_path / "out"))
    assert record["status"] == "ok" and record["data"]["corrupt_images_skipped"] == 2
    assert record["data"]["files_refused"] == 2 and record["data"]["train_size"] == 8
    assert sorted(record["data"]["corrupt_image_reasons"].values()) == [
        FIFO_REASON,
        f"a link to /dev/zero, outside {root}",
    ]


def test_the_skipped_share_counts_the_refused_files_among_the_listed_ones():
    """5 listed files refused beside 5 that ran: half the dataset skipped, not 5 of 5."""
    from effbench.report.tables import skipped_images_warning

    data = {"corrupt_images_skipped": 5, "files_refused": 5, "train_size": 4, "val_size": 1}
    line = skipped_images_warning(results.record_of({"schema_version": 1, "status": "ok", "data": data}))
    assert line is not None and "5 of 10 images (50%)" in line, line
