"""A context's tuned fits, one trial at a time and fused (``training.fuse``): same choice, and a
killed fused study resumes without redoing the trials that finished; a head fit on a frozen
body computes its features once per trial, with the same choice."""

import functools

import pytest
import torch

from seq2final.methods import context as context_module
from seq2final.methods.context import Context, GridFits
from seq2final.models import build_model
from seq2final.training import Engine, Task
from seq2final.training.features import is_head
from seq2final.training.halving import TrialCurve, replay
from seq2final.training.records import FitRecord
from seq2final.training.search import Budget, SearchSpace
from seq2final.training.tuner import Tuner

pytestmark = pytest.mark.usefixtures("float64")

GRID = SearchSpace.parse(
    {
        "lr": {"grid": [3e-3, 1e-3]},
        "weight_decay": {"grid": [1e-4, 1e-2]},
        "dropout": {"grid": [0.0]},
    },
    "test",
)


def context(tmp_path, fuse, patience=99, epochs=3, **options):
    engine = Engine(device="cpu", batch_size=50, eval_batch_size=60, patience=patience, fuse=fuse,
                    **options)  # fmt: skip
    budget = Budget(sampler="grid", max_epochs=epochs)
    return Context(
        sequence=None, arch="convnet_2", seed=0, engine=engine, budget=budget,
        budget_name="paper", tuner=Tuner(budget, None, tmp_path, 0), owner_key="job", seed_key="job",
        device=torch.device("cpu"),
    )  # fmt: skip


def tuned(ctx, task):
    model = ctx.tuned_fit("final", GRID, lambda: ctx.seeded("final", lambda: build_model(
        "convnet_2", 10)), task)  # fmt: skip
    return model, ctx.fits[-1]


def test_the_paper_grid_fused_picks_what_it_picks_one_trial_at_a_time(tmp_path, learnable):
    task = Task([learnable(80)], learnable(40, seed=1))
    one_model, one = tuned(context(tmp_path / "one", fuse=1), task)
    fused_model, fused = tuned(context(tmp_path / "fused", fuse=4), task)
    assert fused.params == one.params and fused.best_epoch == one.best_epoch
    assert [t.value for t in fused.trial_summaries] == [
        t.value for t in one.trial_summaries
    ]  # every grid point's selected validation accuracy
    assert len({t.value for t in one.trial_summaries}) > 1  # the choice was not a tie
    for name, value in one_model.state_dict().items():
        assert torch.allclose(value, fused_model.state_dict()[name], rtol=0, atol=1e-9), name


class Interrupted(Exception):
    """The job killed (pytest keeps KeyboardInterrupt for itself)."""


def test_a_killed_fused_study_resumes_without_redoing_finished_trials(
    tmp_path, learnable, monkeypatch
):
    # Shuffled validation labels: accuracy wanders and patience 1 stops models at different
    # epochs, so some trials finish while others still train.
    task = Task([learnable(80)], learnable(40, seed=1, shuffled=True))
    uninterrupted = tuned(context(tmp_path / "whole", fuse=4, patience=1, epochs=8), task)[1]

    real_fit_fused, widths, finished_first = context_module.fit_fused, [], []

    def killed_after_the_first_stop(models, task, trials, engine, epochs):
        widths.append(len(models))
        if len(widths) > 1:
            return real_fit_fused(models, task, trials, engine, epochs)
        for trial in trials:
            stop, epoch_callback = trial.on_stop, trial.on_epoch

            def on_stop(result, weights, stop=stop):
                stop(result, weights)
                finished_first.append(result)

            def on_epoch(epoch, accuracy, report=epoch_callback):
                if finished_first:
                    raise Interrupted
                report(epoch, accuracy)

            trial.on_stop, trial.on_epoch = on_stop, on_epoch
        return real_fit_fused(models, task, trials, engine, epochs)

    monkeypatch.setattr(context_module, "fit_fused", killed_after_the_first_stop)
    with pytest.raises(Interrupted):
        tuned(context(tmp_path / "killed", fuse=4, patience=1, epochs=8), task)
    assert 1 <= len(finished_first) < 4
    resumed = tuned(context(tmp_path / "killed", fuse=4, patience=1, epochs=8), task)[1]
    assert widths[1:] == [4 - len(finished_first)]  # only the unfinished trials trained again
    assert resumed.params == uninterrupted.params
    assert resumed.valid_accuracy == uninterrupted.valid_accuracy


