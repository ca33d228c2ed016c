"""What a run will train, resolved before any work: states, jobs and the run that holds them.

These are plain records (no training, no stores, no tracking), so every layer that needs to talk
about a job (its training, the stores, MLflow tracking, the command suggested in an error) can
import them without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from seq2final.config.parameters import MlflowOptions, TuningOptions
from seq2final.methods import METHODS, JobNames, ModeBlock
from seq2final.protocols import ProtocolOptions
from seq2final.training.engine import Engine
from seq2final.training.records import StepView
from seq2final.training.search import Budget

STEP0 = "step0"
"""The mode name of the step-0 model every sequential mode starts from."""


def _in_view(text: str, view: StepView | None) -> str:
    """``text``, with the view it trains on under a protocol (``ft (steps 0-2)``)."""
    return text + (f" (steps {view.name})" if view is not None else "")


@dataclass(frozen=True)
class StatePlan:
    """One historical state to train (or reuse): a mode, or the shared step-0 model.

    ``extends``: the key of the state of the previous time that a growing chain's state extends
    by one step (:func:`seq2final.methods.chain_mode`); ``view`` is then the steps it has seen.
    ``seed_key``: the key the state would have under any budget, which seeds its fits, so that a
    configuration trains the same under every budget (:func:`~seq2final.runs.planner.plan_run`).
    """

    key: str
    mode: str
    config: ModeBlock
    step0_key: str | None = None
    view: StepView | None = None
    extends: str | None = None
    seed_key: str = ""

    @property
    def name(self) -> str:
        """The state as progress lines show it: its mode, and its view under a protocol."""
        return _in_view(self.mode, self.view)


@dataclass(frozen=True)
class JobPlan:
    """One job: the modes actually trained and the names users asked for that map to it."""

    key: str
    method: str
    requested: tuple[str, ...]
    historical: str
    final: str
    state_key: str | None
    config: ModeBlock
    view: StepView | None = None
    warm_start: str | None = None  # the previous time's job whose model this one starts from
    seed_key: str = ""  # its key under any budget: what seeds its fits (as StatePlan's)

    @property
    def names(self) -> JobNames:
        """The job's one name in every view and its other names (``st_b`` for the ConvNet job
        named ``st_1``)."""
        return JobNames.of(self.method, self.requested)

    @property
    def name(self) -> str:
        """The job's one name (``names.name``)."""
        return self.names.name

    @property
    def record_aliases(self) -> list[str]:
        """The names asked for besides the method trained, as its record's ``aliases`` keeps
        them (the record's names are read back with ``JobNames.of(method, aliases)``)."""
        return [n for n in self.requested if n != self.method]

    @property
    def model_name(self) -> str:
        """The job's name in MLflow, where a temporal protocol's view is a model of its own."""
        return self.names.model_name(self.view.name if self.view is not None else None)

    @property
    def label(self) -> str:
        """The job as progress lines show it: its one name, and its view under a protocol."""
        return _in_view(self.name, self.view)


@dataclass(frozen=True)
class RunPlan:
    """Everything one ``kedro run`` trains, resolved and validated before any work: what passes
    from the configuration to the training, the stores and the tracker. The engine, budget,
    tuning and MLflow options and the modes' blocks are the checked objects themselves
    (:class:`~seq2final.config.checks.CheckedRun`): what trains reads them as they were checked,
    never a dict rebuilt into a model again."""

    sequence_key: str
    sequence_name: str
    dataset: str
    data_path: str | None
    arch: str
    seed: int
    budget_name: str
    budget: Budget
    engine: Engine
    tuning: TuningOptions
    force: bool
    states: list[StatePlan]
    jobs: list[JobPlan]
    requested: list[tuple[str, str]] = field(default_factory=list)
    mlflow: MlflowOptions = field(default_factory=MlflowOptions)
    plugins: tuple[str, ...] = ()  # import paths, imported again wherever a model is loaded
    protocol: str = "final"
    protocol_options: ProtocolOptions = field(default_factory=ProtocolOptions)
    # states keyed by steps 0..T-1 alone, shared by sequences whose final steps differ
    shared_history: bool = False
    data_options: dict[str, Any] | None = None  # the dataset's own (a user's own data)

    def job_params(self, job: JobPlan) -> dict[str, Any]:
        """The run parameters that ask for exactly ``job`` (and the states it needs)."""
        name = job.requested[0]
        what = (
            {"method": name}
            if name in METHODS
            else {"historical": job.historical, "final": job.final}
        )
        params: dict[str, Any] = {
            "sequence": self.sequence_name,
            "seed": self.seed,
            "dataset": self.dataset,
        }
        params.update({"data_path": self.data_path} if self.data_path else {})
        params.update({"data_options": self.data_options} if self.data_options else {})
        if self.protocol != "final":
            params.update(
                protocol=self.protocol,
                protocol_options=self.protocol_options.model_dump(exclude_none=True),
            )
        if job.view is not None:  # the one view of the protocol this job trains
            params["protocol_view"] = job.view.name
        return {**params, **what, "arch": self.arch, "budget": self.budget_name}

    def command(self, pipeline: str, job: JobPlan) -> str:
        """The command that runs ``pipeline`` for ``job`` with this plan's sequence and settings."""
        params = ",".join(
            f"{key}:{value}"
            for name, given in self.job_params(job).items()
            for key, value in (
                ((f"{name}.{k}", v) for k, v in given.items() if v is not None)
                if isinstance(given, dict)
                else ((name, given),)
            )
        )
        return f"kedro run --pipeline {pipeline} --params {params}"
