"""The run parameters: what ``kedro run --params`` accepts, as validated models.

Users type parameters on the command line (``--params sequence:clr,seed:3``), so every block is a
strict pydantic model and every name that points into a registry is checked against it; a typo
stops the run at once with one line (:func:`seq2final.config.checks.validate_parameters`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from seq2final.core.schema import StrictModel
from seq2final.data.sources import SOURCES
from seq2final.methods import FINAL_MODES, HISTORICAL_MODES, METHODS
from seq2final.models import ARCHITECTURES
from seq2final.protocols import PROTOCOLS, ProtocolOptions
from seq2final.training.engine import Engine

MethodName = Annotated[str, AfterValidator(METHODS.validate)]


class BuildOptions(StrictModel):
    """``build_sequences`` block: overrides of the preset's sizes and where raw data lives."""

    test_size: int | None = Field(default=None, ge=1)
    oracle_size: int | None = Field(default=None, ge=2)
    raw_dir: str = "data/01_raw"
    example_columns: int = Field(default=10, ge=1, le=20)


class QuantifyOptions(StrictModel):
    """``quantify_shift`` block: the PCA and optimal-transport settings."""

    variance: float = Field(default=0.95, gt=0, le=1)
    max_components: int = Field(default=100, ge=1)
    max_iterations: int = Field(default=100_000_000, ge=1000)
    workers: int = Field(default=2, ge=1)
    history_images: int = Field(default=6000, ge=2)


class TuningOptions(StrictModel):
    """``tuning`` block: where Optuna studies and their checkpoints live."""

    storage: str | None = None
    root: str = "data/06_models/optuna"


class MlflowOptions(StrictModel):
    """``mlflow`` block: whether jobs are tracked, and the names their runs and models get."""

    enabled: bool = True
    tracking_uri: str | None = None
    experiment: str = "seq2final/{sequence}"
    registered_model: str = "{sequence}.{arch}.{method}"
    best_model: str = "{sequence}.{dataset}.{arch}"
    log_models: bool = True


class EvaluateOptions(StrictModel):
    """``evaluate`` block: which methods the paired bootstrap compares, and how."""

    reference: MethodName = "baseline"
    pairs: list[tuple[MethodName, MethodName]] = Field(default_factory=list)
    resamples: int = Field(default=10_000, ge=100)
    confidence: float = Field(default=0.95, gt=0, lt=1)


Measure = Literal["intensity", "w2_covariate", "nn1", "support_intensity"]
CurveKind = Literal["ft", "lp"]


def _every_measure() -> list[Measure]:
    return ["intensity", "w2_covariate", "nn1", "support_intensity"]


def _both_kinds() -> list[CurveKind]:
    return ["ft", "lp"]


class RobustnessOptions(StrictModel):
    """``robustness`` block: the shift measures the slopes are fitted on, and the method history's
    value is measured against (docs/intensity.md)."""

    measures: list[Measure] = Field(default_factory=_every_measure, min_length=1)
    reference: MethodName = "baseline"


class CurveOptions(StrictModel):
    """``representations`` block: the data-efficiency curves of a run's historical states
    (docs/representations.md): which kinds, at which final-step training sizes, the fits'
    epoch cap and plateau patience (Feature Forgetting's schedule stops them), and which final
    step a temporal protocol's view is tested on: its own (``view``) or the whole sequence's
    (``sequence``: states that saw 1, 2, … steps, all on one step)."""

    kinds: list[CurveKind] = Field(default_factory=_both_kinds, min_length=1)
    sizes: list[Annotated[int, Field(ge=1)]] | None = Field(default=None, min_length=1)
    first_size: int = Field(default=50, ge=1)
    max_epochs: int = Field(default=30, ge=1)
    patience: int = Field(default=2, ge=0)
    scratch: bool = True
    test_on: Literal["view", "sequence"] = "view"


class VisualizeOptions(StrictModel):
    """``visualize`` block: how finely paths are sampled and how many test images SVCCA uses."""

    interpolation_points: int = Field(default=11, ge=2)
    svcca_images: int = Field(default=500, ge=10)


class PretrainOptions(StrictModel):
    """``pretrain_historical`` block: the shared step-0 model's search space, and whether
    historical states are keyed by steps 0..T−1 alone (``shared_history``), so sequences whose
    histories are byte-identical (a family's members) train them once (docs/intensity.md)."""

    step0: dict[str, Any]
    shared_history: bool = False


def _methods(names: str | list[str] | None) -> str | list[str] | None:
    """One method, several (a list: each is run), or none (every method): each name checked."""
    if names == []:
        raise ValueError("an empty list runs nothing; valid: a method, a list of them, or null")
    for name in names if isinstance(names, list) else [names]:
        METHODS.validate(name)
    return names


class RunParameters(StrictModel):
    """The public run parameters plus one options block per pipeline."""

    sequence: str = "digits_clr"
    dataset: Annotated[str | None, AfterValidator(SOURCES.validate)] = None
    data_path: str | None = None
    # the dataset's own options (folder, manifest: how times become periods; docs/data.md)
    data_options: dict[str, Any] | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**32)
    intensities: list[float] | None = None  # a family's (seq2final.data.family)
    arch: Annotated[str, AfterValidator(ARCHITECTURES.validate)] = "convnet_4"
    method: Annotated[str | list[str] | None, AfterValidator(_methods)] = None
    historical: Annotated[str | None, AfterValidator(HISTORICAL_MODES.validate)] = None
    final: Annotated[str | None, AfterValidator(FINAL_MODES.validate)] = None
    budget: str = "tour"
    force: bool = False
    protocol: Annotated[str, AfterValidator(PROTOCOLS.validate)] = "final"
    protocol_options: ProtocolOptions = ProtocolOptions()
    protocol_view: str | None = None
    build_sequences: BuildOptions = BuildOptions()
    quantify_shift: QuantifyOptions = QuantifyOptions()
    training: Engine = Engine()
    budgets: dict[str, dict[str, Any]] = Field(default_factory=dict)
    tuning: TuningOptions = TuningOptions()
    mlflow: MlflowOptions = MlflowOptions()
    evaluate: EvaluateOptions = EvaluateOptions()
    visualize: VisualizeOptions = VisualizeOptions()
    robustness: RobustnessOptions = RobustnessOptions()
    representations: CurveOptions = CurveOptions()
    pretrain_historical: PretrainOptions | None = None
    historical_modes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    final_modes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    plugins: list[str] = Field(default_factory=list)  # import paths (checks.py reads them first)
