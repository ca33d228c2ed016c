"""The tuner: one resumable Optuna study per fit, run under a budget (:mod:`~.search`).

Each fit of a method (one stage of one model) is tuned by its own study on validation accuracy
only. Under the ``paper`` budget the grid is enqueued in the original nesting order, so ties go to
the first grid point as they did there.

Studies live in an Optuna storage (a journal file by default, any RDB URL by parameter). The best
trial's weights are checkpointed next to it, so a study interrupted after some trials resumes with
the remaining ones and still returns the best model over all of them.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import torch
from optuna.storages.journal import JournalFileBackend

from seq2final.core.errors import Seq2FinalError
from seq2final.core.liveness import ProcessToken, current_process
from seq2final.core.progress import current
from seq2final.core.seeds import derived_seed
from seq2final.training.epochs import FitResult
from seq2final.training.halving_study import HalvingStudy
from seq2final.training.search import Budget, SearchSpace
from seq2final.training.trials import (
    TestScore,
    TrialFits,
    Tuned,
    keep_if_best,
    load_checkpoint,
    trial_records,
)

log = logging.getLogger(__name__)
optuna.logging.set_verbosity(optuna.logging.WARNING)


TrainTrial = Callable[
    [dict[str, float], int, Callable[[int, float], None]], tuple[FitResult, dict[str, torch.Tensor]]
]


@dataclass(eq=False)
class TrialRun:
    """One asked trial, as the training of a trial sees it: its values and seed, ``report`` to call after
    each epoch (it raises :class:`optuna.TrialPruned` once the trial is pruned, and has told the
    study so) and ``finish`` to call with the fit's result and weights when the model stops."""

    trial: optuna.Trial
    params: dict[str, float]
    seed: int
    order: int
    curve: list[float] = field(default_factory=list)
    told: bool = False
    finish: Callable[[FitResult, dict[str, torch.Tensor]], None] = lambda result, weights: None

    def report(self, epoch: int, accuracy: float) -> None:
        self.curve.append(accuracy)
        self.trial.report(accuracy, epoch)
        if self.trial.should_prune():
            self.trial.set_user_attr("valid_curve", self.curve)
            self.trial.study.tell(self.trial, state=optuna.trial.TrialState.PRUNED)
            self.told = True
            raise optuna.TrialPruned()


TrainStack = Callable[[list[TrialRun]], None]
"""Trains several trials together; calls each run's ``report`` per epoch and ``finish`` when
its model stops (a pruned one's ``report`` has raised :class:`optuna.TrialPruned`)."""


@dataclass
class _Resumed:
    """A study as :meth:`Tuner._resumed` readies it."""

    study: optuna.Study
    done: list[optuna.trial.FrozenTrial]
    checkpoint: Path
    best: dict[str, Any] | None
    started_over: bool


