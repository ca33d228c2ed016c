"""Head fits on cached features: the same fit as the loop's where the body cannot change (same
selected epoch, history and head), the body run once per split instead of once per batch, and
every condition that keeps a fit in the loop."""

import pytest
import torch
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models import BlockModel, build_model
from seq2final.representations.fit import PlateauSchedule, curve_point
from seq2final.training import Engine, FitCallback, Task
from seq2final.training.engine import layer_inputs
from seq2final.training.features import cache_refusal, fit_cached, fit_on_features
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import clone_model, fit
from seq2final.training.terms import Ewc

HP = HyperParameters({"lr": 3e-2, "weight_decay": 1e-3, "dropout": 0.0})


def engine(**options):
    defaults = {"patience": 3, "freeze_bn_stats": True}
    return Engine(device="cpu", batch_size=16, eval_batch_size=50, **{**defaults, **options})


def body_passes(model):
    """How many times the stem runs: once per batch it sees."""
    calls = []
    model.conv1.register_forward_hook(lambda *args: calls.append(1))
    return calls


def task_of(learnable, **options):
    return Task([learnable(70)], learnable(40, seed=1), **{"trainable": ["fc"], **options})


@pytest.mark.usefixtures("float64")  # float32 noise differs by CPU (docs/architecture.md)
@pytest.mark.parametrize("arch", ["convnet_2", "densenet_1"])  # DenseNet's head has a BN
def test_the_cached_head_fit_is_the_loops_fit(learnable, arch):
    torch.manual_seed(0)
    model = build_model(arch, 10)
    anchor = {n: p.detach() + 0.1 for n, p in model.named_parameters()}
    pull = Ewc([(anchor, {n: torch.ones_like(p) for n, p in anchor.items()})])
    task = task_of(learnable, penalties=[pull], callbacks=[PlateauSchedule(patience=1)])
    hp = HyperParameters({**HP, "ewc_lambda": 0.1})
    loop_model, cached_model = clone_model(model), clone_model(model)
    loop_passes, cached_passes = body_passes(loop_model), body_passes(cached_model)
    assert cache_refusal(cached_model, task, hp, engine()) is None
    looped = fit(loop_model, task, hp, engine(), 40, seed=5)
    cached = fit_on_features(cached_model, task, hp, engine(), 40, seed=5)

    assert 0 < looped.best_epoch < looped.epochs < 40  # a selection, and a stop before the cap
    assert (cached.best_epoch, cached.epochs) == (looped.best_epoch, looped.epochs)
    assert cached.valid_accuracy == looped.valid_accuracy
    for row, expected in zip(cached.history, looped.history, strict=True):
        assert row == pytest.approx(expected, rel=1e-9, abs=1e-12, nan_ok=True)
    for name, value in loop_model.state_dict().items():  # the head, and its BN's statistics
        # the body's features of a batch of 16 or of 50, and a BN's batch statistics, are sums in
        # other orders: float64 noise, far below what the comparison allows
        assert torch.allclose(cached_model.state_dict()[name], value, rtol=1e-9, atol=1e-12), name
        if not name.startswith("fc."):
            assert torch.equal(value, model.state_dict()[name]), name  # the body untouched
    assert not torch.equal(cached_model.fc.linear.weight, model.fc.linear.weight)
    assert [p.requires_grad for p in cached_model.parameters()] == [
        p.requires_grad for p in loop_model.parameters()
    ]
    assert not cached_model.training and cached_model.dropout == loop_model.dropout == 0.0
    # the body ran once per evaluation batch: 70 training images in two, 40 validation in one;
    # the loop's five training batches and a validation pass an epoch
    assert len(cached_passes) == 2 + 1 and len(loop_passes) == 6 * looped.epochs + 1


@pytest.mark.usefixtures("float64")  # features of batches of 16 or 50: float64 noise only
def test_a_curve_point_is_the_same_with_features_cached_or_not(learnable):
    torch.manual_seed(1)
    model = build_model("convnet_1", 10)
    # shuffled validation labels: the schedule stops the fit before its 30 epochs
    splits = learnable(60), learnable(30, seed=1, shuffled=True), learnable(30, seed=2)
    points = [curve_point(model, "lp", *splits, engine(), max_epochs=30, seed=3, patience=1,
                          cache_features=cache) for cache in (False, True)]  # fmt: skip
    assert points[0] == points[1] and points[0].epochs < 30


class Subclassed(BlockModel):
    """A block model whose forward could be anything."""


class Reads(FitCallback):
    """A callback not declared safe for features (it could read the batches)."""


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"engine": {"freeze_bn_stats": False}}, "BatchNorm statistics move"),
        ({"engine": {"augment": "flip_crop"}}, "augmentation"),
        ({"hp": {"dropout": 0.5}}, "dropout"),
        ({"task": {"trainable": None}}, "trains every layer"),
        ({"task": {"trainable": ["layer1", "fc"]}}, "trains"),
        ({"task": {"callbacks": [Reads()]}}, "callback Reads is not declared feature_safe"),
        ({"task": {"objective": "dro"}}, "loss term 'dro'"),
        ({"model": lambda m: m.layer1.add_module("noise", nn.Dropout(0.1))},
         "unknown training behaviour (layer1.noise: Dropout)"),
        ({"model": lambda m: setattr(m, "__class__", Subclassed)},
         "a Subclassed, not a plain block model"),
    ],
)  # fmt: skip
def test_what_keeps_a_fit_in_the_loop(learnable, change, reason):
    torch.manual_seed(2)
    model = build_model("convnet_1", 10)
    change.get("model", lambda m: None)(model)
    task = task_of(learnable, **change.get("task", {}))
    hp = HyperParameters({**HP, **change.get("hp", {})})
    fitting = engine(**change.get("engine", {}))
    assert reason in cache_refusal(model, task, hp, fitting)
    with pytest.raises(Seq2FinalError, match="would change the result"):
        fit_on_features(clone_model(model), task, hp, fitting, 2, seed=0)


def test_fit_cached_runs_the_loop_where_caching_would_change_the_fit_or_is_off(learnable):
    torch.manual_seed(3)
    model = build_model("convnet_1", 10)
    task = task_of(learnable)
    moving = engine(freeze_bn_stats=False)  # BN statistics move: the loop, exactly
    one, two = clone_model(model), clone_model(model)
    passes = body_passes(two)
    fit(one, task, HP, moving, 3, seed=0)
    fit_cached(two, task, HP, moving, 3, seed=0)
    assert all(torch.equal(v, two.state_dict()[k]) for k, v in one.state_dict().items())
    assert len(passes) > 3 * 4  # every batch of every epoch through the body
    off = clone_model(model)
    passes = body_passes(off)
    fit_cached(off, task, HP, engine(), 3, seed=0, cache=False)
    assert len(passes) > 3 * 4


def test_head_inputs_are_what_the_head_receives(learnable):
    torch.manual_seed(4)
    model = build_model("resnet_1", 10).eval()
    data = learnable(30)
    seen = []
    model.fc.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.no_grad():
        model(data.x.float() / 255)
    assert torch.equal(layer_inputs(model, model.fc, data, engine()), seen[0])
