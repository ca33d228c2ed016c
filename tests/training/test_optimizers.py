"""Optimiser recipes: Adam by default, a recipe's own hyper-parameters, and a step closure that
re-evaluates the whole loss (SAM's second pass) at the perturbed weights."""

import copy

import pytest
import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import NameClash
from seq2final.models import build_model
from seq2final.training import FitCallback, HyperParameters, Task, fit
from seq2final.training.engine import Engine, scale_images, unfusable
from seq2final.training.objectives import mode_schemas
from seq2final.training.optimizers import OPTIMIZERS, OptimizerRecipe, optimizer
from seq2final.training.tensors import TensorSplit

ENGINE = Engine(batch_size=32, eval_batch_size=32)


def _data(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorSplit(
        torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8, generator=g), torch.arange(n) % 3
    )


class SharpnessAware(torch.optim.Optimizer):
    """SAM around Adam: ascend to w + ρ g/‖g‖, take the gradient there, step Adam from w."""

    def __init__(self, parameters, rho, lr):
        super().__init__(parameters, {"rho": rho})
        self.adam = torch.optim.Adam(self.param_groups, lr=lr)
        self.passes = 0

    @torch.no_grad()
    def step(self, closure):
        chosen = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in chosen]))
        shifts = [p.grad * (self.param_groups[0]["rho"] / (norm + 1e-12)) for p in chosen]
        for p, shift in zip(chosen, shifts, strict=True):
            p.add_(shift)
        with torch.enable_grad():
            closure()
        self.passes += 1
        for p, shift in zip(chosen, shifts, strict=True):
            p.sub_(shift)
        self.used = [(p.detach().clone(), p.grad.clone()) for p in chosen]  # for the test
        self.adam.step()


class Rho(BaseModel):
    test_rho: float = Field(default=0.05, gt=0, json_schema_extra={"space": {"grid": [0.05]}})


@optimizer("test_sam")
class TestSam(OptimizerRecipe):
    hyperparameters = Rho
    takes_closure = True

    def build(self, parameters, hp):
        self.made = SharpnessAware(parameters, hp.test_rho, hp.lr)
        return self.made


def test_sams_update_is_adams_step_with_the_gradient_at_the_perturbed_weights():
    torch.manual_seed(0)
    model = build_model("convnet_1", 3)
    start = copy.deepcopy(model)
    task = Task([_data()], _data(seed=1), optimizer="test_sam")
    fit(model, task, HyperParameters(lr=1e-2, test_rho=0.1, weight_decay=0.1), ENGINE, 1, seed=0)
    # a re-typing of SAM (Foret et al. 2021, Alg. 1) on the same batch: every image, train mode
    x, y = scale_images(_data().x, ENGINE), _data().y
    start.train()
    parameters = list(start.parameters())
    decayed = [p for m in start.modules() if isinstance(m, nn.Conv2d | nn.Linear)
               for p in m.parameters(recurse=False)]  # fmt: skip

    def loss():  # the L2 penalty too: SAM's second pass evaluates it at the perturbed weights
        return F.cross_entropy(start(x), y) + 0.1 * sum((p**2).sum() for p in decayed)

    gradient = torch.autograd.grad(loss(), parameters)
    norm = torch.sqrt(sum((g**2).sum() for g in gradient))
    with torch.no_grad():
        for p, g in zip(parameters, gradient, strict=True):
            p += 0.1 * g / norm
    perturbed = torch.autograd.grad(loss(), parameters)
    with torch.no_grad():
        for p, g in zip(parameters, gradient, strict=True):
            p -= 0.1 * g / norm
    # Adam starts from the weights as they were, with the gradient taken at w + ρ g/‖g‖
    used = task.optimizer.made.used
    for (weight, grad), p, theirs in zip(used, parameters, perturbed, strict=True):
        torch.testing.assert_close(weight, p.detach())
        torch.testing.assert_close(grad, theirs, rtol=1e-4, atol=1e-6)
    assert not all(
        torch.allclose(g, h) for g, h in zip(gradient, perturbed, strict=True)
    )  # it did perturb


def test_a_closure_recipe_reruns_the_whole_loss_once_more_per_update():
    passes = []

    class Counting(FitCallback):
        def after_backward(self, fit_state):
            passes.append(fit_state.epoch)

    task = Task([_data()], _data(seed=1), callbacks=[Counting()], optimizer="test_sam")
    fit(build_model("convnet_1", 3), task, HyperParameters(lr=1e-3), ENGINE, 2, seed=0)
    assert passes == [1, 1, 2, 2]  # one batch an epoch, two passes a batch
    assert task.optimizer.made.passes == 2