class Tuner:
    """Runs one Optuna study per fit under a budget, with a persistent storage and checkpoints."""

    def __init__(self, budget: Budget, storage: str | None, root: Path, seed: int) -> None:
        self.budget = budget
        self.seed = seed
        self.root = Path(root)
        self.storage_url = storage
        self._storage: optuna.storages.BaseStorage | None = None
        self.checkpoints: list[Path] = []

    @property
    def storage(self) -> optuna.storages.BaseStorage:
        if self._storage is None:
            self._storage = open_storage(self.storage_url, self.root)
        return self._storage

    def _sampler(self, name: str, draw: int = 0) -> optuna.samplers.BaseSampler:
        """The sampler for the ``draw``-th finished trial of study ``name``.

        Seeding by draw number, not once per process, makes trial k's values depend only on the
        seed and the k finished trials before it: an interrupted and resumed study draws exactly
        what an uninterrupted one does, and never replays the draws it already made.
        """
        seed = derived_seed(self.seed, name, "sampler", draw)
        if self.budget.sampler == "tpe":
            return optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=self.budget.startup_trials
            )
        return optuna.samplers.RandomSampler(seed=seed)  # grid points are enqueued explicitly

    def trial_seed(self, seed_name: str, params: dict[str, float]) -> int:
        """A configuration's training seed: from the fit (``seed_name``, which names no budget),
        the run's seed and the values, so that the configuration trains the same under every
        budget and its first *k* epochs are a prefix of the grid's (docs/methods.md, "Tuning")."""
        return derived_seed(self.seed, seed_name, sorted(params.items()))

    def _ask(
        self, study: optuna.Study, name: str, space: SearchSpace, draw: int, seed_name: str
    ) -> TrialRun:
        """The ``draw``-th trial of the study, its values drawn and recorded."""
        study.sampler = self._sampler(name, draw)
        trial = study.ask()
        trial.set_user_attr("worker", str(current_process()))
        params = space.suggest(trial)
        order = trial.user_attrs.get("order", trial.number)
        trial.set_user_attr("order", order)
        trial.set_user_attr("params", params)
        trial.set_user_attr("draw", draw)
        return TrialRun(trial, params, self.trial_seed(seed_name, params), order)

    def _batch_size(self, width: int, pending: list[int]) -> int:
        """How many of the ``pending`` draws to ask for at once: up to ``width``, and under TPE
        never past the last start-up trial (the model-based draws should see those)."""
        size = min(width, len(pending))
        startup = self.budget.startup_trials
        if self.budget.sampler == "tpe" and pending[0] < startup:
            size = min(size, sum(draw < startup for draw in pending))
        return max(1, size)

    def _study(self, name: str) -> optuna.Study:
        return optuna.create_study(
            storage=self.storage,
            study_name=name,
            sampler=self._sampler(name),
            pruner=self.budget.pruner_of(),
            direction="maximize",
            load_if_exists=True,
        )

    def tune(
        self,
        name: str,
        space: SearchSpace,
        train_trial: TrainTrial,
        train_stack: TrainStack | None = None,
        width: int = 1,
        seed_name: str | None = None,
        fits: TrialFits | None = None,
        test_score: TestScore | None = None,
        known: dict[str, float] | None = None,
    ) -> Tuned:
        """Run (or resume) study ``name`` and return its best trial; the trials' seeds come from
        ``seed_name`` (``name`` when None: a study name that holds no budget).

        ``train_trial`` trains one trial. With ``train_stack`` and ``width`` > 1, up to
        ``width`` trials are asked at a time and handed to ``train_stack`` together (one stacked
        fit); each is told as soon as its model stops, so a
        killed fused study keeps the trials that finished. Under TPE the first batch holds only
        the start-up (random) trials, so the model-based draws see them.

        Ties go to the earliest grid point (grid) or the earliest trial (other samplers), as in
        the original. Trials finished by an earlier, interrupted run are kept and not rerun, and a
        trial's seed follows from its values, so a resumed grid computes what an uninterrupted
        one would. One process runs a study at a time (the stores hold a lease on the job or state
        it belongs to); trials a dead worker left running are tried again. A study whose best
        weights are gone (its fit was stored and the checkpoint discarded, and now the fit is
        asked for again, e.g. with ``force``) starts over.

        A ``halving`` budget trains ``fits`` instead of ``train_trial``
        (:meth:`_tune_halving`). ``test_score``, given a finished trial's weights, is recorded
        with the trial (:attr:`TrialRecord.test_accuracy`) and read by nothing here. ``known``:
        the values that won the fit's previous step, which a halving budget with ``keep_known``
        keeps at every rung (other budgets train the whole grid or sample; they ignore it).
        """
        if self.budget.pruner == "halving":
            if fits is None:
                raise Seq2FinalError(f"study '{name}': budget pruner 'halving' needs the fits "
                                     "to continue; this fit gives none")  # fmt: skip
            return self._tune_halving(name, space, fits, seed_name or name, test_score, width,
                                      known)  # fmt: skip
        resumed = self._resumed(name)
        study, done = resumed.study, resumed.done
        pending = self._pending(study, space, done)
        progress = current()
        progress.trials(len(done), len(done) + len(pending))
        chosen: dict[str, Any] = {} if resumed.best is None else resumed.best
        finish = functools.partial(_finish, study, resumed.checkpoint, chosen, test_score)
        while pending:
            size = self._batch_size(width, pending)
            runs = [
                self._ask(study, name, space, draw, seed_name or name) for draw in pending[:size]
            ]
            pending = pending[size:]
            for run in runs:
                run.finish = functools.partial(finish, run)
            stack = train_stack if size > 1 else None
            self._train_batch(study, name, runs, train_trial, stack)
        if not chosen:
            raise Seq2FinalError(
                f"study '{name}' has no finished trial to select (every trial was pruned); "
                "raise the budget's trials or use pruner: none"
            )
        self.checkpoints.append(resumed.checkpoint)
        return Tuned(chosen["params"], chosen["fit"], chosen["state_dict"], trial_records(study))

    def _pending(
        self, study: optuna.Study, space: SearchSpace, done: list[optuna.trial.FrozenTrial]
    ) -> list[int]:
        """The draws still to make: under the grid, every point no decided trial holds,
        enqueued in grid order (once: a point already waiting is not enqueued again)."""
        if self.budget.sampler != "grid":
            return _pending_draws(done, self.budget.trials or 0)
        finished = {t.user_attrs.get("order", t.number) for t in done}
        waiting = {
            t.user_attrs.get("order", t.number)
            for t in study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.WAITING])
        }
        points = space.grid_points()
        for index, point in enumerate(points):
            if index not in finished and index not in waiting:
                study.enqueue_trial(point, user_attrs={"order": index}, skip_if_exists=False)
        return list(range(len(done), len(done) + len(points) - len(finished)))

    def _train_batch(
        self, study: optuna.Study, name: str, runs: list[TrialRun], train_trial: TrainTrial,
        train_stack: TrainStack | None,
    ) -> None:  # fmt: skip
        """Train the asked ``runs``, stacked (``train_stack``) or one by one, each told as it
        stops; any left untold when training fails are told FAIL, so they are asked again."""
        pruned, progress = optuna.trial.TrialState.PRUNED, current()
        try:
            if train_stack is not None:
                for _ in runs:
                    progress.trial()
                with ExitStack() as beating:
                    for run in runs:
                        beating.enter_context(_heartbeat(self.storage, run.trial._trial_id))
                    train_stack(runs)
            else:
                for run in runs:
                    progress.trial()
                    try:
                        with _heartbeat(self.storage, run.trial._trial_id):
                            run.finish(*train_trial(run.params, run.seed, run.report))
                    except optuna.TrialPruned:  # raised outside report: tell it here
                        if not run.told:
                            run.trial.set_user_attr("valid_curve", run.curve)
                            study.tell(run.trial, state=pruned)
                            run.told = True
            unfinished = [run.trial.number for run in runs if not run.told]
            if unfinished:
                raise Seq2FinalError(
                    f"study '{name}': the stacked training left trial(s) {unfinished} "
                    "neither finished nor pruned"
                )
        except BaseException:
            for run in runs:
                if not run.told:
                    study.tell(run.trial, state=optuna.trial.TrialState.FAIL)
            raise

    def _tune_halving(
        self,
        name: str,
        space: SearchSpace,
        fits: TrialFits,
        seed_name: str,
        test_score: TestScore | None,
        width: int = 1,
        known: dict[str, float] | None = None,
    ) -> Tuned:
        """Synchronous successive halving over the grid (:mod:`~seq2final.training.halving`).

        Every grid point trains to the first rung; a fit a rung stops is saved under
        ``checkpoints/<study>/`` and continued from there if it goes on. A configuration becomes
        an Optuna trial once its fate is known: COMPLETE when its stopping rule ended it (its
        value the fit's), PRUNED with its curve when a rung left it behind. The rungs' decisions
        follow from the curves alone, so a study killed at any point makes them again from its
        trials and paused fits and trains only what no rung has seen (a fit killed mid-rung goes
        on from the rung before).

        With ``width`` above 1 the grid trains in stacks of up to ``width`` grid points in grid
        order (:class:`~seq2final.training.fused.FusedRun`), each paused to one file per rung:
        the stack trains in lockstep to the rung, and the points the rung leaves behind leave
        the stack. Under ``keep_known`` the ``known`` values, where they are a grid point, go
        on at every rung."""
        guarded = self.budget.keep_each
        if guarded is not None and guarded not in space.params:
            raise Seq2FinalError(f"budget keep_each '{guarded}' is not searched by study "
                                 f"'{name}'; valid: {', '.join(space.params)}")  # fmt: skip
        study = HalvingStudy(self, name, space, fits, seed_name, test_score, width)
        return study.run(study.kept_point(known))

    def _resumed(self, name: str) -> _Resumed:
        """Study ``name`` ready to go on: its stale trials failed, its decided (finished or
        pruned) trials, none where it starts over (its best weights gone), its best so far."""
        study = self._study(name)
        self._fail_stale(study)
        states = [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED]
        done = study.get_trials(deepcopy=False, states=states)
        checkpoint = self.root / "checkpoints" / f"{name}.pt"
        study, best = self._stored_best(study, checkpoint, done)
        over = best is None and any(t.state == states[0] for t in done)
        if done and not over:
            log.info("study %s: resuming after %d decided trial(s)", name, len(done))
        return _Resumed(study, [] if over else done, checkpoint, best, over)

    def _stored_best(
        self, study: optuna.Study, checkpoint: Path, finished: list[optuna.trial.FrozenTrial]
    ) -> tuple[optuna.Study, dict[str, Any] | None]:
        """The study and its best trial so far from ``checkpoint`` (None before any). Weights left
        from a study that no longer exists are dropped; a study with finished trials whose best
        weights are gone (its fit was stored and the checkpoint discarded, and the fit is asked
        for again) starts over, as a new, empty study."""
        best = load_checkpoint(checkpoint)
        if best is not None and not finished:
            checkpoint.unlink(missing_ok=True)
            best = None
        if best is None and any(t.state == optuna.trial.TrialState.COMPLETE for t in finished):
            log.info("study %s: best weights no longer stored; starting the study over",
                     study.study_name)  # fmt: skip
            optuna.delete_study(study_name=study.study_name, storage=self.storage)
            study = self._study(study.study_name)
        return study, best

    def _fail_stale(self, study: optuna.Study) -> None:
        """Close the trials whose worker is gone, so that their configurations are tried again.

        A trial records its worker (:mod:`seq2final.core.liveness`). It is failed when that worker
        ran on this host and its process no longer exists, when it ran elsewhere and its
        heartbeat in an RDB storage stopped (Optuna's own check), or when it has no worker
        recorded (an older version's trial). A live worker's trial is never touched.
        """
        optuna.storages.fail_stale_trials(study)
        running = study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.RUNNING])
        for trial in running:
            worker = ProcessToken.parse(str(trial.user_attrs.get("worker", "")))
            if worker is None or worker.alive() is False:
                log.info("study %s: trial %d's worker is gone; trying it again", study.study_name,
                         trial.number)  # fmt: skip
                study.tell(trial.number, state=optuna.trial.TrialState.FAIL)

    def discard_checkpoints(self) -> None:
        """Delete this tuner's checkpoints once the fits they back are persisted elsewhere."""
        for path in self.checkpoints:
            path.unlink(missing_ok=True)
        self.checkpoints.clear()


