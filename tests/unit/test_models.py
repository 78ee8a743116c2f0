"""Models: every arch trains a step, freezing leaves frozen tensors bit-identical and graph-free,
and every weights source either loads exactly or fails in one line naming --weights."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import http.server
import json
import os
import pickle
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torchvision
from efficientnet_pytorch import EfficientNet
from torch import nn

from effbench.config import RunConfig
from effbench.errors import EffbenchError
from effbench.models import build_model, trainable_parameters, weights

B0 = "efficientnet-b0"
B0_FILE = "efficientnet-b0-355c32eb.pth"  # the name efficientnet-pytorch's url_map gives


def cfg_for(arch: str, **kw) -> RunConfig:
    kw = {"weights": "none", "freeze": "none", "image_size": 32, **kw}
    return RunConfig(arch=arch, **kw)


def build(arch: str, num_classes: int = 10, seed: int = 0, **kw):
    torch.manual_seed(seed)
    return build_model(cfg_for(arch, **kw), num_classes)


def sgd_steps(model: nn.Module, steps: int, *, size: int = 32, batch: int = 2, num_classes: int = 10) -> torch.Tensor:
    """A few SGD steps with momentum and weight decay (both would move a frozen tensor that leaked
    into the optimizer); returns the last logits."""
    opt = torch.optim.SGD(trainable_parameters(model), lr=0.1, momentum=0.9, weight_decay=5e-4)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(batch, 3, size, size, generator=gen)
        y = torch.randint(0, num_classes, (batch,), generator=gen)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return logits


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# --- every architecture ---------------------------------------------------------------------------


@pytest.mark.parametrize("arch", [f"efficientnet-b{i}" for i in range(8)] + ["resnet18"])
def test_every_arch_builds_and_takes_an_sgd_step_at_32px(arch):
    bundle = build(arch, num_classes=7)
    model = bundle.model
    assert bundle.arch == arch
    assert model.training
    assert bundle.trainable_params == bundle.total_params == sum(p.numel() for p in model.parameters())
    json.dumps(bundle.info)  # goes into results.json as is
    assert bundle.info["num_classes"] == 7 and bundle.info["weights"] == "none"
    before = snapshot(model)
    logits = sgd_steps(model, 1, num_classes=7)
    assert logits.shape == (2, 7)
    assert torch.isfinite(logits).all()
    head = "_fc.weight" if arch.startswith("efficientnet") else "fc.weight"
    assert not torch.equal(before[head], model.state_dict()[head])


def test_arch_aliases_resolve_to_the_registry():
    assert build("b0").arch == B0


# --- ResNet-18 -------------------------------------------------------------------------------------


def test_resnet18_matches_torchvision_names_shapes_and_outputs(tmp_path):
    tv = torchvision.models.resnet18()
    file = tmp_path / "tv.pth"
    torch.save(tv.state_dict(), file)
    bundle = build("resnet18", num_classes=1000, image_size=64, weights=str(file))
    ours = bundle.model
    assert [(k, v.shape) for k, v in ours.state_dict().items()] == [(k, v.shape) for k, v in tv.state_dict().items()]
    assert bundle.total_params == 11_689_512  # torchvision's documented resnet18 size
    assert bundle.info["head"] == "loaded" and bundle.info["stem"] == "imagenet"
    x = torch.randn(2, 3, 64, 64)
    ours.eval(), tv.eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(x), tv(x), rtol=0, atol=0)


def test_resnet18_stem_switches_between_cifar_and_imagenet():
    cifar, imagenet = build("resnet18", image_size=32), build("resnet18", image_size=64)
    assert cifar.info["stem"] == "cifar" and imagenet.info["stem"] == "imagenet"
    assert cifar.model.conv1.kernel_size == (3, 3) and cifar.model.conv1.stride == (1, 1)
    assert isinstance(cifar.model.maxpool, nn.Identity)
    assert imagenet.model.conv1.kernel_size == (7, 7) and imagenet.model.conv1.stride == (2, 2)
    assert isinstance(imagenet.model.maxpool, nn.MaxPool2d)
    assert cifar.total_params == 11_173_962  # the usual CIFAR ResNet-18 count (10 classes)
    # The CIFAR stem keeps the 32x32 map; the ImageNet one quarters it.
    with torch.no_grad():
        assert cifar.model.effbench_stage_fns()[0](torch.zeros(1, 3, 32, 32)).shape[-1] == 32
        assert imagenet.model.effbench_stage_fns()[0](torch.zeros(1, 3, 64, 64)).shape[-1] == 16


def test_resnet18_without_batch_norm_has_none_and_trains():
    bundle = build("resnet18", batch_norm=False)
    model = bundle.model
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert all(m.bias is not None for m in model.modules() if isinstance(m, nn.Conv2d))
    assert bundle.info["batch_norm"] is False
    before = snapshot(model)
    assert torch.isfinite(sgd_steps(model, 2)).all()
    assert not torch.equal(before["conv1.weight"], model.conv1.weight)
    with_bn = build("resnet18")
    assert any(isinstance(m, nn.BatchNorm2d) for m in with_bn.model.modules())


# --- freezing --------------------------------------------------------------------------------------

BASE_OUTPUT = {B0: "_bn1", "resnet18": "layer4.1"}  # the last module of the frozen base


@pytest.mark.parametrize("arch", [B0, "resnet18"])
def test_classifier_freeze_keeps_the_base_bit_identical_and_graph_free(arch):
    bundle = build(arch, freeze="classifier")
    model = bundle.model
    head = model.effbench_head_name + "."
    frozen = {k for k, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {k for k, _ in model.named_parameters() if not k.startswith(head)}
    head_params = list(getattr(model, model.effbench_head_name).parameters())
    assert [id(p) for p in trainable_parameters(model)] == [id(p) for p in head_params]
    assert bundle.trainable_params == sum(p.numel() for p in head_params)
    assert bundle.info["trainable_stages"] == [model.effbench_head_name] and bundle.info["trainable_blocks"] == 0

    seen: list[tuple[torch.Tensor, bool]] = []  # (base output, grad mode while the base ran)
    model.get_submodule(BASE_OUTPUT[arch]).register_forward_hook(
        lambda m, i, out: seen.append((out, torch.is_grad_enabled()))
    )
    before = snapshot(model)
    model.train()  # as the loop does every epoch: must not unfreeze BatchNorm
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns and not any(m.training for m in bns)
    logits = sgd_steps(model, 3)

    after = model.state_dict()
    for name, value in before.items():  # weights and BN running statistics alike
        if not name.startswith(head):
            assert torch.equal(value, after[name]), name
    assert not torch.equal(before[head + "weight"], after[head + "weight"])
    assert len(seen) == 3 and all(not t.requires_grad and t.grad_fn is None and not grad for t, grad in seen)
    assert logits.grad_fn is not None


def test_classifier_freeze_computes_what_the_plain_efficientnet_computes():
    model = build(B0, freeze="classifier").model
    plain = EfficientNet.from_name(B0, num_classes=10)
    plain.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 32, 32)
    model.eval(), plain.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x), plain(x), rtol=0, atol=0)


@pytest.mark.parametrize(
    "arch, n, trainable_prefixes",
    [
        (B0, 3, ("_blocks.13.", "_blocks.14.", "_blocks.15.", "_conv_head.", "_bn1.", "_fc.")),
        ("resnet18", 3, ("layer3.1.", "layer4.", "fc.")),
    ],
)
def test_last_n_trains_exactly_the_last_blocks_and_what_follows(arch, n, trainable_prefixes):
    bundle = build(arch, freeze=f"last:{n}")
    model = bundle.model
    expected = {k for k, _ in model.named_parameters() if k.startswith(trainable_prefixes)}
    trainable = {k for k, p in model.named_parameters() if p.requires_grad}
    assert trainable == expected and expected
    assert bundle.trainable_params == sum(p.numel() for p in trainable_parameters(model))
    assert bundle.info["trainable_blocks"] == n
    before = snapshot(model)
    sgd_steps(model, 2)
    # The forward and the freeze agree: exactly the trainable tensors got gradients.
    assert {k for k, p in model.named_parameters() if p.grad is not None} == expected
    after = model.state_dict()
    for name, value in before.items():
        if not name.startswith(trainable_prefixes):
            assert torch.equal(value, after[name]), name
    bn_training = {k: m.training for k, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)}
    assert any(bn_training.values()) and not all(bn_training.values())
    assert all(t == f"{k}.".startswith(trainable_prefixes) for k, t in bn_training.items())


def test_freeze_none_trains_everything_in_train_mode():
    bundle = build(B0, freeze="none")
    assert bundle.trainable_params == bundle.total_params
    assert all(m.training for m in bundle.model.modules())
    assert bundle.info["trainable_stages"] == "all"


@pytest.mark.parametrize("arch, blocks", [(B0, 16), ("resnet18", 8)])
def test_last_n_beyond_the_block_count_names_the_option(arch, blocks):
    with pytest.raises(EffbenchError) as info:
        build(arch, freeze="last:999")
    assert info.value.option == "--freeze"
    assert info.value.message == f"last:999 exceeds the {blocks} blocks of {arch}; use last:1..{blocks} or none"
    assert build(arch, freeze=f"last:{blocks}").info["trainable_blocks"] == blocks


def test_eval_then_train_restores_the_freeze():
    model = build(B0, freeze="last:1").model
    model.eval()
    assert not any(m.training for m in model.modules())
    model.train()
    assert model._fc.training and model._blocks[15].training
    assert not model._blocks[14].training and not model._bn0.training


# --- weights from a local file ---------------------------------------------------------------------


@pytest.mark.parametrize("wrap", ["plain", "state_dict", "model", "ddp"])
def test_a_state_dict_of_the_same_arch_loads_completely(tmp_path, wrap):
    source = build(B0, seed=1).model
    with torch.no_grad():  # statistics no fresh build has, so the buffers must load too
        for m in source.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 2.0)
    state = source.state_dict()
    saved = {
        "plain": state,
        "state_dict": {"state_dict": state, "epoch": 3},
        "model": {"model": state, "optimizer": {}},
        "ddp": {f"module.{k}": v for k, v in state.items()},
    }[wrap]
    file = tmp_path / "b0.pth"
    torch.save(saved, file)
    bundle = build(B0, seed=2, weights=str(file), freeze="classifier")
    assert bundle.info["head"] == "loaded"
    assert bundle.info["weights_file"] == str(file.resolve())
    assert bundle.info["weights_sha256_prefix"] == hashlib.sha256(file.read_bytes()).hexdigest()[:8]
    x = torch.randn(2, 3, 32, 32)
    source.eval(), bundle.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(bundle.model(x), source(x), rtol=0, atol=0)


def test_a_head_of_another_size_is_dropped_and_reinitialised(tmp_path):
    source = build(B0, num_classes=1000, seed=1).model
    file = tmp_path / "b0-1000.pth"
    torch.save(source.state_dict(), file)
    fresh = build(B0, num_classes=10, seed=2).model
    bundle = build(B0, num_classes=10, seed=2, weights=str(file))
    assert bundle.info["head"] == "reinitialised"
    assert torch.equal(bundle.model._conv_stem.weight, source._conv_stem.weight)
    assert torch.equal(bundle.model._fc.weight, fresh._fc.weight)  # the seeded fresh head


def test_a_file_of_another_arch_names_the_first_mismatched_tensor(tmp_path):
    file = tmp_path / "resnet18.pth"
    torch.save(build("resnet18").model.state_dict(), file)
    with pytest.raises(EffbenchError) as info:
        build(B0, weights=str(file))
    assert info.value.option == "--weights"
    assert f"{file} does not fit {B0}" in info.value.message
    assert "missing tensor '_conv_stem.weight'" in info.value.message


def test_a_shape_mismatch_reports_both_shapes(tmp_path):
    file = tmp_path / "cifar-stem.pth"
    torch.save(build("resnet18", image_size=32).model.state_dict(), file)
    with pytest.raises(EffbenchError) as info:
        build("resnet18", image_size=64, weights=str(file))
    assert info.value.message == (
        f"{file} does not fit resnet18: tensor 'conv1.weight' has shape (64, 3, 3, 3) in the file "
        "but (64, 3, 7, 7) in the model"
    )


def test_an_extra_tensor_in_the_file_is_refused(tmp_path):
    state = build("resnet18").model.state_dict()
    state["extra.weight"] = torch.zeros(3)
    file = tmp_path / "extra.pth"
    torch.save(state, file)
    with pytest.raises(EffbenchError, match="has tensor 'extra.weight' that the model lacks"):
        build("resnet18", weights=str(file))


@pytest.mark.parametrize(
    "content, reason",
    [
        (os.urandom(4096), "not a PyTorch checkpoint"),
        (b"epoch,loss\n1,0.5\n", "not a PyTorch checkpoint"),
        (b"", "not a PyTorch checkpoint"),
    ],
)
def test_a_file_that_is_not_a_checkpoint_is_refused(tmp_path, content, reason):
    file = tmp_path / "weights.pth"
    file.write_bytes(content)
    with pytest.raises(EffbenchError) as info:
        build(B0, weights=str(file))
    assert info.value.option == "--weights" and f"{file} is {reason}" in info.value.message
    assert "\n" not in str(info.value)


def test_a_pickle_that_is_not_a_state_dict_is_refused(tmp_path):
    file = tmp_path / "list.pth"
    torch.save([1, 2, 3], file)
    with pytest.raises(EffbenchError, match="holds a list, not a state_dict"):
        build(B0, weights=str(file))


class _Payload:
    """Unpickling this runs a shell command: what a hostile checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("saver", ["pickle", "torch.save"])
