"""Callbacks fire at the documented points of the one loop, in order, the documented times."""

import copy

import pytest
import torch

from seq2final.core.errors import Seq2FinalError
from seq2final.models import build_model
from seq2final.training import FitCallback, HyperParameters, LossTerm, ModelWrapper, Task, fit
from seq2final.training import loop as training
from seq2final.training.engine import Engine, accuracy, fuse_width, unfusable
from seq2final.training.tensors import TensorSplit

ENGINE = Engine(batch_size=8, eval_batch_size=16, patience=2)


def _data(n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorSplit(
        torch.randint(0, 256, (n, 3, 8, 8), dtype=torch.uint8, generator=g), torch.arange(n) % 3
    )


def _script(monkeypatch, curve):
    values = iter(curve)
    monkeypatch.setattr(training, "_validate", lambda *args: (0.0, next(values)))


class Recording(FitCallback):
    def __init__(self):
        self.calls = []

    def __getattribute__(self, name):
        attribute = object.__getattribute__(self, name)
        if name in POINTS:

            def record(fit, *args):
                self.calls.append((name, fit.epoch, *args[:1]))
                return attribute(fit, *args)

            return record
        return attribute


POINTS = {
    "before_fit", "before_eval", "after_eval", "on_selected", "before_epoch", "transform_batch",
    "after_backward", "before_update", "after_update", "after_epoch", "after_fit",
}  # fmt: skip


def test_callbacks_fire_in_the_documented_order_and_number(monkeypatch):
    """Two domains of 16 images in batches of 8: 2 steps an epoch, 2 batches a step; the curve
    selects epochs 0 and 2 and stops after 2 stalls (epochs 3 and 4), so 4 epochs in all."""
    _script(monkeypatch, [0.5, 0.4, 0.6, 0.6, 0.5])
    recording = Recording()
    task = Task([_data(), _data(seed=1)], _data(seed=2), callbacks=[recording])
    result = fit(build_model("convnet_1", 3), task, HyperParameters(lr=1e-3), ENGINE, 10, seed=0)
    assert (result.epochs, result.best_epoch) == (4, 2)
    step = [("transform_batch", "E", 0), ("transform_batch", "E", 1), ("after_backward", "E"),
            ("before_update", "E"), ("after_update", "E")]  # fmt: skip

    def epoch(e, selected):
        calls = [("before_epoch", e)]
        calls += [tuple(e if part == "E" else part for part in call) for call in step * 2]
        calls += [("before_eval", e), ("after_eval", e)]
        return calls + ([("on_selected", e)] if selected else []) + [("after_epoch", e)]

    expected = [("before_fit", 0), ("before_eval", 0), ("after_eval", 0), ("on_selected", 0)]
    for e, selected in ((1, False), (2, True), (3, False), (4, False)):
        expected += epoch(e, selected)
    assert recording.calls == [*expected, ("after_fit", 4)]


class Phased(ModelWrapper):
    def __init__(self, head_only):
        self.head_only = head_only

    def phases(self):
        return [(1, self.head_only), (None, None)]


def test_a_phased_fit_trains_only_the_chosen_parameters_in_phase_one(monkeypatch):
    model = build_model("convnet_2", 3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    _script(monkeypatch, [0.1, 0.2])  # epoch 1 selected: its weights are kept
    task = Task([_data()], _data(seed=1), callbacks=[Phased(["fc."]).callback()])
    fit(model, task, HyperParameters(lr=1e-2, weight_decay=1e-3), ENGINE, 1, seed=0)
    for name, parameter in model.named_parameters():
        moved = not torch.equal(parameter, before[name])
        assert moved == name.startswith("fc."), name  # the others' bytes are unchanged
        assert parameter.requires_grad  # every flag restored after the fit
    _script(monkeypatch, [0.1, 0.2, 0.3])  # and from epoch 2 on, every layer trains
    fit(model, task, HyperParameters(lr=1e-2), ENGINE, 2, seed=0)
    name, stem = next((n, p) for n, p in model.named_parameters() if n.startswith("conv1."))
    assert not torch.equal(stem, before[name])


def test_a_phase_that_trains_nothing_stops_the_fit_before_its_first_epoch(monkeypatch):
    _script(monkeypatch, [0.1, 0.2])
    task = Task([_data()], _data(seed=1), callbacks=[Phased(["adapter."]).callback()])
    with pytest.raises(Seq2FinalError) as error:
        fit(build_model("convnet_1", 3), task, HyperParameters(lr=1e-3), ENGINE, 1, seed=0)
    assert str(error.value).startswith(
        "model wrapper Phased: phase 1 trains no parameter (prefixes ['adapter.']); valid "
        "prefixes start names such as conv1."
    )


def test_several_callbacks_fire_at_each_point_in_the_order_the_task_lists_them(monkeypatch):
    _script(monkeypatch, [0.5, 0.6])
    order = []

    class Named(FitCallback):
        def __init__(self, name):
            self.name = name

        def before_fit(self, fit):
            order.append(("before_fit", self.name))

        def after_update(self, state):
            order.append(("after_update", self.name))

    task = Task([_data()], _data(seed=1), callbacks=[Named("a"), Named("b")])
    fit(build_model("convnet_1", 3), task, HyperParameters(lr=1e-3), ENGINE, 1, seed=0)
    assert (
        order
        == [("before_fit", "a"), ("before_fit", "b")]
        + [("after_update", "a"), ("after_update", "b")] * 2
    )  # two steps of 8 images


def test_a_fit_with_any_callback_trains_its_trials_one_at_a_time():
    class Term(LossTerm, FitCallback):  # a term that is its own callback, as LwF is
        def penalty(self, inputs, hp):
            return None

    both = Term()
    task = Task([_data()], _data(seed=1), penalties=[both], callbacks=[both])
    assert unfusable(Engine(), task) == ["Term"] and fuse_width(Engine(fuse=4), task) == 1
    assert unfusable(Engine(), Task([_data()], _data(seed=1), penalties=[both])) == []


def test_a_refused_fit_hands_the_model_back_as_it_came(monkeypatch):
    model = build_model("convnet_1", 3)
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    task = Task([_data()], _data(seed=1), trainable=["fc"],
                callbacks=[Phased(["adapter."]).callback()])  # fmt: skip
    with pytest.raises(Seq2FinalError):
        fit(model, task, HyperParameters(lr=1e-3, dropout=0.3), ENGINE, 1, seed=0)
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags
    assert not model.training


def test_a_phase_of_no_epochs_is_refused():
    with pytest.raises(Seq2FinalError, match="phase 1 lasts 0 epochs; valid: a whole number >= 1"):
        ModelWrapper.callback(type("Zero", (ModelWrapper,), {"phases": lambda self: [(0, None)]})())


def test_parts_written_with_the_names_before_they_were_renamed_are_warned_and_still_work():
    """``before_step``/``after_step`` (now ``before_update``/``after_update``: a step is a
    time step), ``Task(terms=)`` (now ``penalties=``: terms are every loss term) and a wrapper's
    ``fixed_statistics`` (now ``freeze_bn_stats``, as the engine says it)."""
    with pytest.warns(DeprecationWarning, match="Old.after_step is now after_update"):

        class Old(FitCallback):
            def __init__(self):
                self.updates = 0

            def after_step(self, state):
                self.updates += 1

    class Nothing(LossTerm):
        def penalty(self, inputs, hp):
            return None

    old, nothing = Old(), Nothing()
    with pytest.warns(DeprecationWarning, match=r"Task\(terms=...\) is now Task\(penalties="):
        task = Task([_data()], _data(seed=1), terms=[nothing], callbacks=[old])
    assert task.penalties == [nothing] and task.all_penalties[1:] == [nothing]
    fit(build_model("convnet_1", 3), task, HyperParameters(lr=1e-3), ENGINE, 1, seed=0)
    assert old.updates == 2  # 16 images in batches of 8: two updates in the one epoch
    with pytest.warns(DeprecationWarning, match="Fixed.fixed_statistics is now freeze_bn_stats"):

        class Fixed(ModelWrapper):
            fixed_statistics = True

    assert Fixed().freeze_bn_stats and not ModelWrapper().freeze_bn_stats
    wrapper = ModelWrapper()
    with pytest.warns(DeprecationWarning, match="fixed_statistics is now freeze_bn_stats"):
        wrapper.fixed_statistics = True  # set on an instance, as a wrapper's __init__ may
    assert wrapper.freeze_bn_stats
    with pytest.warns(DeprecationWarning, match=r"Task.hyperparameters\(values\) is now"):
        assert task.hyperparameters({"lr": 0.5}) == task.checked_hyperparameters({"lr": 0.5})


class Averaged(FitCallback):
    """The weights' running mean, swapped in for every validation (an EMA of decay 1/n)."""

    def before_fit(self, fit_state):
        self.average = copy.deepcopy(fit_state.model)
        self.seen = 1
        self.validated, self.snapshots = [], []

    def after_update(self, fit_state):
        self.seen += 1
        with torch.no_grad():
            for mean, now in zip(
                self.average.parameters(), fit_state.model.parameters(), strict=True
            ):
                mean += (now - mean) / self.seen

    def before_eval(self, fit_state):
        fit_state.eval_model = self.average

    def after_eval(self, fit_state):
        self.validated.append(fit_state.valid_accuracy)
        self.snapshots.append(copy.deepcopy(fit_state.eval_model.state_dict()))


def test_a_replaced_eval_model_is_what_validation_selection_and_the_result_see():
    averaged = Averaged()
    task = Task([_data(24)], _data(seed=1), callbacks=[averaged])
    model = build_model("convnet_1", 3)
    seen = []
    result = fit(model, task, HyperParameters(lr=1e-2), ENGINE, 3, seed=0,
                 on_epoch=lambda epoch, accuracy: seen.append(accuracy))  # fmt: skip
    valid = _data(seed=1)
    curve = [row["valid_accuracy"] for row in result.history]
    assert curve == averaged.validated == seen  # the history, the tuner's reports, after_eval
    assert result.valid_accuracy == max(curve)
    # what the fit hands back is the average of the selected epoch, which scores as recorded
    assert accuracy(model, valid, ENGINE) == pytest.approx(result.valid_accuracy)
    kept = averaged.snapshots[result.best_epoch]
    assert all(torch.equal(value, kept[name]) for name, value in model.state_dict().items())


def test_after_fit_runs_when_a_pruned_fit_stops_so_hooks_are_removed():
    class Hooked(FitCallback):
        def before_fit(self, fit_state):
            self.hook = fit_state.model.fc.linear.register_forward_hook(lambda *a: None)

        def after_fit(self, fit_state):
            self.hook.remove()

    def prune(epoch, accuracy):
        if epoch == 1:
            raise RuntimeError("pruned")

    model = build_model("convnet_1", 3)
    task = Task([_data()], _data(seed=1), callbacks=[Hooked()])
    with pytest.raises(RuntimeError, match="pruned"):
        fit(model, task, HyperParameters(lr=1e-3), ENGINE, 3, seed=0, on_epoch=prune)
    assert not model.fc.linear._forward_hooks
    assert all(p.requires_grad for p in model.parameters())


def test_the_selected_epochs_evaluated_model_is_the_one_handed_back(monkeypatch):
    """A scripted curve selects epoch 2: the model handed back is the average validated then,
    not the fit's weights at that epoch."""
    _script(monkeypatch, [0.1, 0.2, 0.5, 0.3])
    raw = []

    class Kept(Averaged):
        def after_eval(self, fit_state):
            super().after_eval(fit_state)
            raw.append(copy.deepcopy(fit_state.model.state_dict()))

    averaged = Kept()
    model = build_model("convnet_1", 3)
    task = Task([_data(24)], _data(seed=1), callbacks=[averaged])
    result = fit(model, task, HyperParameters(lr=1e-2), ENGINE, 3, seed=0)
    assert result.best_epoch == 2
    kept = averaged.snapshots[2]
    assert all(torch.equal(value, kept[name]) for name, value in model.state_dict().items())
    assert not all(torch.equal(value, raw[2][name]) for name, value in kept.items())


class Installs(FitCallback):
    def __init__(self, ended):
        self.ended = ended

    def after_fit(self, fit_state):
        self.ended.append(type(self).__name__)


def test_a_refused_fit_ends_the_callbacks_that_started_and_a_failing_end_keeps_a_prune():
    ended = []

    class Refuses(FitCallback):
        def before_fit(self, fit_state):
            raise Seq2FinalError("refused")

    task = Task([_data()], _data(seed=1), callbacks=[Installs(ended), Refuses(), Installs([])])
    with pytest.raises(Seq2FinalError, match="refused"):
        fit(build_model("convnet_1", 3), task, HyperParameters(lr=1e-3), ENGINE, 1, seed=0)
    assert ended == ["Installs"]  # the one that started, not the one after the refusal

    class Breaks(FitCallback):
        def after_fit(self, fit_state):
            raise RuntimeError("broken cleanup")

    class Pruned(Exception):
        pass

    def prune(epoch, accuracy):
        raise Pruned

    task = Task([_data()], _data(seed=1), callbacks=[Breaks(), Installs(ended)])
    with pytest.raises(Pruned):  # the prune, not the cleanup's error
        fit(build_model("convnet_1", 3), task, HyperParameters(lr=1e-3), ENGINE, 1, seed=0,
            on_epoch=prune)  # fmt: skip
    assert ended == ["Installs", "Installs"]  # the others still ended
