"""RunConfig: defaults resolve once, and every bad value names the option the user typed."""

from __future__ import annotations

import pytest

from effbench.config import RunConfig, default_image_size, parse_freeze, smoke_overrides
from effbench.errors import EffbenchError


def test_defaults_resolve_for_efficientnet_transfer_learning():
    cfg = RunConfig(arch="b3", dataset="cifar")
    assert cfg.arch == "efficientnet-b3"
    assert cfg.dataset == "cifar100"
    assert cfg.weights == "imagenet"
    assert cfg.freeze == "classifier"
    assert cfg.image_size == 300
    assert cfg.batch_size == 64
    assert cfg.lr == 0.1


def test_defaults_resolve_for_resnet18_from_scratch():
    cfg = RunConfig(arch="resnet18", dataset="cifar10", optimizer="adadelta")
    assert (cfg.weights, cfg.freeze, cfg.image_size, cfg.batch_size, cfg.lr) == ("none", "none", 32, 128, 1.0)
    assert default_image_size("resnet18", "food101") == 224
    assert RunConfig(arch="b5", dataset="food").image_size == 456


@pytest.mark.parametrize(
    "kwargs, option",
    [
        ({"arch": "vgg17"}, "--arch"),  # vgg16 is torchvision's (issue 15)
        ({"dataset": "mnist"}, "--dataset"),
        ({"optimizer": "lbfgs"}, "--optimizer"),
        ({"precision": "fp8"}, "--precision"),
        ({"device": "tpu"}, "--device"),
        ({"loader": "magic"}, "--loader"),
        ({"batch_size": 0}, "--batch-size"),
        ({"batch_size": -4}, "--batch-size"),
        ({"epochs": 0}, "--epochs"),
        ({"max_steps": 0}, "--max-steps"),
        ({"max_val_steps": -1}, "--max-val-steps"),
        ({"image_size": 0}, "--image-size"),
        ({"image_size": 8}, "--image-size"),
        ({"workers": -1}, "--workers"),
        ({"warmup_steps": -1}, "--warmup-steps"),
        ({"lr": 0.0}, "--lr"),
        ({"momentum": 1.5}, "--momentum"),
        ({"weight_decay": -1.0}, "--weight-decay"),
        ({"val_fraction": 1.0}, "--val-fraction"),
        ({"val_fraction": 0.0}, "--val-fraction"),
        ({"freeze": "half"}, "--freeze"),
        ({"freeze": "last:0"}, "--freeze"),
        ({"freeze": "last:-2"}, "--freeze"),
        ({"arch": "b0", "batch_norm": False}, "--no-batch-norm"),
        ({"log_interval": 0}, "--log-interval"),
    ],
)
def test_bad_values_name_their_option(kwargs, option):
    with pytest.raises(EffbenchError) as info:
        RunConfig(**kwargs)
    assert info.value.option == option
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(option)


def test_parse_freeze():
    assert parse_freeze("classifier") == ("classifier", 0)
    assert parse_freeze("none") == ("none", 0)
    assert parse_freeze("LAST:3") == ("last", 3)
    assert RunConfig(freeze="last:2").freeze == "last:2"


def test_round_trip_through_dict():
    cfg = RunConfig(arch="resnet18", dataset="cifar10", batch_size=32, max_steps=3)
    again = RunConfig.from_dict(cfg.to_dict())
    assert again == cfg


def test_smoke_preset_is_offline_and_small():
    cfg = RunConfig(**smoke_overrides())
    assert (cfg.dataset, cfg.weights, cfg.device, cfg.image_size, cfg.epochs) == ("synthetic", "none", "cpu", 32, 1)
    assert cfg.warmup_steps < cfg.max_steps


def test_a_negative_zero_is_recorded_as_zero():
    # --momentum -0 is 0 and in range; config.json said "momentum": -0.0
    import json

    cfg = RunConfig(momentum=-0.0, weight_decay=-0.0, dataset="synthetic")
    d = json.loads(json.dumps(cfg.to_dict()))
    assert json.dumps([d["momentum"], d["weight_decay"]]) == "[0.0, 0.0]"


@pytest.mark.parametrize("value, hint", [(90.0, "for 90% use 0.9"), (55.5, "for 55.5% use 0.555"), (100, "use 1")])
def test_a_percentage_for_a_fraction_is_answered_with_the_fraction(value, hint):
    # issue 34: `--target-top1 90` said only that 90 is outside (0, 1]
    with pytest.raises(EffbenchError) as info:
        RunConfig(dataset="cifar10", target_top1=value)
    assert info.value.option == "--target-top1" and "it is a fraction" in info.value.message
    assert info.value.message.endswith(hint)
    with pytest.raises(EffbenchError) as info:  # beyond any percentage: the range alone
        RunConfig(dataset="cifar10", target_top1=250.0)
    assert info.value.message == "250 is outside (0, 1]; use a value in that range"
