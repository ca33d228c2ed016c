"""A ``halving`` budget's study as the steps a reader follows (:meth:`~seq2final.training.
tuner.Tuner._tune_halving` says what it does)."""

from __future__ import annotations

import functools
import logging
import shutil
from typing import TYPE_CHECKING, Any

import optuna
import torch

from seq2final.core.errors import Seq2FinalError
from seq2final.core.liveness import current_process
from seq2final.core.progress import current
from seq2final.training.epochs import FitResult
from seq2final.training.halving import best_so_far, grid_point_of, rungs, survivors
from seq2final.training.search import SearchSpace
from seq2final.training.trials import TestScore, TrialFits, Tuned, keep_if_best, trial_records

if TYPE_CHECKING:
    from seq2final.training.tuner import Tuner

log = logging.getLogger(__name__)


class HalvingStudy:
    """One halving study (:meth:`Tuner._tune_halving`) as the steps a reader follows: open
    (resume what an earlier run decided), train each rung (point by point, or stack by stack),
    decide who goes on, record each configuration once decided, close."""

    def __init__(
        self, tuner: Tuner, name: str, space: SearchSpace, fits: TrialFits, seed_name: str,
        test_score: TestScore | None, width: int,
    ) -> None:  # fmt: skip
        self.tuner, self.budget, self.name, self.space = tuner, tuner.budget, name, space
        self.fits, self.seed_name, self.test_score, self.width = fits, seed_name, test_score, width
        self.points = space.grid_points()
        self.folder = tuner.root / "checkpoints" / name  # paused fits, one file each
        resumed = tuner._resumed(name)
        self.study, self.checkpoint = resumed.study, resumed.checkpoint
        if resumed.started_over:  # its paused fits too
            shutil.rmtree(self.folder, ignore_errors=True)
        self.told = {t.user_attrs["order"]: t for t in resumed.done}
        self.chosen: dict[str, Any] = {} if resumed.best is None else resumed.best
        self.curves = {order: list(t.user_attrs.get("valid_curve", []))
                       for order, t in self.told.items()}  # fmt: skip
        self.ended = {order for order, t in self.told.items()
                      if t.state == optuna.trial.TrialState.COMPLETE}  # fmt: skip
        self.progress = current()

    def kept_point(self, known: dict[str, float] | None) -> int | None:
        """Under ``keep_known``, the grid point the previous step's winner is, if it is one."""
        if not self.budget.keep_known or known is None:
            return None
        kept = grid_point_of(known, self.points)
        if kept is None:
            log.info("study %s: the previous step's winner %s is no point of this grid",
                     self.name, known)  # fmt: skip
        return kept

    def run(self, kept: int | None) -> Tuned:
        """Every rung in turn, then the last (to each survivor's end), and the best finished."""
        budget = self.budget
        running = list(range(len(self.points)))
        groups = [running[start : start + self.width]
                  for start in range(0, len(running), self.width)]  # fmt: skip
        every = [*rungs(budget.min_epochs, budget.reduction_factor, budget.max_epochs), None]
        for index, rung in enumerate(every):
            self.progress.trials(0, len(running))
            if self.width > 1:
                for group in groups:
                    self._advance_stack(group, rung, running)
            else:
                for order in running:
                    if order not in self.told:
                        self._advance(order, rung)
            running = self._still_running(running, rung)
            if rung is None or not running:
                break
            running = self._decide(running, rung, index == 0, kept)
        if not self.chosen:
            raise Seq2FinalError(f"study '{self.name}' has no finished trial to select")
        self.tuner.checkpoints.append(self.checkpoint)
        shutil.rmtree(self.folder, ignore_errors=True)
        chosen = self.chosen
        return Tuned(
            chosen["params"], chosen["fit"], chosen["state_dict"], trial_records(self.study)
        )

    def _still_running(self, running: list[int], rung: int | None) -> list[int]:
        """Those not ended by their stopping rule by this rung (an ended one is a candidate,
        not ranked again)."""
        return [order for order in running if order not in self.ended
                or (rung is not None and len(self.curves[order]) - 1 > rung)]  # fmt: skip

    def _decide(self, running: list[int], rung: int, first: bool, kept: int | None) -> list[int]:
        """The rung's survivors (:func:`~seq2final.training.halving.survivors`); the others are
        recorded as pruned."""
        scores = {order: best_so_far(self.curves[order], rung) for order in running}
        guarded = self.budget.keep_each
        guard = None
        if guarded is not None and first:
            guard = {order: self.points[order][guarded] for order in running}
        going_on = survivors(running, scores, self.budget.reduction_factor, guard, kept)
        for order in running:
            if order not in going_on and order not in self.told:
                self._record(order, None)
        return going_on

    def _record(self, order: int, value: float | None, test: float | None = None) -> None:
        """A decided configuration as an Optuna trial: COMPLETE with its value, or PRUNED."""
        state = (
            optuna.trial.TrialState.COMPLETE
            if value is not None
            else optuna.trial.TrialState.PRUNED
        )
        attrs = {"order": order, "params": self.points[order], "valid_curve": self.curves[order],
                 "worker": str(current_process())}  # fmt: skip
        if test is not None:
            attrs["test_accuracy"] = test
        self.study.add_trial(optuna.trial.create_trial(
            params=self.points[order], distributions=self.space.distributions(), value=value,
            state=state, user_attrs=attrs,
        ))  # fmt: skip
        (self.folder / f"{order}.pt").unlink(missing_ok=True)

    def _finished(self, order: int, result: FitResult, weights: dict[str, torch.Tensor]) -> None:
        """A point its stopping rule ended: kept if best, recorded with its value."""
        keep_if_best(self.chosen, self.checkpoint, order, self.points[order], result, weights)
        self.ended.add(order)
        test = None if self.test_score is None else self.test_score(weights)
        self._record(order, result.valid_accuracy, test)

    def _advance(self, order: int, until: int | None) -> None:
        """Train grid point ``order`` to epoch ``until`` (to its end when None)."""
        paused = self.folder / f"{order}.pt"
        point = self.points[order]
        if paused.exists():
            run = self.fits.load(paused, point)
        else:
            run = self.fits.start(point, self.tuner.trial_seed(self.seed_name, point))
        if until is not None and run.epoch >= until:
            self.curves[order] = [row["valid_accuracy"] for row in run.log.history]
            return  # trained to this rung before an interruption
        self.progress.trial()
        self.progress.epochs(self.budget.max_epochs if until is None else until)
        result = run.run(until, progress=self.progress.epoch)
        self.curves[order] = [row["valid_accuracy"] for row in run.log.history]
        if result is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            run.save(paused)
            return
        self._finished(order, result, self.fits.weights(run))

    def _stopped(self, order: int, result: FitResult, weights: dict[str, torch.Tensor]) -> None:
        """A stacked point its stopping rule ended: finished, as :meth:`_advance`'s."""
        weights = {k: v.detach().cpu().clone() for k, v in weights.items()}
        self.curves[order] = [row["valid_accuracy"] for row in result.history]
        self._finished(order, result, weights)

    def _advance_stack(self, group: list[int], until: int | None, running: list[int]) -> None:
        """Train the undecided points of ``group`` as one stack to epoch ``until``."""
        todo = [order for order in group if order in running and order not in self.told]
        if not todo:
            return
        paused = self.folder / f"stack-{group[0]}.pt"
        run = self.fits.load_stack(paused) if paused.exists() else None
        if run is not None and set(todo) <= set(run.training):
            run.drop([order for order in run.training if order not in todo])
        else:  # none yet, or a file of other points (fuse changed since): start afresh
            run = self.fits.start_stack(
                [self.points[o] for o in todo],
                [self.tuner.trial_seed(self.seed_name, self.points[o]) for o in todo], todo,
            )  # fmt: skip
        for order, trial in run.trials.items():
            trial.on_stop = functools.partial(self._stopped, order)
        if until is None or run.epoch < until:
            for _ in run.training:
                self.progress.trial()
            self.progress.epochs(self.budget.max_epochs if until is None else until)
            if run.run(until) is None:
                self.folder.mkdir(parents=True, exist_ok=True)
                run.save(paused)
            else:
                paused.unlink(missing_ok=True)
        self.curves.update({o: c for o, c in run.curves().items()
                            if o in todo and o not in self.ended})  # fmt: skip