def test_a_malicious_pickle_is_refused_without_running(tmp_path, saver):
    proof = tmp_path / "payload-works"
    pickle.loads(pickle.dumps(_Payload(proof)))  # the payload is live under plain unpickling...
    assert proof.exists()
    marker = tmp_path / "pwned"
    file = tmp_path / "evil.pth"
    if saver == "pickle":
        file.write_bytes(pickle.dumps(_Payload(marker)))
    else:
        torch.save(_Payload(marker), file)
    with pytest.raises(EffbenchError) as info:
        build(B0, weights=str(file))
    assert info.value.option == "--weights" and "is not a PyTorch checkpoint" in info.value.message
    assert not marker.exists()  # ...and never ran here


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(EffbenchError) as info:
        build(B0, weights=str(tmp_path / "nope.pth"))
    assert info.value.option == "--weights" and "nope.pth not found" in info.value.message


# --- ImageNet weights: cache, mirror, offline ------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def torch_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "torch-home"
    monkeypatch.setenv("TORCH_HOME", str(home))
    monkeypatch.setenv("EFFBENCH_WEIGHTS_MIRROR", f"http://127.0.0.1:{closed_port()}")
    return home


@pytest.fixture
def mirror(tmp_path, monkeypatch) -> Iterator[tuple[Path, http.server.HTTPServer]]:
    """A loopback HTTP server over a folder, set as EFFBENCH_WEIGHTS_MIRROR."""
    root = tmp_path / "mirror"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep pytest output clean
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("EFFBENCH_WEIGHTS_MIRROR", f"http://127.0.0.1:{server.server_address[1]}")
    yield root, server
    server.shutdown()
    server.server_close()


