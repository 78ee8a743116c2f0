"""torchvision's and timm's models: names resolve or fail with suggestions, `--freeze` trains
exactly what it says, weights load through the same cache/mirror, FLOPs match published figures.

Models are built at 32 px (ViTs with 2x2 patches) so a step costs little on 2 CPU cores; the
structure-only checks build on the meta device (no memory, no compute)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import sys
import threading

import pytest
import torch
import torchvision.models as tvm
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from clitools import invoke
from effbench.config import RunConfig
from effbench.errors import EffbenchError
from effbench.models import build_model, catalog, external, frozen_stage_count, trainable_parameters
from effbench.sweep.presets import PRESETS


def build(arch: str, num_classes: int = 10, **kw):
    torch.manual_seed(0)
    kw = {"weights": "none", "freeze": "none", "image_size": 32, "dataset": "synthetic", **kw}
    return build_model(RunConfig(arch=arch, **kw), num_classes)


def sgd_steps(model: nn.Module, steps: int, size: int = 32) -> None:
    opt = torch.optim.SGD(trainable_parameters(model), lr=0.1, momentum=0.9, weight_decay=5e-4)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(2, 3, size, size, generator=gen)
        loss = nn.functional.cross_entropy(model(x), torch.randint(0, 10, (2,), generator=gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


# --- names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, canonical",
    [
        ("resnet50", "torchvision:resnet50"),  # bare torchvision name
        ("TorchVision:ViT_B_16", "torchvision:vit_b_16"),
        ("resnet18", "resnet18"),  # effbench's own keeps the bare name
        ("torchvision:resnet18", "torchvision:resnet18"),
        ("b3", "efficientnet-b3"),
        ("timm:vit_tiny_patch16_224", "timm:vit_tiny_patch16_224"),
    ],
)
def test_names_resolve_to_one_canonical_form(given, canonical):
    assert RunConfig(arch=given, weights="none").arch == canonical


@pytest.mark.parametrize(
    "bad, near",
    [("resnet5", "resnet50"), ("torchvision:vit_b16", "torchvision:vit_b_16"), ("timm:vit_tiny_patch16", "timm:")],
)
def test_a_bad_name_is_one_line_suggesting_the_nearest(bad, near):
    with pytest.raises(EffbenchError) as info:
        RunConfig(arch=bad)
    assert info.value.option == "--arch" and "did you mean" in info.value.message and near in info.value.message
    assert "\n" not in str(info.value)


def test_a_bad_name_on_the_command_line_exits_2_in_one_line(capsys, tmp_path):
    code, out, err = invoke(["run", "--arch", "convnext_tiyn", "--device", "cpu", "--output", tmp_path], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: --arch: unknown architecture 'convnext_tiyn'; did you mean convnext_tiny")


def test_timm_names_without_timm_say_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # `import timm` now raises ImportError
    with pytest.raises(EffbenchError, match=r"not installed; pip install 'effbench\[timm\]'"):
        RunConfig(arch="timm:resnet18")


def test_models_without_timm_is_one_line_naming_source(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "timm", None)
    code, out, err = invoke(["models", "--source", "timm"], capsys)
    assert (
        code == 2
        and err == "error: --source: timm is not installed; pip install 'effbench[timm]', or use --source torchvision\n"
    )
    code, out, _ = invoke(["models", "--source", "all", "--json"], capsys)  # all: what is installed
    assert code == 0 and not any(r["source"] == "timm" for r in json.loads(out))


def test_native_image_size_comes_from_the_library():
    assert RunConfig(arch="torchvision:inception_v3", dataset="synthetic").image_size == 299
    assert RunConfig(arch="torchvision:efficientnet_v2_s", dataset="synthetic").image_size == 384
    assert RunConfig(arch="timm:vit_tiny_patch16_384", dataset="synthetic").image_size == 384


# --- effbench models ----------------------------------------------------------------------------------


def test_models_lists_at_least_60_with_sizes_checked_against_a_built_model(capsys):
    code, out, _ = invoke(["models", "--json"], capsys)
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and len(rows) >= 60
    assert {"efficientnet-b0", "resnet18", "torchvision:resnet50", "torchvision:vit_b_16"} <= set(rows)
    for name in ("torchvision:resnet50", "torchvision:convnext_tiny", "torchvision:vit_b_16"):
        with torch.device("meta"):
            built = tvm.get_model(catalog.split(name)[1])  # 1000 classes, as the metadata counts
        assert rows[name]["params"] == sum(p.numel() for p in built.parameters())
    vit = rows["torchvision:vit_b_16"]
    assert vit["image_size_px"] == 224 and vit["fixed_image_size"] and vit["weights"] == "vit_b_16-c867db91.pth"
    assert rows["efficientnet-b0"]["params"] == 5_288_548  # counted (torchvision's efficientnet_b0: the same)
    code, out, _ = invoke(["models"], capsys)
    assert code == 0 and "torchvision:convnext_tiny" in out and "architectures" in out.splitlines()[-1]


def test_models_lists_timm_on_request(capsys):
    code, out, _ = invoke(["models", "--source", "timm", "--json"], capsys)
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and len(rows) > 1000
    assert rows["timm:vit_tiny_patch16_224"]["fixed_image_size"] is True
    assert rows["timm:resnet50"]["image_size_px"] == 224


@pytest.mark.parametrize("name, published_gmacs", [("resnet50", 4.09), ("vit_b_16", 17.56), ("convnext_tiny", 4.46)])
def test_forward_flops_at_224_match_published_multiply_adds(name, published_gmacs):
    """Published: ResNet-50 4.09 GMACs, ViT-B/16 17.56, ConvNeXt-T 4.46 (torchvision's model tables,
    the `_ops` of their weights). Counted here by FlopCounterMode (2 FLOPs per multiply-add) on a
    meta-device forward, apart from the catalog, which must say the same."""
    with torch.device("meta"):
        model = tvm.get_model(name)
        x = torch.empty(1, 3, 224, 224)
    with FlopCounterMode(display=False) as counter:
        model(x)
    counted = counter.get_total_flops()
    assert counted == pytest.approx(2 * published_gmacs * 1e9, rel=0.05)
    assert catalog.info(f"torchvision:{name}").forward_gflops == pytest.approx(counted / 1e9, rel=0.05)


# --- stages and freezing ---------------------------------------------------------------------------


FAMILIES = (
    "alexnet", "convnext_tiny", "densenet121", "efficientnet_b0", "googlenet", "inception_v3", "maxvit_t",
    "mnasnet0_5", "mobilenet_v3_small", "regnet_x_400mf", "resnet50", "shufflenet_v2_x0_5", "squeezenet1_0",
    "swin_t", "vgg11_bn", "vit_b_16",
)  # fmt: skip
"""One model of each torchvision classification module."""


def check_stages(name: str) -> None:
    kw = {"aux_logits": False, "init_weights": False} if name in external.AUX_CLASSIFIERS else {}
    if name.startswith("regnet"):  # its builder computes widths with real tensors: no meta device
        model = tvm.get_model(name, **kw)
    else:
        with torch.device("meta"):  # structure only: no memory, no init compute
            model = tvm.get_model(name, **kw)
    staged = external.adapt(model, external.torchvision_head(model), arch=name)  # raises if a tensor is uncovered
    stages = staged.effbench_stages()
    final = staged.get_submodule(stages[-1].name)
    assert isinstance(final, (nn.Linear, nn.Conv2d)), name  # the final layer, not a block holding it
    assert sum(s.is_block for s in stages) >= 4, name


@pytest.mark.parametrize("name", FAMILIES)
def test_each_torchvision_family_splits_into_stages_ending_in_its_classifier(name):
    check_stages(name)


@pytest.mark.slow
def test_every_torchvision_model_splits_into_stages_ending_in_its_classifier():
    for name in catalog.torchvision_names():
        if not name.startswith("regnet") or name == "regnet_x_400mf":
            check_stages(name)


HEADS = {
    "torchvision:resnet50": "fc",
    "torchvision:convnext_tiny": "classifier.2",  # after the classifier's LayerNorm: the Linear only
    "torchvision:vit_b_16": "heads.head",
    "timm:vit_tiny_patch16_224": "head",
    "timm:resnet18": "fc",
}


@pytest.mark.parametrize("arch", list(HEADS))
def test_classifier_freeze_trains_exactly_the_final_layer(arch):
    bundle = build(arch, freeze="classifier")
    model = bundle.model
    head = HEADS[arch]
    final = model.get_submodule(head)
    assert isinstance(final, nn.Linear) and final.out_features == 10
    assert [id(p) for p in trainable_parameters(model)] == [id(p) for p in final.parameters()]
    assert bundle.trainable_params == sum(p.numel() for p in final.parameters()) < bundle.total_params
    assert bundle.info["trainable_stages"] == [head]
    model.train()
    norms = [m for m in model.modules() if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)) and m is not final]
    assert norms and not any(m.training for m in norms)  # frozen BN statistics stay put
    before = {k: v.clone() for k, v in model.state_dict().items()}
    sgd_steps(model, 2)
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == {f"{head}.weight", f"{head}.bias"}  # weights and running statistics alike


def test_last_n_on_a_torchvision_vit_trains_the_last_encoder_layers():
    """torchvision's VisionTransformer, made small (vit_b_16's layout: encoder.layers.encoder_layer_i)."""
    torch.manual_seed(0)
    vit = tvm.VisionTransformer(32, 16, num_layers=4, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10)
    model = external.adapt(vit, external.torchvision_head(vit), arch="small vit")
    stages = model.effbench_stages()
    assert [s.name for s in stages if s.is_block] == [f"encoder.layers.encoder_layer_{i}" for i in range(4)]
    assert frozen_stage_count(stages, ("last", 2), "small vit") == len(stages) - 4  # 2 layers, ln, head
    model.effbench_freeze_prefix(len(stages) - 4)
    trainable = {k for k, p in model.named_parameters() if p.requires_grad}
    prefixes = ("encoder.layers.encoder_layer_2.", "encoder.layers.encoder_layer_3.", "encoder.ln.", "heads.head.")
    assert trainable == {k for k, _ in model.named_parameters() if k.startswith(prefixes)}
    assert "class_token" not in trainable and "encoder.pos_embedding" not in trainable
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    sgd_steps(model, 2)  # torchvision's zero-initialised head passes no gradient on step 1
    assert {k for k, p in model.named_parameters() if p.grad is not None} == trainable
    assert {k for k, p in model.named_parameters() if not torch.equal(before[k], p)} == trainable


TIMM_BLOCKS = {
    "convnext_atto": [f"stages.{i}" for i in range(4)],  # stem = Sequential(conv, norm): not 2 blocks
    "test_resnet": ["layer1.0", "layer2.0", "layer3.0", "layer4.0"],  # deep stem conv1 = Sequential of 7
    "regnety_002": ["s1", "s2", "s3", "s4"],  # no block list: every child but the stem
    "mambaout_femto": [f"stages.{i}" for i in range(4)],  # head.pre_logits holds an fc: still the head
    "vit_tiny_patch16_224": [f"blocks.{i}" for i in range(12)],
}
"""The blocks of each, read off the model's printed layout (timm 1.0)."""


