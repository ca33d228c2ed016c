"""A study's trials as the tuner keeps them: what a halving budget trains, the chosen trial and
its checkpoint, and the summary of every trial a fit's record carries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import optuna
import torch

from seq2final.core.errors import Seq2FinalError
from seq2final.core.files import atomic_write
from seq2final.core.schema import stored_problem
from seq2final.training.epochs import FitResult
from seq2final.training.fused import FusedRun
from seq2final.training.loop import FitRun
from seq2final.training.records import TrialRecord

TestScore = Callable[[dict[str, torch.Tensor]], float | None]
"""A finished trial's selected weights scored on the test split, only to be recorded."""


class TrialFits(Protocol):
    """What a ``halving`` budget trains: a grid point's fit, started afresh or continued from
    the file a rung left it in (:class:`~seq2final.training.loop.FitRun`); with a width above 1,
    grid points stacked into one fused fit (:class:`~seq2final.training.fused.FusedRun`) the same
    way."""

    def start(self, params: dict[str, float], seed: int) -> FitRun: ...

    def load(self, path: Path, params: dict[str, float]) -> FitRun: ...

    def weights(self, run: FitRun) -> dict[str, torch.Tensor]:
        """An ended fit's selected weights, on the CPU, as the grid's trial hands them back."""
        ...

    def start_stack(
        self, params: list[dict[str, float]], seeds: list[int], labels: list[int]
    ) -> FusedRun: ...

    def load_stack(self, path: Path) -> FusedRun: ...


@dataclass
class Tuned:
    """The selected trial of a study: its values, fit, weights, and a summary of every trial."""

    params: dict[str, float]
    fit: FitResult
    state_dict: dict[str, torch.Tensor]
    trials: list[TrialRecord] = field(default_factory=list)

    @property
    def finished_trials(self) -> int:
        return sum(t.finished for t in self.trials)


def keep_if_best(
    chosen: dict[str, Any],
    checkpoint: Path,
    order: int,
    params: dict[str, float],
    result: FitResult,
    weights: dict[str, torch.Tensor],
) -> None:
    """Make a finished trial the study's ``chosen`` one, checkpointed, if its validation accuracy
    beats the best so far (ties to the earlier grid point or trial)."""
    value = result.valid_accuracy
    if not chosen or (value, -order) > (chosen["value"], -chosen.get("order", 0)):
        chosen.clear()
        chosen.update(value=value, order=order, params=params, fit=result, state_dict=weights)
        save_checkpoint(checkpoint, chosen)


def trial_records(study: optuna.Study) -> list[TrialRecord]:
    """A summary of every trial the study ran (those still waiting in its queue aside)."""
    return [
        TrialRecord(
            number=t.number,
            state=t.state.name,
            params=t.user_attrs.get("params", t.params),
            value=t.value,
            valid_curve=t.user_attrs.get("valid_curve", []),
            test_accuracy=t.user_attrs.get("test_accuracy"),
        )
        for t in study.get_trials(deepcopy=False)
        if t.state != optuna.trial.TrialState.WAITING
    ]


def save_checkpoint(path: Path, best: dict[str, Any]) -> None:
    fit: FitResult = best["fit"]
    payload = {
        "value": best["value"],
        "order": best["order"],
        "params": best["params"],
        "fit": vars(fit),
        "state_dict": best["state_dict"],
    }
    atomic_write(path, lambda partial: torch.save(payload, partial))


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    """The best trial so far, or None when there is none yet.

    A file that exists but cannot be read is reported, not ignored: silently dropping it would
    restart a study that may have run for hours. Checkpoints are written atomically, so this
    means the file was damaged or replaced by something else.
    """
    if not path.exists():
        return None
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
        fit = payload["fit"]
        if "path_integral" in fit:  # checkpoints written before callbacks kept extras
            omega = fit.pop("path_integral")
            fit["extras"] = {} if omega is None else {"path_integral": omega}
        payload["fit"] = FitResult(**fit)
    except Exception as error:  # any unreadable or foreign content is the same problem
        first = stored_problem(error)[:120]
        raise Seq2FinalError(
            f"tuning checkpoint {path} is unreadable ({first}); delete it to restart its study "
            "from scratch"
        ) from None
    return payload
