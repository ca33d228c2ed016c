"""Validation of run parameters, before any pipeline does work.

Users type parameters on the command line (``--params sequence:clr,seed:3``), so a typo must stop
the run at once with one line naming the bad value and the valid choices, not minutes later inside
a node. :func:`validate_parameters` checks the merged parameters against pydantic models: the
public run parameters at the top level, and one block per pipeline.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from seq2final.errors import Seq2FinalError
from seq2final.registry import Registry


def _check_name(registry: Registry[Any], value: str | None) -> str | None:
    if value is not None:
        registry[value]  # unknown names are answered with the valid list
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BuildOptions(_Strict):
    """``build_sequences`` block: overrides of the preset's sizes and where raw data lives."""

    test_size: int | None = Field(default=None, ge=1)
    oracle_size: int | None = Field(default=None, ge=2)
    raw_dir: str = "data/01_raw"
    example_columns: int = Field(default=10, ge=1, le=20)


class QuantifyOptions(_Strict):
    """``quantify_shift`` block: the PCA and optimal-transport settings."""

    variance: float = Field(default=0.95, gt=0, le=1)
    max_components: int = Field(default=100, ge=1)
    max_iterations: int = Field(default=100_000_000, ge=1000)
    workers: int = Field(default=2, ge=1)


class TrainingOptions(_Strict):
    """``training`` block: how fits run (see :class:`seq2final.training.Engine`)."""

    batch_size: int = Field(default=100, ge=1)
    eval_batch_size: int = Field(default=1000, ge=1)
    input_scale: Literal["unit", "raw"] = "unit"
    device: str = "auto"
    channels_last: bool = False
    amp: Literal["none", "bf16", "fp16"] = "none"
    patience: int = Field(default=6, ge=1)
    freeze_bn_stats: bool = False


class TuningOptions(_Strict):
    """``tuning`` block: where Optuna studies and their checkpoints live."""

    storage: str | None = None
    root: str = "data/06_models/optuna"


class MlflowOptions(_Strict):
    """``mlflow`` block: whether jobs are tracked, and the names their runs and models get."""

    enabled: bool = True
    experiment: str = "seq2final/{sequence}"
    registered_model: str = "{sequence}.{arch}.{method}"
    best_model: str = "{sequence}.{dataset}.{arch}"
    log_models: bool = True


class EvaluateOptions(_Strict):
    """``evaluate`` block: which methods the paired bootstrap compares, and how."""

    reference: str = "baseline"
    pairs: list[tuple[str, str]] = Field(default_factory=list)
    resamples: int = Field(default=10_000, ge=100)
    confidence: float = Field(default=0.95, gt=0, lt=1)

    @field_validator("reference")
    @classmethod
    def _reference(cls, value: str) -> str:
        from seq2final.methods import METHODS

        return _check_name(METHODS, value) or value

    @field_validator("pairs")
    @classmethod
    def _pairs(cls, value: list[tuple[str, str]]) -> list[tuple[str, str]]:
        from seq2final.methods import METHODS

        for pair in value:
            for name in pair:
                _check_name(METHODS, name)
        return value


class VisualizeOptions(_Strict):
    """``visualize`` block: how finely paths are sampled and how many test images SVCCA uses."""

    interpolation_points: int = Field(default=101, ge=2)
    svcca_images: int = Field(default=500, ge=10)


class PretrainOptions(_Strict):
    """``pretrain_historical`` block: the shared step-0 model's search space."""

    step0: dict[str, Any]


class RunParameters(_Strict):
    """The public run parameters plus one options block per pipeline."""

    sequence: str = "digits_clr"
    dataset: str | None = None
    data_path: str | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**32)
    arch: str = "convnet_4"
    method: str | None = None
    historical: str | None = None
    final: str | None = None
    budget: str = "default"
    force: bool = False
    build_sequences: BuildOptions = BuildOptions()
    quantify_shift: QuantifyOptions = QuantifyOptions()
    training: TrainingOptions = TrainingOptions()
    budgets: dict[str, dict[str, Any]] = Field(default_factory=dict)
    tuning: TuningOptions = TuningOptions()
    mlflow: MlflowOptions = MlflowOptions()
    evaluate: EvaluateOptions = EvaluateOptions()
    visualize: VisualizeOptions = VisualizeOptions()
    pretrain_historical: PretrainOptions | None = None
    historical_modes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    final_modes: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, value: str | None) -> str | None:
        from seq2final.data import SOURCES

        return _check_name(SOURCES, value)

    @field_validator("arch")
    @classmethod
    def _arch(cls, value: str | None) -> str | None:
        from seq2final.models import ARCHITECTURES

        return _check_name(ARCHITECTURES, value)

    @field_validator("method")
    @classmethod
    def _method(cls, value: str | None) -> str | None:
        from seq2final.methods import METHODS

        return _check_name(METHODS, value)

    @field_validator("historical")
    @classmethod
    def _historical(cls, value: str | None) -> str | None:
        from seq2final.methods import HISTORICAL_MODES

        return _check_name(HISTORICAL_MODES, value)

    @field_validator("final")
    @classmethod
    def _final(cls, value: str | None) -> str | None:
        from seq2final.methods import FINAL_MODES

        return _check_name(FINAL_MODES, value)


def validate_parameters(parameters: dict[str, Any]) -> RunParameters:
    """Check all parameters, including the sequence spec; raise one line on the first problem."""
    from seq2final.sequences import resolve_spec

    parameters = {k: v for k, v in parameters.items() if not k.startswith("_")}  # YAML templates
    try:
        run = RunParameters.model_validate(parameters)
    except ValidationError as error:
        raise Seq2FinalError(_one_line(error)) from None
    spec = resolve_spec(
        run.sequence,
        run.dataset,
        run.data_path,
        run.seed,
        run.build_sequences.test_size,
        run.build_sequences.oracle_size,
    )
    _check_methods(run, spec.num_targets)
    return run


def _check_methods(run: RunParameters, final_step: int) -> None:
    """Method and modes agree, the budget exists and every search space parses."""
    from seq2final.jobs import check_mode_configs
    from seq2final.methods import resolve_request
    from seq2final.tuning import get_budget

    def named(block: str, error: Seq2FinalError) -> Seq2FinalError:
        return Seq2FinalError(f"parameter '{block}': {error}")

    try:
        resolve_request(run.method, run.historical, run.final)
    except Seq2FinalError as error:
        raise named("method" if run.method else "final", error) from None
    try:
        get_budget(run.budgets, run.budget)
    except Seq2FinalError as error:
        raise named("budget", error) from None
    if run.pretrain_historical is not None:
        check_mode_configs(
            run.historical_modes,
            run.final_modes,
            run.pretrain_historical.step0,
            final_step,
            run.budget,
        )


def _one_line(error: ValidationError) -> str:
    """The first pydantic error as 'parameter X: problem (got value); valid: ...'."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    if first["type"] == "extra_forbidden":
        block = first["loc"][:-1]
        model: type[BaseModel] = RunParameters
        for part in block:
            model = model.model_fields[str(part)].annotation  # type: ignore[assignment]
        return f"unknown parameter '{where}'; valid: {', '.join(model.model_fields)}"
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, Seq2FinalError):
        return f"parameter '{where}': {cause}"
    return f"parameter '{where}' = {first['input']!r}: {first['msg']}"