@pytest.mark.parametrize("name", list(TIMM_BLOCKS))
def test_timm_blocks_are_the_models_blocks_not_its_stem_or_head(name):
    import timm

    with torch.device("meta"):
        model = timm.create_model(name)
    staged = external.adapt(model, external.timm_head(model, name), arch=name, stem_pattern=external.timm_stem(model))
    assert [s.name for s in staged.effbench_stages() if s.is_block] == TIMM_BLOCKS[name]


def test_timm_last_1_trains_the_last_stage_and_the_head():
    """mambaout's head holds a Linear in pre_logits; it counted as the last block, so last:1 trained the head only."""
    model = build("timm:mambaout_femto", freeze="last:1").model
    trainable = {k for k, p in model.named_parameters() if p.requires_grad}
    assert trainable == {k for k, _ in model.named_parameters() if k.startswith(("stages.3.", "head."))}


# --- image sizes -------------------------------------------------------------------------------------


def test_a_vit_with_weights_needs_its_native_size(tmp_path):
    with pytest.raises(EffbenchError) as info:
        build("torchvision:vit_b_16", image_size=64, weights=str(tmp_path / "any.pth"))
    assert info.value.option == "--image-size" and "use --image-size 224" in info.value.message
    with pytest.raises(EffbenchError, match="use --image-size 224"):
        build("timm:vit_tiny_patch16_224", image_size=64, weights="imagenet")
    with pytest.raises(EffbenchError, match="multiple of 16, e.g. 32"):
        build("torchvision:vit_b_16", image_size=40)


