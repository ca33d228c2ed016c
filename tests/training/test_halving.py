"""Synchronous halving: its rules on scripted curves, the live budget against its replay on the
grid's stored curves, and a study killed between rungs resumed without retraining a rung."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from seq2final.core.errors import Seq2FinalError
from seq2final.methods.context import GridFits
from seq2final.models import build_model
from seq2final.training import Engine, Task
from seq2final.training.fused import FusedRun
from seq2final.training.halving import TrialCurve, grid_point_of, replay, rungs, survivors
from seq2final.training.search import Budget, SearchSpace
from seq2final.training.tuner import Tuner

GRID = SearchSpace.parse(
    {"lr": {"grid": [3e-2, 3e-3, 3e-4]}, "weight_decay": {"grid": [1e-4, 1e-2]}}, "test"
)
ENGINE = Engine(device="cpu", batch_size=20, eval_batch_size=60, patience=3)
HALVING = {"sampler": "grid", "pruner": "halving", "min_epochs": 1, "reduction_factor": 2,
           "max_epochs": 8}  # fmt: skip


def test_a_known_winner_goes_on_at_every_rung_and_is_found_by_the_values_the_grid_searches():
    scores = {0: 0.5, 1: 0.7, 2: 0.7, 3: 0.2, 4: 0.1, 5: 0.6}
    assert survivors(range(6), scores, 3, known=4) == [1, 2, 4]
    assert survivors([1, 2], scores, 3, known=4) == [1]  # once left behind, not brought back
    points = [{"lr": 0.1, "wd": wd} for wd in (0.0, 0.1, 0.2)]
    assert grid_point_of({"lr": 0.05, "wd": 0.1, "dropout": 0.5}, points) == 1  # lr is fixed
    assert grid_point_of({"lr": 0.1, "wd": 0.3}, points) is None


def test_rungs_grow_by_eta_below_the_last_epoch():
    assert rungs(10, 3, 100) == [10, 30, 90]
    assert rungs(30, 3, 100) == [30, 90]
    assert rungs(100, 3, 100) == []


def test_the_best_third_goes_on_ties_to_the_earlier_point_and_the_guard_keeps_each_values_best():
    scores = {0: 0.5, 1: 0.7, 2: 0.7, 3: 0.2, 4: 0.1, 5: 0.6}
    assert survivors(range(6), scores, 3) == [1, 2]
    assert survivors(range(6), scores, 4) == [1, 2]  # ⌈6/4⌉ = 2
    assert survivors([3, 4], scores, 3) == [3]  # at least one
    lr = {0: 0.1, 1: 0.1, 2: 0.1, 3: 0.01, 4: 0.01, 5: 0.1}
    assert survivors(range(6), scores, 3, lr) == [1, 2, 3]  # 3: the best of lr 0.01


def test_a_replay_ranks_the_running_the_ended_stay_candidates_and_the_best_finished_is_chosen():
    curves = [
        TrialCurve(0, [0.1, 0.2, 0.3, 0.35, 0.4, 0.41, 0.42]),  # slow, runs to the end
        TrialCurve(1, [0.1, 0.5, 0.5, 0.5, 0.45]),  # fast, then stops (patience)
        TrialCurve(2, [0.1, 0.15]),  # ended by its stopping rule before the first rung
        TrialCurve(3, [0.1, 0.3, 0.32, 0.6, 0.61, 0.62, 0.63]),
    ]
    replayed = replay(curves, first=2, eta=2, max_epochs=6, guard=False)
    # rung 2: running 0, 1, 3 (2 ended at 1): best so far 0.3, 0.5, 0.32 -> 1 and 3 go on
    # rung 4: 1 ended at 4; 3 alone goes on to its end
    assert replayed.epochs == {0: 2, 1: 4, 2: 1, 3: 6}
    assert replayed.finished == [1, 2, 3] and replayed.selected == 3
    assert replayed.spent == 13


def _fits(learnable, epochs=8):
    task = Task([learnable(60)], learnable(40, seed=1))

    def make_model():
        torch.manual_seed(7)
        return build_model("convnet_1", 10)

    return GridFits(make_model, task, ENGINE, epochs)


def _grid_curves(tmp_path, fits):
    """The full grid, its trials trained as the halving budget trains them (same seeds)."""
    grid = Budget(sampler="grid", max_epochs=fits.max_epochs)

    def train_trial(params, seed, report):
        run = fits.start(params, seed)
        result = run.run(on_epoch=report)
        return result, run.model.state_dict()

    tuned = Tuner(grid, None, tmp_path / "grid", 0).tune("fit-grid", GRID, train_trial,
                                                         seed_name="fit")  # fmt: skip
    by_params = {tuple(t.params.values()): t.valid_curve for t in tuned.trials}
    return [by_params[tuple(p.values())] for p in GRID.grid_points()], tuned


@pytest.mark.parametrize(("guard", "known"), [(None, None), ("lr", None), (None, 5)])
def test_the_live_budget_makes_its_replays_decisions_and_continues_the_grids_curves(
    tmp_path, learnable, guard, known
):
    """Without a guard, with the best of each learning rate kept at the first rung, and with a
    known winner (the slowest learning rate, with another value of a fixed parameter, as a
    previous step's winner comes) kept at every rung."""
    fits = _fits(learnable)
    grid_curves, grid = _grid_curves(tmp_path, fits)
    budget = Budget(**HALVING, keep_each=guard, keep_known=known is not None)
    won = None if known is None else {**GRID.grid_points()[known], "dropout": 0.5}
    live = Tuner(budget, None, tmp_path / "halving", 0).tune(
        "fit-halving", GRID, None, seed_name="fit", fits=fits, known=won
    )
    lrs = [p["lr"] for p in GRID.grid_points()]
    replayed = replay([TrialCurve(order, curve, lrs[order])
                       for order, curve in enumerate(grid_curves)], 1, 2, 8, guard is not None,
                      known)  # fmt: skip
    if known is not None:
        assert known in replayed.finished  # kept to the end, whatever its rank
    live_curves = {GRID.grid_points().index(t.params): t for t in live.trials}
    assert sorted(live_curves) == list(range(6))  # every grid point decided once
    for order, trial in live_curves.items():
        # a promoted trial continued: its curve is the grid's, bit for bit, as far as it went
        assert trial.valid_curve == grid_curves[order][: len(trial.valid_curve)], order
        assert len(trial.valid_curve) - 1 == replayed.epochs[order], order
        assert (trial.state == "COMPLETE") == (order in replayed.finished), order
    assert live.params == GRID.grid_points()[replayed.selected]
    assert replayed.spent < sum(len(c) - 1 for c in grid_curves)  # something was pruned
    if replayed.selected == GRID.grid_points().index(grid.params):
        exactly = [pytest.approx(row, rel=0, abs=0, nan_ok=True) for row in grid.fit.history]
        assert live.fit.history == exactly  # the grid's own fit of that point


class Killed(Exception):
    """The process killed mid-study (pytest keeps KeyboardInterrupt for itself)."""


def test_a_study_killed_between_rungs_resumes_without_retraining_a_finished_rung(
    tmp_path, learnable
):
    fits = _fits(learnable)
    budget = Budget(**HALVING)
    started, loaded = [], []

    class Counting:
        def start(self, params, seed):
            started.append(params)
            return fits.start(params, seed)

        def load(self, path, params):
            loaded.append(path.name)
            if len(loaded) == 2:  # the second rung's second fit: die before it trains
                raise Killed
            return fits.load(path, params)

        def weights(self, run):
            return fits.weights(run)

    def tune():
        return Tuner(budget, None, tmp_path, 0).tune("fit", GRID, None, seed_name="fit",
                                                     fits=Counting())  # fmt: skip

    with pytest.raises(Killed):
        tune()
    assert len(started) == 6  # every point trained to the first rung, each saved
    started.clear()
    resumed = tune()
    assert started == []  # no first rung trained again: every fit continued from its file
    uninterrupted = Tuner(budget, None, tmp_path / "again", 0).tune(
        "fit", GRID, None, seed_name="fit", fits=fits
    )
    assert resumed.params == uninterrupted.params
    assert [(t.state, t.params, t.valid_curve) for t in sorted(resumed.trials, key=_order)] == [
        (t.state, t.params, t.valid_curve) for t in sorted(uninterrupted.trials, key=_order)
    ]
    assert not (tmp_path / "checkpoints" / "fit").exists()  # the paused fits are gone


def _order(trial):
    return GRID.grid_points().index(trial.params)


@pytest.mark.usefixtures("float64")
def test_a_fused_study_trains_the_grid_in_lockstep_and_decides_as_the_single_one(
    tmp_path, learnable, monkeypatch
):
    """Under ``fuse`` the whole grid is one stack: each rung trains the points still in it
    together, the ones it leaves behind leave the stack, and the decisions (states, epochs,
    curves, selection) are the single fits' at dropout 0, in float64 where the two compute the
    same accuracies."""
    fits = _fits(learnable)
    budget = Budget(**HALVING)
    single = Tuner(budget, None, tmp_path / "single", 0).tune("fit", GRID, None,
                                                              seed_name="fit", fits=fits)  # fmt: skip
    sizes = []
    real_run = FusedRun.run

    def watched(run, until=None):
        sizes.append((len(run.training), until))
        return real_run(run, until)

    monkeypatch.setattr(FusedRun, "run", watched)
    fused = Tuner(budget, None, tmp_path / "fused", 0).tune(
        "fit", GRID, None, width=6, seed_name="fit", fits=fits
    )
    assert fused.params == single.params
    assert [(t.state, t.params, t.valid_curve) for t in sorted(fused.trials, key=_order)] == [
        (t.state, t.params, t.valid_curve) for t in sorted(single.trials, key=_order)
    ]
    assert fused.fit.best_epoch == single.fit.best_epoch
    stacked = [size for size, _ in sizes]
    assert stacked[0] == 6 and stacked == sorted(stacked, reverse=True) and stacked[-1] < 6
    # rungs 1, 2, 4: three of six go on after the first; fewer after each rung
    assert [until for _, until in sizes] == [1, 2, 4, None][: len(sizes)]
    assert stacked[1] <= 3


def test_a_fused_study_killed_between_rungs_resumes_its_stack_from_the_file(tmp_path, learnable):
    """Two stacks of three; killed as the second rung loads them: the resumed study starts no
    stack afresh and ends as an uninterrupted one."""
    fits = _fits(learnable)
    budget = Budget(**HALVING)
    started, loaded = [], []

    class Counting:
        def start_stack(self, params, seeds, labels):
            started.append(labels)
            return fits.start_stack(params, seeds, labels)

        def load_stack(self, path):
            loaded.append(path.name)
            if len(loaded) == 2:
                raise Killed
            return fits.load_stack(path)

    def tune(root, using):
        return Tuner(budget, None, root, 0).tune("fit", GRID, None, width=3, seed_name="fit",
                                                 fits=using)  # fmt: skip

    with pytest.raises(Killed):
        tune(tmp_path, Counting())
    assert started == [[0, 1, 2], [3, 4, 5]]
    started.clear()
    resumed = tune(tmp_path, Counting())
    assert started == []  # every stack continued from its file
    uninterrupted = tune(tmp_path / "again", fits)
    assert resumed.params == uninterrupted.params
    assert [(t.state, t.params, t.valid_curve) for t in sorted(resumed.trials, key=_order)] == [
        (t.state, t.params, t.valid_curve) for t in sorted(uninterrupted.trials, key=_order)
    ]
    assert not (tmp_path / "checkpoints" / "fit").exists()


@pytest.mark.usefixtures("float64")
def test_a_fused_study_resumed_under_another_width_starts_the_points_its_files_lack(
    tmp_path, learnable
):
    """Killed as its second rung begins with stacks of three, resumed with one stack of six
    (``fuse`` changed, or another machine's ``auto``): the file of points 0-2 cannot continue
    3-5, so the stack starts afresh, and the study ends as an uninterrupted one of six."""
    fits = _fits(learnable)
    budget = Budget(**HALVING)

    class Killing:
        start_stack = staticmethod(fits.start_stack)

        def load_stack(self, path):
            raise Killed

    with pytest.raises(Killed):
        Tuner(budget, None, tmp_path, 0).tune("fit", GRID, None, width=3, seed_name="fit",
                                              fits=Killing())  # fmt: skip
    resumed = Tuner(budget, None, tmp_path, 0).tune("fit", GRID, None, width=6, seed_name="fit",
                                                    fits=fits)  # fmt: skip
    whole = Tuner(budget, None, tmp_path / "whole", 0).tune(
        "fit", GRID, None, width=6, seed_name="fit", fits=fits
    )
    assert resumed.params == whole.params
    assert [(t.state, t.valid_curve) for t in sorted(resumed.trials, key=_order)] == [
        (t.state, t.valid_curve) for t in sorted(whole.trials, key=_order)
    ]


def test_halving_needs_the_grid_and_a_searched_guard(tmp_path):
    with pytest.raises(ValueError, match="valid sampler: grid"):
        Budget(sampler="tpe", trials=4, pruner="halving", max_epochs=8)
    with pytest.raises(ValueError, match="keep_each guards the first rung of pruner 'halving'"):
        Budget(sampler="grid", max_epochs=8, keep_each="lr")
    with pytest.raises(ValueError, match="keep_known keeps a known winner through the rungs of "
                                         "pruner 'halving', not 'none'"):  # fmt: skip
        Budget(sampler="grid", max_epochs=8, keep_known=True)
    assert "keep_known" not in Budget(**HALVING).results_key()  # keys made before it stay valid
    assert Budget(**HALVING, keep_known=True).results_key()["keep_known"] is True
    tuner = Tuner(Budget(**HALVING, keep_each="dropout"), None, tmp_path, 0)
    with pytest.raises(Seq2FinalError, match="keep_each 'dropout' is not searched"):
        tuner.tune("fit", GRID, None, fits=object())


SCRIPT = """
import sys
from pathlib import Path

import torch

from seq2final.methods.context import GridFits
from seq2final.models import build_model
from seq2final.training import Engine, Task
from seq2final.training.search import Budget, SearchSpace
from seq2final.training.tensors import TensorSplit
from seq2final.training.tuner import Tuner

torch.set_num_threads(1)


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return TensorSplit(torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8, generator=g),
                       torch.arange(n) % 3)


def make_model():
    torch.manual_seed(7)
    return build_model("convnet_1", 3)


started = []


class Counting(GridFits):
    def start(self, params, seed):
        started.append(params)
        return super().start(params, seed)

    def load(self, path, params):
        print("LOAD", path.name, flush=True)  # a rung after the first has begun
        return super().load(path, params)


fits = Counting(make_model, Task([data(600, 0)], data(60, 1)),
                Engine(device="cpu", batch_size=20, eval_batch_size=60, patience=99), 6)
space = SearchSpace.parse({"lr": {"grid": [3e-2, 3e-3, 3e-4]},
                           "weight_decay": {"grid": [1e-4, 1e-2]}}, "test")
budget = Budget(sampler="grid", pruner="halving", min_epochs=2, reduction_factor=2, max_epochs=6)
tuned = Tuner(budget, None, Path(sys.argv[1]), 0).tune("fit", space, None, seed_name="fit",
                                                      fits=fits)
print("STARTED", len(started))
print("RESULT", sorted((t.state, tuple(t.params.items()), tuple(t.valid_curve))
                       for t in tuned.trials), tuned.params)
"""


def test_a_study_killed_by_sigkill_in_its_second_rung_resumes_without_a_first_rung_again(
    tmp_path,
):
    """A real kill -9 while the second rung trains: the resumed study starts no fit afresh (the
    first rung's survivors continue from their files) and ends as an uninterrupted one."""
    script = tmp_path / "tune.py"
    script.write_text(SCRIPT)
    killed = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, str(script), str(killed)],
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    # the first rung's survivors are loaded as the second rung begins: kill it mid-training
    line = process.stdout.readline()
    assert line.startswith("LOAD"), line
    time.sleep(0.2)
    assert process.poll() is None, "the study finished before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    resumed = subprocess.run([sys.executable, str(script), str(killed)], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
    whole = subprocess.run([sys.executable, str(script), str(tmp_path / "whole")],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "STARTED 0" in resumed and "STARTED 6" in whole  # no first rung trained again
    assert resumed.split("RESULT")[1] == whole.split("RESULT")[1]