def test_imagenet_offline_without_cache_fails_fast_naming_the_cache(torch_home):
    started = time.monotonic()
    with pytest.raises(EffbenchError) as info:
        build(B0, weights="imagenet")
    cache = torch_home / "hub" / "checkpoints" / B0_FILE
    assert info.value.option == "--weights"
    assert f"not cached at {cache}" in info.value.message
    assert info.value.message.endswith(f"copy {B0_FILE} there, or use --weights none")
    assert time.monotonic() - started < 10
    assert not cache.exists()


def test_imagenet_downloads_from_the_mirror_then_uses_the_cache(torch_home, mirror, monkeypatch):
    root, server = mirror
    torch.manual_seed(3)
    official = EfficientNet.from_name(B0)  # 1000 classes, like the real file, which also
    state = {k: v for k, v in official.state_dict().items() if not k.endswith("num_batches_tracked")}
    torch.save(state, root / B0_FILE)  # predates BatchNorm's num_batches_tracked
    prefix = hashlib.sha256((root / B0_FILE).read_bytes()).hexdigest()[:8]
    monkeypatch.setattr(weights, "official_sha256_prefix", lambda name: prefix if name == B0_FILE else "")

    bundle = build(B0, weights="imagenet", freeze="classifier")
    cache = torch_home / "hub" / "checkpoints" / B0_FILE
    assert cache.is_file()
    assert bundle.info["weights"] == "imagenet" and bundle.info["weights_file"] == str(cache)
    assert bundle.info["weights_sha256_prefix"] == prefix and bundle.info["head"] == "reinitialised"
    assert torch.equal(bundle.model._conv_stem.weight, official._conv_stem.weight)

    server.shutdown()
    server.server_close()
    (root / B0_FILE).unlink()
    again = build(B0, num_classes=1000, weights="imagenet")  # from the cache alone
    assert again.info["head"] == "loaded"
    torch.testing.assert_close(again.model.state_dict(), official.state_dict(), rtol=0, atol=0)


