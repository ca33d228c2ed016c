"""What a protocol is: the Seq-to-Final problems it trains, and how it scores their models.

Every protocol reduces to the one problem the project already solves, adapting to the last step
of a sequence, posed on *views* of the built sequence: the steps 0..t of it (the model a method
has at time t, the view's last step playing the final step), or those steps with their training
data mixed across the whole sequence (Wild-Time's diagnostic). Every method, historical state,
key, tuner and store works on a view as it does on a sequence, and views that two protocols share
(``eval_fix`` at its split step and ``eval_stream`` at the same step) are trained once.

A protocol's score reads each view's result record, which holds the accuracy of the view's final
model on every step of the whole sequence (:data:`STEP_SPLITS`), so scoring needs no model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import Registry
from seq2final.core.schema import StrictModel
from seq2final.data.presets import PRESETS
from seq2final.methods import FINAL_MODES, RequestedJob
from seq2final.training.records import StepScore

STEP_SPLITS = ("train", "test")
"""The splits of every step a view's model is evaluated on: ``test`` (the step's held-out
images) for the Wild-Time protocols, ``train`` (what the stream trains on next) for
test-then-train."""

WILD_TIME_TRAIN_FRACTION = 0.9
"""The share of a step's images that trains under the temporal protocols (Wild-Time splits each
step 90 % train, 10 % in-distribution held-out)."""


@dataclass(frozen=True)
class View:
    """One Seq-to-Final problem: ``steps`` of the sequence (the last one is its final step),
    their training and validation data drawn at random from every step when ``mixed``."""

    name: str
    steps: tuple[int, ...]
    mixed: bool = False

    @property
    def last(self) -> int:
        return self.steps[-1]


def prefix(t: int) -> View:
    """Steps 0..t: what a learner has seen at time t (shared by every protocol that needs it)."""
    return View(f"0-{t}", tuple(range(t + 1)))


DEFAULT_WINDOW = 2
"""Eval-Stream's window where neither the parameters nor the sequence's preset give one."""


class ProtocolOptions(StrictModel):
    """The ``protocol_options`` block: the split step and the stream window.

    ``split_step``: ``eval_fix`` (and the mixed diagnostic) train on steps 0..split_step and test
    on the later ones; ``None`` means the middle step. ``window``: ``eval_stream`` tests the model
    of time t on steps t+1..t+window; ``None`` means a preset's own window, else
    :data:`DEFAULT_WINDOW` (:func:`options_for` resolves both). ``warm_start``: under
    ``eval_stream``, each time's pooled model (a final mode marked ``pooled``: ERM, IRM, DRO and
    Wild-Time's on all steps) starts from the same method's model of the previous time, as
    Wild-Time's Eval-Stream trains; ``None`` (off) trains each afresh.
    """

    split_step: int | None = None
    window: int | None = None  # None: a preset's own (Yearbook's 10, Wild-Time's K), else 2
    warm_start: bool | None = None  # None: off


StepAccuracies = Mapping[int, StepScore]
"""Per step of the sequence: accuracy on each of :data:`STEP_SPLITS`, and ``test_size``."""


@dataclass(frozen=True)
class Protocol:
    """A registered protocol: the views it trains for a sequence of ``num_steps`` steps, and its
    score from each view's per-step accuracies (keyed by view name)."""

    name: str
    description: str
    views: Callable[[int, ProtocolOptions], list[View]]
    score: Callable[[Mapping[str, StepAccuracies], int, ProtocolOptions], dict[str, Any]]
    reports: tuple[str, ...]
    temporal: bool = True
    headline: str | None = None

    @property
    def headline_report(self) -> str:
        """The number a figure shows for the protocol: ``headline``, else its first report."""
        return self.headline or self.reports[0]


PROTOCOLS: Registry[Protocol] = Registry("protocol")


