"""The fast loader's image decoding (data/fast_images.py, docs/decoding.md), checked against what is not itself:
PIL's pixels (the torchvision loader's, and what torchvision.io.decode_jpeg gave before TorchCodec), TorchCodec
0.17's own C++ sources for the CUDA path, nvjpeg.h's status codes for its errors.

- CPU decode: TorchCodec for JPEG, PIL for the rest, equal to PIL bit for bit, EXIF-oriented JPEGs included.
- --gpu-decode: the batch goes through TorchCodec's decode_jpegs_cuda, which runs on and synchronizes the
  current stream (item 13 of issue 27); out of memory is the run's OOM, never corrupt files; a failed batch is
  decoded again on the CPU, counting only files that fail there; a training batch is never skipped (item 14).
"""

from __future__ import annotations

import functools
import io
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from effbench.data import fast_images
from effbench.data.fast_images import decode_cpu, decode_on_device, keep_stored_orientation
from effbench.errors import EffbenchError
from effbench.run import faults

TORCHCODEC_CORE = Path(__import__("torchcodec").__file__).parent / "_core"


def _noise(mode: str, w: int, h: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 255, w * h * 3).reshape(h, w, 3)
    rgb = ((rng.integers(0, 256, (h, w, 3)) + ramp) / 2).astype(np.uint8)  # texture on a gradient
    im = Image.fromarray(rgb, "RGB")
    return im if mode == "RGB" else im.convert(mode)


def _encode(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _exif(orientation: int) -> Image.Exif:
    ex = Image.Exif()
    ex[0x0112] = orientation
    return ex


def _icc_with_app1_bytes() -> bytes:
    # an APP2 payload holding 0xFF 0xE1: not a marker, so the walk must step over it by the segment length
    return b"\x00" * 20 + b"\xff\xe1\x00\x10Exif\x00\x00" + b"\x00" * 20


@functools.cache
def _jpeg_cases() -> dict[str, bytes]:
    cases = {}
    for sub in (0, 1, 2):  # 4:4:4, 4:2:2, 4:2:0
        for prog in (False, True):
            cases[f"rgb-sub{sub}-prog{int(prog)}"] = _encode(
                _noise("RGB", 37, 23), "JPEG", quality=75, subsampling=sub, progressive=prog
            )
    cases["rgb-q100"] = _encode(_noise("RGB", 16, 16), "JPEG", quality=100)
    cases["gray"] = _encode(_noise("L", 31, 17), "JPEG", quality=90)
    cases["gray-prog"] = _encode(_noise("L", 31, 17), "JPEG", quality=90, progressive=True)
    cases["cmyk"] = _encode(_noise("CMYK", 29, 19), "JPEG", quality=90)  # Adobe APP14, inverted CMYK
    cases["cmyk-prog"] = _encode(_noise("CMYK", 29, 19), "JPEG", quality=90, progressive=True)
    cases["restart-markers"] = _encode(_noise("RGB", 40, 24), "JPEG", restart_marker_blocks=1)
    cases["optimized-huffman"] = _encode(_noise("RGB", 40, 24), "JPEG", optimize=True)
    cases["rgb-no-ycc"] = _encode(_noise("RGB", 40, 24), "JPEG", keep_rgb=True)
    cases["1x1"] = _encode(_noise("RGB", 1, 1), "JPEG")
    for o in (3, 6, 8):  # rotated by EXIF: PIL's convert("RGB") keeps the stored orientation
        cases[f"exif-orientation-{o}"] = _encode(_noise("RGB", 40, 24), "JPEG", exif=_exif(o))
    cases["exif-6-prog"] = _encode(_noise("RGB", 40, 24), "JPEG", exif=_exif(6), progressive=True)
    cases["exif-6-gray"] = _encode(_noise("L", 40, 24), "JPEG", exif=_exif(6))
    cases["icc-payload-with-ffe1"] = _encode(_noise("RGB", 40, 24), "JPEG", icc_profile=_icc_with_app1_bytes())
    return cases


@functools.cache
def _other_cases() -> dict[str, bytes]:
    base = Image.fromarray(np.random.default_rng(1).integers(0, 256, (13, 19, 4), dtype=np.uint8), "RGBA")
    cases = {f"png-{m}": _encode(base.convert(m), "PNG") for m in ("RGB", "RGBA", "L", "LA", "1")}
    cases["png-P"] = _encode(base.convert("RGB").convert("P"), "PNG")
    cases["png-16bit"] = _encode(Image.fromarray(np.arange(13 * 19, dtype=np.uint16).reshape(13, 19) * 250), "PNG")
    cases["png-exif-6"] = _encode(base.convert("RGB"), "PNG", exif=_exif(6))
    cases["gif"] = _encode(base.convert("RGB"), "GIF")
    frames = [base.convert("RGB"), _noise("RGB", 19, 13, seed=2)]
    cases["gif-animated"] = _encode(frames[0], "GIF", save_all=True, append_images=frames[1:])
    cases["webp-lossy"] = _encode(base.convert("RGB"), "WEBP", quality=80)
    cases["webp-alpha"] = _encode(base, "WEBP", lossless=True)
    cases["webp-exif-6"] = _encode(base.convert("RGB"), "WEBP", lossless=True, exif=_exif(6))
    cases["bmp"] = _encode(base.convert("RGB"), "BMP")
    return cases


def _tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _pil_rgb(data: bytes) -> torch.Tensor:
    with Image.open(io.BytesIO(data)) as im:
        return torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1)


