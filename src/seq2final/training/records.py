"""The records of training: what a trial, a fit and a finished job report, typed and versioned.

A job's record is written once, as JSON, beside its model (``data/07_model_output/results``), and
read by everything after it: the run's table, ``evaluate``'s tables, ``visualize``'s figures,
MLflow, the sweep and the benchmarks. Pydantic models say what it holds down to its leaves (the
engine it ran with, each fit, each trial of a fit), so a reader gets attributes checked once on
load instead of string keys looked up in many modules, and a record that does not match is
refused in one line naming the file. The records live with training because a record's engine
block is the :class:`~seq2final.training.engine.Engine` itself, and the tuner writes the trials.

``format`` is the record's layout version. Records written before it existed have none and read as
format 1, with what earlier releases wrote: records from before FLOPs were counted have no FLOP
fields (``None`` here), and those from before a chain's step-0 model was charged hold one state's
FLOPs as ``{"state": key, "train_flops": n}``, read as ``{"states": {key: n}}``. A later change
of layout raises :data:`RECORD_FORMAT` and says here how the older formats read.
"""

from __future__ import annotations

from typing import Any, TypedDict

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_serializer,
    model_validator,
)

from seq2final.training.engine import Engine

RECORD_FORMAT = 2
"""The layout records are written in: 2 adds ``format`` to format 1's fields."""


class EpochRow(TypedDict):
    """One epoch of a fit's history: epoch 0, before training, has no training metrics (NaN)."""

    epoch: int
    train_loss: float
    train_accuracy: float
    valid_loss: float
    valid_accuracy: float


class CurveRow(EpochRow):
    """One epoch of a job's learning curves (``<job>.curves.csv``): the fit's stage (``final``,
    ``main/step3``, ...) with that fit's :class:`EpochRow` (the stage written first)."""

    stage: str


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StepView(_Record):
    """The view of the sequence a state or job trains on under a temporal protocol: its name
    (``0-2``), the sequence's steps it holds (the last is its final step) and, for a view whose
    training images are mixed from every step, the seed of that draw. Planned with the run
    (``runs.plans``) and kept in the job's record."""

    name: str
    steps: tuple[int, ...]
    mixed_seed: int | None = None


class TrialRecord(_Record):
    """One trial of a fit's study, as the tuner left it: its number, Optuna's state
    (``COMPLETE``, ``PRUNED``, ``FAIL``, ``RUNNING``), the hyper-parameters it drew, its
    validation accuracy (``None`` for a trial that did not finish), its validation accuracy
    after every epoch it ran (before training first) and, for a finished one, its selected
    model's accuracy on the final step's test split: recorded so that a search policy can be
    replayed on stored grids and judged on test (docs/benchmarks.md, "Search"), never read to
    select anything."""

    number: int
    state: str
    params: dict[str, Any]
    value: float | None
    valid_curve: list[float] = []
    test_accuracy: float | None = None

    @model_serializer(mode="wrap")
    def _scored_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``test_accuracy`` written only where one was recorded: records written before it
        existed, or by a fit that records none, are written back as they were."""
        data: dict[str, Any] = handler(self)
        if data.get("test_accuracy") is None:
            data.pop("test_accuracy", None)
        return data

    @property
    def finished(self) -> bool:
        """Trained to its end or stopped by the pruner: it counts as a trial of the fit."""
        return self.state in ("COMPLETE", "PRUNED")

    @property
    def reached(self) -> float | None:
        """Its validation accuracy, or for a pruned trial the last epoch's it reached."""
        if self.value is not None:
            return self.value
        return self.valid_curve[-1] if self.valid_curve else None


