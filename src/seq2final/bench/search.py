"""How many epochs a budget spends before its best trial comes within a margin of the grid's best.

For one fit (the baseline's: from scratch on the final step; FT's: from a fixed historical
model) and one seed, the paper's grid is run in full first; its best validation accuracy sets
the target (``margin`` below it, 0.01 by default) and its total epochs the yardstick. Each budget
is then tuned on the same fit, and the epochs it has spent when a *finished* trial first reaches
the target are counted (a pruned trial is never selected, so it never reaches it, but its epochs
count). A budget that never reaches the target is reported as missing it and charged what it
spent, and at least the grid's epochs (the grid is what finds the target).
"""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seq2final.core.files import atomic_write
from seq2final.core.seeds import derived_seed
from seq2final.data.sequence import ShiftSequence
from seq2final.models import build_model
from seq2final.runs.keys import digest
from seq2final.training.engine import Engine, accuracy
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import fit
from seq2final.training.objectives import Task
from seq2final.training.records import TrialRecord
from seq2final.training.search import Budget, SearchSpace
from seq2final.training.tensors import TensorSplit
from seq2final.training.trials import Tuned
from seq2final.training.tuner import Tuner

log = logging.getLogger(__name__)

HISTORY_HP = HyperParameters(lr=1e-3, weight_decay=1e-4, dropout=0.0)
"""The fixed ERM fit of the historical steps that FT continues (the same model for every
budget: what is measured is the final fit's search, not the history's)."""

KEYED_PENALTIES = {"irm_penalty": 1.0, "ewc_lambda": 0.0, "adjacency": 0.0}
"""The penalties every fit's hyper-parameters held, at these values, when the measurement's first
studies were keyed. Any hyper-parameter declared since is keyed only while it is on, so that
adding one does not orphan hours of results."""


def history_key(hp: HyperParameters = HISTORY_HP) -> dict[str, float]:
    """The history fit's hyper-parameters as the study keys hold them."""
    own = {"lr", "weight_decay", "dropout", *KEYED_PENALTIES}
    return {**KEYED_PENALTIES, **{k: float(v) for k, v in hp.items() if k in own or v != 0.0}}


@dataclass(frozen=True)
class SearchRun:
    """One budget's study on one fit and seed: epochs to the target and what it selected."""

    budget: str
    fit: str
    seed: int
    epochs: int  # spent in all
    epochs_to_target: int | None  # spent when a finished trial first reached the target
    best_valid: float
    test_accuracy: float
    trials: int


@dataclass(frozen=True)
class Outcome:
    """One study's outcome as the measurement keeps it (JSON, so a killed one resumes)."""

    trials: list[TrialRecord]
    best_valid: float
    test_accuracy: float
    params: dict[str, Any]


def epochs_to_target(trials: list[TrialRecord], target: float) -> tuple[int, int | None]:
    """(epochs spent in all, epochs spent when a finished trial first reached ``target``), over
    a study's trial summaries (:attr:`Tuned.trials`) in the order they ran."""
    spent, reached = 0, None
    for trial in sorted(trials, key=lambda t: t.number):
        spent += max(0, len(trial.valid_curve) - 1)  # epoch 0 is the initial model
        value = trial.value
        finished = trial.state == "COMPLETE" and value is not None
        if reached is None and finished and value is not None and value >= target:
            reached = spent
    return spent, reached


