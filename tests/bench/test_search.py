"""The search section: epochs counted to the grid's best, on a tiny sequence and scripted studies."""

import math

import pytest

from seq2final.bench.search import SearchRun, epochs_to_target, measure_search, summarize
from seq2final.data.sampler import build_sequence
from seq2final.data.spec import resolve_spec
from seq2final.training.engine import Engine
from seq2final.training.records import TrialRecord
from seq2final.training.search import Budget, SearchSpace


def trial(number, state, value, epochs):
    return TrialRecord(number=number, state=state, params={}, value=value,
                       valid_curve=[0.1] * (epochs + 1))  # fmt: skip


def test_epochs_count_until_a_finished_trial_reaches_the_target():
    trials = [
        trial(3, "COMPLETE", 0.70, 9),
        trial(0, "COMPLETE", 0.50, 10),
        trial(1, "PRUNED", None, 2),  # pruned: its epochs count, it never reaches the target
        trial(2, "COMPLETE", 0.61, 7),
    ]  # counted in the order they ran
    assert epochs_to_target(trials, 0.60) == (28, 19)
    assert epochs_to_target(trials, 0.80) == (28, None)


def test_a_budget_that_misses_the_target_is_charged_at_least_the_grids_epochs():
    grids = [{"fit": "baseline", "seed": 0, "epochs": 40, "best_valid": 0.6, "test_accuracy": 0.5}]
    runs = [
        SearchRun("a", "baseline", 0, epochs=30, epochs_to_target=10, best_valid=0.6,
                  test_accuracy=0.5, trials=3),
        SearchRun("b", "baseline", 0, epochs=20, epochs_to_target=None, best_valid=0.4,
                  test_accuracy=0.3, trials=2),
    ]  # fmt: skip
    rows = {r["budget"]: r for r in summarize(runs, grids)}
    assert rows["a"]["fraction_of_grid"] == 0.25 and rows["a"]["reached"] == 1
    assert (
        rows["b"]["fraction_of_grid"] == 1.0 and rows["b"]["reached"] == 0
    )  # 20 spent, 40 charged
    assert rows["paper grid"]["fraction_of_grid"] == 1.0


def test_a_budget_is_also_charged_what_it_spent_after_reaching_the_target():
    grids = [{"fit": "baseline", "seed": s, "epochs": 40, "best_valid": 0.6, "test_accuracy": 0.5}
             for s in (0, 1)]  # fmt: skip
    runs = [
        SearchRun("a", "baseline", 0, epochs=30, epochs_to_target=10, best_valid=0.6,
                  test_accuracy=0.5, trials=3),
        SearchRun("a", "baseline", 1, epochs=20, epochs_to_target=20, best_valid=0.6,
                  test_accuracy=0.5, trials=2),
    ]  # fmt: skip
    row = next(r for r in summarize(runs, grids) if r["budget"] == "a")
    assert row["fraction_of_grid"] == (10 / 40 + 20 / 40) / 2
    assert row["spent_of_grid"] == (30 / 40 + 20 / 40) / 2


def test_measure_search_runs_the_grid_and_each_budget_on_both_fits(source, tmp_path, monkeypatch):
    spec = resolve_spec("source200:rotation100", dataset="digits", test_size=50, oracle_size=100)
    sequence = build_sequence(spec, source)
    space = SearchSpace.parse({"lr": {"grid": [1e-3, 1e-2]}, "dropout": {"grid": [0.0]}}, "t")
    budgets = {"two": Budget(sampler="random", trials=2, max_epochs=2)}
    figures = measure_search(
        sequence, "convnet_1", budgets, {"baseline": space, "ft": space}, [0],
        Engine(device="cpu"), grid_epochs=2, history_epochs=1, store=tmp_path / "store",
    )  # fmt: skip
    assert [(g["fit"], g["seed"]) for g in figures["grids"]] == [("baseline", 0), ("ft", 0)]
    assert all(1 <= g["epochs"] <= 4 for g in figures["grids"])  # 2 grid points, ≤ 2 epochs each
    for run in figures["runs"]:
        assert run["trials"] == 2 and 1 <= run["epochs"] <= 4
        assert 0.0 <= run["test_accuracy"] <= 1.0 and not math.isnan(run["best_valid"])
    assert {(r["budget"], r["fit"]) for r in figures["summary"]} == {
        ("paper grid", "baseline"), ("two", "baseline"), ("paper grid", "ft"), ("two", "ft")
    }  # fmt: skip

    # Measured again with the same store: every study is read back, none is trained.
    def no_training(*args, **kwargs):
        raise AssertionError("a cached study was trained again")

    monkeypatch.setattr("seq2final.bench.search.run_budget", no_training)
    monkeypatch.setattr("seq2final.bench.search.fit", no_training)
    again = measure_search(
        sequence, "convnet_1", budgets, {"baseline": space, "ft": space}, [0],
        Engine(device="cpu"), grid_epochs=2, history_epochs=1, store=tmp_path / "store",
    )  # fmt: skip
    assert again == figures


class Interrupted(Exception):
    """The measurement stopped by its user (pytest keeps KeyboardInterrupt for itself)."""


def test_an_interrupted_measurement_resumes_at_the_next_unfinished_trial(
    source, tmp_path, monkeypatch
):
    spec = resolve_spec("source200:rotation100", dataset="digits", test_size=50, oracle_size=100)
    sequence = build_sequence(spec, source)
    space = SearchSpace.parse({"lr": {"grid": [1e-3, 1e-2]}, "dropout": {"grid": [0.0]}}, "t")
    budgets = {"two": Budget(sampler="random", trials=2, max_epochs=2)}

    def measure(store):
        return measure_search(
            sequence, "convnet_1", budgets, {"baseline": space, "ft": space}, [0],
            Engine(device="cpu"), grid_epochs=2, history_epochs=1, store=store,
        )  # fmt: skip

    uninterrupted = measure(tmp_path / "whole")
    from seq2final.bench import search

    real_fit, calls, interrupt_at = search.fit, [], [2]

    def interrupted_fit(*args, **kwargs):  # the 2nd fit (grid point 1) is interrupted, once
        calls.append(1)
        if len(calls) in interrupt_at:
            interrupt_at.clear()
            raise Interrupted
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(search, "fit", interrupted_fit)
    with pytest.raises(Interrupted):
        measure(tmp_path / "resumed")
    calls.clear()
    resumed = measure(tmp_path / "resumed")
    # 9 fits in all (2 grid points + 2 trials per fit, 1 history): grid point 0 is not redone.
    assert len(calls) == 8
    assert resumed["grids"] == uninterrupted["grids"]
    assert not list((tmp_path / "resumed" / "studies").iterdir())  # finished studies cleared


def test_a_penalty_added_to_the_hyper_parameters_does_not_change_the_study_keys():
    """The keys hold the history fit's hyper-parameters as they were when the first studies ran;
    a penalty added since (off for the history fit) is left out, one that is on is kept."""
    from seq2final.bench.search import history_key
    from seq2final.training.hyperparameters import HyperParameters

    assert history_key() == {"lr": 1e-3, "weight_decay": 1e-4, "dropout": 0.0, "irm_penalty": 1.0,
                             "ewc_lambda": 0.0, "adjacency": 0.0}  # fmt: skip
    off = HyperParameters(lr=1e-3, weight_decay=1e-4, dropout=0.0, coral=0.0, si_c=0.0)
    assert history_key(off) == history_key()  # penalties declared since, off: the same key
    assert history_key(HyperParameters(lr=1e-3, si_c=0.5))["si_c"] == 0.5