def test_an_image_below_torchvision_min_size_is_one_line():
    with pytest.raises(EffbenchError) as info:
        build("torchvision:swin_t", image_size=64)
    assert info.value.option == "--image-size" and "below the 224 px" in info.value.message


def test_a_timm_model_at_a_size_its_layers_cannot_take_is_one_line_naming_one_they_can():
    """timm publishes no minimum size; before the meta-device probe this was a run `failed` with an
    empty report ("Kernel size can't be greater than actual input size") after the data had loaded."""
    with pytest.raises(EffbenchError) as info:
        build("timm:convnext_atto", image_size=17)  # 17 -> 4 px after the stem, 1 px before the last 2x2 downsample
    assert info.value.option == "--image-size" and "\n" not in str(info.value)
    assert "cannot run at 17 px (Calculated padded input size" in info.value.message
    assert info.value.message.endswith("use --image-size 32")
    model = build("timm:convnext_atto", image_size=32).model  # the size it names trains, on real tensors
    model(torch.randn(2, 3, 32, 32)).sum().backward()


def test_a_timm_size_error_on_the_command_line_exits_2_and_leaves_no_run(capsys, tmp_path):
    argv = ["run", "--arch", "timm:test_convnext", "--dataset", "synthetic", "--image-size", "17", "--device", "cpu"]
    code, out, err = invoke([*argv, "--weights", "none", "--output", tmp_path], capsys)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and errors == [err.splitlines()[-1]] and "Traceback" not in err
    assert errors[0].startswith("error: --image-size: timm:test_convnext cannot run at 17 px")
    assert "status" not in out and not any(tmp_path.iterdir())