# --------------------------------------------------------------------------------------------------
# Item 15: the CPU images are PIL's, bit for bit
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(_jpeg_cases()))
def test_cpu_jpeg_decode_is_pils_bit_for_bit_and_torchvisions(name):
    data = _jpeg_cases()[name]
    got = decode_cpu(_tensor(data))
    assert got.dtype == torch.uint8 and got.ndim == 3 and got.shape[0] == 3
    assert torch.equal(got, _pil_rgb(data))
    # what the fast loader decoded before TorchCodec (torchvision 0.29 deprecates it; silenced here alone)
    from torchvision.io import ImageReadMode, decode_jpeg

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert torch.equal(got, decode_jpeg(_tensor(data), mode=ImageReadMode.RGB))


@pytest.mark.parametrize("name", sorted(_other_cases()))
def test_cpu_decode_of_other_formats_is_pils_bit_for_bit(name):
    data = _other_cases()[name]
    assert torch.equal(decode_cpu(_tensor(data)), _pil_rgb(data))


def test_torchcodec_alone_would_turn_exif_oriented_jpegs():
    # why keep_stored_orientation exists: without it the image comes out transposed (orientation 6)
    from torchcodec.decoders import decode_jpeg

    data = _jpeg_cases()["exif-orientation-6"]
    assert tuple(decode_jpeg(_tensor(data)).shape) == (3, 40, 24)  # turned
    assert tuple(_pil_rgb(data).shape) == (3, 24, 40)  # stored
    assert fast_images.app1_offsets(data) and not fast_images.app1_offsets(
        keep_stored_orientation(_tensor(data)).numpy().tobytes()
    )


def test_the_marker_walk_finds_app1_only_where_a_marker_is():
    plain = _jpeg_cases()["icc-payload-with-ffe1"]
    assert b"\xff\xe1" in plain and fast_images.app1_offsets(plain) == []  # inside APP2's payload: no marker
    assert keep_stored_orientation(t := _tensor(plain)) is t  # untouched, not copied
    oriented = _jpeg_cases()["exif-orientation-6"]
    (at,) = fast_images.app1_offsets(oriented)
    assert oriented[at - 1 : at + 1] == b"\xff\xe1" and oriented[at + 3 : at + 9] == b"Exif\x00\x00"


def test_read_square_and_read_encoded_keep_the_stored_orientation(tmp_path):
    data = _jpeg_cases()["exif-orientation-6"]
    path = tmp_path / "a.jpg"
    path.write_bytes(data)
    assert tuple(fast_images.read_square(str(path), 16).shape) == (3, 16, 16)
    encoded = fast_images.read_encoded(str(path), 16)
    assert encoded is not None and encoded.ndim == 1 and fast_images.app1_offsets(encoded.numpy().tobytes()) == []
    assert torch.equal(decode_cpu(encoded), _pil_rgb(data))


