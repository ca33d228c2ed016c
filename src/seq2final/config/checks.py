"""Every check done before work: parameters, method requests, budgets and the modes' YAML blocks.

A typo in a parameter or a YAML block must cost seconds, not the hours of training that would
run before the code reading it is reached. :func:`validate_parameters` runs as soon as Kedro has
the parameters (a project hook) and raises one line on the first problem.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from seq2final.config.parameters import RunParameters
from seq2final.core.errors import Seq2FinalError
from seq2final.core.plugins import load_plugins, plugin_paths
from seq2final.core.schema import one_line
from seq2final.data.family import Member, is_family, members
from seq2final.data.sources import SOURCES
from seq2final.data.spec import SequenceSpec, resolve_spec
from seq2final.methods import FINAL_MODES, HISTORICAL_MODES
from seq2final.methods.blocks import ModeBlock, settings_of
from seq2final.methods.modes import FinalMode, HistoricalMode, block_keys, default_space
from seq2final.methods.requests import RequestedJob, requested_jobs, resolve_request
from seq2final.methods.schedules import check_schedules
from seq2final.models import build_model
from seq2final.protocols import (
    PROTOCOLS,
    ProtocolOptions,
    check_warm_start,
    chosen_views,
    options_for,
    runnable,
    sequence_options,
)
from seq2final.training.hyperparameters import complete, declared
from seq2final.training.objectives import mode_schemas
from seq2final.training.search import Budget, SearchSpace, get_budget


@dataclass(frozen=True)
class ModeBlocks:
    """Every registered mode's YAML block and the step-0 model's space, checked and parsed."""

    historical: Mapping[str, ModeBlock]
    final: Mapping[str, ModeBlock]
    step0: ModeBlock


@dataclass(frozen=True)
class CheckedRun:
    """The run parameters as checked, with what checking them resolved, each made once: the
    sequence spec, the budget, the jobs asked for, the protocol's options (a preset's split step
    filled in) and every mode's parsed block. A run plans from it (:func:`~seq2final.runs.planner.
    plan_run`) and its hooks read it, so nothing is resolved or validated a second time
    (docs/architecture.md). ``blocks`` is None only where the configuration has no
    ``pretrain_historical`` block, which a pipeline that trains needs."""

    parameters: RunParameters
    spec: SequenceSpec
    budget: Budget
    jobs: tuple[RequestedJob, ...]
    protocol_options: ProtocolOptions
    blocks: ModeBlocks | None
    # a family's members and each one's checked specification, in the family's order
    members: tuple[tuple[Member, SequenceSpec], ...] = ()

    def datasets(self) -> dict[str, object]:
        """What the nodes read of the checked run, by the catalog dataset that holds it
        (``conf/base/catalog.yml``): the run, its spec, the pipelines' typed option blocks and
        the budget's name, each the object the check made, so no node takes a ``params:`` input
        that Kedro would parse a second time."""
        parameters = self.parameters
        return {
            "checked_run": self,
            "sequence_spec": self.spec,
            "build_options": parameters.build_sequences,
            "quantify_options": parameters.quantify_shift,
            "evaluate_options": parameters.evaluate,
            "visualize_options": parameters.visualize,
            "curve_options": parameters.representations,
            "budget_name": parameters.budget,
        }

    def mode_blocks(self) -> ModeBlocks:
        """The modes' blocks, which planning a training run needs."""
        if self.blocks is None:
            raise Seq2FinalError(
                "parameter 'pretrain_historical' is missing; valid: a block with the step-0 "
                "model's space 'step0' (conf/base/parameters_pretrain_historical.yml)"
            )
        return self.blocks

    def asking(self, arch: str, method: str | None, historical: str | None, final: str | None
               ) -> CheckedRun:  # fmt: skip
        """The same checked run asking for other jobs on another architecture (a sweep's
        combinations, each planned from one check of the parameters)."""
        parameters = self.parameters.model_copy(
            update={"arch": arch, "method": method, "historical": historical, "final": final}
        )
        jobs = tuple(requested_jobs(method, historical, final, arch))
        return dataclasses.replace(self, parameters=parameters, jobs=jobs)


def validate_parameters(parameters: Mapping[str, Any]) -> CheckedRun:
    """Load the plugins the parameters name, then check everything, including the sequence spec.

    Plugins come first because they may add the very names (methods, sources, ...) that the
    other parameters use. A family is checked member by member, and its run is its first
    member's under the family's name, which names its reports and its MLflow experiment (no
    pipeline but ``robustness`` runs a family: :class:`~seq2final.hooks.ValidateParametersHook`).
    """
    parameters = {k: v for k, v in parameters.items() if not k.startswith("_")}  # YAML templates
    plugins = plugin_paths(parameters.get("plugins"))
    load_plugins(plugins)
    try:
        run = RunParameters.model_validate({**parameters, "plugins": plugins})
    except ValidationError as error:
        raise Seq2FinalError(one_line(error, RunParameters)) from None
    natural = run.dataset is not None and SOURCES[run.dataset].natural
    if natural and is_family(run.sequence, run.intensities):
        raise Seq2FinalError(
            f"dataset '{run.dataset}' is a sequence by itself (its periods), with no shift "
            f"intensity to dial (sequence '{run.sequence}', intensities "
            f"{list(run.intensities or [])}); valid: intensities null, or a family on a pooled "
            "dataset such as digits"
        )
    if is_family(run.sequence, run.intensities):
        family = members(run.sequence, run.intensities)
        checked = [  # each as its own run checks it
            validate_parameters({**parameters, "sequence": member.sequence, "intensities": None})
            for member in family
        ]
        first = checked[0]
        return dataclasses.replace(
            first, parameters=run, spec=dataclasses.replace(first.spec, name=run.sequence),
            members=tuple((m, c.spec) for m, c in zip(family, checked, strict=True)),
        )  # fmt: skip
    spec = _sequence_spec(run)
    try:
        budget = get_budget(run.budgets, run.budget)
    except Seq2FinalError as error:
        raise Seq2FinalError(f"parameter 'budget': {error}") from None
    blocks = _check_methods(run, spec.num_targets)
    asked = tuple(requested_jobs(run.method, run.historical, run.final, run.arch))
    _check_wrappers(run, asked, budget)
    options = _check_protocol(run, spec, asked)
    try:  # even when every job will be reused: a setting this machine cannot honour is a typo
        run.training.torch_device()
    except Seq2FinalError as error:
        raise Seq2FinalError(f"parameter 'training': {error}") from None
    return CheckedRun(run, spec, budget, asked, options, blocks)


@dataclass
class CheckedParameters:
    """The session's run, checked once and kept: the first hook checks it
    (``ValidateParametersHook``), the others read ``run`` instead of checking again."""

    run: CheckedRun | None = None

    def check(self, parameters: Mapping[str, Any]) -> CheckedRun:
        """Check ``parameters`` (the raw ones, as the configuration gives them) and keep them."""
        self.run = None  # a refused session keeps nothing of the one before
        self.run = validate_parameters(parameters)
        return self.run

    def checked(self) -> CheckedRun:
        """The kept run (hooks run after the check, which stops a session it refuses)."""
        if self.run is None:
            raise RuntimeError("the run parameters are read before they were checked")
        return self.run


def _sequence_spec(run: RunParameters) -> SequenceSpec:
    """The full specification of the sequence the parameters name (one sequence, not a family)."""
    return resolve_spec(
        run.sequence,
        run.dataset,
        run.data_path,
        run.seed,
        run.build_sequences.test_size,
        run.build_sequences.oracle_size,
        **sequence_options(run.protocol),
        data_options=run.data_options,
    )


def _check_methods(run: RunParameters, final_step: int) -> ModeBlocks | None:
    """Method and modes agree and every mode's block is usable: its blocks, checked. The final
    step is the whole sequence's, which no protocol's view passes (a schedule positive up to it
    is positive up to a view's)."""
    try:
        resolve_request(run.method, run.historical, run.final)
    except Seq2FinalError as error:
        where = "method" if run.method else "final"
        raise Seq2FinalError(f"parameter '{where}': {error}") from None
    if run.pretrain_historical is None:
        return None
    return check_mode_configs(
        run.historical_modes,
        run.final_modes,
        run.pretrain_historical.step0,
        final_step,
        run.budget,
    )


def _check_wrappers(run: RunParameters, asked: Sequence[RequestedJob], budget: Budget) -> None:
    """Every model wrapper a requested mode declares leaves each of its phases something to train
    on the run's architecture: the probe is the architecture's plain model (of two classes:
    parameter names do not depend on the count) as the wrapper wraps it, so a wrapper declared
    with a mode whose fits train another kind of model (joint, side modules) names phases of
    that model in ``wrap``."""
    checked: set[tuple[str, str]] = set()
    for job in asked:
        for kind, mode in (
            ("historical", HISTORICAL_MODES[job.historical]),
            ("final", FINAL_MODES[job.final]),
        ):
            if mode.wrapper is None or (kind, mode.name) in checked:
                continue
            checked.add((kind, mode.name))
            blocks = run.historical_modes if kind == "historical" else run.final_modes
            try:
                wrapper = mode.wrapper.configured(blocks.get(mode.name) or {})
                wrapper.check(wrapper.wrap(build_model(run.arch, 2)), budget.max_epochs)
            except Seq2FinalError as error:
                raise Seq2FinalError(f"{kind} mode '{mode.name}': {error}") from None


def _check_protocol(
    run: RunParameters, spec: SequenceSpec, asked: Sequence[RequestedJob]
) -> ProtocolOptions:
    """The protocol's options fit the sequence (a split step inside it, a window before its
    end) and the requested methods can run on its views, checked before anything is built or
    trained; the options, with a preset's split step where none is given."""
    try:
        check_warm_start(run.protocol, run.protocol_options)
    except Seq2FinalError as error:
        raise Seq2FinalError(f"parameter 'protocol': {error}") from None
    options = options_for(run.protocol_options, run.sequence, spec.dataset)
    if spec.natural:  # its periods are its steps: no oracle-size draw of the final one
        runnable(asked, run.protocol, run.method or run.final, spec.dataset)
    if not PROTOCOLS[run.protocol].temporal:
        return options
    if run.pretrain_historical is not None and run.pretrain_historical.shared_history:
        raise Seq2FinalError(
            f"pretrain_historical.shared_history under protocol '{run.protocol}': valid only "
            "under protocol final (a temporal protocol's states are keyed by the steps they saw)"
        )
    runnable(asked, run.protocol, run.method or run.final)
    if spec.natural and not spec.steps:
        complete = [name for name, entry in SOURCES.items() if entry.periods]
        raise Seq2FinalError(
            f"parameter 'protocol': {run.protocol} needs every step of the sequence before it is "
            f"loaded, which dataset '{spec.dataset}' (whose empty periods are dropped) does not "
            f"fix; valid: the protocol final, or the datasets {', '.join(complete)} (every period "
            "required), e.g. the preset yearbook"
        )
    try:
        views = PROTOCOLS[run.protocol].views(len(spec.steps), options)
        chosen_views(views, run.protocol_view, run.protocol)
    except Seq2FinalError as error:
        raise Seq2FinalError(f"parameter 'protocol': {error}") from None
    return options


def check_curve_views(run: CheckedRun) -> None:
    """Curves tested on the sequence's final step (``representations.test_on: sequence``)
    cannot come from a view whose training images are drawn from every step, the final one's
    too (the mixed split). Checked before a run that fits curves starts (the parameter hook),
    not for one that fits none, whatever its ``representations`` block says."""
    parameters = run.parameters
    if (
        parameters.representations.test_on != "sequence"
        or not PROTOCOLS[parameters.protocol].temporal
    ):
        return
    views = PROTOCOLS[parameters.protocol].views(len(run.spec.steps), run.protocol_options)
    mixed = [view.name for view in chosen_views(views, parameters.protocol_view,
                                                parameters.protocol) if view.mixed]  # fmt: skip
    if mixed:
        raise Seq2FinalError(
            f"representations.test_on sequence with the view {mixed[0]}: its training images are "
            "drawn from every step, the final step's too; valid: test_on view"
        )


def check_mode_configs(
    historical_modes: Mapping[str, Any],
    final_modes: Mapping[str, Any],
    step0_space: Mapping[str, Any],
    final_step: int | None = None,
    budget: str | None = None,
) -> ModeBlocks:
    """Every registered mode's block, from its YAML or its defaults in code, and everything in
    it usable: the blocks, each with its search spaces parsed and its settings read.

    Checked here, before any training, so a typo in a YAML block costs seconds, not the hours of
    training that would run before the mode reading it is reached.
    """
    where = "pretrain_historical.step0"
    step0 = ModeBlock(
        where, {"space": dict(step0_space)}, {"space": check_space(step0_space, where)}
    )
    checked: dict[str, dict[str, ModeBlock]] = {}
    for registry, blocks, group in (
        (HISTORICAL_MODES, historical_modes, "historical_modes"),
        (FINAL_MODES, final_modes, "final_modes"),
    ):
        unknown = [name for name in blocks if name not in registry]
        if unknown:
            raise Seq2FinalError(
                f"{group} has a block for unknown mode(s) {', '.join(unknown)}; "
                f"valid: {', '.join(registry)}"
            )
        checked[group] = {}
        for name, mode in registry.items():
            checked[group][name] = _mode_block(mode, blocks.get(name), f"{group}.{name}")
            if final_step is not None and budget is not None:
                check_schedules(checked[group][name], final_step, budget, f"{group}.{name}")
    return ModeBlocks(checked["historical_modes"], checked["final_modes"], step0)


def mode_block(group: str, name: str, written: Mapping[str, Any] | None = None) -> ModeBlock:
    """Registered mode ``name``'s block (``group``: ``historical_modes`` or ``final_modes``)
    checked as a run checks it, from ``written`` (its YAML values) or its defaults: what the
    mode is handed as ``config``, to run it outside a run (docs/extending.md)."""
    mode: HistoricalMode | FinalMode
    if group == "historical_modes":
        mode = HISTORICAL_MODES[name]
    elif group == "final_modes":
        mode = FINAL_MODES[name]
    else:
        raise Seq2FinalError(f"mode group '{group}'; valid: historical_modes, final_modes")
    return _mode_block(mode, written, f"{group}.{name}")


def _mode_block(mode: HistoricalMode | FinalMode, block: Any, where: str) -> ModeBlock:
    """A mode's block checked: only its keys, each search space usable (the mode's default for
    one the YAML does not give), its settings valid against its schema, then its own check. A
    block no YAML gives is the mode's code defaults, settings included, so that a key, which
    hashes ``raw``, changes with them."""
    written = block is not None
    block = dict(block or {})
    valid = block_keys(mode)
    unknown = [key for key in block if key not in valid]
    if unknown:
        raise Seq2FinalError(
            f"{where} has unknown key(s) {', '.join(map(str, unknown))}; valid: "
            f"{', '.join(valid) or 'none (the mode has no settings)'}"
        )
    raw = {
        **{key: default_space(mode, key) for key in mode.config_keys if key not in block},
        **block,
    }
    for key in mode.config_keys:  # a declared space takes a written one entry by entry (a
        if isinstance(block.get(key), Mapping):  # one-entry --params override too); null leaves
            raw[key] = merged_space(mode.spaces.get(key, {}), block[key])
    spaces = {
        key: check_space(raw[key], f"{where}.{key}", mode.terms, mode.optimizer)
        for key in mode.config_keys
    }
    settings = None if mode.settings is None else settings_of(mode.settings, raw, where)
    if settings is not None and not written:  # the code's settings, in the keys (a block the
        raw = {**raw, **settings.model_dump(mode="json")}  # YAML writes keys as written)
    if mode.check is not None:
        mode.check(raw, where)
    return ModeBlock(where, raw, spaces, settings)


def merged_space(declared: Mapping[str, Any], written: Mapping[str, Any]) -> dict[str, Any]:
    """A space a mode declares with the entries a YAML block or ``--params`` writes over it: a
    written hyper-parameter's keys replace the declared ones' (``lwf_lambda.grid: [0.5]`` keeps
    its range), a new one is added and one written as null leaves the search, so a space is
    replaced whole by nulling the entries not written (docs/extending.md)."""
    merged = {name: dict(entry) if isinstance(entry, Mapping) else entry
              for name, entry in declared.items()}  # fmt: skip
    for name, entry in written.items():
        if entry is None:
            merged.pop(name, None)
        elif isinstance(entry, Mapping) and isinstance(merged.get(name), Mapping):
            merged[name] = {**merged[name], **entry}
        else:
            merged[name] = entry
    return merged


def check_space(
    raw: Mapping[str, Any], where: str, terms: Sequence[str] = (), optimizer: str = "adam"
) -> SearchSpace:
    """A search space that parses, sets a learning rate and names only hyper-parameters the fit,
    the mode's loss terms (``terms``, besides the L2 term every fit has) or its optimiser
    declare, each value it can take within the declared range."""
    space = SearchSpace.parse(raw, where)
    schemas = mode_schemas(terms, optimizer)
    known = declared(schemas)
    unknown = [name for name in space.params if name not in known]
    if unknown:
        raise Seq2FinalError(
            f"search space {where} names hyper-parameter(s) {', '.join(unknown)} that no loss "
            f"term of the mode declares; valid: {', '.join(sorted(known))}"
        )
    if "lr" not in space.params:
        raise Seq2FinalError(
            f"search space {where} needs 'lr' (a space written for a mode without a declared "
            "one replaces its default space whole: write every entry it searches)"
        )
    for name, spec in space.params.items():
        ends = [v for v in (spec.low, spec.high) if v is not None]
        for value in (*spec.grid, *ends):
            complete({"lr": 1.0, name: value}, schemas, f"search space {where}")
    return space
