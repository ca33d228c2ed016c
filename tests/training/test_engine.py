"""The engine's documented options: frozen BN statistics, the devices and precisions it accepts."""

import pytest
import torch
from torch import nn

from seq2final.config.checks import validate_parameters
from seq2final.core.errors import Seq2FinalError
from seq2final.models import build_model
from seq2final.training import Engine, HyperParameters, Task, TensorSplit, fit, loop
from seq2final.training.engine import autocast, fuse_width


def _split(n: int, seed: int) -> TensorSplit:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g)
    return TensorSplit(images, torch.arange(n) % 3)


@pytest.mark.parametrize("freeze", [False, True])
def test_a_frozen_layer_statistic_moves_by_the_bn_momentum_rule_unless_frozen(freeze, monkeypatch):
    """One training step of the head alone, by hand: a frozen layer's running mean becomes
    0.9 · old + 0.1 · batch mean in training mode (as in the original), and stays old with
    ``freeze_bn_stats``. Validation is scripted so the fit keeps epoch 1."""
    scores = iter([0.1, 0.9])
    monkeypatch.setattr(loop, "_validate", lambda model, valid, step, engine: (0.0, next(scores)))
    torch.manual_seed(0)
    model = build_model("convnet_1", 3)
    old = model.conv1.bn.running_mean.clone()
    data = _split(8, 0)
    with torch.no_grad():
        batch_mean = model.conv1.conv(data.x.float() / 255).mean(dim=(0, 2, 3))
    engine = Engine(batch_size=8, eval_batch_size=8, freeze_bn_stats=freeze)
    task = Task([data], _split(8, 1), trainable=["fc"])
    result = fit(model, task, HyperParameters(lr=1e-3), engine, max_epochs=1, seed=0)
    assert result.best_epoch == 1
    moved = 0.9 * old + 0.1 * batch_mean
    assert not torch.allclose(old, moved)  # the two behaviours are told apart
    assert torch.allclose(model.conv1.bn.running_mean, old if freeze else moved, atol=1e-6)


def test_fp16_without_cuda_is_refused_before_training_even_under_device_auto(
    monkeypatch, project_parameters
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(Seq2FinalError, match="amp 'fp16' needs a CUDA device, not 'cpu'"):
        Engine(device="auto", amp="fp16").torch_device()
    params = project_parameters
    # checked with the parameters, whether or not anything will train (evaluate never does)
    with pytest.raises(Seq2FinalError, match="parameter 'training': amp 'fp16' needs a CUDA"):
        validate_parameters({**params, "training": {"amp": "fp16"}})
    assert Engine(device="auto", amp="bf16").torch_device() == torch.device("cpu")


def test_bf16_on_the_cpu_computes_in_bfloat16_and_trains():
    engine = Engine(amp="bf16", batch_size=8, eval_batch_size=8)
    layer = nn.Linear(4, 2)
    with autocast(engine, torch.device("cpu")):
        assert layer(torch.ones(1, 4)).dtype == torch.bfloat16
    with autocast(Engine(), torch.device("cpu")):
        assert layer(torch.ones(1, 4)).dtype == torch.float32
    torch.manual_seed(0)
    model = build_model("convnet_1", 3)
    task = Task([_split(16, 0)], _split(8, 1))
    result = fit(model, task, HyperParameters(lr=1e-3), engine, max_epochs=2, seed=0)
    losses = [row["train_loss"] for row in result.history[1:]]
    assert len(losses) == 2 and all(loss == loss and loss > 0 for loss in losses)


def test_fuse_auto_means_one_trial_at_a_time_on_the_cpu_and_bad_values_are_one_line(
    monkeypatch, project_parameters
):
    task = Task([_split(4, 0)], _split(4, 1))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert fuse_width(Engine(device="auto"), task) == 1 and fuse_width(Engine(fuse=6), task) == 6
    monkeypatch.setattr(Engine, "torch_device", lambda self: torch.device("cuda"))
    assert fuse_width(Engine(), task) == 16 and fuse_width(Engine(compile=True), task) == 1
    assert fuse_width(Engine(augment="flip_crop"), task) == 16
    with pytest.raises(ValueError, match="fuse 4 with amp fp16, compile: fused trials support"):
        Engine(fuse=4, amp="fp16", compile=True)
    params = project_parameters
    for training, message in [
        ({"fuse": 0}, "fuse 0: valid: auto or a number of trials >= 1"),
        ({"fuse": "all"}, "fuse 'all': valid: auto or a number of trials >= 1"),
        ({"fuse": 4, "channels_last": True}, "fused trials support none of them"),
        ({"fuse": 2, "compile": True}, "fuse 2 with compile: fused trials support none"),
    ]:
        with pytest.raises(Seq2FinalError, match=f"parameter 'training.*{message}"):
            validate_parameters({**params, "training": training})
    # not in the results key: fusing schedules trials, it does not change what a fit computes
    assert Engine(fuse=8).results_key() == Engine(fuse=1).results_key()
