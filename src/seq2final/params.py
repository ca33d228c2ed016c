"""Validation of run parameters, before any pipeline does work.

Users type parameters on the command line (``--params sequence:clr,seed:3``), so a typo must stop
the run at once with one line naming the bad value and the valid choices, not minutes later inside
a node. :func:`validate_parameters` checks the merged parameters against pydantic models: the
public run parameters at the top level, and one block per pipeline.
"""

from __future__ import annotations

from typing import Any

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


class RunParameters(_Strict):
    """The public run parameters plus one options block per pipeline."""

    sequence: str = "digits_clr"
    dataset: str | None = None
    data_path: str | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**32)
    arch: str | None = None
    method: str | None = None
    historical: str | None = None
    final: str | None = None
    budget: int | None = Field(default=None, ge=1)
    build_sequences: BuildOptions = BuildOptions()
    quantify_shift: QuantifyOptions = QuantifyOptions()

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

    try:
        run = RunParameters.model_validate(parameters)
    except ValidationError as error:
        raise Seq2FinalError(_one_line(error)) from None
    resolve_spec(
        run.sequence,
        run.dataset,
        run.data_path,
        run.seed,
        run.build_sequences.test_size,
        run.build_sequences.oracle_size,
    )
    return run


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