def test_a_head_fit_on_a_frozen_body_runs_the_body_once_per_split_with_the_same_choice(
    tmp_path, learnable, monkeypatch
):
    task = Task([learnable(80)], learnable(40, seed=1), trainable=["fc"])
    passes = []

    def tuned_with_passes(ctx):
        def make():
            model = ctx.seeded("final", lambda: build_model("convnet_2", 10))
            model.conv1.register_forward_hook(lambda *args: passes.append(1))
            return model

        model = ctx.tuned_fit("final", GRID, make, task)
        return model, ctx.fits[-1]

    stacks = []
    monkeypatch.setattr(context_module, "fit_fused", lambda models, *a: stacks.append(models))
    # fuse 4 asked: a head on cached features trains its trials one at a time instead
    cached_model, cached = tuned_with_passes(context(tmp_path / "c", 4, freeze_bn_stats=True))
    cached_passes = len(passes)
    monkeypatch.setattr(context_module, "fit_cached",
                        functools.partial(context_module.fit_cached, cache=False))  # fmt: skip
    passes.clear()
    looped_model, looped = tuned_with_passes(context(tmp_path / "l", 1, freeze_bn_stats=True))
    assert not stacks
    assert cached.params == looped.params and cached.best_epoch == looped.best_epoch
    assert [t.value for t in cached.trial_summaries] == [t.value for t in looped.trial_summaries]
    for name, value in looped_model.state_dict().items():
        assert torch.allclose(value, cached_model.state_dict()[name], rtol=0, atol=1e-12), name
    # each of four trials: 80 training images in two evaluation batches and 40 validation in
    # one, where the loop runs two training batches an epoch and a validation pass before and
    # after each of three epochs (the fit's cost, counted once after the study, runs in both)
    assert len(passes) - cached_passes == 4 * ((2 * 3 + 4) - (2 + 1))


def test_a_task_naming_another_optimizer_than_its_mode_declares_is_refused_before_a_trial(
    tmp_path, learnable
):
    ctx = context(tmp_path, fuse=1)
    ctx.optimizer = "sam_of_the_mode"
    with pytest.raises(Exception) as error:
        tuned(ctx, Task([learnable(20)], learnable(10, seed=1)))
    assert str(error.value) == (
        "fit 'final': its task names optimizer 'adam' but its mode declares 'sam_of_the_mode'; "
        "valid: the mode's optimizer= and the task's optimizer= alike"
    )
    assert ctx.fits == []  # refused before anything trained


def test_a_configuration_trains_the_same_prefix_under_every_budget(tmp_path, learnable):
    """Two budgets, two studies (their names hold the budget), one seed key: each grid point's
    first two epochs under a 2-epoch budget are the first two of its 5-epoch fit, bit for bit."""
    task = Task([learnable(80)], learnable(40, seed=1))
    curves = []
    for epochs in (2, 5):
        ctx = context(tmp_path / str(epochs), fuse=1, epochs=epochs)
        ctx.owner_key = f"job-{epochs}-epochs"
        tuned(ctx, task)
        curves.append([t.valid_curve for t in ctx.fits[-1].trial_summaries])
    short, long = curves
    assert [len(c) for c in short] == [3] * 4 and [len(c) for c in long] == [6] * 4
    assert [c[:3] for c in long] == short
    assert len({tuple(c) for c in short}) > 1  # the grid points train differently


