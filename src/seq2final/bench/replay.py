"""Search policies replayed on stored grids and judged on test (docs/benchmarks.md, "Search").

A grid fit keeps every configuration's validation curve and its selected model's test accuracy
(:attr:`~seq2final.training.records.TrialRecord.test_accuracy`). Since a configuration trains the
same under every budget (docs/methods.md, "Tuning"), what a synchronous-halving policy would
train and select on that fit follows from the curves alone (:func:`~seq2final.training.halving.
replay`): a policy is judged on stored grids with no training. Per fit, *success* is the test
accuracy of the policy's selection at least the grid's selection's minus a margin (0.01), and
*spend* the epochs it trains (pruned configurations included) over the grid's. A rate over *n*
fits is reported with its one-sided 95 % Clopper–Pearson lower bound: a claim about those fits.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy.stats import beta

from seq2final.core.errors import Seq2FinalError
from seq2final.training.halving import TrialCurve, grid_point_of, previous_step, replay
from seq2final.training.records import FitRecord

MARGIN = 0.01
"""How far below the grid's selection a policy's may test and still count as a success."""
FROZEN_POLICY = "3,2"
"""The policy chosen on the development set (``benchmarks/search_replay.py choose``), frozen
before the held-out set was judged: ``kedro bench --sections replay``'s default."""


@dataclass(frozen=True)
class GridFit:
    """One tuned fit as its full grid trained it: where it comes from (``run``, ``owner`` and
    ``stage``: which state or job, which fit), and per grid point (grid order) its values, its
    validation curve and its selected model's test accuracy."""

    run: str
    owner: str
    stage: str
    params: list[dict[str, float]]
    curves: list[list[float]]
    tests: list[float]

    @property
    def size(self) -> int:
        return len(self.params)

    @property
    def selected(self) -> int:
        """The grid's own choice: the best validation accuracy, ties to the earlier point."""
        return max(range(self.size), key=lambda order: (max(self.curves[order]), -order))

    @property
    def epochs(self) -> int:
        return sum(len(curve) - 1 for curve in self.curves)

    def to_json(self) -> dict[str, Any]:
        return vars(self)


def grid_fits(run: str, owner: str, fits: Iterable[FitRecord]) -> list[GridFit]:
    """The fits of one state or job that ran a whole grid of more than one point, each trial
    finished with a test accuracy (a fit tuned under a grid budget without a pruner)."""
    found = []
    for fit in fits:
        trials = fit.trial_summaries
        if len(trials) < 2 or any(t.state != "COMPLETE" or t.test_accuracy is None
                                  for t in trials):  # fmt: skip
            continue
        ordered = sorted(trials, key=lambda t: t.number)
        found.append(GridFit(run, owner, fit.stage, [dict(t.params) for t in ordered],
                             [list(t.valid_curve) for t in ordered],
                             [float(t.test_accuracy or 0.0) for t in ordered]))  # fmt: skip
    return found


@dataclass(frozen=True)
class Policy:
    """Synchronous halving (:mod:`~seq2final.training.halving`): the first rung, η, the guarded
    hyper-parameter (``None``: no guard) and whether the previous step's winner is kept at every
    rung (``keep_known``; :func:`known_orders`)."""

    first: int
    eta: int
    guard: str | None = None
    known: bool = False

    @property
    def name(self) -> str:
        guard = f", best of each {self.guard} kept" if self.guard else ""
        known = ", the previous step's winner kept" if self.known else ""
        return f"halving from {self.first} epochs, 1/{self.eta} on{guard}{known}"


def known_orders(fits: Sequence[GridFit]) -> dict[tuple[str, str, str], int]:
    """For each fit (by run, owner and stage) whose previous step was stored, the grid point of
    that step's selection: the grid's choice on its previous step in the same run
    (:func:`~seq2final.training.halving.previous_step`), as a live ``keep_known`` budget finds it
    (:meth:`~seq2final.methods.context.Context.known_winner`), where its values are a point of
    this grid (:func:`grid_point_of`). A run's fits of one chain are taken to be one state's (the
    stored runs hold one sequential state each)."""
    known = {}
    for fit in fits:
        same_run = [other for other in fits if other.run == fit.run]
        index = previous_step(fit.stage, [other.stage for other in same_run])
        if index is None:
            continue
        previous = same_run[index]
        order = grid_point_of(previous.params[previous.selected], fit.params)
        if order is not None:
            known[(fit.run, fit.owner, fit.stage)] = order
    return known


@dataclass(frozen=True)
class Judged:
    """A policy on one fit: whether its selection's test accuracy came within the margin of the
    grid's selection's, and the epochs it spent against the grid's."""

    fit: GridFit
    success: bool
    spent: int
    test: float

    @property
    def spend(self) -> float:
        return self.spent / self.fit.epochs


