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


def _inputs(model=None, domains=3, seed=0):
    """A step of ``domains`` domains of 6 images each, with its logits and losses filled in."""
    g = torch.Generator().manual_seed(seed)
    model = model or nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    batches = [
        Batch(torch.randn(6, 3, 2, 2, generator=g), torch.arange(6) % 3, None, None, 1.0)
        for _ in range(domains)
    ]
    inputs = LossInputs(model, batches, torch.Generator().manual_seed(1))
    for batch in batches:
        logits = model(batch.x)
        inputs.logits.append(logits)
        inputs.losses.append(F.cross_entropy(logits, batch.y, reduction="none"))
        inputs.domain_losses.append(inputs.losses[-1].mean())
    return inputs


def _domain_losses(inputs):
    return torch.stack(inputs.domain_losses)


def _check_erm(inputs):
    assert torch.equal(
        LOSS_TERMS["erm"]().combine(inputs, HyperParameters()), _domain_losses(inputs).sum()
    )


def _check_irm(inputs):
    term, hp = LOSS_TERMS["irm"](), HyperParameters(irm_penalty=2.5)
    loss = term.domain_loss(inputs, 1, inputs.domain_losses[1], hp)
    expected = inputs.domain_losses[1] + 2.5 * irm_penalty(
        inputs.logits[1], inputs.batches[1].y, torch.Generator().manual_seed(1)
    )
    torch.testing.assert_close(loss, expected)
    assert torch.equal(term.combine(inputs, hp), _domain_losses(inputs).sum())


def _check_irm_v1(inputs):
    """Wild-Time's IRM-T ``train_step`` re-typed: a scalar dummy ``scale`` times the logits,
    per group the mean loss and the product of the gradients of the even and odd halves' mean
    losses w.r.t. ``scale``, both averaged over the groups."""
    scale = torch.tensor(1.0, dtype=torch.float64).requires_grad_()
    avg_loss, penalty = 0.0, 0.0
    for logits, batch in zip(inputs.logits, inputs.batches, strict=True):
        group_losses = F.cross_entropy(scale * logits, batch.y, reduction="none")
        avg_loss += group_losses.mean()
        grad_1 = torch.autograd.grad(group_losses[0::2].mean(), [scale], create_graph=True)[0]
        grad_2 = torch.autograd.grad(group_losses[1::2].mean(), [scale], create_graph=True)[0]
        penalty += torch.sum(grad_1 * grad_2)
    groups = len(inputs.batches)
    expected = avg_loss / groups + 2.5 * (penalty / groups)
    loss = LOSS_TERMS["irm_v1"]().combine(inputs, HyperParameters(irm_penalty=2.5))
    torch.testing.assert_close(loss, expected)
    assert float(penalty) != 0.0  # the penalty counts in the check


def _check_dro(inputs):
    assert torch.equal(
        LOSS_TERMS["dro"]().combine(inputs, HyperParameters()), _domain_losses(inputs).max()
    )


def _check_joint(inputs):
    combined = LOSS_TERMS["joint"]().combine(inputs, HyperParameters())
    torch.testing.assert_close(combined, _domain_losses(inputs).sum() / 3)


def _check_coral(inputs):
    """Equal domains: the pooled cross-entropy is the domains' mean loss."""
    combined = LOSS_TERMS["coral"]().combine(inputs, HyperParameters(coral=0.9))
    torch.testing.assert_close(
        combined, _domain_losses(inputs).mean() + 0.9 * coral_penalty(inputs.logits)
    )


def _check_l2(inputs):
    term = LOSS_TERMS["l2"]()
    torch.testing.assert_close(
        term.penalty(inputs, HyperParameters(weight_decay=0.3)),
        0.3 * squared_weight_norm(inputs.model),
    )
    assert term.penalty(inputs, HyperParameters(weight_decay=0.0)) is None


def _check_pull(cls, name):
    def check(inputs):
        g = torch.Generator().manual_seed(3)
        named = dict(inputs.model.named_parameters())
        anchors = [
            ({n: p.detach() + torch.randn(p.shape, generator=g) for n, p in named.items()},
             {n: torch.rand(p.shape, generator=g) for n, p in named.items()})
            for _ in range(2)
        ]  # fmt: skip
        expected = sum(
            float((fisher[n] * (p.detach() - values[n]) ** 2).sum())
            for values, fisher in anchors
            for n, p in named.items()
        )  # λ Σ_k Σ F_k (θ − θ_k)², no ½, over every anchor
        value = cls(anchors).penalty(inputs, HyperParameters({name: 0.5}))
        assert float(value) == pytest.approx(0.5 * expected)
        assert cls([]).penalty(inputs, HyperParameters({name: 0.5})) is None  # nothing to pull to

    return check


def _check_adjacency(inputs):
    torch.manual_seed(0)
    model = JointModel("convnet_1", 3, 2, [["fc"]])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    joint = LossInputs(model, inputs.batches, None)
    value = Adjacency().penalty(joint, HyperParameters(adjacency=0.7))
    torch.testing.assert_close(value, 0.7 * model.adjacency_norm())
    assert Adjacency().penalty(inputs, HyperParameters(adjacency=0.7)) is None  # a plain model


CHECKS = {
    "erm": _check_erm, "irm": _check_irm, "irm_v1": _check_irm_v1, "dro": _check_dro, "joint": _check_joint,
    "coral": _check_coral, "l2": _check_l2, "ewc": _check_pull(Ewc, "ewc_lambda"),
    "si": _check_pull(Si, "si_c"), "adjacency": _check_adjacency,
}  # fmt: skip


