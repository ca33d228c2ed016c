"""Features in ``LossInputs``: the head's input, from the pass that made the logits, computed only
when a term asks, with no hook left behind."""

import pytest
import torch

from seq2final.core.errors import Seq2FinalError
from seq2final.models import ARCHITECTURES, JointModel, build_model
from seq2final.training import HyperParameters, LossTerm, Task, fit
from seq2final.training.engine import Engine, run_model_with_features, unfusable
from seq2final.training.tensors import TensorSplit

ENGINE = Engine(batch_size=8, eval_batch_size=16)


def _data(n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorSplit(
        torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8, generator=g), torch.arange(n) % 3
    )


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_features_are_what_the_last_linear_layer_sees_and_the_logits_are_forwards(arch):
    torch.manual_seed(0)
    model = build_model(arch, 3, dropout=0.0).eval()
    x = torch.rand(4, 3, 32, 32)
    seen = []
    hook = model.fc.linear.register_forward_hook(lambda m, inputs, out: seen.append(inputs[0]))
    with torch.no_grad():
        logits = model(x)
        hook.remove()
        features, same_logits = run_model_with_features(model, x, None)
    assert torch.equal(features, seen[0]) and torch.equal(same_logits, logits)


class Spread(LossTerm):
    """Asks for features: the variance of the domains' mean features (a Fishr-like penalty)."""

    name = "spread"
    uses_features = True

    def __init__(self):
        self.seen = []

    def penalty(self, inputs, hp):
        self.seen.append(
            [(f.shape, len(b.y)) for f, b in zip(inputs.features, inputs.batches, strict=True)]
        )
        return torch.stack([f.mean(0) for f in inputs.features]).var(0).sum()


class Blind(LossTerm):
    name = "blind"

    def penalty(self, inputs, hp):
        assert inputs.features == []  # no term asked: none computed
        return None


def test_a_fit_computes_features_per_domain_only_when_a_term_asks():
    spread = Spread()
    model = build_model("convnet_1", 3)
    task = Task([_data(), _data(seed=1)], _data(seed=2), penalties=[spread])
    fit(model, task, HyperParameters(lr=1e-3), ENGINE, 1, seed=0)
    width = model.fc.linear.in_features
    assert spread.seen == [[(torch.Size([8, width]), 8)] * 2] * 2  # 2 steps of 2 domains
    assert not any(m._forward_hooks for m in model.modules())
    assert unfusable(ENGINE, task) == ["spread"]  # a stack does not compute features
    fit(build_model("convnet_1", 3), Task([_data()], _data(seed=2), penalties=[Blind()]),
        HyperParameters(lr=1e-3), ENGINE, 1, seed=0)  # fmt: skip


def test_a_joint_model_has_no_features_to_give():
    joint = JointModel("convnet_1", 3, 2, [["fc"]])
    with pytest.raises(Seq2FinalError, match="needs a block model, not JointModel"):
        run_model_with_features(joint, torch.rand(2, 3, 8, 8), 1)
