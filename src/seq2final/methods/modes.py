"""What a method is made of: a historical mode, a final mode, and the registries that name them.

Every method of the paper is a way to use the historical steps 0..T−1 (the *historical mode*:
train nothing, one model on all of them, or a chain of per-step models) followed by a way to fit
the final step T (the *final mode*). Keeping the two apart is what lets users combine any
historical mode with any final mode that can continue from what it leaves
(``--params historical:irm,final:lp_ft``). Both are registries filled by decorators on the
functions that train them; a method is a registered :class:`MethodRecipe` naming one of each.

What a historical mode leaves (:attr:`HistoricalMode.leaves`) decides which final modes can
follow it (:attr:`FinalMode.continues_from`):

* ``nothing``: the final mode sees the steps itself (baseline, oracle, ERM/IRM/DRO on all steps,
  the joint models);
* ``model``: one plain model per chain (ERM/IRM/DRO on steps 0..T−1; SFT and EWC chains, whose
  last model is step T−1's) → ``ft``, ``lp_ft``, ``side_1``, ``side_b``;
* ``side_chain``: a side-tuned joint model over steps 0..T−1 (SST) → the side mode that adds the
  same kind of side module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from pydantic import BaseModel
from torch import nn

from seq2final.core.registry import Registry
from seq2final.core.schema import StrictModel
from seq2final.methods.context import Context
from seq2final.training.hyperparameters import FitHyperParameters, declared
from seq2final.training.hyperparameters import default_space as schema_space
from seq2final.training.objectives import mode_schemas
from seq2final.training.optimizers import OPTIMIZERS
from seq2final.training.records import ChosenChain, FitRecord, StateInfo
from seq2final.training.terms import LOSS_TERMS, Anchor, AnchorPull, pull_towards
from seq2final.training.wrappers import ModelWrapper

Leaves = Literal["nothing", "model", "side_chain"]
LEAVES: tuple[Leaves, ...] = ("nothing", "model", "side_chain")


@dataclass
class ModelChain:
    """Models of steps 0..T−1 (one model for ERM/IRM/DRO) and how the final step continues it.

    ``final_space`` replaces the final mode's own space for the continuation (an SFT schedule
    fixes the learning rate at step T; EWC searches λ_EWC instead of L2). ``anchors`` are what
    the continuation is pulled towards, weighted by the hyper-parameter ``anchor_weight``: EWC's
    (θ_k, F_k) for every earlier step under ``ewc_lambda``, SI's (θ_{T−1}, Ω) under ``si_c``.
    """

    models: list[nn.Module]
    final_space: dict[str, Any] | None = None
    anchors: list[Anchor] = field(default_factory=list)
    anchor_weight: str = "ewc_lambda"

    @property
    def last(self) -> nn.Module:
        return self.models[-1]

    def pull(self) -> AnchorPull:
        """The pull a continuation of the chain trains under (none without anchors)."""
        return pull_towards(self.anchor_weight, self.anchors)


@dataclass
class HistoricalState:
    """What ``pretrain_historical`` persists: chains by name (schedules, or ``main``) and fit records.

    ``extends``: on a growing chain's state just trained, the previous time's state it continues,
    whose models and anchors it holds as they are, so that the store writes only what this state
    adds (a state read from the store has none).
    """

    mode: str
    arch: str
    chains: dict[str, ModelChain]
    fits: list[FitRecord] = field(default_factory=list)
    info: StateInfo | None = None  # None: a state made outside a run (tests, notebooks)
    extends: HistoricalState | None = field(default=None, repr=False)

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
class FinalOutcome:
    """A final mode's model, the time index to evaluate it at, and what it chose.

    ``candidates`` holds every chain's continued model with its final validation accuracy when
    the mode chose among several (SFT's schedules), so the job can report each one's test
    accuracy: the paper's SFT column is the best of them *on test*, ours the best on validation.
    """

    model: nn.Module
    step: int | None
    chosen: ChosenChain = field(default_factory=ChosenChain)
    valid_accuracy: float | None = None
    candidates: dict[str, tuple[nn.Module, float]] = field(default_factory=dict)


ConfigCheck = Callable[[Mapping[str, Any], str], None]
"""Checks what a mode's ``settings`` schema cannot say alone (a setting that depends on its
search space), raising one line on a bad value; run with every other check, before any work."""
StepZero = Callable[[], nn.Module]
"""Loads the shared step-0 model (for modes with ``uses_step0``)."""
HistoricalTrainer = Callable[[Context, Mapping[str, Any], StepZero | None], dict[str, ModelChain]]
ChainStep = Callable[[Context, Mapping[str, Any], str, ModelChain, int], ModelChain]
"""One step of a chain: ``(ctx, config, chain name, chain of steps 0..t−1, t)`` → the chain of
steps 0..t (its model of step t fitted on step t of ``ctx``'s sequence)."""
FinalRunner = Callable[[Context, Mapping[str, Any], HistoricalState | None], FinalOutcome]


@dataclass(frozen=True)
class HistoricalMode:
    """A way to use steps 0..T−1; ``train`` returns chains (``None`` for the mode that trains none).

    ``side_module``: the kind of side module its chain adds (``one_layer``, ``block``), if any;
    ``block_equivalent``: the mode trained instead on architectures without ``one_layer`` side
    modules (a ConvNet block is one conv + BN already). ``config_keys``: the search spaces its
    block holds; ``settings``: the schema of its other keys (their types and defaults).
    A block holds these keys and no other: every block is checked against them before any work,
    so a typo or a setting the mode does not read stops the run (``check`` adds what the schema
    cannot say alone). ``terms``: the registered loss terms its fits use beyond the L2 term
    every fit has, whose hyper-parameters its spaces may name (checked before any work).
    ``wrapper``: the model wrapper its fits use, if any, whose phases are checked against a model
    of the run's architecture before any work. ``grow``: for a chain written with
    :func:`chain_mode`, its one step; a temporal protocol then keys the chain's state by the steps
    it saw and extends the state of steps 0..t−1 by one fit for time t, instead of re-running the
    chain for every view (docs/protocols.md, "Chains that grow"). ``optimizer``: the
    registered optimiser recipe its fits use, whose hyper-parameters its spaces may name.
    ``spaces``: its search spaces' defaults by key, used where its YAML block gives none (then
    without a declared one, :func:`default_space`); a YAML block's key replaces the default.
    """

    name: str
    description: str
    leaves: Leaves
    train: HistoricalTrainer | None = None
    grow: ChainStep | None = None
    side_module: str | None = None
    uses_step0: bool = False
    block_equivalent: str | None = None
    config_keys: tuple[str, ...] = ("space",)
    settings: type[StrictModel] | None = None
    check: ConfigCheck | None = None
    terms: tuple[str, ...] = ()
    wrapper: ModelWrapper | None = None
    optimizer: str = "adam"
    spaces: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_declared(self)
        if self.leaves not in LEAVES:
            raise ValueError(
                f"historical mode '{self.name}': unknown leaves '{self.leaves}'; "
                f"valid: {', '.join(LEAVES)}"
            )


@dataclass(frozen=True)
class FinalMode:
    """A way to fit the final step; ``continues_from`` lists what historical modes it follows.

    ``side_module``, ``block_equivalent``, ``config_keys``, ``settings``, ``check``, ``terms``,
    ``wrapper``, ``optimizer`` and ``spaces`` as for :class:`HistoricalMode`.
    ``uses_oracle``: it trains on the final step's oracle-size draw, which only a whole sequence
    has (the views the temporal protocols train on have none). ``pooled``: it trains one fresh
    model (:meth:`Context.new_model`) on steps 0..T, which a stream may warm-start from the
    previous time's model (``protocol_options.warm_start``, as Wild-Time's Eval-Stream trains).
    """

    name: str
    description: str
    continues_from: tuple[Leaves, ...]
    run: FinalRunner
    side_module: str | None = None
    block_equivalent: str | None = None
    config_keys: tuple[str, ...] = ("space",)
    uses_oracle: bool = False
    settings: type[StrictModel] | None = None
    check: ConfigCheck | None = None
    terms: tuple[str, ...] = ()
    wrapper: ModelWrapper | None = None
    pooled: bool = False
    optimizer: str = "adam"
    spaces: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_declared(self)
        unknown = [kind for kind in self.continues_from if kind not in LEAVES]
        if unknown:
            raise ValueError(
                f"final mode '{self.name}': unknown continues_from {', '.join(unknown)}; "
                f"valid: {', '.join(LEAVES)}"
            )


def block_keys(mode: HistoricalMode | FinalMode) -> tuple[str, ...]:
    """Every key a mode's YAML block may hold: its search spaces, then its settings."""
    return (*mode.config_keys, *(mode.settings.model_fields if mode.settings else ()))


def default_space(mode: HistoricalMode | FinalMode, key: str) -> dict[str, Any]:
    """The search space ``key`` of a mode whose YAML block does not give it: the one the mode
    declares in code (``spaces=``), else every declared default entry of what its fits read —
    the fit's learning rate and dropout, the L2 term's weight, its terms' and its optimiser's
    hyper-parameters (docs/extending.md, "One file per method")."""
    if key in mode.spaces:
        return dict(mode.spaces[key])
    schemas: list[type[BaseModel]] = [FitHyperParameters]
    schemas += [schema for _, schema in mode_schemas(mode.terms, mode.optimizer)]
    return {name: entry for schema in schemas for name, entry in schema_space(schema).items()}


def _check_declared(mode: HistoricalMode | FinalMode) -> None:
    """What a mode declares is usable: registered loss terms and optimiser whose
    hyper-parameters are distinct (with L2's), no key both a search space and a setting (a
    block's key has one meaning), and default spaces only for its search-space keys."""
    for term in mode.terms:
        if term not in LOSS_TERMS:
            raise ValueError(
                f"mode '{mode.name}': unknown loss term '{term}'; valid: {', '.join(LOSS_TERMS)}"
            )
    if mode.optimizer not in OPTIMIZERS:
        raise ValueError(
            f"mode '{mode.name}': unknown optimizer '{mode.optimizer}'; valid: "
            f"{', '.join(OPTIMIZERS)}"
        )
    declared(mode_schemas(mode.terms, mode.optimizer))
    settings = mode.settings.model_fields if mode.settings is not None else {}
    both = [key for key in mode.config_keys if key in settings]
    if both:
        raise ValueError(f"mode '{mode.name}': {', '.join(both)} both a search space and a setting")
    stray = [key for key in mode.spaces if key not in mode.config_keys]
    if stray:
        raise ValueError(
            f"mode '{mode.name}': spaces for {', '.join(stray)}, which are not its search "
            f"spaces; valid: {', '.join(mode.config_keys) or 'none (config_keys is empty)'}"
        )


HISTORICAL_MODES: Registry[HistoricalMode] = Registry("historical mode")
FINAL_MODES: Registry[FinalMode] = Registry("final mode")


def historical_mode(
    name: str, description: str, leaves: Leaves = "model", **options: Any
) -> Callable[[HistoricalTrainer], HistoricalTrainer]:
    """Register the decorated trainer as historical mode ``name``."""

    def register(train: HistoricalTrainer) -> HistoricalTrainer:
        HISTORICAL_MODES.add(name, HistoricalMode(name, description, leaves, train, **options))
        return train

    return register


def chain_mode(
    name: str,
    description: str,
    start: HistoricalTrainer,
    leaves: Leaves = "model",
    **options: Any,
) -> Callable[[ChainStep], ChainStep]:
    """Register the decorated chain step as historical mode ``name``: a chain that ``start``
    begins (its chains of step 0) and the step extends by one step at a time.

    On a whole sequence the mode trains ``start`` and then the step for t = 1..T−1, in one state;
    under a temporal protocol each time's state is the previous time's plus one step, so a
    stream of T steps costs T fits of the chain, not T²/2.
    """

    def register(step: ChainStep) -> ChainStep:
        def train(
            ctx: Context, config: Mapping[str, Any], step0: StepZero | None
        ) -> dict[str, ModelChain]:
            chains = start(ctx, config, step0)
            for chain_name, chain in chains.items():  # chain by chain, then step by step
                for t in range(1, ctx.final_index):
                    chain = step(ctx, config, chain_name, chain, t)
                chains[chain_name] = chain
            return chains

        HISTORICAL_MODES.add(
            name, HistoricalMode(name, description, leaves, train, grow=step, **options)
        )
        return step

    return register


def from_step0(
    ctx: Context, config: Mapping[str, Any], step0: StepZero | None
) -> dict[str, ModelChain]:
    """The start of a chain that continues the shared step-0 model (``uses_step0``)."""
    assert step0 is not None, "a chain that starts from step 0's model declares uses_step0"
    return {"main": ModelChain([step0()])}


def final_mode(
    name: str, description: str, continues_from: tuple[Leaves, ...], **options: Any
) -> Callable[[FinalRunner], FinalRunner]:
    """Register the decorated runner as final mode ``name``."""

    def register(run: FinalRunner) -> FinalRunner:
        FINAL_MODES.add(name, FinalMode(name, description, continues_from, run, **options))
        return run

    return register


# Paper Table 1's classes; 0 marks the references (oracle and baseline) every table compares with.
FAMILIES = {0: "reference", 1: "class 1", 2: "class 2", 3: "class 3"}


@dataclass(frozen=True)
class MethodRecipe:
    """A method: its historical mode, its final mode, its column name and where it comes from.

    ``paper_class`` is paper Table 1's class (0 for the references, ``None`` for methods beyond
    the paper); ``citation`` says where the method comes from.
    """

    historical: str
    final: str
    paper_name: str
    paper_class: int | None = None
    citation: str = ""

    @property
    def family(self) -> str:
        return "custom" if self.paper_class is None else FAMILIES[self.paper_class]


METHODS: Registry[MethodRecipe] = Registry("method")


def method(
    name: str,
    historical: str,
    final: str,
    paper_name: str | None = None,
    paper_class: int | None = None,
    citation: str = "",
) -> MethodRecipe:
    """Register method ``name`` as ``historical`` followed by ``final``."""
    recipe = MethodRecipe(historical, final, paper_name or name, paper_class, citation)
    METHODS.add(name, recipe)
    return recipe