class FitRecord(_Record):
    """One fit of a state or job, tuned or closed-form (no epochs, no trials; docs/architecture.md,
    "From `kedro run` to a result record").

    ``stage`` names the fit within its owner (``final``, ``history``, ``main/step3``, ...);
    ``params`` are the selected trial's hyper-parameters, ``valid_accuracy``, ``best_epoch`` and
    ``epochs`` its validation accuracy, the epoch it kept and the epochs it ran; ``trials`` counts
    the finished trials and ``trial_summaries`` lists every trial. The FLOPs are every trial's
    (``None`` in records written before FLOPs were counted). ``closed_gates``: for a gated fit,
    the share of gated units the selected model closed.
    """

    stage: str
    params: dict[str, Any]
    valid_accuracy: float
    best_epoch: int
    epochs: int
    trials: int
    train_flops: int | None = None
    eval_flops: int | None = None
    trial_summaries: list[TrialRecord] = []
    closed_gates: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _without_curve(cls, data: Any) -> Any:
        """States stored before a fit's learning curve moved to the job's curves kept it in the
        fit as ``history``; nothing reads it from there, so it is dropped on load."""
        if isinstance(data, dict) and "history" in data:
            data = {k: v for k, v in data.items() if k != "history"}
        return data

    def to_json(self) -> dict[str, Any]:
        """The fit as records keep it: FLOPs and ``closed_gates`` only where there are some."""
        return self.model_dump(mode="json", exclude=self._unset())

    def _unset(self) -> set[str]:
        return {
            n for n in ("train_flops", "eval_flops", "closed_gates") if getattr(self, n) is None
        }


class StateInfo(_Record):
    """Where a historical state came from, kept with its fits (``state.json``'s ``info``): its
    key, the sequence, seed and budget it was trained under, the step-0 state it starts from,
    the previous time's state a growing chain's extends (written since chains grow; older
    states read as None), its wall time and device."""

    key: str
    sequence_key: str
    seed: int
    budget: str
    step0: str | None = None
    extends: str | None = None
    wall_seconds: float
    device: str

    @property
    def continues(self) -> str | None:
        """The state this one continues: the previous time's, else the step-0 model's."""
        return self.extends or self.step0

    def to_json(self) -> dict[str, Any]:
        """The info as written: the fields it was made or read with (a state stored before
        ``extends`` existed is written back without it)."""
        return self.model_dump(mode="json", exclude_unset=True)


class StepScore(_Record):
    """A view's model on one step of the whole sequence: its accuracy on the step's train and
    test splits (``protocols.STEP_SPLITS``) and the test split's size, all a protocol scores a
    view by (docs/protocols.md)."""

    train: float
    test: float
    test_size: int


class ChosenChain(_Record):
    """What a final mode chose among the chains it continued (SFT's schedules): the chain's
    name, ``None`` where it had one chain, ``main`` (written as ``{}``, as before it was typed)."""

    chain: str | None = None

    @property
    def name(self) -> str:
        """The chain the final model continues (``main`` where there was one)."""
        return self.chain or "main"

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


class SharedFlops(_Record):
    """The training FLOPs of the historical states a job continues, by state key: shared by the
    jobs that continue them, so a total over jobs charges each key once."""

    shared: bool = True
    states: dict[str, int]


