"""Budgets, search spaces, grids in the paper's order, and studies that resume after interruption."""

from pathlib import Path

import pytest
import torch

from seq2final.core.errors import Seq2FinalError
from seq2final.training.epochs import FitResult
from seq2final.training.search import Budget, SearchSpace, get_budget, parse_budgets
from seq2final.training.tuner import Tuner

SPACE = SearchSpace.parse(
    {
        "lr": {"grid": [1e-3, 1e-4], "low": 1e-4, "high": 1e-3, "log": True},
        "weight_decay": {"grid": [1e-4, 1e-2]},
        "dropout": {"grid": [0.0, 0.5], "low": 0.0, "high": 0.5},
    },
    "test",
)


class Objective:
    """Scores each configuration by a fixed formula and can stop the run at a chosen call."""

    def __init__(self, interrupt_at: int | None = None) -> None:
        self.calls: list[dict] = []
        self.interrupt_at = interrupt_at

    def __call__(self, params, seed, report):
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        self.calls.append(params)
        value = params["lr"] * 100 + params["dropout"]
        report(1, value)
        return FitResult(value, 1, 1, []), {"w": torch.tensor([value])}


def test_grid_runs_the_paper_grid_in_nesting_order(tmp_path):
    objective = Objective()
    tuner = Tuner(Budget(sampler="grid", max_epochs=1), None, tmp_path, seed=0)
    tuned = tuner.tune("s", SPACE, objective)
    assert objective.calls == SPACE.grid_points()
    assert objective.calls[:2] == [
        {"lr": 1e-3, "weight_decay": 1e-4, "dropout": 0.0},
        {"lr": 1e-3, "weight_decay": 1e-4, "dropout": 0.5},
    ]
    # Two configurations tie at the best score; the first in grid order wins, as in the original.
    assert tuned.params == {"lr": 1e-3, "weight_decay": 1e-4, "dropout": 0.5}
    assert torch.equal(tuned.state_dict["w"], torch.tensor([0.6]))


@pytest.mark.parametrize("sampler", ["grid", "tpe", "random"])
def test_an_interrupted_study_resumes_without_repeating_trials(tmp_path, sampler):
    budget = Budget(sampler=sampler, trials=None if sampler == "grid" else 6, max_epochs=1)
    first = Objective(interrupt_at=3)
    with pytest.raises(KeyboardInterrupt):
        Tuner(budget, None, tmp_path, seed=1).tune("study", SPACE, first)
    second = Objective()
    tuned = Tuner(budget, None, tmp_path, seed=1).tune("study", SPACE, second)
    assert len(first.calls) == 3
    total = 8 if sampler == "grid" else 6
    assert len(second.calls) == total - 3
    if sampler == "grid":
        assert {tuple(c.values()) for c in first.calls + second.calls} == {
            tuple(p.values()) for p in SPACE.grid_points()
        }
    assert tuned.finished_trials == total
    if sampler != "grid":  # a resumed sampler must not replay the finished trials' draws
        assert len({c["lr"] for c in first.calls + second.calls}) == total
        # Nor draw anything else: an uninterrupted study with the same seed draws the same values.
        uninterrupted = Objective()
        Tuner(budget, None, tmp_path / "whole", seed=1).tune("study", SPACE, uninterrupted)
        assert uninterrupted.calls == first.calls + second.calls
    best = max(first.calls + second.calls, key=lambda p: p["lr"] * 100 + p["dropout"])
    assert tuned.fit.valid_accuracy == pytest.approx(best["lr"] * 100 + best["dropout"])


def test_a_trial_left_running_by_a_killed_process_is_closed_and_redrawn(tmp_path):
    """A killed process cannot mark its trial failed; the resumed study must not count it."""
    budget = Budget(sampler="tpe", trials=5, max_epochs=1)
    first = Objective(interrupt_at=2)
    with pytest.raises(KeyboardInterrupt):
        Tuner(budget, None, tmp_path, seed=3).tune("study", SPACE, first)
    resumed = Tuner(budget, None, tmp_path, seed=3)
    resumed._study("study").ask()  # what a kill in the middle of a trial leaves behind
    second = Objective()
    tuned = resumed.tune("study", SPACE, second)
    states = [t.state for t in tuned.trials]
    assert "RUNNING" not in states and states.count("FAIL") == 2
    assert tuned.finished_trials == 5
    uninterrupted = Objective()
    Tuner(budget, None, tmp_path / "whole", seed=3).tune("study", SPACE, uninterrupted)
    assert uninterrupted.calls == first.calls + second.calls