def test_the_closure_draws_what_the_first_pass_drew_so_batch_orders_are_a_plain_fits():
    """IRM draws a permutation per domain from the fit's generator: the closure's pass draws
    the same one, and every later batch is the one an Adam fit of the same seed draws."""
    seen = {}

    class Batches(FitCallback):
        def __init__(self, name):
            self.name = name
            seen[name] = []

        def after_backward(self, fit_state):
            seen[self.name].append([b.y.tolist() for b in fit_state.batches])

    for name in ("adam", "test_sam"):
        task = Task([_data(), _data(seed=2)], _data(seed=1), objective="irm", optimizer=name,
                    callbacks=[Batches(name)])  # fmt: skip
        fit(build_model("convnet_1", 3), task, HyperParameters(lr=1e-3), ENGINE, 3, seed=0)
    assert seen["test_sam"][::2] == seen["test_sam"][1::2]  # both passes of a step: one batch
    assert seen["test_sam"][::2] == seen["adam"]


def test_a_recipes_hyperparameters_join_the_fits_and_a_modes():
    task = Task([_data()], _data(seed=1), optimizer="test_sam")
    assert task.checked_hyperparameters({"lr": 1e-3})["test_rho"] == 0.05
    with pytest.raises(Seq2FinalError, match="test_rho"):
        task.checked_hyperparameters({"lr": 1e-3, "test_rho": -1.0})
    with pytest.raises(Seq2FinalError, match="unknown hyper-parameter"):
        Task([_data()], _data(seed=1)).checked_hyperparameters({"lr": 1e-3, "test_rho": 0.1})
    assert "test_rho" in {
        n for _, schema in mode_schemas((), "test_sam") for n in schema.model_fields
    }
    assert unfusable(ENGINE, task) == ["optimizer test_sam"]


def test_an_unknown_recipe_a_clash_and_fp16_with_a_closure_are_refused():
    with pytest.raises(Seq2FinalError, match="unknown optimizer 'nope'.*adam"):
        Task([_data()], _data(seed=1), optimizer="nope")
    with pytest.raises(NameClash, match="optimizer 'adam'"):
        optimizer("adam")(type("Again", (OptimizerRecipe,), {}))
    fp16 = Engine.model_construct(**{**ENGINE.model_dump(), "amp": "fp16"})
    task = Task([_data()], _data(seed=1), optimizer="test_sam")
    with pytest.raises(Seq2FinalError, match="closure.*valid: amp none or bf16"):
        fit(build_model("convnet_1", 3), task, HyperParameters(lr=1e-3), fp16, 1, seed=0)
    assert "adam" in OPTIMIZERS
    with pytest.raises(Seq2FinalError, match="not an instance of a registered recipe"):
        Task([_data()], _data(seed=1), optimizer=type("Loose", (OptimizerRecipe,), {})())


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_registered_recipe_trains_a_fit_with_its_default_values(name):
    """Looped over the registry (the built-in and any plugin's): one epoch moves the weights."""
    model = build_model("convnet_1", 3)
    before = [p.detach().clone() for p in model.parameters()]

    class Last(FitCallback):
        def after_update(self, fit_state):
            self.weights = [p.detach().clone() for p in fit_state.model.parameters()]

    last = Last()
    fit(model, Task([_data()], _data(seed=1), callbacks=[last], optimizer=name),
        HyperParameters(lr=1e-2), ENGINE, 1, seed=0)  # fmt: skip
    assert any(not torch.equal(a, b) for a, b in zip(before, last.weights, strict=True))


@optimizer("test_layerwise")
class LayerwiseDecay(OptimizerRecipe):
    """Layer-wise learning-rate decay: each earlier parameter tensor at half the next one's rate,
    grouped by the model's own names (the build sees the model)."""

    def build(self, parameters, hp, model):
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        assert [p for _, p in named] == parameters  # the same tensors, in the same order
        depth = len(named)
        self.groups = [{"params": [p], "lr": hp.lr * 0.5 ** (depth - 1 - i), "name": name}
                       for i, (name, p) in enumerate(named)]  # fmt: skip
        return torch.optim.Adam(self.groups)


def test_a_recipe_that_takes_the_model_groups_parameters_by_name():
    model = build_model("convnet_1", 3)
    for p in model.parameters():  # a frozen tensor is left out of the names as of the parameters
        p.requires_grad_(False)
        break
    task = Task([_data()], _data(seed=1), optimizer="test_layerwise")
    fit(model, task, HyperParameters(lr=1e-2), ENGINE, 1, seed=0)
    groups = task.optimizer.groups
    trainable = [name for name, p in model.named_parameters()][1:]
    assert [group["name"] for group in groups] == trainable
    assert groups[-1]["lr"] == 1e-2 and groups[-2]["lr"] == 5e-3
