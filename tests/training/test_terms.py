"""Every built-in loss term against its formula on tiny tensors, and the term API's refusals."""

import pytest
import torch
import torch.nn.functional as F
from pydantic import BaseModel
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models import JointModel, squared_weight_norm
from seq2final.training import HyperParameters, LossTerm, Task, loss_term
from seq2final.training.tensors import TensorSplit
from seq2final.training.terms import (
    LOSS_TERMS,
    Adjacency,
    Batch,
    Ewc,
    LossInputs,
    Si,
    coral_penalty,
    irm_penalty,
)

pytestmark = pytest.mark.usefixtures("float64")


def _view(model=None, domains=3, seed=0):
    """A step of ``domains`` domains of 6 images each, with its logits and losses filled in."""
    g = torch.Generator().manual_seed(seed)
    model = model or nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    batches = [
        Batch(torch.randn(6, 3, 2, 2, generator=g), torch.arange(6) % 3, None, None, 1.0)
        for _ in range(domains)
    ]
    view = LossInputs(model, batches, torch.Generator().manual_seed(1))
    for batch in batches:
        logits = model(batch.x)
        view.logits.append(logits)
        view.losses.append(F.cross_entropy(logits, batch.y, reduction="none"))
        view.domain_losses.append(view.losses[-1].mean())
    return view


def _domain_losses(view):
    return torch.stack(view.domain_losses)


def _check_erm(view):
    assert torch.equal(
        LOSS_TERMS["erm"]().combine(view, HyperParameters()), _domain_losses(view).sum()
    )


def _check_irm(view):
    term, hp = LOSS_TERMS["irm"](), HyperParameters(irm_penalty=2.5)
    loss = term.domain_loss(view, 1, view.domain_losses[1], hp)
    expected = view.domain_losses[1] + 2.5 * irm_penalty(
        view.logits[1], view.batches[1].y, torch.Generator().manual_seed(1)
    )
    torch.testing.assert_close(loss, expected)
    assert torch.equal(term.combine(view, hp), _domain_losses(view).sum())


def _check_dro(view):
    assert torch.equal(
        LOSS_TERMS["dro"]().combine(view, HyperParameters()), _domain_losses(view).max()
    )


def _check_joint(view):
    combined = LOSS_TERMS["joint"]().combine(view, HyperParameters())
    torch.testing.assert_close(combined, _domain_losses(view).sum() / 3)


def _check_coral(view):
    combined = LOSS_TERMS["coral"]().combine(view, HyperParameters(coral=0.9))
    torch.testing.assert_close(
        combined, _domain_losses(view).mean() + 0.9 * coral_penalty(view.logits)
    )


def _check_l2(view):
    term = LOSS_TERMS["l2"]()
    torch.testing.assert_close(
        term.penalty(view, HyperParameters(weight_decay=0.3)), 0.3 * squared_weight_norm(view.model)
    )
    assert term.penalty(view, HyperParameters(weight_decay=0.0)) is None


def _check_pull(cls, name):
    def check(view):
        values = {n: p.detach() + 1.0 for n, p in view.model.named_parameters()}
        fisher = {n: torch.full_like(p, 2.0) for n, p in view.model.named_parameters()}
        count = sum(p.numel() for p in view.model.parameters())
        pull = cls([(values, fisher)])
        value = pull.penalty(view, HyperParameters({name: 0.5}))
        assert float(value) == pytest.approx(0.5 * 2.0 * count)  # λ Σ F (θ − θ_k)², no ½
        assert cls([]).penalty(view, HyperParameters({name: 0.5})) is None  # nothing to pull to

    return check


def _check_adjacency(view):
    torch.manual_seed(0)
    model = JointModel("convnet_1", 3, 2, [["fc"]])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    joint = LossInputs(model, view.batches, None)
    value = Adjacency().penalty(joint, HyperParameters(adjacency=0.7))
    torch.testing.assert_close(value, 0.7 * model.adjacency_norm())
    assert Adjacency().penalty(view, HyperParameters(adjacency=0.7)) is None  # a plain model


CHECKS = {
    "erm": _check_erm, "irm": _check_irm, "dro": _check_dro, "joint": _check_joint,
    "coral": _check_coral, "l2": _check_l2, "ewc": _check_pull(Ewc, "ewc_lambda"),
    "si": _check_pull(Si, "si_c"), "adjacency": _check_adjacency,
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(LOSS_TERMS))
def test_every_registered_term_equals_its_formula(name):
    """A term registered without a check here fails: a new built-in term brings its formula."""
    assert name in CHECKS, f"loss term '{name}' has no formula check in this file"
    CHECKS[name](_view())


def _split():
    return TensorSplit(torch.zeros(4, 3, 2, 2, dtype=torch.uint8), torch.arange(4) % 2)


def test_a_hyper_parameter_two_active_parts_declare_is_one_line():
    class Again(BaseModel):
        weight_decay: float = 0.0

    class Twice(LossTerm):
        name = "twice"
        hyperparameters = Again

        def penalty(self, view, hp):
            return None

    with pytest.raises(Seq2FinalError) as error:
        Task([_split()], _split(), terms=[Twice()])
    assert str(error.value) == (
        "hyper-parameter 'weight_decay' is declared by both loss term 'l2' and loss term 'twice'; "
        "valid: a name no other active term or callback declares"
    )


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (dict, "loss term 'bad': hyperparameters <class 'dict'> is not a pydantic model; valid: "),
        (type("Typed", (BaseModel,), {"__annotations__": {"k": str}, "k": "x"}),
         "loss term 'bad': hyper-parameter 'k' is typed <class 'str'>; valid: float"),
        (type("Bare", (BaseModel,), {"__annotations__": {"k": float}}),
         "loss term 'bad': hyper-parameter 'k' has no default; give it one"),
    ],
)  # fmt: skip
def test_a_plugin_term_with_an_invalid_schema_is_refused_when_it_registers(schema, message):
    with pytest.raises(Seq2FinalError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        loss_term("bad")(type("Bad", (LossTerm,), {"hyperparameters": schema}))
    assert "bad" not in LOSS_TERMS


def test_an_objective_is_a_term_that_combines():
    with pytest.raises(Seq2FinalError, match="loss term 'l2' is a penalty, not an objective; valid "
                       "objectives: erm, irm, dro, joint, coral"):  # fmt: skip
        Task([_split()], _split(), objective="l2")