def _finish(
    study: optuna.Study, checkpoint: Path, chosen: dict[str, Any], test_score: TestScore | None,
    run: TrialRun, result: FitResult, state_dict: dict[str, torch.Tensor],
) -> None:  # fmt: skip
    """A trial whose model stopped: its curve, best epoch and (recorded only) test score kept
    with it, made the study's chosen one if best, and told."""
    trial = run.trial
    trial.set_user_attr("valid_curve", run.curve)
    trial.set_user_attr("best_epoch", result.best_epoch)
    score = None if test_score is None else test_score(state_dict)
    if score is not None:
        trial.set_user_attr("test_accuracy", score)
    keep_if_best(chosen, checkpoint, run.order, run.params, result, state_dict)
    study.tell(trial, result.valid_accuracy)
    run.told = True


def _pending_draws(done: list[optuna.trial.FrozenTrial], trials: int) -> list[int]:
    """The draws (0..trials-1) no finished trial has made. Trials of a fused batch finish in any
    order, so after an interruption the missing draws need not be the last ones; a trial from
    before draws were recorded made the lowest draw still free (they ran one at a time)."""
    made = {t.user_attrs["draw"] for t in done if "draw" in t.user_attrs}
    unrecorded = sum("draw" not in t.user_attrs for t in done)
    return [draw for draw in range(trials) if draw not in made][unrecorded:]