def protocol(
    name: str,
    description: str,
    views: Callable[[int, ProtocolOptions], list[View]],
    reports: tuple[str, ...],
    temporal: bool = True,
    headline: str | None = None,
) -> Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]:
    """Register the decorated scoring function as protocol ``name``."""

    def register(score: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        PROTOCOLS.add(name, Protocol(name, description, views, score, reports, temporal, headline))
        return score

    return register


def long_enough(num_steps: int) -> int:
    """The last step T of a sequence long enough for a temporal protocol: a model with history
    (steps 0..1) and a later step to test it on need steps 0..2 at least."""
    if num_steps < 3:
        raise Seq2FinalError(
            f"a sequence of {num_steps} steps is too short for a temporal protocol; valid: "
            "sequences of at least 3 steps (source and two shifted steps)"
        )
    return num_steps - 1


def options_for(options: ProtocolOptions, sequence: str, dataset: str) -> ProtocolOptions:
    """The options a sequence runs with: where no split step or window is given, a preset's own
    when the preset runs on its own dataset (the Yearbook preset's split at 1970 and window of 10
    years, as Wild-Time runs Yearbook); a window otherwise :data:`DEFAULT_WINDOW`."""
    preset = PRESETS.get(sequence)
    own = preset if preset is not None and preset.dataset == dataset else None
    update: dict[str, int] = {}
    if options.split_step is None and own is not None and own.split_step is not None:
        update["split_step"] = own.split_step
    if options.window is None:
        update["window"] = (
            own.window if own is not None and own.window is not None else DEFAULT_WINDOW
        )
    return options.model_copy(update=update) if update else options


def split_step(num_steps: int, options: ProtocolOptions) -> int:
    """The split step: the given one, checked, or the middle of the sequence.

    It must leave history before it and at least one step after it: 1..T−1 for steps 0..T.
    """
    last = long_enough(num_steps)
    step = options.split_step if options.split_step is not None else last // 2
    if not 1 <= step <= last - 1:
        raise Seq2FinalError(
            f"protocol_options.split_step {step} is outside the sequence (steps 0..{last}); "
            f"valid: 1..{last - 1}, so that steps before and after it exist"
        )
    return step


def stream_times(num_steps: int, options: ProtocolOptions) -> range:
    """The times t a stream scores (t+1..t+window must exist): 0..T−window, as Wild-Time's
    Eval-Stream, whose first model is that of step 0 alone (:data:`FIRST_MODEL`)."""
    last = long_enough(num_steps)
    assert options.window is not None, "options_for resolves the window first"
    # time 0 alone is one model shared by every method: a stream also needs a time with history
    if not 1 <= options.window <= last - 1:
        raise Seq2FinalError(
            f"protocol_options.window {options.window} is past the end of the sequence (steps "
            f"0..{last}, a time with history needing a window after it); valid: 1..{last - 1}"
            if options.window >= 1
            else f"protocol_options.window {options.window}: valid: 1..{last - 1}"
        )
    return range(0, last - options.window + 1)


FIRST_MODEL = ("none", "scratch")
"""The modes of every method's model of time 0 (the view of step 0 alone): one model trained on
step 0 alone, the baseline's fit, shared by every method. A view of one step has no history for
a method to use; Wild-Time trains each method's own objective on step 0, which for ERM, FT, EWC
and SI is this fit and for IRM-T, GroupDRO-T, A-GEM, mixup and LISA is not (docs/protocols.md,
"Eval-Stream, time 0")."""


WARM_PROTOCOLS = ("eval_stream",)
"""The protocols whose views are every time of a stream, one after another: the only ones where a
view has a previous time's model to start from."""


def check_warm_start(protocol: str, options: ProtocolOptions) -> None:
    """A warm start is asked only where every time has a previous one's model."""
    if options.warm_start and protocol not in WARM_PROTOCOLS:
        raise Seq2FinalError(
            f"protocol_options.warm_start true under protocol '{protocol}': valid only under "
            f"{', '.join(WARM_PROTOCOLS)}, whose views are the stream's consecutive times; "
            f"under {protocol} every fit starts afresh"
        )


def sequence_options(protocol: str) -> dict[str, Any]:
    """How a protocol's sequences are built: a test split for every step and Wild-Time's
    90 % train share under the temporal protocols; nothing different under ``final``."""
    if not PROTOCOLS[protocol].temporal:
        return {}
    return {"step_tests": True, "train_fraction": WILD_TIME_TRAIN_FRACTION}


def runnable(
    wanted: Sequence[RequestedJob],
    protocol: str,
    named: str | list[str] | None,
    dataset: str | None = None,
) -> list[RequestedJob]:
    """The requested jobs a temporal protocol's views, or a sequence by itself (``dataset``, a
    natural one: its periods are its steps, with no oracle-size draw), can train: a final mode
    that needs the oracle draw cannot. Asked for by name (``named``), such a job is refused in
    one line; among all methods, it is left out."""
    kept = [job for job in wanted if not FINAL_MODES[job.final].uses_oracle]
    if named and len(kept) < len(wanted):
        named = next(job.requested for job in wanted if FINAL_MODES[job.final].uses_oracle)
        if dataset is not None:
            raise Seq2FinalError(
                f"method '{named}' cannot run on dataset '{dataset}': it trains on the final "
                "step's oracle-size draw, which a sequence of periods does not have; valid: any "
                "method but the oracle"
            )
        raise Seq2FinalError(
            f"method '{named}' cannot run under protocol '{protocol}': it trains on the final "
            "step's oracle-size draw, which the views a temporal protocol trains on do not have; "
            "valid: any method but the oracle, or protocol final"
        )
    return kept


def chosen_views(views: list[View], only: str | None, protocol: str) -> list[View]:
    """``views``, or only the one named ``only`` (a sweep runs each view as a task of its own);
    a name the protocol does not train is one line listing those it does."""
    if only is None:
        return views
    picked = [view for view in views if view.name == only]
    if not picked:
        raise Seq2FinalError(
            f"protocol_view '{only}' is not a view protocol '{protocol}' trains here; valid: "
            + ", ".join(view.name for view in views)
        )
    return picked