def judge(
    fit: GridFit,
    policy: Policy,
    max_epochs: int,
    margin: float = MARGIN,
    known: int | None = None,
) -> Judged:
    """Replay ``policy`` on ``fit``'s curves; judge its selection on test. ``known``: the grid
    point of the previous step's winner (:func:`known_orders`), kept when the policy says so."""
    if policy.guard is not None and any(policy.guard not in p for p in fit.params):
        raise Seq2FinalError(f"--policy guard '{policy.guard}' is not searched by fit "
                             f"{fit.owner}/{fit.stage}; valid: {', '.join(fit.params[0])}")  # fmt: skip
    guarded = [None if policy.guard is None else p.get(policy.guard) for p in fit.params]
    replayed = replay(
        [TrialCurve(order, curve, guarded[order]) for order, curve in enumerate(fit.curves)],
        policy.first, policy.eta, max_epochs, policy.guard is not None,
        known if policy.known else None,
    )  # fmt: skip
    test = fit.tests[replayed.selected]
    return Judged(fit, test >= fit.tests[fit.selected] - margin, replayed.spent, test)


def lower_bound(successes: int, n: int, confidence: float = 0.95) -> float:
    """The one-sided Clopper–Pearson lower confidence bound of a success rate."""
    if successes == 0:
        return 0.0
    return float(beta.ppf(1 - confidence, successes, n - successes + 1))


def summarize(judged: Sequence[Judged]) -> list[dict[str, Any]]:
    """Per grid size and over all: fits, successes, rate and its lower bound, spend as median,
    90th percentile and pooled (all epochs spent over all the grids' epochs)."""
    groups: dict[str, list[Judged]] = {}
    for one in judged:
        groups.setdefault(f"{one.fit.size} points", []).append(one)
    groups = dict(sorted(groups.items(), key=lambda item: int(item[0].split()[0])))
    groups["all"] = list(judged)
    rows = []
    for name, members in groups.items():
        if not members:
            continue
        spends = sorted(one.spend for one in members)
        successes = sum(one.success for one in members)
        rows.append({
            "grid": name, "fits": len(members), "successes": successes,
            "rate": successes / len(members), "lower_bound": lower_bound(successes, len(members)),
            "spend_median": statistics.median(spends),
            "spend_p90": spends[math.ceil(0.9 * len(spends)) - 1],  # nearest rank
            "spend_pooled": sum(one.spent for one in members)
            / sum(one.fit.epochs for one in members),
        })  # fmt: skip
    return rows


def noise_floor(
    first: Sequence[GridFit],
    second: Mapping[tuple[str, str, str], GridFit],
    margin: float = MARGIN,
) -> dict[str, Any]:
    """The grid against itself: on each fit of ``first`` that ``second`` (another seed set's
    grids, by run, owner and stage) also trained, whether the second grid's selection tests
    within the margin of the first's."""
    pairs = [(fit, second[(fit.run, fit.owner, fit.stage)]) for fit in first
             if (fit.run, fit.owner, fit.stage) in second]  # fmt: skip
    successes = sum(
        other.tests[other.selected] >= fit.tests[fit.selected] - margin for fit, other in pairs
    )
    return {"fits": len(pairs), "successes": successes,
            "rate": successes / len(pairs) if pairs else None,
            "lower_bound": lower_bound(successes, len(pairs)) if pairs else None}  # fmt: skip


def stored_grids(path: Path) -> tuple[list[GridFit], dict[str, Any]]:
    """The grid fits ``benchmarks/search_replay.py collect`` stored at ``path``, and what the
    file says of them (``cpu``, ``max_epochs``); none where nothing was collected."""
    if not path.exists():
        return [], {}
    stored = json.loads(path.read_text())
    fits = [GridFit(**fit) for fits in stored["runs"].values() for fit in fits]
    return fits, {k: v for k, v in stored.items() if k != "runs"}


def parse_policy(text: str) -> Policy:
    """``FIRST,ETA[,GUARD][,known]`` (``3,2,lr``, ``3,2,known``) as a :class:`Policy`; a bad
    one in one line."""
    parts = [part.strip() for part in text.split(",")]
    known = parts[-1] == "known"
    rest = parts[:-1] if known else parts
    try:
        first, eta = int(rest[0]), int(rest[1])
    except (ValueError, IndexError):
        first = eta = 0
    if len(rest) not in (2, 3) or first < 1 or eta < 2 or "" in rest:
        raise Seq2FinalError(f"--policy {text}: valid: FIRST,ETA[,GUARD][,known] with FIRST ≥ 1 "
                             "epoch and ETA ≥ 2, e.g. 3,2,lr or 3,2,known")  # fmt: skip
    return Policy(first, eta, rest[2] if len(rest) == 3 else None, known)