def test_a_study_whose_weights_were_discarded_starts_over(tmp_path):
    budget = Budget(sampler="random", trials=2, max_epochs=1)
    tuner = Tuner(budget, None, tmp_path, seed=0)
    tuner.tune("again", SPACE, Objective())
    tuner.discard_checkpoints()
    rerun = Objective()
    Tuner(budget, None, tmp_path, seed=0).tune("again", SPACE, rerun)
    assert len(rerun.calls) == 2


def test_fixing_a_parameter_shrinks_the_grid():
    assert SPACE.grid_size() == 8
    fixed = SPACE.fix({"lr": 5e-4})
    assert fixed.grid_size() == 4 and fixed.params["lr"].fixed


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"lr": {"grid": [1e-3], "low": 1e-2, "high": 1e-3}}, "space.lr.*low 0.01 > high 0.001"),
        ({"lr": {"grid": []}}, "space.lr 'grid' = \\[\\]: .*at least 1 item"),
        ({"lr": {"grid": [1e-3], "low": 0.0, "high": 1.0, "log": True}}, "log range needs low > 0"),
    ],
)
def test_bad_search_spaces_are_refused_in_one_line(raw, message):
    with pytest.raises(Seq2FinalError, match=message) as error:
        SearchSpace.parse(raw, "final_modes.ft.space")
    assert "\n" not in str(error.value) and "final_modes.ft.space" in str(error.value)


def test_budgets_are_names_with_checked_settings():
    budgets = {"smoke": {"sampler": "random", "trials": 1, "max_epochs": 2}}
    assert get_budget(budgets, "smoke").max_epochs == 2
    with pytest.raises(Seq2FinalError, match="unknown budget 'huge'; valid: smoke"):
        get_budget(budgets, "huge")
    with pytest.raises(Seq2FinalError, match="budget 'bad'.*unknown sampler 'cmaes'"):
        parse_budgets({"bad": {"sampler": "cmaes", "trials": 1, "max_epochs": 1}})
    with pytest.raises(Seq2FinalError, match="needs a number of trials"):
        parse_budgets({"bad": {"sampler": "tpe", "max_epochs": 1}})


def test_a_resumed_grid_with_a_fixed_value_and_a_tie_matches_an_uninterrupted_one(tmp_path):
    """Fixed values are not Optuna parameters, and the interrupted point reruns last."""
    space = SPACE.fix({"weight_decay": 1e-3})  # 4 points; two tie at the best score

    class Tied(Objective):
        def __call__(self, params, seed, report):
            self.seeds = [*getattr(self, "seeds", []), seed]
            return super().__call__({**params, "dropout": 0.0}, seed, report)

    budget = Budget(sampler="grid", max_epochs=1)
    whole = Tied()
    expected = Tuner(budget, None, tmp_path / "a", seed=1).tune("s", space, whole)
    first, second = Tied(interrupt_at=0), Tied()  # the grid-first point of the tie is cut off
    with pytest.raises(KeyboardInterrupt):
        Tuner(budget, None, tmp_path / "b", seed=1).tune("s", space, first)
    resumed = Tuner(budget, None, tmp_path / "b", seed=1).tune("s", space, second)
    assert len(first.calls) + len(second.calls) == 4  # nothing finished is rerun
    assert resumed.params == expected.params == {"lr": 1e-3, "weight_decay": 1e-3, "dropout": 0.0}
    assert first.seeds == whole.seeds[:1]  # a trial's seed follows its values, not its number
    assert sorted(second.seeds) == sorted(whole.seeds)


def test_a_budget_or_space_with_an_unknown_or_missing_key_says_which_in_one_line():
    with pytest.raises(Seq2FinalError) as unknown:
        parse_budgets({"smoke": {"sampler": "random", "trials": 1, "max_epochs": 2, "bogus": 1}})
    assert str(unknown.value) == (
        "budget 'smoke': unknown key 'bogus'; valid: sampler, trials, max_epochs, pruner, "
        "startup_trials, warmup_epochs, min_epochs, reduction_factor, keep_each, keep_known"
    )
    with pytest.raises(Seq2FinalError) as missing:
        SearchSpace.parse({"lr": {"low": 1e-4, "high": 1e-2}}, "final_modes.ft.space")
    assert str(missing.value) == "search space final_modes.ft.space.lr 'grid': Field required"