def test_a_corrupt_cached_imagenet_file_says_to_delete_it(torch_home):
    cache = torch_home / "hub" / "checkpoints" / B0_FILE
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"<html>proxy login</html>")
    with pytest.raises(EffbenchError) as info:
        build(B0, weights="imagenet")
    assert info.value.message.startswith(f"{cache} is not a PyTorch checkpoint")
    assert info.value.message.endswith("delete it to download it again")


def test_imagenet_with_a_wrong_checksum_leaves_no_cache_file(torch_home, mirror):
    root, _ = mirror
    torch.save(EfficientNet.from_name(B0).state_dict(), root / B0_FILE)  # not the official bytes
    with pytest.raises(EffbenchError) as info:
        build(B0, weights="imagenet")
    assert "could not be downloaded" in info.value.message and "355c32eb" in info.value.message
    assert not (torch_home / "hub" / "checkpoints" / B0_FILE).exists()


def test_resnet18_imagenet_weights_need_the_imagenet_stem(torch_home):
    with pytest.raises(EffbenchError) as info:
        build("resnet18", image_size=32, weights="imagenet")
    assert info.value.option == "--weights" and "--image-size > 32" in info.value.message
    with pytest.raises(EffbenchError, match="--no-batch-norm"):
        build("resnet18", image_size=64, batch_norm=False, weights="imagenet")
    with pytest.raises(EffbenchError, match="resnet18-f37072fd.pth there"):  # the right file, offline
        build("resnet18", image_size=64, weights="imagenet")


