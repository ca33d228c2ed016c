"""FLOP accounting: one convolution's count by hand, scaled to epochs, passes and trials."""

import torch
from torch import nn

from seq2final.models import biases
from seq2final.training.callbacks import FitCallback
from seq2final.training.engine import Engine
from seq2final.training.flops import FitCost, counted_flops, fit_cost
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.objectives import Task
from seq2final.training.optimizers import OptimizerRecipe, optimizer
from seq2final.training.records import TrialRecord
from seq2final.training.si_agem import GradientProjection
from seq2final.training.tensors import TensorSplit
from seq2final.training.wrappers import ModelWrapper

# a 3→4-channel 3×3 convolution (padding 1) on 8×8 images, then a linear layer 256 → 2
CONV = 2 * (8 * 8) * (3 * 3) * 3 * 4  # FLOPs per image: 2 per multiply-add, one per output tap
LINEAR = 2 * 256 * 2


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Flatten(), nn.Linear(256, 2))


def _split(n):
    return TensorSplit(torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8), torch.arange(n) % 2)


def test_a_convolutions_forward_count_is_the_hand_formula_and_scales_with_the_batch():
    model = _model()
    for batch in (1, 5):
        x = torch.rand(batch, 3, 8, 8)
        assert counted_flops(lambda x=x: model(x)) == batch * (CONV + LINEAR)


def test_a_fits_cost_is_its_step_scaled_to_epochs_passes_and_every_trial():
    task = Task([_split(10)], _split(6))
    cost = fit_cost(_model(), task, HyperParameters(lr=1e-3), Engine(batch_size=4))
    # training an image: forward, the convolution's weight gradient (the input needs none) and
    # the linear layer's input and weight gradients
    per_image = 2 * CONV + 3 * LINEAR
    assert cost == FitCost(train_epochs=(10 * per_image,), valid_pass=6 * (CONV + LINEAR),
                           per_image=CONV + LINEAR)  # fmt: skip
    # counted on a few images, scaled: the same for a batch of 100
    assert fit_cost(_model(), task, HyperParameters(lr=1e-3), Engine(batch_size=100)) == cost
    trials = [
        TrialRecord(
            number=0, state="COMPLETE", params={}, value=0.3, valid_curve=[0.1, 0.2, 0.3, 0.3]
        ),
        TrialRecord(number=1, state="PRUNED", params={}, value=None, valid_curve=[0.1, 0.1]),
    ]  # 3 + 1 epochs; fmt: skip
    assert cost.of_trials(trials) == (4 * 10 * per_image, 6 * 6 * (CONV + LINEAR))


def test_an_agem_fit_also_pays_a_reference_gradient_on_its_memory_every_step():
    task = Task([_split(10)], _split(6))
    engine = Engine(batch_size=4)  # 3 steps an epoch
    plain = fit_cost(_model(), task, HyperParameters(lr=1e-3), engine)
    memory = Task([_split(10)], _split(6), callbacks=[GradientProjection(_split(20), 5)])
    agem = fit_cost(_model(), memory, HyperParameters(lr=1e-3), engine)
    assert agem.train_epochs[0] - plain.train_epochs[0] == 3 * 5 * (2 * CONV + 3 * LINEAR)
    assert (agem.valid_pass, agem.per_image) == (plain.valid_pass, plain.per_image)


def test_counting_leaves_the_model_as_it_was():
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fit_cost(model, Task([_split(10)], _split(6)), HyperParameters(lr=1e-3), Engine(batch_size=4))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_the_count_sees_the_parameters_that_train_a_predicates_and_each_phases():
    task = Task([_split(10)], _split(6))
    hp, engine = HyperParameters(lr=1e-3), Engine(batch_size=4)
    # biases only: no weight gradient, but the conv bias needs the gradient of the linear
    # layer's input
    bitfit = fit_cost(_model(), Task([_split(10)], _split(6), trainable=biases()), hp, engine)
    assert bitfit.train_epochs == (10 * (CONV + 2 * LINEAR),)

    class HeadFirst(ModelWrapper):
        def phases(self):
            return [(2, ["2."]), (None, None)]  # the linear layer alone for two epochs

    phased = Task([_split(10)], _split(6), callbacks=[HeadFirst().callback()])
    cost = fit_cost(_model(), phased, hp, engine, max_epochs=5)
    head, every = 10 * (CONV + 2 * LINEAR), 10 * (2 * CONV + 3 * LINEAR)
    assert cost.train_epochs == (head, head, every)
    assert cost.train_flops(4) == 2 * head + 2 * every
    assert fit_cost(_model(), task, hp, engine, max_epochs=5).train_epochs == (every,)


def test_the_count_ends_every_callback_it_started():
    calls = []

    class Hooked(FitCallback):
        def before_fit(self, fit_state):
            self.module = fit_state.model[2]  # the copy's linear layer: the one counted
            self.hook = self.module.register_forward_hook(lambda *a: calls.append("hook"))

        def after_fit(self, fit_state):
            self.hook.remove()
            calls.append("after_fit")

    hooked = Hooked()
    task = Task([_split(10)], _split(6), callbacks=[hooked])
    fit_cost(_model(), task, HyperParameters(lr=1e-3), Engine(batch_size=4))
    assert calls[-1] == "after_fit" and "hook" in calls
    assert not hooked.module._forward_hooks  # the hook it installed is gone


def test_a_closure_optimizers_second_pass_is_counted():
    class TwoPasses(torch.optim.SGD):
        def step(self, closure):
            closure()  # SAM's second pass, at the same weights here
            return super().step()

    @optimizer("test_two_passes")
    class Recipe(OptimizerRecipe):
        takes_closure = True

        def build(self, parameters, hp):
            return TwoPasses(parameters, lr=hp.lr)

    hp, engine = HyperParameters(lr=1e-3), Engine(batch_size=4)
    plain = fit_cost(_model(), Task([_split(10)], _split(6)), hp, engine)
    twice = fit_cost(_model(), Task([_split(10)], _split(6), optimizer="test_two_passes"), hp,
                     engine)  # fmt: skip
    assert twice.train_epochs == (2 * plain.train_epochs[0],)
