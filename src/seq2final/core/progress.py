"""Progress a person can follow through a long run: item k of N, the fit inside it, time left.

A run trains its historical states, then its jobs, one after another inside its training nodes
(:mod:`seq2final.runs.execution`), and every fit in them runs trials of epochs. :class:`Progress` follows all of it:

* on a terminal, one live display (rich) that shows the item (``job 5/23 st_1``), its fit
  (stage, trial, epoch), the time elapsed and an estimate of what remains, under which the log
  scrolls;
* elsewhere (a cluster job's log, CI, ``| tee``), one plain log line when an item starts and one
  when it ends, with the same numbers, so that a log file says where a run is and ``grep``
  finds every job by name.

The estimate is the mean time of the items trained so far for each item still to start, plus
what the mean leaves of the current one (nothing once it runs longer than the mean); items
reused from an earlier run take no time and are left out of the mean.

Code deep in a fit reports through :func:`current` (a context variable, so nested fits and the
stores need not hand a reporter down through every call); outside a :class:`Progress` it is a
reporter that shows nothing.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from rich import progress as rich_progress
from rich import text as rich_text

log = logging.getLogger(__name__)


def is_terminal() -> bool:
    """Whether a person is watching: standard output is a terminal."""
    return sys.stdout.isatty()


def clock(seconds: float) -> str:
    """``seconds`` as h:mm:ss (m:ss under an hour), the way the live display shows time."""
    seconds = max(int(round(seconds)), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


@dataclass
class _Fit:
    """One tuned fit as the live display shows it."""

    stage: str
    trials: int = 0
    trial: int = 0
    epochs: int = 0
    epoch: int = 0

    def describe(self) -> str:
        parts = [self.stage]
        if self.trials:
            parts.append(f"trial {min(self.trial, self.trials)}/{self.trials}")
        if self.epochs:
            parts.append(f"epoch {self.epoch}/{self.epochs}")
        return " · ".join(parts)


@dataclass
class Outcome:
    """What an item's end line adds after its time (set inside :meth:`Progress.item`)."""

    note: str = ""