def test_trainable_parameters_see_through_wrappers():
    model = build(B0, freeze="classifier").model
    wrapped = nn.DataParallel(model) if torch.cuda.is_available() else nn.Sequential(model)
    assert [id(p) for p in trainable_parameters(wrapped)] == [id(model._fc.weight), id(model._fc.bias)]


def test_a_batch_of_one_is_refused_only_where_a_training_batchnorm_would_see_one_value(monkeypatch):
    # issue 46: PyTorch refuses a BatchNorm input of one value per channel in training (batch x height x width == 1);
    # efficientnet-b0 at 32 px (the smoke run) ends its blocks at 1x1
    from effbench.models import check_batch_norm

    small = RunConfig(arch="efficientnet-b0", dataset="synthetic", image_size=32, weights="none", device="cpu")
    with pytest.raises(EffbenchError) as e:
        check_batch_norm(small, 1)
    assert e.value.option == "--batch-size" and "efficientnet-b0's BatchNorm layer _blocks.11._bn1" in e.value.message
    assert "(input 1x672x1x1 at --image-size 32)" in e.value.message
    assert e.value.message.endswith("use --batch-size 2 or more, or a larger --image-size")
    # the model that trains fails at that size as the check says, and runs at 64 px (2x2: four values)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        build_model(small, 10).model(torch.zeros(1, 3, 32, 32))
    build_model(dataclasses.replace(small, image_size=64), 10).model(torch.zeros(1, 3, 64, 64))
    check_batch_norm(dataclasses.replace(small, image_size=64), 1)
    check_batch_norm(small, 2)  # two images: two values per channel
    check_batch_norm(dataclasses.replace(small, freeze="classifier"), 1)  # frozen BatchNorms run in eval mode
    check_batch_norm(dataclasses.replace(small, data_only=True), 1)  # no model trains
    # a model the meta device cannot run is left to the run
    monkeypatch.setattr(torch.nn.Module, "__call__", lambda *_a, **_kw: (_ for _ in ()).throw(NotImplementedError))
    check_batch_norm(small, 1)