class ResultRecord(_Record):
    """A finished job: what it is, how it scored on the final step, and what it cost.

    ``fits`` lists every fit of the job (stage, drawn hyper-parameters, chosen epoch, trials, FLOPs)
    as the tuner reported it; ``hyperparameters`` the chosen values per stage. Under a temporal
    protocol, ``view`` names the job's view and ``step_accuracies`` holds the model's accuracy on
    every step of the whole sequence (keys are step indices as strings, as JSON keeps them).
    """

    format: int = Field(1, ge=1, le=RECORD_FORMAT)
    job_key: str
    sequence: str
    sequence_key: str
    dataset: str
    arch: str
    method: str
    paper_name: str
    paper_class: int | None
    aliases: list[str] = []
    historical: str
    final: str
    historical_state: str | None
    seed: int
    budget: str
    test_accuracy: float
    worst_class_accuracy: float
    test_nll: float | None  # None: not a number (a diverged model's), which JSON cannot hold
    ece: float | None
    valid_accuracy: float
    epochs: int
    trials: int
    wall_seconds: float
    device: str
    parameters: int
    test_size: int
    hyperparameters: dict[str, dict[str, Any]]
    chosen: ChosenChain = ChosenChain()
    chains: dict[str, dict[str, float]] = {}
    eval_step: int | None = None
    engine: Engine
    fits: list[FitRecord]
    train_flops: int | None = None  # None: written before FLOPs were counted
    eval_flops: int | None = None
    inference_flops_per_image: int | None = None
    historical_flops: SharedFlops | None = None
    view: StepView | None = None
    step_accuracies: dict[str, StepScore] | None = None
    detection_auroc: float | None = None  # None: no historical model with a linear head

    @model_validator(mode="before")
    @classmethod
    def _format_1(cls, data: Any) -> Any:
        """A format-1 record charging one state as ``{"state", "shared", "train_flops"}``."""
        shared = data.get("historical_flops") if isinstance(data, dict) else None
        if isinstance(shared, dict) and "state" in shared and "states" not in shared:
            states = {shared["state"]: shared.get("train_flops", 0)}
            data = {**data, "historical_flops": {"shared": True, "states": states}}
        return data

    _engine_keys: tuple[str, ...] | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _engine_as_written(
        cls, data: Any, handler: ModelWrapValidatorHandler[ResultRecord]
    ) -> ResultRecord:
        """A record read from a file keeps its engine block's keys as the file had them (one
        written before an option existed lacks it; some wrote ``augment: none``), so written
        again it is the same JSON."""
        record = handler(data)
        written = data.get("engine") if isinstance(data, dict) else None
        if isinstance(written, dict):
            record._engine_keys = tuple(written)
        return record

    @field_serializer("engine")
    def _engine(self, engine: Engine) -> dict[str, Any]:
        if self._engine_keys is None:  # made by this release
            return engine.recorded()
        values = engine.model_dump()
        return {key: values[key] for key in self._engine_keys}

    @field_serializer("chosen")
    def _chosen(self, chosen: ChosenChain) -> dict[str, Any]:
        return chosen.to_json()

    @field_serializer("fits")
    def _fits(self, fits: list[FitRecord]) -> list[dict[str, Any]]:
        return [fit.to_json() for fit in fits]

    def to_json(self) -> dict[str, Any]:
        """The record as written: ``view`` and ``step_accuracies`` only under a protocol, the
        FLOP fields only where they were counted and the detection AUROC only where there is a
        historical model to measure it with; the engine as :meth:`Engine.recorded` gives it (or, read from a file, as the file had it)."""
        optional = (
            "view",
            "step_accuracies",
            "train_flops",
            "eval_flops",
            "inference_flops_per_image",
            "detection_auroc",
        )
        return self.model_dump(
            mode="json", exclude={name for name in optional if getattr(self, name) is None}
        )

    def stage_labels(self) -> dict[str, str]:
        """What a learning-curve legend calls each fit stage, by stage: a stage of a chain the
        job continued (SFT's ``exponential_2e-4_0.5/final``) as its schedule and step, the one
        the job kept on validation marked; any other as ``stage <name>``; each with the learning
        rate it trained with (chosen by its search, or set by its schedule)."""
        labels = {}
        for fit in self.fits:
            chain, _, step = fit.stage.rpartition("/")
            label = f"stage {fit.stage}"
            if chain:
                kept = " (kept)" if chain == self.chosen.chain else ""
                label = f"schedule {chain}{kept}, {step} step"
            if "lr" in fit.params:
                label += f", lr {float(fit.params['lr']):.3g}"
            labels[fit.stage] = label
        return labels

    def shared_train_flops(self) -> dict[str, int]:
        """The training FLOPs of the historical states this job continues, by key."""
        return dict(self.historical_flops.states) if self.historical_flops else {}