def test_an_unreadable_checkpoint_is_reported_with_its_path_not_restarted(tmp_path):
    budget = Budget(sampler="random", trials=3, max_epochs=1)
    with pytest.raises(KeyboardInterrupt):
        Tuner(budget, None, tmp_path, seed=0).tune("long", SPACE, Objective(interrupt_at=2))
    checkpoint = tmp_path / "checkpoints" / "long.pt"
    checkpoint.write_bytes(b"damaged")
    resumed = Objective()
    with pytest.raises(Seq2FinalError, match=f"tuning checkpoint {checkpoint} is unreadable"):
        Tuner(budget, None, tmp_path, seed=0).tune("long", SPACE, resumed)
    assert resumed.calls == []  # nothing was rerun, and the two finished trials are still there


class Curve:
    """Reports a constant validation accuracy every epoch, lower for each later trial, and
    records the epoch at which each trial stopped (its last report)."""

    def __init__(self, max_epochs: int) -> None:
        self.max_epochs = max_epochs
        self.stopped_at: list[int] = []

    def __call__(self, params, seed, report):
        value = 0.9 - 0.01 * len(self.stopped_at)
        self.stopped_at.append(0)
        for epoch in range(self.max_epochs + 1):
            self.stopped_at[-1] = epoch
            report(epoch, value)
        return FitResult(value, self.max_epochs, self.max_epochs, []), {"w": torch.tensor([value])}


def test_successive_halving_prunes_each_worse_trial_at_its_first_rung(tmp_path):
    budget = Budget(
        sampler="random", trials=6, max_epochs=12, pruner="successive_halving", min_epochs=2,
        reduction_factor=2,
    )  # fmt: skip
    curve = Curve(budget.max_epochs)
    tuned = Tuner(budget, None, tmp_path, seed=0).tune("sh", SPACE, curve)
    # The first trial is the best at every rung and runs to the end; every later one is worse
    # than it at the first rung (min_epochs = 2) and stops there.
    assert curve.stopped_at == [12, 2, 2, 2, 2, 2]
    assert [t.state for t in tuned.trials] == ["COMPLETE"] + ["PRUNED"] * 5


def test_hyperband_prunes_each_worse_trial_at_its_brackets_first_rung(tmp_path):
    budget = Budget(
        sampler="tpe", trials=14, max_epochs=16, pruner="hyperband", min_epochs=2,
        startup_trials=2, reduction_factor=2,
    )  # fmt: skip
    curve = Curve(budget.max_epochs)
    tuner = Tuner(budget, None, tmp_path, seed=0)
    tuner.tune("hb", SPACE, curve)
    study = tuner._study("hb")
    pruner = study.pruner
    pruner._try_initialization(study)  # the trials' brackets, as the pruner assigned them
    brackets = [pruner._get_bracket_id(study, t) for t in study.get_trials(deepcopy=False)]
    assert len(set(brackets)) > 1  # the test means something only across brackets
    expected, seen = [], set()
    for bracket in brackets:
        # Bracket b's rungs are at min_epochs * reduction_factor ** (b + k). Its first trial
        # leads it; the later (worse) ones stop at its first rung, except where that rung is
        # the whole run.
        first_rung = budget.min_epochs * budget.reduction_factor**bracket
        expected.append(first_rung if bracket in seen and first_rung < 16 else 16)
        seen.add(bracket)
    assert curve.stopped_at == expected, brackets
    assert min(curve.stopped_at) == 2 and 4 in curve.stopped_at  # two brackets' rungs seen


def test_a_journal_lock_left_by_a_killed_process_can_be_found_stale(tmp_path, monkeypatch):
    """Optuna's journal lock is a symlink to the journal, found stale after its grace period by
    reading the journal's mtime through it; a relative target (the project's relative
    ``tuning.root``) made it dangle, and a killed worker's lock blocked every other worker."""
    import os

    from seq2final.training.tuner import open_storage

    monkeypatch.chdir(tmp_path)
    storage = open_storage(None, Path("data/06_models/optuna"))
    lock = storage._backend._lock  # what a worker killed mid-write leaves behind
    lock.acquire()
    try:
        link = Path(lock._lock_file)
        assert Path(os.readlink(link)).is_absolute()
        assert link.resolve() == (tmp_path / "data/06_models/optuna/journal.log").resolve()
        os.stat(link)  # what the stale-lock check reads: it must not dangle
    finally:
        lock.release()