HEARTBEAT_SECONDS = 20
"""How often a trial in an RDB storage says its worker is alive."""
GRACE_SECONDS = 120
"""How long an RDB trial may go without a heartbeat before another worker fails it as stale."""


def check_storage(url: str | None) -> None:
    """Open an RDB study storage once, so an unreachable or refused database is one line
    before any work rather than a traceback after the first fit."""
    if not url or "://" not in url:
        return
    try:
        open_storage(url, Path("."), connect_timeout=10)
    except Exception as error:  # SQLAlchemy, driver and Optuna errors alike
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise Seq2FinalError(
            f"parameter 'tuning.storage': cannot open {url!r} ({reason})"
        ) from None


def open_storage(
    url: str | None, root: Path, connect_timeout: int | None = None
) -> optuna.storages.BaseStorage:
    """A journal file under ``root`` by default (one machine); an RDB for ``dialect://`` URLs
    (many machines; with heartbeats); else a journal at that path."""
    if url and "://" in url:
        return optuna.storages.RDBStorage(
            url,
            heartbeat_interval=HEARTBEAT_SECONDS,
            grace_period=GRACE_SECONDS,
            engine_kwargs=_engine_options(url, connect_timeout),
        )
    path = Path(url) if url else Path(root) / "journal.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    # An absolute path: Optuna's lock is a symlink to the journal, and with a relative target
    # the link dangles, so a lock left by a killed process is never found stale and every
    # other process waits for it for ever.
    return optuna.storages.JournalStorage(JournalFileBackend(str(path.resolve())))


def _engine_options(url: str, connect_timeout: int | None) -> dict[str, Any] | None:
    """Server databases: connections checked before use (a worker outlives idle timeouts)."""
    if url.startswith("sqlite"):
        return None
    options: dict[str, Any] = {"pool_pre_ping": True}
    if connect_timeout and url.startswith("postgresql"):
        options["connect_args"] = {"connect_timeout": connect_timeout}
    return options


@contextmanager
def _heartbeat(storage: optuna.storages.BaseStorage, trial_id: int) -> Iterator[None]:
    """Record the trial's heartbeat while the block runs, where the storage keeps heartbeats."""
    if not isinstance(storage, optuna.storages.RDBStorage) or not storage.get_heartbeat_interval():
        yield
        return
    stop = threading.Event()
    interval = storage.get_heartbeat_interval()

    def beat() -> None:
        while True:
            try:
                storage.record_heartbeat(trial_id)
            except Exception as error:  # noqa: BLE001 - a missed beat must not end the beating
                log.warning("trial %d: heartbeat not recorded (%s)", trial_id, error)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, name=f"optuna heartbeat {trial_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