@dataclass
class Progress:
    """Progress through ``names`` (the items a store trains or reuses, in order): ``kind`` k of N.

    Use it as a context manager around the items and :meth:`item` around each item trained
    (:meth:`reused` for one that is not); fits report through :func:`current`. ``live`` chooses
    the live display (default: on a terminal), drawn on ``console`` (default: rich's, which
    Kedro's log handler shares, so records scroll above the display).
    """

    kind: str
    names: Sequence[str]
    live: bool | None = None
    console: Any = None
    _started: float = field(default=0.0, init=False)
    _trained: list[float] = field(default_factory=list, init=False)
    _index: int = field(default=0, init=False)  # the item started last (all before it finished)
    _item_started: float | None = field(default=None, init=False)
    _name: str = field(default="", init=False)
    _fits: list[_Fit] = field(default_factory=list, init=False)
    _display: Any = field(default=None, init=False)
    _task: Any = field(default=None, init=False)
    _token: Any = field(default=None, init=False)

    def __enter__(self) -> Progress:
        self._started = time.perf_counter()
        if self.live if self.live is not None else is_terminal():
            self._display = rich_progress.Progress(
                rich_progress.TextColumn("[bold]{task.description}"),
                rich_progress.BarColumn(bar_width=20),
                rich_progress.MofNCompleteColumn(),
                rich_progress.TextColumn("{task.fields[where]}"),
                _TimesColumn(self),
                console=self.console,
                transient=True,
            )
            self._task = self._display.add_task(f"{self.kind}s", total=len(self.names), where="")
            self._display.start()
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)
        if self._display is not None:
            self._display.stop()

    def elapsed(self) -> float:
        return time.perf_counter() - self._started

    def remaining(self) -> float | None:
        """Seconds left: the mean time of the items trained so far for each item not started,
        plus what the mean leaves of the current one (a slow item eats only into its own
        share); None before the first item is trained."""
        if not self._trained:
            return None
        mean = sum(self._trained) / len(self._trained)
        left = mean * (len(self.names) - self._index)
        if self._item_started is not None:
            left += max(mean - (time.perf_counter() - self._item_started), 0.0)
        return left

    def times(self) -> str:
        left = self.remaining()
        return f"{clock(self.elapsed())} elapsed" + (
            f", about {clock(left)} left" if left is not None else ""
        )

    @contextmanager
    def item(self, name: str) -> Iterator[Outcome]:
        """Item ``name`` (the next one): a line when it starts and one when it ends (none if it
        raises: the error says what happened)."""
        self._index += 1
        self._name = name
        self._fits.clear()
        where = f"{self.kind} {self._index}/{len(self.names)} {name}"
        log.info("%s: started", where)
        started = self._item_started = time.perf_counter()
        self._show()
        outcome = Outcome()
        yield outcome
        seconds = time.perf_counter() - started
        self._trained.append(seconds)
        self._item_started = None
        note = f" ({outcome.note})" if outcome.note else ""
        log.info("%s: done in %.1f s%s; %s", where, seconds, note, self.times())
        self._show(advance=1)

    def reused(self) -> None:
        """The next item finished in an earlier run: counted, not timed (its store logs it)."""
        self._index += 1
        self._show(advance=1)

    @property
    def label(self) -> str:
        """The item being trained, for log lines of its fits."""
        return self._name

    @contextmanager
    def fit(self, stage: str) -> Iterator[None]:
        """A tuned fit of the current item, named by its stage."""
        self._fits.append(_Fit(stage))
        self._show()
        try:
            yield
        finally:
            self._fits.pop()
            self._show()

    def trials(self, done: int, total: int) -> None:
        """The current fit's study has ``total`` trials, ``done`` of them finished earlier."""
        if self._fits:
            self._fits[-1].trial, self._fits[-1].trials = done, total
            self._show()

    def trial(self) -> None:
        """The current fit starts its next trial (several at once when trials are fused)."""
        if self._fits:
            fit = self._fits[-1]
            fit.trial, fit.epoch = fit.trial + 1, 0
            self._show()

    def epochs(self, total: int) -> None:
        """The current trial trains up to ``total`` epochs."""
        if self._fits:
            self._fits[-1].epochs, self._fits[-1].epoch = total, 0
            self._show()

    def epoch(self, count: int = 1) -> None:
        """The current trial finished ``count`` more epochs (the fit loop's progress callback)."""
        if self._fits:
            self._fits[-1].epoch += count
            self._show()

    def _show(self, advance: int = 0) -> None:
        if self._display is None:
            return
        fit = f" · {self._fits[-1].describe()}" if self._fits else ""
        self._display.update(self._task, advance=advance, where=f"{self._name}{fit}")


class _TimesColumn(rich_progress.ProgressColumn):
    """Elapsed and left, computed whenever the display redraws (several times a second), so the
    clock runs through a long epoch instead of stopping between events."""

    def __init__(self, progress: Progress) -> None:
        super().__init__()
        self.progress = progress

    def render(self, task: Any) -> Any:
        return rich_text.Text(self.progress.times(), style="dim")


class _Silent:
    """What :func:`current` gives outside a :class:`Progress`: nothing is shown."""

    label = ""

    @contextmanager
    def fit(self, stage: str) -> Iterator[None]:
        yield

    def trials(self, done: int, total: int) -> None:
        pass

    def trial(self) -> None:
        pass

    def epochs(self, total: int) -> None:
        pass

    def epoch(self, count: int = 1) -> None:
        pass


_CURRENT: ContextVar[Progress | None] = ContextVar("seq2final_progress", default=None)


Reporter = Progress | _Silent
"""What :func:`current` gives: the phase's progress, or a reporter that shows nothing."""


def current() -> Reporter:
    """The progress of the phase running now, or a reporter that shows nothing."""
    return _CURRENT.get() or _Silent()