def test_a_distilled_timm_model_is_one_line_not_a_missing_module():
    with pytest.raises(EffbenchError) as info:
        build("timm:levit_128s", image_size=64)
    assert info.value.option == "--arch" and "distilled model" in info.value.message
    assert info.value.message.endswith("effbench trains one; use another --arch")


# --- weights ---------------------------------------------------------------------------------------


@pytest.fixture
def torch_home(tmp_path, monkeypatch):
    home = tmp_path / "torch-home"
    monkeypatch.setenv("TORCH_HOME", str(home))
    monkeypatch.delenv("EFFBENCH_WEIGHTS_MIRROR", raising=False)
    return home


def test_torchvision_imagenet_weights_load_from_the_hub_cache(torch_home):
    torch.manual_seed(5)
    official = tvm.mobilenet_v3_small()  # 1000 classes, as the real file
    cache = torch_home / "hub" / "checkpoints" / "mobilenet_v3_small-047dcff4.pth"  # torchvision's name
    cache.parent.mkdir(parents=True)
    torch.save(official.state_dict(), cache)
    bundle = build("torchvision:mobilenet_v3_small", weights="imagenet", freeze="classifier")
    assert bundle.info["weights_file"] == str(cache) and bundle.info["head"] == "reinitialised"
    assert bundle.info["weights_sha256_prefix"] == "047dcff4"
    assert torch.equal(bundle.model.features[0][0].weight, official.features[0][0].weight)


def test_googlenet_loads_an_official_file_with_its_auxiliary_classifiers(tmp_path):
    full = tvm.googlenet(aux_logits=True, init_weights=True)  # what torchvision's file holds
    file = tmp_path / "googlenet.pth"
    torch.save(full.state_dict(), file)
    bundle = build("torchvision:googlenet", num_classes=1000, weights=str(file))
    assert bundle.info["head"] == "loaded"
    assert not any(k.startswith("aux") for k in bundle.model.state_dict())
    bundle.model.train()
    assert isinstance(bundle.model(torch.randn(2, 3, 32, 32)), torch.Tensor)  # no aux outputs in training


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    root = tmp_path / "mirror"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    monkeypatch.setenv("EFFBENCH_WEIGHTS_MIRROR", f"http://127.0.0.1:{server.server_address[1]}")
    yield root
    server.shutdown()
    server.server_close()


def test_timm_weights_come_through_the_mirror_as_safetensors(mirror, tmp_path):
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(7)
    official = timm.create_model("resnet18", pretrained=False)
    name = "timm--resnet18.a1_in1k.safetensors"  # timm's default hub id, timm/resnet18.a1_in1k
    save_file(official.state_dict(), str(mirror / name))
    digest = hashlib.sha256((mirror / name).read_bytes()).hexdigest()[:8]
    bundle = build("timm:resnet18", num_classes=1000, weights="imagenet")
    cache = tmp_path / "torch-home" / "hub" / "checkpoints" / name
    assert bundle.info["weights_file"] == str(cache) and cache.is_file()
    assert bundle.info["weights_sha256_prefix"] == digest and bundle.info["head"] == "loaded"
    torch.testing.assert_close(bundle.model.state_dict(), official.state_dict(), rtol=0, atol=0)


# --- sweeps ------------------------------------------------------------------------------------------


def test_the_yardstick_preset_names_architectures_that_resolve():
    archs = PRESETS["yardstick"].dims["arch"]
    assert "resnet50" in archs and len(archs) >= 3
    assert all(RunConfig(arch=a, weights="none").arch.startswith("torchvision:") for a in archs)