@pytest.mark.parametrize(
    "name", sorted(n for n, t in LOSS_TERMS.items() if t.__module__.startswith("seq2final."))
)
def test_every_registered_term_equals_its_formula(name):
    """A term registered without a check here fails: a new built-in term brings its formula."""
    assert name in CHECKS, f"loss term '{name}' has no formula check in this file"
    CHECKS[name](_inputs())


def _split():
    return TensorSplit(torch.zeros(4, 3, 2, 2, dtype=torch.uint8), torch.arange(4) % 2)


def test_a_hyper_parameter_two_active_parts_declare_is_one_line():
    class Again(BaseModel):
        weight_decay: float = 0.0

    class Twice(LossTerm):
        name = "twice"
        hyperparameters = Again

        def penalty(self, inputs, hp):
            return None

    with pytest.raises(Seq2FinalError) as error:
        Task([_split()], _split(), penalties=[Twice()])
    assert str(error.value) == (
        "hyper-parameter 'weight_decay' is declared by both loss term 'l2' and loss term 'twice'; "
        "valid: a name no other active term declares"
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
                       "objectives: erm, irm, irm_v1, dro, joint, coral"):  # fmt: skip
        Task([_split()], _split(), objective="l2")


def test_a_mode_names_registered_terms_with_distinct_hyper_parameters():
    from seq2final.methods.modes import FinalMode

    with pytest.raises(ValueError, match="mode 'm': unknown loss term 'vrex'; valid: erm, irm"):
        FinalMode("m", "", ("nothing",), run=None, terms=("vrex",))
    with pytest.raises(Seq2FinalError, match="'ewc_lambda' is declared by both loss term 'ewc'"):
        FinalMode("m", "", ("nothing",), run=None, terms=("ewc", "ewc"))


def test_hyper_parameters_never_shadow_the_mapping_and_read_as_attributes_and_names():
    shadow = type("Shadow", (BaseModel,), {"__annotations__": {"items": float}, "items": 0.0})
    with pytest.raises(Seq2FinalError, match="hyper-parameter 'items' is a name the values'"):
        loss_term("shadow")(type("ShadowTerm", (LossTerm,), {"hyperparameters": shadow}))
    hp = HyperParameters(lr=0.1, weight_decay=0.2)
    assert (hp.lr, hp["weight_decay"], dict(hp.items())) == (
        0.1,
        0.2,
        {"lr": 0.1, "weight_decay": 0.2},
    )
    assert hp == {"lr": 0.1, "weight_decay": 0.2}
    import copy
    import pickle

    assert copy.deepcopy(hp) == hp and pickle.loads(pickle.dumps(hp)) == hp


def test_a_pull_declares_exactly_its_weight():
    two = type(
        "Two", (BaseModel,), {"__annotations__": {"a": float, "b": float}, "a": 0.0, "b": 0.0}
    )
    with pytest.raises(Seq2FinalError, match="a pull declares exactly one hyper-parameter"):
        type("TwoWeights", (Ewc,), {"hyperparameters": two})


def _wild_time_group_dro(losses, groups, num_groups, adv_probs, step_size=0.01):
    """Wild-Time's GroupDRO-T loss of one batch re-typed (skzhang1/Wild-Time@23b0696,
    ``wildtime/methods/groupdro/loss.py``, ``LossComputer.compute_group_avg`` and
    ``compute_robust_loss`` at their defaults): each group's mean loss over the ids
    0..num_groups−1 only, the weights multiplied by exp(step_size · loss) and renormalised, the
    loss their weighted sum. Returns the loss and the new weights."""
    group_map = (groups == torch.arange(num_groups).unsqueeze(1)).double()
    count = group_map.sum(1)
    group_loss = (group_map @ losses) / (count + (count == 0).double())
    probs = adv_probs * torch.exp(step_size * group_loss)
    probs = probs / probs.sum()
    return group_loss @ probs, probs


def test_wild_times_group_dro_weighs_its_first_groups_where_ours_takes_the_worst_window():
    """docs/fixes.md, Wild-Time: its weights start at 1/num_groups and move a little each step,
    and a window whose id is num_groups or more weighs nothing; seq2final's DRO (the paper's,
    shared with GroupDRO-T) back-propagates the worst window's mean loss."""
    losses = torch.tensor([0.2, 0.4, 1.0, 1.2, 0.6, 0.8, 3.0, 4.0, 2.5, 1.5], dtype=torch.float64)
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 4, 5, 5])  # six windows, num_groups 4
    start = torch.full((4,), 0.25, dtype=torch.float64)
    wild, probs = _wild_time_group_dro(losses, groups, 4, start)
    means = [losses[groups == g].mean() for g in range(6)]
    expected = sum(means[g] * probs[g] for g in range(4))  # windows 4 and 5 weigh nothing
    assert wild == pytest.approx(float(expected), abs=1e-12)
    assert float(probs.sum()) == pytest.approx(1.0)  # near 1/4 each after one step, the
    assert float((probs - 0.25).abs().max()) < 0.01  # larger the group's loss the larger
    assert probs.argsort().tolist() == [0, 2, 1, 3]
    inputs = LossInputs(nn.Identity(), [], None, domain_losses=means)
    ours = LOSS_TERMS["dro"]().combine(inputs, HyperParameters())
    assert float(ours) == pytest.approx(4.0) == float(max(means))  # window 4: Wild-Time drops it
    assert float(ours) - float(wild) > 1.0