def test_the_cpu_decode_path_raises_no_torchvision_deprecation_warning(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(_jpeg_cases()["rgb-sub2-prog0"])
    png = tmp_path / "b.png"
    png.write_bytes(_other_cases()["png-RGB"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert fast_images.read_square(str(path), 16) is not None
        assert fast_images.read_square(str(png), 16) is not None
        decode_on_device([_tensor(_jpeg_cases()["gray"])], 8, torch.device("cpu"))


def test_truncated_and_garbage_jpegs_are_unreadable_as_for_pil(tmp_path):
    data = _jpeg_cases()["rgb-sub2-prog0"]
    for i, bad in enumerate((data[: len(data) // 2], b"\xff\xd8\xff" + b"\x00" * 40)):
        path = tmp_path / f"{i}.jpg"
        path.write_bytes(bad)
        with pytest.raises(OSError):  # PIL refuses both too (UnidentifiedImageError is an OSError)
            _pil_rgb(bad)
        assert fast_images.read_square(str(path), 16) is None


# --------------------------------------------------------------------------------------------------
# Item 13: --gpu-decode goes through the call that orders its work with the current stream
# --------------------------------------------------------------------------------------------------
def _source(name: str) -> str:
    path = TORCHCODEC_CORE / name
    if not path.exists():
        pytest.skip(f"torchcodec ships no {name} here")
    return path.read_text()


def _function_body(src: str, signature: str) -> str:
    start = src.index(signature)
    body_start = src.index("{", start)
    depth, i = 0, body_start
    while True:
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        if depth == 0:
            return src[body_start : i + 1]
        i += 1


def test_torchcodecs_cuda_decode_runs_on_and_synchronizes_the_current_stream():
    # The assumption the fake below encodes, read in the pinned torchcodec's own source: decode_jpegs_cuda (the
    # op `torchcodec_ns::decode_jpegs_cuda`, image_custom_ops.cpp) decodes on the caller's current stream and
    # host-synchronizes it before returning; the hardware engine, which ignores the stream, starts only after a
    # synchronize too. A torchcodec that drops either makes this fail before a GPU run could be wrong.
    assert 'm.impl("decode_jpegs_cuda", TORCH_BOX(&decode_jpegs_cuda))' in _source("image_custom_ops.cpp")
    src = _source("DecodeJpegCuda.cpp")
    entry = _function_body(src, "std::vector<torch::stable::Tensor> decode_jpegs_cuda(\n    std::vector")
    assert re.search(r"cudaStream_t current_stream = get_current_cuda_stream\(device_index\);", entry)
    assert re.search(r"decoder->decode_images\(\s*contig_images,[^;]*current_stream\)", entry)
    decode_images = _function_body(src, "CUDAJpegDecoder::decode_images(")
    assert re.search(
        r"cudaStreamSynchronize\(stream\);[^}]*STD_TORCH_CHECK[^}]*\n\s*return output_tensors;", decode_images
    )
    hardware = _function_body(src, "void CUDAJpegDecoder::decode_batched_hardware(")
    presync = re.search(r"= cudaStreamSynchronize\(stream\);", hardware)
    decode_call = re.search(r"status = nvjpegDecodeBatched\(", hardware)
    assert presync and decode_call and presync.start() < decode_call.start()
    assert "get_current_cuda_stream" in _source("CUDACommon.h")  # aoti_torch_get_current_cuda_stream


def test_gpu_decode_sends_the_whole_batch_through_torchcodecs_synchronizing_op(monkeypatch):
    from torchcodec.decoders import _image_decoders

    calls = []

    def fake_decode_jpegs_cuda(tensors, mode, device):  # the op's signature (image_custom_ops.cpp)
        calls.append((len(tensors), mode, torch.device(device)))
        return [decode_cpu(t) for t in tensors]  # the images nvJPEG would make, made on the CPU

    monkeypatch.setattr(_image_decoders, "_decode_jpegs_cuda", fake_decode_jpegs_cuda)
    cases = _jpeg_cases()
    items = [_tensor(cases["rgb-sub2-prog0"]), _tensor(cases["gray"]), _tensor(cases["cmyk"])]
    batch, bad = decode_on_device(items, 8, torch.device("cuda", 0))
    assert calls == [(3, 3, torch.device("cuda", 0))]  # one batched call, mode RGB (ImageReadMode.RGB.value)
    assert bad == [] and tuple(batch.shape) == (3, 3, 8, 8)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_decode_after_queued_work_equals_a_decode_on_an_idle_gpu():
    # Work still queued on the current stream writes the memory the decode's outputs reuse: torchvision's
    # private-stream decoder could then return images overwritten afterwards (vision PR #9606).
    device = torch.device("cuda", torch.cuda.current_device())
    items = [_tensor(_encode(_noise("RGB", 512, 384, seed=s), "JPEG", quality=90)) for s in range(16)]
    torch.cuda.synchronize()
    reference, _ = decode_on_device(items, 256, device)
    torch.cuda.synchronize()
    for _ in range(3):
        a = torch.randn(4096, 4096, device=device)
        scratch = torch.empty(64 << 20, dtype=torch.uint8, device=device)
        for _ in range(20):  # long enough to still run when the decode starts
            a = a @ a / 64
        scratch.fill_(255)
        del scratch  # back to the caching allocator, reusable by the decode's outputs at once
        batch, bad = decode_on_device(items, 256, device)
        batch = batch.clone()  # on the same stream, as validation's kernels read it
        torch.cuda.synchronize()
        assert bad == [] and torch.equal(batch, reference)


# --------------------------------------------------------------------------------------------------
# Item 14: out of memory is the run's OOM; a failed batch is decoded again on the CPU; no silent skip
# --------------------------------------------------------------------------------------------------
# Messages as they arrive in Python: TorchCodec's STD_TORCH_CHECK prefixes "<function>, <file>:<line>, "
# (torch/headeronly/util/Exception.h); its stable-ABI ops re-throw torch's CUDA OOM with "(originally from ...)"
# (torch/csrc/stable/macros.h, throw_exception); torchvision 0.29's decoder wrapped it its own way.
NVJPEG_BATCH_OOM = (
    "decode_batched_hardware, /__w/torchcodec/torchcodec/src/torchcodec/_core/DecodeJpegCuda.cpp:412, "
    "Failed to decode batch: 5"
)
TORCH_OOM_VIA_TORCHCODEC = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is "
    'free. (originally from torch_call_dispatcher("aten::empty", "memory_format", stack.data(), TORCH_ABI_VERSION) '
    "API call failed at /pytorch/torch/csrc/stable/ops.h, line 631)"
)
TORCH_OOM_VIA_TORCHVISION = "Error while decoding JPEG images: CUDA out of memory. Tried to allocate 512.00 MiB"


@pytest.mark.parametrize("message", [NVJPEG_BATCH_OOM, TORCH_OOM_VIA_TORCHCODEC, TORCH_OOM_VIA_TORCHVISION])
def test_gpu_decode_out_of_memory_is_the_runs_oom_not_corrupt_files(monkeypatch, message):
    import torchcodec.decoders

    from effbench.run.record import outcome_of

    def oom(*_a, **_k):
        raise RuntimeError(message)

    def no_cpu_retry(_data):
        raise AssertionError("out of memory must not send the batch to the CPU decoder")

    monkeypatch.setattr(torchcodec.decoders, "decode_jpeg", oom)
    monkeypatch.setattr(fast_images, "decode_cpu", no_cpu_retry)
    items = [_tensor(_jpeg_cases()["gray"]), _tensor(_jpeg_cases()["rgb-q100"])]
    with pytest.raises(torch.OutOfMemoryError) as info:
        decode_on_device(items, 8, torch.device("cpu"))
    assert "\n" not in str(info.value) and str(info.value).startswith("--gpu-decode: decoding 2 JPEGs")
    assert "lower --batch-size" in str(info.value) and info.value.__cause__ is not None
    assert outcome_of(info.value, received=[], phase="epochs").status == "oom"


def test_nvjpeg_allocator_failure_of_every_checked_call_is_out_of_memory():
    # every nvJPEG status check in the pinned torchcodec's source, with status 5 (NVJPEG_STATUS_ALLOCATOR_FAILURE
    # in nvjpeg.h) and 3 (NVJPEG_STATUS_BAD_JPEG: the file's fault)
    src = _source("DecodeJpegCuda.cpp")
    checks = re.findall(r'status == NVJPEG_STATUS_SUCCESS,\s*"([^"]+)",\s*status\)', src)
    assert len(checks) >= 8 and "Failed to decode batch: " in checks and "nvjpegDecode failed: " in checks
    for text in checks:
        assert faults.is_out_of_memory(RuntimeError(f"f, DecodeJpegCuda.cpp:1, {text}5")), text
        assert not faults.is_out_of_memory(RuntimeError(f"f, DecodeJpegCuda.cpp:1, {text}3")), text
    assert not faults.is_out_of_memory(RuntimeError("f, x.cpp:1, Failed to synchronize CUDA stream: 5"))
    assert not faults.is_out_of_memory(RuntimeError("Failed to decode batch: 50"))


def test_a_failed_batch_is_decoded_again_on_the_cpu_and_only_really_corrupt_files_count(monkeypatch):
    import torchcodec.decoders

    cpu_decode_jpeg = torchcodec.decoders.decode_jpeg

    def nvjpeg_refuses(source, **kw):  # one file nvJPEG cannot take fails the whole batched call
        if isinstance(source, list):
            raise RuntimeError("decode_software, DecodeJpegCuda.cpp:470, nvjpegDecode failed: 4")
        return cpu_decode_jpeg(source, **kw)  # the CPU decoder, one image

    monkeypatch.setattr(torchcodec.decoders, "decode_jpeg", nvjpeg_refuses)
    cases = _jpeg_cases()
    corrupt = _tensor(cases["rgb-sub2-prog0"][:300])
    items = [_tensor(cases["cmyk"]), corrupt, _tensor(cases["gray"])]
    batch, bad = decode_on_device(items, 8, torch.device("cpu"))
    assert bad == [1] and tuple(batch.shape) == (2, 3, 8, 8)
    assert torch.equal(batch[0], fast_images.square(_pil_rgb(cases["cmyk"]), 8))


class _Batches:
    """A DataLoader's place: yields the given collated batches."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def _loader(batches, *, train: bool, encoded: bool):
    from effbench.data.loaders import SkipLog

    log = SkipLog()
    loader = fast_images.DeviceAugmentLoader(
        _Batches(batches), log, torch.device("cpu"), lambda x, g: x.float(), torch.Generator(),
        encoded=encoded, side=8, keep_full=train, batch_size=2,
    )  # fmt: skip
    return loader, log


@pytest.mark.parametrize("encoded", [True, False])
def test_a_training_batch_with_no_decodable_image_stops_the_run_in_one_line(encoded):
    bad = [_tensor(b"\xff\xd8\xff" + b"\x00" * 40), _tensor(b"\xff\xd8\xff" + b"\x01" * 40)]
    paths = ("a.jpg", "b.jpg")
    batch = (bad, torch.tensor([0, 1]), (), paths) if encoded else (None, None, paths)  # _WithPaths / collate
    train, _ = _loader([batch], train=True, encoded=encoded)
    with pytest.raises(EffbenchError) as info:
        list(train)
    assert info.value.option == "--data-dir" and "a.jpg, b.jpg" in info.value.message
    val, log = _loader([batch], train=False, encoded=encoded)
    assert list(val) == [] and log.stats()["corrupt_images_skipped"] == 2  # validation leaves them out


def test_a_training_batch_with_one_corrupt_image_stays_full():
    good = _tensor(_jpeg_cases()["gray"])
    batch = ([good, _tensor(b"\xff\xd8\xff" + b"\x00" * 40)], torch.tensor([3, 4]), (), ("a.jpg", "b.jpg"))
    train, log = _loader([batch], train=True, encoded=True)
    ((x, y),) = list(train)
    assert (
        tuple(x.shape) == (2, 3, 8, 8) and y.tolist() == [3, 3] and log.stats()["corrupt_image_examples"] == ["b.jpg"]
    )


def test_a_torchcodec_that_cannot_load_stops_the_run_and_is_never_counted_as_corrupt_files(monkeypatch, tmp_path):
    import sys

    from effbench.data.fast_images import build_loaders
    from effbench.data.images import FileExamples
    from effbench.recipes import resolve
    from effbench.data.loaders import LoaderOptions

    path = tmp_path / "a.jpg"
    path.write_bytes(_jpeg_cases()["gray"])
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", None)  # `import` raises ImportError, as a failed load
    with pytest.raises(EffbenchError) as info:
        fast_images.read_square(str(path), 8)  # in a worker: an error, not None (a "corrupt" file)
    assert info.value.option == "--loader" and "--loader torchvision" in info.value.message
    examples = FileExamples((str(path),), np.array([0]))
    with pytest.raises(EffbenchError, match="TorchCodec"):  # in the training process, before any worker
        build_loaders(examples, examples, LoaderOptions(batch_size=1, workers=0, seed=0), torch.device("cpu"),
                      resolve("seed", "imagefolder", 8), channels_last=False, gpu_decode=False)  # fmt: skip


# --- the pixel limit's header walk (issue 37): what PIL's Image.open reads, in microseconds --------------------


def _with_sof(data: bytes, width: int, height: int, *, second: bool = False) -> bytes:
    """`data` with its (first) SOF segment declaring width x height; with `second`, a copy of that segment
    declaring it is put after the original, so two frame headers precede the scan."""
    buf = bytearray(data)
    at = next(i for i in range(2, len(buf) - 1) if buf[i] == 0xFF and buf[i + 1] in (0xC0, 0xC1, 0xC2))
    length = (buf[at + 2] << 8) | buf[at + 3]
    seg = bytearray(buf[at : at + 2 + length])
    seg[5:9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    if second:
        return bytes(buf[: at + 2 + length] + seg + buf[at + 2 + length :])
    return bytes(buf[:at] + seg + buf[at + 2 + length :])


def _header_cases() -> dict[str, bytes]:
    cases = dict(_jpeg_cases())
    rgb = _jpeg_cases()["rgb-sub2-prog0"]
    cases["bomb-30000"] = _with_sof(rgb, 30000, 30000)
    cases["bomb-prog"] = _with_sof(_jpeg_cases()["rgb-sub2-prog1"], 20000, 20000)
    cases["two-sofs-small-then-bomb"] = _with_sof(rgb, 30000, 30000, second=True)
    cases["fill-bytes"] = rgb[:2] + b"\xff\xff\xff" + rgb[2:]  # fill 0xFFs before the first marker
    cases["garbage-between-segments"] = rgb[:2] + b"\x00\x11" + rgb[2:]  # PIL skips stray bytes: the walk does not
    cases["truncated-header"] = rgb[:40]
    cases["exif-thumbnail"] = _encode(_noise("RGB", 300, 200), "JPEG", exif=_exif(6))
    cases["big-icc"] = _encode(_noise("RGB", 40, 24), "JPEG", icc_profile=b"\x00" * 70_000)  # split over APP2s
    cases["not-a-jpeg"] = _other_cases()["png-RGB"]
    return cases


def _pil_size(data: bytes) -> tuple[int, int] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as im:
                return im.size if im.format in ("JPEG", "MPO") else None
    except Image.DecompressionBombError:
        return "bomb"  # type: ignore[return-value]
    except Exception:
        return None


@pytest.mark.parametrize("name", sorted(_header_cases()))
def test_the_header_walk_reads_the_size_pil_reads_or_leaves_it_to_pil(name, monkeypatch):
    from effbench.data.images import jpeg_declared_pixels

    data = _header_cases()[name]
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # PIL's own size, however large
    got, size = jpeg_declared_pixels(data), _pil_size(data)
    assert got is None or (size is not None and got == size[0] * size[1]), (got, size)
    # every clean JPEG the library writes is read by the walk, not handed back to PIL
    if name in _jpeg_cases() or name.startswith(("bomb", "two-sofs", "fill", "exif-thumb")):
        assert got is not None


@pytest.mark.parametrize("name", sorted(_header_cases()))
@pytest.mark.parametrize("max_pixels", [None, 100, 89_478_485])
def test_the_pixel_limit_gives_pils_verdict_on_every_header(name, max_pixels, monkeypatch):
    """The refusal is PIL's (Image.open raises DecompressionBombError above 2 * MAX_IMAGE_PIXELS), whichever
    way over_pixel_limit reached it."""
    from effbench.data.images import over_pixel_limit

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", max_pixels)
    data = _header_cases()[name]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Image.open(io.BytesIO(data)).close()
        refused = False
    except Image.DecompressionBombError:
        refused = True
    except Exception:
        refused = False
    got = over_pixel_limit(np.frombuffer(data, dtype=np.uint8))
    assert (got is not None) == refused, got
    if refused:
        assert got.startswith("over the pixel limit (Image size (") and "pixels) exceeds limit of" in got