def final_step_fits(
    sequence: ShiftSequence,
    arch: str,
    engine: Engine,
    history_epochs: int,
    kept: Path | None = None,
) -> dict[str, Callable[[], nn.Module]]:
    """The two fits measured: ``baseline`` (a fresh model) and ``ft`` (a copy of one ERM model
    of the historical steps, trained with :data:`HISTORY_HP` the first time FT needs it, and
    kept at ``kept`` when given so that a resumed measurement does not train it again)."""
    device = engine.torch_device()
    classes = len(sequence.class_names)
    history: dict[str, torch.Tensor] = {}

    def split(step: int, name: str) -> TensorSplit:
        return TensorSplit.from_arrays(*sequence.step(step).split(name))

    def history_weights() -> dict[str, torch.Tensor]:
        if not history and kept is not None and kept.exists():
            history.update(torch.load(kept, map_location=device, weights_only=True))
        if not history:
            steps = range(sequence.num_steps - 1)
            torch.manual_seed(derived_seed("bench", "history"))
            model = build_model(arch, classes).to(device)
            task = Task(
                [TensorSplit.concat([split(t, "train") for t in steps])],
                TensorSplit.concat([split(t, "valid") for t in steps]),
            )
            fit(model, task, HISTORY_HP, engine, history_epochs, seed=0)
            history.update({k: v.detach().clone() for k, v in model.state_dict().items()})
            if kept is not None:
                atomic_write(kept, lambda partial: torch.save(history, partial))
        return history

    def fresh() -> nn.Module:
        return build_model(arch, classes).to(device)

    def continued() -> nn.Module:
        model = build_model(arch, classes).to(device)
        model.load_state_dict(history_weights())
        return model

    return {"baseline": fresh, "ft": continued}


def run_budget(
    name: str,
    budget: Budget,
    space: SearchSpace,
    make_model: Callable[[], nn.Module],
    task: Task,
    test: TensorSplit,
    engine: Engine,
    seed: int,
    root: Path,
) -> tuple[Tuned, float]:
    """Tune one fit under ``budget`` in a fresh study; the selected model's test accuracy."""

    def train_trial(params, trial_seed, report):  # noqa: ANN001, ANN202 - the tuner's protocol
        torch.manual_seed(derived_seed(seed, "init"))  # every trial starts from the same init
        model = make_model()
        result = fit(
            model, task, HyperParameters(params), engine, budget.max_epochs,
            trial_seed, report,
        )  # fmt: skip
        return result, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}

    tuned = Tuner(budget, None, root, seed).tune(name, space, train_trial)
    model = make_model()
    model.load_state_dict(tuned.state_dict)
    return tuned, accuracy(model, test, engine)


def measure_search(
    sequence: ShiftSequence,
    arch: str,
    budgets: Mapping[str, Budget],
    spaces: Mapping[str, SearchSpace],
    seeds: list[int],
    engine: Engine,
    grid_epochs: int = 100,
    history_epochs: int = 15,
    margin: float = 0.01,
    store: Path | None = None,
) -> dict[str, Any]:
    """Every budget against the paper grid, on the baseline's and FT's final-step fits.

    The measurement takes hours of CPU, so with a ``store`` folder it resumes where it was
    stopped: each study's outcome is kept in ``outcomes.json`` under a digest of everything it
    depends on, a study in progress keeps its Optuna journal and best checkpoint under
    ``studies/`` (resumed at the next unfinished trial), and the historical model FT continues
    is kept beside them.
    """
    common = {"sequence": sequence.key, "arch": arch, "engine": engine.results_key(),
              "history": [history_epochs, history_key()]}  # fmt: skip
    kept = store / f"history-{digest(common)}.pt" if store is not None else None
    fits = final_step_fits(sequence, arch, engine, history_epochs, kept)
    final = sequence.num_steps - 1
    train, valid, test = (
        TensorSplit.from_arrays(*sequence.step(final).split(s)) for s in ("train", "valid", "test")
    )
    task = Task([train], valid)
    grid = Budget(sampler="grid", max_epochs=grid_epochs)
    outcomes = store / "outcomes.json" if store is not None else None
    done = json.loads(outcomes.read_text()) if outcomes is not None and outcomes.exists() else {}

    def study(fit_name: str, seed: int, name: str, budget: Budget) -> Outcome:
        key = digest({**common, "fit": fit_name, "seed": seed, "budget": budget.model_dump(),
                      "space": spaces[fit_name].describe()})  # fmt: skip
        if key not in done:
            with _study_folder(store, key) as folder:
                tuned, test_accuracy = run_budget(
                    f"{fit_name}-{seed}-{name}", budget, spaces[fit_name], fits[fit_name], task,
                    test, engine, seed, folder,
                )  # fmt: skip
                done[key] = {"trials": [t.model_dump(mode="json") for t in tuned.trials],
                             "best_valid": tuned.fit.valid_accuracy,
                             "test_accuracy": test_accuracy, "params": tuned.params}  # fmt: skip
                if outcomes is not None:
                    atomic_write(outcomes, lambda partial: partial.write_text(json.dumps(done)))
        stored = done[key]
        return Outcome([TrialRecord.model_validate(t) for t in stored["trials"]],
                       stored["best_valid"], stored["test_accuracy"], stored["params"])  # fmt: skip

    runs: list[SearchRun] = []
    grids: list[dict[str, Any]] = []
    for fit_name in fits:
        for seed in seeds:
            outcome = study(fit_name, seed, "grid", grid)
            total, _ = epochs_to_target(outcome.trials, 0.0)
            best = outcome.best_valid
            grids.append({"fit": fit_name, "seed": seed, "epochs": total, "best_valid": best,
                          "test_accuracy": outcome.test_accuracy,
                          "params": outcome.params})  # fmt: skip
            log.info("%s %d grid: valid %.3f, %d epochs", fit_name, seed, best, total)
            for name, budget in budgets.items():
                outcome = study(fit_name, seed, name, budget)
                spent, reached = epochs_to_target(outcome.trials, best - margin)
                runs.append(SearchRun(name, fit_name, seed, spent, reached, outcome.best_valid,
                                      outcome.test_accuracy, len(outcome.trials)))  # fmt: skip
                log.info("%s %d %s: %d epochs, target after %s", fit_name, seed, name, spent,
                         reached)  # fmt: skip
    return {"margin": margin, "grids": grids, "runs": [vars(r) for r in runs],
            "summary": summarize(runs, grids)}  # fmt: skip