@pytest.mark.parametrize("fuse", [1, 4])
def test_a_halving_budget_tunes_a_fit_as_its_replay_on_the_grids_curves_says(
    tmp_path, learnable, fuse
):
    """The context hands the tuner its fits to continue (one at a time, or the grid as one
    stack under ``fuse``): the halving budget selects what replaying it on the grid budget's
    curves selects, and trains each point as far."""
    task = Task([learnable(80)], learnable(40, seed=1))
    grid_ctx = context(tmp_path / "grid", fuse=1, epochs=6)
    tuned(grid_ctx, task)
    curves = [t.valid_curve for t in grid_ctx.fits[-1].trial_summaries]
    ctx = context(tmp_path / "halving", fuse=fuse, epochs=6)
    ctx.budget = ctx.tuner.budget = Budget(sampler="grid", max_epochs=6, pruner="halving",
                                           min_epochs=1, reduction_factor=2)  # fmt: skip
    tuned(ctx, task)
    replayed = replay([TrialCurve(order, curve) for order, curve in enumerate(curves)], 1, 2, 6,
                      guard=False)  # fmt: skip
    fit = ctx.fits[-1]
    assert fit.params == GRID.grid_points()[replayed.selected]
    trained = {GRID.grid_points().index(t.params): len(t.valid_curve) - 1
               for t in fit.trial_summaries}  # fmt: skip
    assert trained == replayed.epochs and replayed.spent < sum(len(c) - 1 for c in curves)


def test_the_known_winner_is_the_last_earlier_fit_of_the_same_stage_or_chain(tmp_path):
    def fit(stage, lr):
        return FitRecord(stage=stage, params={"lr": lr}, valid_accuracy=0.5, best_epoch=1,
                         epochs=1, trials=2, train_flops=0, eval_flops=0)  # fmt: skip

    ctx = context(tmp_path, fuse=1)
    ctx.earlier = [fit("none/step1", 0.1), fit("none/step2", 0.2), fit("linear/step2", 0.3),
                   fit("final", 0.4)]  # fmt: skip
    assert ctx.known_winner("none/final") == {"lr": 0.2}  # the chain's last step
    assert ctx.known_winner("none/step2") == {"lr": 0.1}  # the step before, not a later one
    assert ctx.known_winner("final") == {"lr": 0.4}  # the previous time's job's own fit
    assert ctx.known_winner("erm") is None
    assert ctx.known_winner("none/head") is None  # LP-FT's probe is no step of the chain
    ctx.fits.append(fit("none/step3", 0.5))  # this context's own fits come after
    assert ctx.known_winner("none/final") == {"lr": 0.5}


def test_a_head_fit_under_halving_trains_on_cached_features_and_continues_the_grids_curves(
    tmp_path, learnable, monkeypatch
):
    """A head fit on a frozen body: the halving budget trains (and continues) each point on the
    body's cached features, as the grid trains it, so its curves are the grid's prefixes bit for
    bit and its choice the replay's; its selected model is the whole network."""
    task = Task([learnable(80)], learnable(40, seed=1), trainable=["fc"])

    def make_for(ctx):
        return lambda: ctx.seeded("final", lambda: build_model("convnet_2", 10))

    grid_ctx = context(tmp_path / "grid", fuse=1, epochs=6, freeze_bn_stats=True)
    grid_model = grid_ctx.tuned_fit("final", GRID, make_for(grid_ctx), task)
    curves = [t.valid_curve for t in grid_ctx.fits[-1].trial_summaries]
    heads, real_start = [], GridFits.start

    def start(fits, params, seed):
        run = real_start(fits, params, seed)
        heads.append(is_head(run.model))
        return run

    monkeypatch.setattr(GridFits, "start", start)
    ctx = context(tmp_path / "halving", fuse=1, epochs=6, freeze_bn_stats=True)
    ctx.budget = ctx.tuner.budget = Budget(sampler="grid", max_epochs=6, pruner="halving",
                                           min_epochs=1, reduction_factor=2)  # fmt: skip
    model = ctx.tuned_fit("final", GRID, make_for(ctx), task)
    assert heads == [True] * 4  # every point's fit on the features
    fit = ctx.fits[-1]
    replayed = replay([TrialCurve(order, curve) for order, curve in enumerate(curves)], 1, 2, 6,
                      guard=False)  # fmt: skip
    assert fit.params == GRID.grid_points()[replayed.selected]
    for trial in fit.trial_summaries:
        curve = curves[GRID.grid_points().index(trial.params)]
        assert trial.valid_curve == curve[: len(trial.valid_curve)]
    if fit.params == grid_ctx.fits[-1].params:  # the grid's own choice: the same network
        for name, value in grid_model.state_dict().items():
            assert torch.equal(value, model.state_dict()[name]), name
