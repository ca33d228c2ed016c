"""The benchmark's methods: a historical mode followed by a final mode.

Every method of the paper is a way to use the historical steps 0..T−1 (the *historical mode*:
train nothing, one model on all of them, or a chain of per-step models) followed by a way to fit
the final step T (the *final mode*). Keeping the two apart is what lets users combine any
historical mode with any final mode that can continue from what it leaves
(``--params historical:irm,final:lp_ft``). Both are registries filled by decorators on the
functions that train them; a paper method is a registered :class:`MethodRecipe` naming one of each.

What a historical mode leaves (its ``kind``) decides which final modes can follow it:

* ``none``: nothing; the final mode sees the steps itself (baseline, oracle, ERM/IRM/DRO on all
  steps, the joint models);
* ``model``: one plain model per chain (ERM/IRM/DRO on steps 0..T−1; SFT and EWC chains, whose
  last model is step T−1's) → ``ft``, ``lp_ft``, ``side_1``, ``side_b``;
* ``side_chain``: a side-tuned joint model over steps 0..T−1 (SST) → the side mode of its kind.

Fixes relative to the original (DESIGN §6): I-FT/D-FT pre-train on steps 0..T−1 only; every SFT
schedule starts from the same step-0 model and the schedule is chosen on the final step's
*validation* accuracy, never on test.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from seq2final.errors import Seq2FinalError
from seq2final.models import JointModel, build_model, layer_names
from seq2final.registry import Registry
from seq2final.sequences import ShiftSequence
from seq2final.training import (
    Data,
    Engine,
    HyperParameters,
    Task,
    clone_model,
    fisher_information,
    fit,
    parameters_of,
)
from seq2final.tuning import Budget, SearchSpace, Tuner, derived_seed, quiet_progress

log = logging.getLogger(__name__)

KINDS = ("none", "model", "side_chain")

# --------------------------------------------------------------------------------------------
# What a historical mode leaves, and the context fits run in
# --------------------------------------------------------------------------------------------


@dataclass
class Chain:
    """Models of steps 0..T−1 (one model for ERM/IRM/DRO) and how the final step continues it.

    ``final_space`` replaces the final mode's own space for the continuation (an SFT schedule
    fixes the learning rate at step T; EWC searches λ_EWC instead of L2). ``anchors`` are EWC's
    (θ_k, F_k) for every earlier step.
    """

    models: list[nn.Module]
    final_space: dict[str, Any] | None = None
    anchors: list[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]] = field(
        default_factory=list
    )

    @property
    def last(self) -> nn.Module:
        return self.models[-1]


@dataclass
class HistoricalState:
    """What ``pretrain_historical`` persists: chains by name (schedules, or ``main``) and fit records."""

    mode: str
    arch: str
    chains: dict[str, Chain]
    fits: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def to(self, device: torch.device) -> HistoricalState:
        """Move every model and EWC anchor to ``device`` (stores load on the CPU)."""
        for chain in self.chains.values():
            chain.models = [model.to(device) for model in chain.models]
            chain.anchors = [
                (
                    {k: v.to(device) for k, v in values.items()},
                    {k: v.to(device) for k, v in fisher.items()},
                )
                for values, fisher in chain.anchors
            ]
        return self


@dataclass
class Context:
    """Everything a mode needs to train: data, architecture, engine, tuner and a study prefix."""

    sequence: ShiftSequence
    arch: str
    seed: int
    engine: Engine
    budget: Budget
    budget_name: str
    tuner: Tuner
    prefix: str
    device: torch.device
    fits: list[dict[str, Any]] = field(default_factory=list)

    @property
    def num_classes(self) -> int:
        return len(self.sequence.class_names)

    @property
    def final_index(self) -> int:
        return self.sequence.num_steps - 1

    def split(self, step: int | str, split: str) -> Data:
        return Data.from_arrays(*self.sequence.step(step).split(split))

    def history(self, split: str) -> Data:
        """Steps 0..T−1 combined."""
        return Data.concat([self.split(t, split) for t in range(self.final_index)])

    def new_model(self, stage: str) -> nn.Module:
        """A freshly initialised model; the same for every trial of a stage, as in the original."""
        torch.manual_seed(derived_seed(self.seed, self.prefix, stage, "init"))
        return build_model(self.arch, self.num_classes).to(self.device)

    def tuned_fit(
        self, stage: str, space: SearchSpace, make_model: Callable[[], nn.Module], task: Task
    ) -> nn.Module:
        """Tune one fit; return its selected model and keep its record in :attr:`fits`."""

        def objective(params, seed, report):
            model = make_model()
            hp = HyperParameters.from_dict(params)
            epochs = self.budget.max_epochs
            with tqdm(
                total=epochs, desc=stage, unit="epoch", leave=False, disable=quiet_progress()
            ) as bar:
                result = fit(model, task, hp, self.engine, epochs, seed, report, bar.update)
            return result, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}

        tuned = self.tuner.tune(f"{self.prefix}/{stage}", space, objective)
        model = make_model()
        model.load_state_dict(tuned.state_dict)
        model.dropout = float(tuned.params.get("dropout", 0.0))
        model.eval()
        self.fits.append(
            {
                "stage": stage,
                "params": tuned.params,
                "valid_accuracy": tuned.fit.valid_accuracy,
                "best_epoch": tuned.fit.best_epoch,
                "epochs": tuned.fit.epochs,
                "trials": tuned.finished_trials,
                "history": tuned.fit.history,
                "trial_summaries": tuned.trials,
            }
        )
        log.info(
            "%s: valid %.3f (epoch %d of %d, %d trial(s)) with %s",
            stage,
            tuned.fit.valid_accuracy,
            tuned.fit.best_epoch,
            tuned.fit.epochs,
            tuned.finished_trials,
            ", ".join(f"{k}={v:.3g}" for k, v in tuned.params.items()),
        )
        return model


def space_of(config: Mapping[str, Any], key: str, where: str) -> SearchSpace:
    if key not in config:
        raise Seq2FinalError(
            f"{where} has no '{key}' search space; valid keys: {', '.join(config)}"
        )
    return SearchSpace.parse(config[key], f"{where}.{key}")


# --------------------------------------------------------------------------------------------
# Registries
# --------------------------------------------------------------------------------------------

HistoricalTrainer = Callable[
    [Context, Mapping[str, Any], Callable[[], nn.Module] | None], dict[str, Chain]
]


@dataclass(frozen=True)
class HistoricalMode:
    """A way to use steps 0..T−1; ``train`` returns chains (``None`` for the mode that trains nothing)."""

    name: str
    description: str
    kind: str
    train: HistoricalTrainer | None = None
    side_kind: str | None = None
    uses_step0: bool = False
    convnet_equivalent: str | None = None
    config_keys: tuple[str, ...] = ("space",)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"historical mode '{self.name}': unknown kind '{self.kind}'; valid: {', '.join(KINDS)}"
            )


@dataclass
class FinalOutcome:
    """A final mode's model, the time index to evaluate it at, and what it chose.

    ``candidates`` holds every chain's continued model with its final validation accuracy when
    the mode chose among several (SFT's schedules), so the job can report each one's test
    accuracy: the paper's SFT column is the best of them *on test*, ours the best on validation.
    """

    model: nn.Module
    step: int | None
    chosen: dict[str, Any] = field(default_factory=dict)
    valid_accuracy: float | None = None
    candidates: dict[str, tuple[nn.Module, float]] = field(default_factory=dict)


FinalRunner = Callable[[Context, Mapping[str, Any], HistoricalState | None], FinalOutcome]


@dataclass(frozen=True)
class FinalMode:
    """A way to fit the final step; ``accepts`` lists the historical kinds it can continue from."""

    name: str
    description: str
    accepts: tuple[str, ...]
    run: FinalRunner
    side_kind: str | None = None
    convnet_equivalent: str | None = None
    config_keys: tuple[str, ...] = ("space",)


HISTORICAL_MODES: Registry[HistoricalMode] = Registry("historical mode")
FINAL_MODES: Registry[FinalMode] = Registry("final mode")


def historical_mode(name: str, description: str, kind: str = "model", **options: Any):
    """Register the decorated trainer as historical mode ``name``."""

    def register(train: HistoricalTrainer) -> HistoricalTrainer:
        HISTORICAL_MODES.add(name, HistoricalMode(name, description, kind, train, **options))
        return train

    return register


def final_mode(name: str, description: str, accepts: tuple[str, ...], **options: Any):
    """Register the decorated runner as final mode ``name``."""

    def register(run: FinalRunner) -> FinalRunner:
        FINAL_MODES.add(name, FinalMode(name, description, accepts, run, **options))
        return run

    return register


@dataclass(frozen=True)
class MethodRecipe:
    """A paper method: its historical mode, its final mode and the paper's column name."""

    historical: str
    final: str
    paper_name: str
    paper_class: int


METHODS: Registry[MethodRecipe] = Registry("method")


def method(name: str, historical: str, final: str, paper_name: str, paper_class: int) -> None:
    METHODS.add(name, MethodRecipe(historical, final, paper_name, paper_class))


# --------------------------------------------------------------------------------------------
# Historical modes
# --------------------------------------------------------------------------------------------

HISTORICAL_MODES.add(
    "none",
    HistoricalMode(
        "none",
        "no historical state: the final mode sees the steps itself, or only the final step",
        "none",
        config_keys=(),
    ),
)


def _historical_single(objective: str) -> HistoricalTrainer:
    def train(
        ctx: Context, config: Mapping[str, Any], step0: Callable[[], nn.Module] | None
    ) -> dict[str, Chain]:
        steps = range(ctx.final_index)
        if objective == "erm":
            domains = [ctx.history("train")]
        else:
            domains = [ctx.split(t, "train") for t in steps]
        task = Task(domains, ctx.history("valid"), objective=objective)
        space = space_of(config, "space", f"historical_modes.{objective}")
        model = ctx.tuned_fit(objective, space, lambda: ctx.new_model(objective), task)
        return {"main": Chain([model])}

    return train


for _name, _text in (
    ("erm", "one ERM model on steps 0..T−1 combined"),
    ("irm", "one IRM model on steps 0..T−1, one environment per step"),
    ("dro", "one worst-domain DRO model on steps 0..T−1"),
):
    historical_mode(_name, _text)(_historical_single(_name))


SCHEDULE_FIELDS = {"none": (), "linear": ("start", "decrement"), "exponential": ("start", "factor")}


def schedule_lr(schedule: Mapping[str, Any], step: int) -> float | None:
    """The learning rate an SFT schedule gives step ``step`` (``None``: tuned per step)."""
    kind = schedule.get("kind")
    if kind not in SCHEDULE_FIELDS:
        raise Seq2FinalError(f"unknown schedule kind {kind!r}; valid: {', '.join(SCHEDULE_FIELDS)}")
    missing = [f for f in SCHEDULE_FIELDS[kind] if not isinstance(schedule.get(f), int | float)]
    if missing:
        raise Seq2FinalError(f"a {kind} schedule needs numeric {', '.join(missing)}")
    if kind == "linear":
        return float(schedule["start"]) - step * float(schedule["decrement"])
    if kind == "exponential":
        return float(schedule["start"]) * float(schedule["factor"]) ** step
    return None


def check_schedules(config: Mapping[str, Any], final_step: int, budget: str, where: str) -> None:
    """The budget's schedules are well formed and keep a positive rate up to the final step."""
    if "schedules" not in config:
        return
    if not selected_schedules(config, budget):
        raise Seq2FinalError(f"{where}.budget_schedules.{budget} lists no schedule")
    for name, schedule in selected_schedules(config, budget).items():
        for step in range(1, final_step + 1):
            try:
                lr = schedule_lr(schedule, step)
            except Seq2FinalError as error:
                raise Seq2FinalError(f"{where}.schedules.{name}: {error}") from None
            if lr is not None and lr <= 0:
                raise Seq2FinalError(
                    f"{where}.schedules.{name} reaches learning rate {lr:.3g} at step {step}; "
                    "it must stay positive up to the final step"
                )


def selected_schedules(config: Mapping[str, Any], budget_name: str) -> dict[str, Mapping[str, Any]]:
    """The schedules a budget runs: ``budget_schedules[budget]`` or, if not listed, all of them."""
    schedules = config.get("schedules", {"none": {"kind": "none"}})
    names = config.get("budget_schedules", {}).get(budget_name, list(schedules))
    unknown = [n for n in names if n not in schedules]
    if unknown:
        raise Seq2FinalError(
            f"budget '{budget_name}' names unknown schedule(s) {', '.join(unknown)}; "
            f"valid: {', '.join(schedules)}"
        )
    return {name: schedules[name] for name in names}


def _step_space(
    config: Mapping[str, Any], schedule: Mapping[str, Any], step: int, where: str
) -> SearchSpace:
    space = space_of(config, "space", where)
    lr = schedule_lr(schedule, step)
    return space if lr is None else space.fix({"lr": lr})


@historical_mode(
    "sequential",
    "a chain of models, each fine-tuned from the previous on its step (SFT)",
    uses_step0=True,
)
def _sequential(
    ctx: Context, config: Mapping[str, Any], step0: Callable[[], nn.Module] | None
) -> dict[str, Chain]:
    assert step0 is not None
    chains = {}
    for name, schedule in selected_schedules(config, ctx.budget_name).items():
        models = [step0()]
        for t in range(1, ctx.final_index):
            start = models[-1]
            task = Task([ctx.split(t, "train")], ctx.split(t, "valid"))
            space = _step_space(config, schedule, t, "historical_modes.sequential")
            models.append(
                ctx.tuned_fit(f"{name}/step{t}", space, lambda s=start: clone_model(s), task)
            )
        final_space = _step_space(config, schedule, ctx.final_index, "historical_modes.sequential")
        chains[name] = Chain(models, final_space.describe())
    return chains


@historical_mode(
    "sequential_ewc",
    "a sequential chain with EWC towards every earlier step (EWC)",
    uses_step0=True,
)
def _sequential_ewc(
    ctx: Context, config: Mapping[str, Any], step0: Callable[[], nn.Module] | None
) -> dict[str, Chain]:
    assert step0 is not None
    space = space_of(config, "space", "historical_modes.sequential_ewc")
    models = [step0()]
    anchors = [
        (
            parameters_of(models[0]),
            fisher_information(models[0], ctx.split(0, "train").to(ctx.device), ctx.engine),
        )
    ]
    for t in range(1, ctx.final_index):
        start = models[-1]
        task = Task([ctx.split(t, "train")], ctx.split(t, "valid"), anchors=list(anchors))
        model = ctx.tuned_fit(f"step{t}", space, lambda s=start: clone_model(s), task)
        models.append(model)
        data = ctx.split(t, "train").to(ctx.device)
        anchors.append((parameters_of(model), fisher_information(model, data, ctx.engine)))
    return {"main": Chain(models, space.describe(), anchors)}


def _side_model(ctx: Context, previous: nn.Module, side_kind: str) -> JointModel:
    """A joint model one step longer than ``previous``, its earlier modules loaded and frozen."""
    steps = previous.num_steps + 1 if isinstance(previous, JointModel) else 2
    names = layer_names(previous)
    model = JointModel(
        ctx.arch, ctx.num_classes, steps, [names] * (steps - 1), "side_tune", side_kind, "separate"
    )
    model.load_previous(previous, freeze=True)
    return model.to(ctx.device)


def _side_fit(
    ctx: Context, stage: str, previous: nn.Module, side_kind: str, step: int, space: SearchSpace
) -> JointModel:
    steps = previous.num_steps + 1 if isinstance(previous, JointModel) else 2
    task = Task(
        [ctx.split(step, "train")],
        ctx.split(step, "valid"),
        objective="joint",
        steps=[steps - 1],
        valid_step=steps - 1,
    )

    def make() -> nn.Module:
        torch.manual_seed(derived_seed(ctx.seed, ctx.prefix, stage, "init"))
        return _side_model(ctx, previous, side_kind)

    return ctx.tuned_fit(stage, space, make, task)


def _sequential_side(side_kind: str) -> HistoricalTrainer:
    def train(
        ctx: Context, config: Mapping[str, Any], step0: Callable[[], nn.Module] | None
    ) -> dict[str, Chain]:
        assert step0 is not None
        space = space_of(config, "space", "historical_modes.sequential_side")
        models: list[nn.Module] = [step0()]
        for t in range(1, ctx.final_index):
            models.append(_side_fit(ctx, f"step{t}", models[-1], side_kind, t, space))
        return {"main": Chain(models)}

    return train


historical_mode(
    "sequential_side_1",
    "a chain of 1-layer side modules, one per step (SST-1)",
    kind="side_chain",
    side_kind="one_layer",
    uses_step0=True,
    convnet_equivalent="sequential_side_b",
)(_sequential_side("one_layer"))
historical_mode(
    "sequential_side_b",
    "a chain of block side modules, one per step (SST-B)",
    kind="side_chain",
    side_kind="block",
    uses_step0=True,
)(_sequential_side("block"))


def train_step0(ctx: Context, space: SearchSpace) -> nn.Module:
    """The step-0 model every sequential mode starts from: ERM on the source step alone."""
    task = Task([ctx.split(0, "train")], ctx.split(0, "valid"))
    return ctx.tuned_fit("step0", space, lambda: ctx.new_model("step0"), task)


# --------------------------------------------------------------------------------------------
# Final modes
# --------------------------------------------------------------------------------------------


def _scratch_on(step: int | str) -> FinalRunner:
    def run(ctx: Context, config: Mapping[str, Any], state: HistoricalState | None) -> FinalOutcome:
        task = Task([ctx.split(step, "train")], ctx.split(step, "valid"))
        space = space_of(config, "space", "final_modes")
        return FinalOutcome(
            ctx.tuned_fit("final", space, lambda: ctx.new_model("final"), task), None
        )

    return run


final_mode("scratch", "train from scratch on the final step only", ("none",))(_scratch_on(-1))
final_mode("scratch_oracle", "train from scratch on the final step at oracle size", ("none",))(
    _scratch_on("oracle")
)


def _all_steps(objective: str) -> FinalRunner:
    def run(ctx: Context, config: Mapping[str, Any], state: HistoricalState | None) -> FinalOutcome:
        steps = [ctx.split(t, "train") for t in range(ctx.sequence.num_steps)]
        domains = [Data.concat(steps)] if objective == "erm" else steps
        task = Task(domains, ctx.split(-1, "valid"), objective=objective)
        space = space_of(config, "space", "final_modes")
        return FinalOutcome(
            ctx.tuned_fit("final", space, lambda: ctx.new_model("final"), task), None
        )

    return run


for _objective in ("erm", "irm", "dro"):
    final_mode(
        f"all_{_objective}",
        f"{_objective.upper()} on all steps 0..T (the final step's validation set selects)",
        ("none",),
    )(_all_steps(_objective))


def _best_of_chains(
    ctx: Context,
    state: HistoricalState,
    fit_chain: Callable[[str, Chain], nn.Module],
    step: int | None,
) -> FinalOutcome:
    """Continue every chain (SFT: every schedule) and keep the best on final *validation*."""
    candidates: dict[str, tuple[nn.Module, float]] = {}
    best: str | None = None
    for name, chain in state.chains.items():
        candidates[name] = (fit_chain(name, chain), ctx.fits[-1]["valid_accuracy"])
        if best is None or candidates[name][1] > candidates[best][1]:
            best = name
    assert best is not None
    model, accuracy = candidates[best]
    chosen = {"chain": best} if len(candidates) > 1 or best != "main" else {}
    return FinalOutcome(model, step, chosen, accuracy, candidates if len(candidates) > 1 else {})


def _chain_space(chain: Chain, config: Mapping[str, Any], key: str) -> SearchSpace:
    if chain.final_space is not None:
        return SearchSpace.parse(chain.final_space, "chain")
    return space_of(config, key, "final_modes")


@final_mode("ft", "fine-tune every layer on the final step", ("model",))
def _fine_tune(
    ctx: Context, config: Mapping[str, Any], state: HistoricalState | None
) -> FinalOutcome:
    assert state is not None
    task_data = (ctx.split(-1, "train"), ctx.split(-1, "valid"))

    def fit_chain(name: str, chain: Chain) -> nn.Module:
        task = Task([task_data[0]], task_data[1], anchors=chain.anchors)
        space = _chain_space(chain, config, "space")
        return ctx.tuned_fit(_stage(name, "final"), space, lambda: clone_model(chain.last), task)

    return _best_of_chains(ctx, state, fit_chain, None)


@final_mode(
    "lp_ft",
    "fit the head on the final step (linear probe), then fine-tune every layer from it",
    ("model",),
    config_keys=("head_space", "space"),
)
def _linear_probe_fine_tune(
    ctx: Context, config: Mapping[str, Any], state: HistoricalState | None
) -> FinalOutcome:
    assert state is not None
    train, valid = ctx.split(-1, "train"), ctx.split(-1, "valid")

    def fit_chain(name: str, chain: Chain) -> nn.Module:
        probe = Task([train], valid, trainable=["fc"], anchors=chain.anchors)
        head = ctx.tuned_fit(
            _stage(name, "head"),
            space_of(config, "head_space", "final_modes.lp_ft"),
            lambda: clone_model(chain.last),
            probe,
        )
        task = Task([train], valid, anchors=chain.anchors)
        space = _chain_space(chain, config, "space")
        return ctx.tuned_fit(_stage(name, "all"), space, lambda: clone_model(head), task)

    return _best_of_chains(ctx, state, fit_chain, None)


def _stage(chain: str, stage: str) -> str:
    return stage if chain == "main" else f"{chain}/{stage}"


def _side_final(side_kind: str) -> FinalRunner:
    def run(ctx: Context, config: Mapping[str, Any], state: HistoricalState | None) -> FinalOutcome:
        assert state is not None
        space = space_of(config, "space", "final_modes")
        final = ctx.final_index

        def fit_chain(name: str, chain: Chain) -> nn.Module:
            return _side_fit(ctx, _stage(name, "final"), chain.last, side_kind, final, space)

        outcome = _best_of_chains(ctx, state, fit_chain, None)
        outcome.step = outcome.model.num_steps - 1
        return outcome

    return run


final_mode(
    "side_1",
    "freeze the historical model, add 1-layer side modules with a new stem and head",
    ("model", "side_chain"),
    side_kind="one_layer",
    convnet_equivalent="side_b",
)(_side_final("one_layer"))
final_mode(
    "side_b",
    "freeze the historical model, add block side modules with a new stem and head",
    ("model", "side_chain"),
    side_kind="block",
)(_side_final("block"))


def _joint(mode: str, side_kind: str, stem_head: str) -> FinalRunner:
    def run(ctx: Context, config: Mapping[str, Any], state: HistoricalState | None) -> FinalOutcome:
        steps = ctx.sequence.num_steps
        names = list(build_model(ctx.arch, ctx.num_classes).layer_names)
        weights = [1.0] * (steps - 1) + [float(config.get("final_weight", 3.0))]
        task = Task(
            [ctx.split(t, "train") for t in range(steps)],
            ctx.split(-1, "valid"),
            objective="joint",
            steps=list(range(steps)),
            valid_step=steps - 1,
            step_weights=weights,
        )

        def make() -> nn.Module:
            torch.manual_seed(derived_seed(ctx.seed, ctx.prefix, "final", "init"))
            return JointModel(
                ctx.arch, ctx.num_classes, steps, [names] * (steps - 1), mode, side_kind, stem_head
            ).to(ctx.device)

        model = ctx.tuned_fit("final", space_of(config, "space", "final_modes"), make, task)
        return FinalOutcome(model, steps - 1)

    return run


final_mode(
    "joint",
    "one joint model over all steps, separate modules per step, adjacent L2 (JM)",
    ("none",),
)(_joint("separate", "block", "separate"))
final_mode(
    "joint_side_1",
    "one joint model over all steps with 1-layer side modules (JST-1)",
    ("none",),
    side_kind="one_layer",
    convnet_equivalent="joint_side_b",
)(_joint("side_tune", "one_layer", "summed"))
final_mode(
    "joint_side_b",
    "one joint model over all steps with block side modules (JST-B)",
    ("none",),
    side_kind="block",
)(_joint("side_tune", "block", "summed"))


# --------------------------------------------------------------------------------------------
# The paper's methods (paper Table 1 classes: 1 = one model on all data, 2 = pre-train then
# adapt, 3 = sequential / joint over steps)
# --------------------------------------------------------------------------------------------

for _args in (
    ("oracle", "none", "scratch_oracle", "Oracle", 0),
    ("baseline", "none", "scratch", "Baseline", 0),
    ("erm", "none", "all_erm", "ERM", 1),
    ("irm", "none", "all_irm", "IRM", 1),
    ("dro", "none", "all_dro", "DRO", 1),
    ("ft", "erm", "ft", "FT", 2),
    ("lp_ft", "erm", "lp_ft", "LP-FT", 2),
    ("i_ft", "irm", "ft", "I-FT", 2),
    ("d_ft", "dro", "ft", "D-FT", 2),
    ("st_1", "erm", "side_1", "ST-1", 2),
    ("st_b", "erm", "side_b", "ST-B", 2),
    ("sft", "sequential", "ft", "SFT", 3),
    ("ewc", "sequential_ewc", "ft", "EWC", 3),
    ("sst_1", "sequential_side_1", "side_1", "SST-1", 3),
    ("sst_b", "sequential_side_b", "side_b", "SST-B", 3),
    ("jm", "none", "joint", "JM", 3),
    ("jst_1", "none", "joint_side_1", "JST-1", 3),
    ("jst_b", "none", "joint_side_b", "JST-B", 3),
):
    method(*_args)


# --------------------------------------------------------------------------------------------
# Combining modes
# --------------------------------------------------------------------------------------------


def check_combination(historical: str, final: str) -> None:
    """Refuse a historical × final pair whose final mode cannot continue what the first leaves."""
    h, f = HISTORICAL_MODES[historical], FINAL_MODES[final]
    valid = [name for name, mode in HISTORICAL_MODES.items() if _fits(mode, f)]
    if not _fits(h, f):
        if h.kind == "none":
            reason = f"'{final}' continues from a trained historical model and '{historical}' trains none"
        elif f.accepts == ("none",):
            reason = f"'{final}' trains on the steps itself and would ignore '{historical}''s state"
        elif h.kind == "side_chain" and f.side_kind is None:
            reason = f"'{historical}' leaves a side-tuned joint model, which '{final}' cannot fine-tune as one network"
        else:
            reason = f"'{historical}' adds {h.side_kind} side modules and '{final}' adds {f.side_kind} ones"
        raise Seq2FinalError(
            f"historical '{historical}' cannot precede final '{final}': {reason}; "
            f"valid historical modes for '{final}': {', '.join(valid)}"
        )


def _fits(h: HistoricalMode, f: FinalMode) -> bool:
    if h.kind not in f.accepts:
        return False
    return h.kind != "side_chain" or h.side_kind == f.side_kind


def resolve_request(
    method_name: str | None, historical: str | None, final: str | None
) -> list[tuple[str, str, str]]:
    """(requested name, historical, final) for every job the run parameters ask for.

    No method and no modes: all registered methods. A method with modes that disagree with its
    recipe is refused rather than guessed at.
    """
    if method_name is not None:
        recipe = METHODS[method_name]
        for given, own, what in (
            (historical, recipe.historical, "historical"),
            (final, recipe.final, "final"),
        ):
            if given is not None and given != own:
                raise Seq2FinalError(
                    f"method '{method_name}' is historical '{recipe.historical}' + final "
                    f"'{recipe.final}', which contradicts {what} '{given}'; give the method or the modes"
                )
        check_combination(recipe.historical, recipe.final)
        return [(method_name, recipe.historical, recipe.final)]
    if historical is None and final is None:
        return [(name, r.historical, r.final) for name, r in METHODS.items()]
    if final is None:
        raise Seq2FinalError(
            f"historical '{historical}' needs a final mode too; valid: {', '.join(FINAL_MODES)}"
        )
    historical = historical or "none"
    check_combination(historical, final)
    return [(method_label(historical, final), historical, final)]


def canonical_modes(historical: str, final: str, family: str) -> tuple[str, str]:
    """The modes actually trained: on a ConvNet a block is one conv + BN, so 1-layer = block."""
    if family == "convnet":
        historical = HISTORICAL_MODES[historical].convnet_equivalent or historical
        final = FINAL_MODES[final].convnet_equivalent or final
    return historical, final


def method_label(historical: str, final: str) -> str:
    """The paper method with these modes, or ``historical+final`` for a new combination."""
    for name, recipe in METHODS.items():
        if (recipe.historical, recipe.final) == (historical, final):
            return name
    return f"{historical}+{final}"


def family_of(arch: str) -> str:
    return arch.split("_")[0]