@contextmanager
def _study_folder(store: Path | None, key: str) -> Iterator[Path]:
    """Where one study runs: kept under ``store`` until its outcome is recorded (so a killed
    measurement resumes the study), or a temporary folder without a store."""
    if store is None:
        with tempfile.TemporaryDirectory() as folder:
            yield Path(folder)
        return
    kept = store / "studies" / key
    kept.mkdir(parents=True, exist_ok=True)
    yield kept
    shutil.rmtree(kept)


def summarize(runs: list[SearchRun], grids: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per budget and fit: mean epochs to the target as a fraction of the grid's, the mean of all
    it spent as a fraction of the grid's (a study goes on after its target: what a user pays),
    seeds reaching it, and the selected configurations' mean validation and test accuracy."""
    grid_epochs = {(g["fit"], g["seed"]): g["epochs"] for g in grids}
    rows = []
    for fit_name in dict.fromkeys(g["fit"] for g in grids):
        seeds = [g for g in grids if g["fit"] == fit_name]
        rows.append({
            "budget": "paper grid", "fit": fit_name, "reached": len(seeds), "seeds": len(seeds),
            "epochs_to_target": statistics.mean(g["epochs"] for g in seeds),
            "fraction_of_grid": 1.0, "spent_of_grid": 1.0,
            "valid": statistics.mean(g["best_valid"] for g in seeds),
            "test": statistics.mean(g["test_accuracy"] for g in seeds),
        })  # fmt: skip
        for budget in dict.fromkeys(r.budget for r in runs):
            mine = [r for r in runs if r.budget == budget and r.fit == fit_name]
            # A miss is charged at least the grid's epochs: the grid is what finds the target.
            charged = [r.epochs_to_target if r.epochs_to_target is not None
                       else max(r.epochs, grid_epochs[(fit_name, r.seed)]) for r in mine]  # fmt: skip
            fractions = [
                c / grid_epochs[(fit_name, r.seed)] for c, r in zip(charged, mine, strict=True)
            ]
            rows.append({
                "budget": budget, "fit": fit_name,
                "reached": sum(r.epochs_to_target is not None for r in mine), "seeds": len(mine),
                "epochs_to_target": statistics.mean(charged),
                "fraction_of_grid": statistics.mean(fractions),
                "spent_of_grid": statistics.mean(
                    r.epochs / grid_epochs[(fit_name, r.seed)] for r in mine
                ),
                "valid": statistics.mean(r.best_valid for r in mine),
                "test": statistics.mean(r.test_accuracy for r in mine),
            })  # fmt: skip
    return rows
