"""Synchronous successive halving over a grid: which configurations go on at each rung.

Every configuration of the grid trains to the first rung (``min_epochs``); then only the best
1/η of those still training, ranked by their best validation accuracy so far (ties to the earlier
grid point), go on to the next rung (η times the epochs), and so on; the last rung's survivors run
to the fit's own stopping rule (patience, ``max_epochs``). A configuration the stopping rule ends
before a rung is finished: it is not ranked again and stays a candidate. The fit selected is the
finished one with the best validation accuracy, ties to the earlier grid point, as the grid's.

Unlike Optuna's asynchronous successive halving, no trial runs ahead of the others: a rung is
decided when every configuration has reached it, so the first trials are not promoted for having
come first. A promoted configuration continues its fit (:class:`~seq2final.training.loop.FitRun`)
and, since a configuration trains the same under every budget (its seed comes from the fit and its
values, docs/methods.md, "Tuning"), its curve is a prefix of the grid's: the same decisions can be
replayed on the curves a grid stored (:func:`replay`) with no training, and
:meth:`~seq2final.training.tuner.Tuner.tune` makes them with the same :func:`survivors`.

Short runs favour large learning rates (their curves rise first). ``keep_each`` guards against it:
at the first rung, the best configuration of each value of that hyper-parameter goes on too.
``keep_known`` uses what is known: the configuration that won the same fit on the previous step
(docs/methods.md, "Tuning") goes on at every rung, whatever its rank.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def rungs(first: int, eta: int, max_epochs: int) -> list[int]:
    """The epochs at which the configurations still training are ranked: ``first``, η·first,
    η²·first, … below ``max_epochs`` (past the last, the survivors run to their stopping rule)."""
    points = []
    epoch = first
    while epoch < max_epochs:
        points.append(epoch)
        epoch *= eta
    return points


def best_so_far(curve: Sequence[float], epoch: int) -> float:
    """The best validation accuracy of epochs 0..``epoch`` (epoch 0: the initial model)."""
    return max(curve[: epoch + 1])


def survivors(
    running: Sequence[int],
    scores: Mapping[int, float],
    eta: int,
    guard: Mapping[int, object] | None = None,
    known: int | None = None,
) -> list[int]:
    """Which of the ``running`` grid points (by grid order) go on: the best ⌈n/η⌉ by ``scores``
    (ties to the earlier point), with ``guard`` (a point's value of the guarded
    hyper-parameter) the best point of each value too, and the ``known`` point while it runs.
    In grid order."""
    ranked = sorted(running, key=lambda order: (-scores[order], order))
    keep = set(ranked[: max(1, math.ceil(len(running) / eta))])
    if guard is not None:
        for value in dict.fromkeys(guard[order] for order in running):
            keep.add(next(order for order in ranked if guard[order] == value))
    if known is not None and known in running:
        keep.add(known)
    return sorted(keep)


def chain_step(stage: str) -> tuple[str, float] | None:
    """A stage of a chain of steps (``none/step2``, ``none/final``) as its chain and step
    (``final`` after every step); ``None`` for a stage of no chain (``erm``, ``none/head``)."""
    chain, _, step = stage.rpartition("/")
    if not chain:
        return None
    if step == "final":
        return chain, math.inf
    if step.startswith("step") and step[4:].isdigit():
        return chain, int(step[4:])
    return None


def previous_step(stage: str, earlier: Sequence[str]) -> int | None:
    """Which of the ``earlier`` stages (by position) is ``stage``'s previous step: the latest
    step before it of the same chain (``none/step1`` for ``none/step2``, the last step for
    ``none/final``); ``None`` where it has none."""
    place = chain_step(stage)
    if place is None:
        return None
    steps = [(step, index) for index, other in enumerate(earlier)
             for chain, step in [chain_step(other) or ("", 0)]
             if chain == place[0] and step < place[1]]  # fmt: skip
    return max(steps)[1] if steps else None


def grid_point_of(values: Mapping[str, float], points: Sequence[Mapping[str, float]]) -> int | None:
    """The first grid point whose searched values (those that vary over the grid) are
    ``values``'; ``None`` where none is. A fixed value, such as the learning rate an SFT schedule
    sets for each step, is no part of what a previous step's winner says."""
    varying = [name for name in points[0] if len({point[name] for point in points}) > 1]
    return next((order for order, point in enumerate(points)
                 if all(values.get(name) == point[name] for name in varying)), None)  # fmt: skip


@dataclass(frozen=True)
class TrialCurve:
    """One grid configuration as the grid trained it: its validation curve (epoch 0 first, up to
    the epoch its stopping rule ended it) and its value of the guarded hyper-parameter."""

    order: int
    valid_curve: list[float]
    guarded: object = None

    @property
    def epochs(self) -> int:
        return len(self.valid_curve) - 1


@dataclass(frozen=True)
class Replayed:
    """A policy replayed on a grid's curves: the configuration it selects, the epochs it trains
    each configuration for, and their sum against the grid's."""

    selected: int
    epochs: dict[int, int]
    finished: list[int]

    @property
    def spent(self) -> int:
        return sum(self.epochs.values())


def replay(
    curves: Sequence[TrialCurve],
    first: int,
    eta: int,
    max_epochs: int,
    guard: bool,
    known: int | None = None,
) -> Replayed:
    """What synchronous halving would train and select, from the curves of the full grid
    (``known``: the grid point kept at every rung)."""
    by_order = {c.order: c for c in curves}
    running = sorted(by_order)
    trained = dict.fromkeys(running, 0)
    finished: list[int] = []
    for index, rung in enumerate(rungs(first, eta, max_epochs)):
        for order in running:
            trained[order] = min(rung, by_order[order].epochs)
        ended = [order for order in running if by_order[order].epochs <= rung]
        finished += ended
        running = [order for order in running if order not in ended]
        if not running:
            break
        scores = {order: best_so_far(by_order[order].valid_curve, rung) for order in running}
        values = {order: by_order[order].guarded for order in running}
        running = survivors(running, scores, eta, values if guard and index == 0 else None, known)
    for order in running:
        trained[order] = by_order[order].epochs
        finished.append(order)
    selected = max(finished, key=lambda order: (max(by_order[order].valid_curve), -order))
    return Replayed(selected, trained, sorted(finished))
