"""Parameters chosen by a predicate given the model: biases, modules by whole path parts, module
types, their combinations, and a fit or a phase that trains exactly them."""

import pytest
import torch
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models import biases, build_model, choose_trainable, in_modules, of_type
from seq2final.training import FitCallback, HyperParameters, ModelWrapper, Task, fit
from seq2final.training.engine import Engine
from seq2final.training.tensors import TensorSplit


class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.fc2 = nn.Linear(2, 2, bias=False)
        self.bn = nn.BatchNorm1d(2)


def test_each_choice_and_their_combinations_name_the_right_parameters():
    model = Two()
    assert biases().chosen(model) == ["fc.bias", "bn.bias"]
    assert in_modules("fc").chosen(model) == ["fc.weight", "fc.bias"]  # never fc2
    assert of_type(nn.BatchNorm1d).chosen(model) == ["bn.weight", "bn.bias"]
    assert (biases() | in_modules("fc2")).chosen(model) == ["fc.bias", "fc2.weight", "bn.bias"]
    assert (biases() & ~of_type(nn.BatchNorm1d)).chosen(model) == ["fc.bias"]
    assert (biases() | in_modules("fc2")).description == "biases or modules fc2"


def test_a_choice_of_nothing_is_refused_in_one_line():
    with pytest.raises(Seq2FinalError) as error:
        choose_trainable(Two(), in_modules("head"))
    assert str(error.value) == (
        "trainable parameters 'modules head' choose none of the model's; valid: a choice "
        "matching parameters such as fc.weight, fc.bias, fc2.weight, bn.weight"
    )


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorSplit(torch.randint(0, 256, (16, 3, 8, 8), dtype=torch.uint8, generator=g),
                       torch.arange(16) % 3)  # fmt: skip


class Trained(FitCallback):
    def after_update(self, fit_state):
        self.weights = {n: p.detach().clone() for n, p in fit_state.model.named_parameters()}


def test_a_fit_trains_exactly_the_chosen_parameters_and_restores_every_flag():
    model = build_model("resnet_1", 3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trained = Trained()
    task = Task([_data()], _data(1), trainable=biases() | in_modules("fc"), callbacks=[trained])
    fit(model, task, HyperParameters(lr=1e-2), Engine(batch_size=8, patience=5), 2, seed=0)
    for name, parameter in model.named_parameters():
        moved = not torch.equal(trained.weights[name], before[name])
        chosen = name.endswith(".bias") or name.startswith("fc.")
        assert moved == chosen, name
        assert parameter.requires_grad


class BiasesFirst(ModelWrapper):
    def phases(self):
        return [(1, biases()), (None, None)]


def test_a_phase_may_be_a_choice_and_one_that_trains_nothing_names_it():
    model = build_model("convnet_1", 3)
    BiasesFirst().check(model)  # every bias is trainable: the phase has something to train
    for parameter in model.parameters():
        parameter.requires_grad_(parameter.dim() > 1)  # no bias trains
    with pytest.raises(Seq2FinalError, match="phase 1 trains no parameter \\(choice 'biases'\\)"):
        BiasesFirst().check(model)