def fused_by(objective: Objective, widths: list[int]):
    """A fused objective that records how many trials it got and scores each as ``objective``
    does, finishing them in reverse order (a stack's models stop when they stop)."""

    def fused(runs):
        widths.append(len(runs))
        for run in reversed(runs):
            run.finish(*objective(run.params, run.seed, run.report))

    return fused


def test_tpe_asks_for_its_startup_trials_first_then_for_width_at_a_time(tmp_path):
    budget = Budget(sampler="tpe", trials=10, startup_trials=3, max_epochs=1)
    widths, objective = [], Objective()
    tuned = Tuner(budget, None, tmp_path, seed=0).tune(
        "s", SPACE, objective, fused_by(objective, widths), width=4
    )
    assert widths == [3, 4, 3] and tuned.finished_trials == 10


def test_a_fused_grid_picks_the_first_best_grid_point_whatever_order_its_trials_finish(tmp_path):
    widths, objective = [], Objective()
    tuner = Tuner(Budget(sampler="grid", max_epochs=1), None, tmp_path, seed=0)
    tuned = tuner.tune("s", SPACE, objective, fused_by(objective, widths), width=3)
    assert widths == [3, 3, 2]
    assert tuned.params == {"lr": 1e-3, "weight_decay": 1e-4, "dropout": 0.5}  # as unfused


def test_a_fused_objective_that_leaves_a_trial_untold_is_an_error(tmp_path):
    tuner = Tuner(Budget(sampler="grid", max_epochs=1), None, tmp_path, seed=0)
    with pytest.raises(Seq2FinalError, match="neither finished nor pruned"):
        tuner.tune("s", SPACE, Objective(), lambda runs: None, width=2)


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_fused_study_killed_after_a_later_trial_finished_resumes_with_the_draws_it_missed(
    tmp_path, sampler
):
    budget = Budget(sampler=sampler, trials=4, startup_trials=4, max_epochs=1)
    whole = Objective()
    Tuner(budget, None, tmp_path / "whole", seed=3).tune("s", SPACE, whole,
                                                         fused_by(whole, []), width=4)  # fmt: skip

    first = Objective()

    def killed_after_the_third(runs):
        run = runs[2]  # the third model of the stack stops first; then the job is killed
        run.finish(*first(run.params, run.seed, run.report))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Tuner(budget, None, tmp_path / "killed", seed=3).tune(
            "s", SPACE, first, killed_after_the_third, width=4
        )
    resumed, widths = Objective(), []
    tuned = Tuner(budget, None, tmp_path / "killed", seed=3).tune(
        "s", SPACE, resumed, fused_by(resumed, widths), width=4
    )
    assert widths == [3] and tuned.finished_trials == 4
    # the three missing draws, not the finished one again: the four an uninterrupted run tried
    tried = sorted(map(str, [*resumed.calls, *first.calls]))
    assert tried == sorted(map(str, whole.calls)) and len(set(tried)) == 4


def test_a_trial_pruned_by_its_own_objective_is_recorded_as_pruned(tmp_path):
    import optuna

    def objective(params, seed, report):
        if params["lr"] == 1e-3:
            raise optuna.TrialPruned()  # an objective may give up on a configuration itself
        return FitResult(0.5, 1, 1, []), {"w": torch.tensor([0.5])}

    tuned = Tuner(Budget(sampler="grid", max_epochs=1), None, tmp_path, seed=0).tune(
        "s", SPACE, objective
    )
    states = [t.state for t in tuned.trials]
    assert states.count("PRUNED") == 4 and states.count("COMPLETE") == 4


def test_a_checkpoint_written_before_fit_extras_loads_with_si_path_integral_as_an_extra(tmp_path):
    """Checkpoints of SI's studies from before callbacks kept ``path_integral`` on the fit."""
    import torch

    from seq2final.training.trials import load_checkpoint

    omega = {"fc.weight": torch.ones(2)}
    for stored, extras in ((omega, {"path_integral": omega}), (None, {})):
        fit = {"valid_accuracy": 0.5, "best_epoch": 1, "epochs": 2, "history": [],
               "path_integral": stored}  # fmt: skip
        path = tmp_path / "old.pt"
        torch.save({"value": 0.5, "order": 0, "params": {"lr": 0.1}, "fit": fit,
                    "state_dict": {}}, path)  # fmt: skip
        loaded = load_checkpoint(path)["fit"]
        assert (loaded.best_epoch, loaded.epochs) == (1, 2)
        assert loaded.extras.keys() == extras.keys()
        for name, value in extras.items():
            assert all(torch.equal(loaded.extras[name][k], v) for k, v in value.items())
