"""Hyper-parameters: what one fit searches, as the union of what its parts declare.

A fit's own hyper-parameters are the learning rate and the model's dropout rate
(:class:`FitHyperParameters`); every loss term it uses adds its own, as a pydantic model whose
fields are its hyper-parameters: name, type (a float), default, valid range and, in
``json_schema_extra["space"]``, a default search-space entry to copy into a mode's YAML block
(listed in docs/reference.md, "Loss terms"; docs/extending.md). So a plugin's term declares
``vrex_lambda`` where it is written, and a space naming a hyper-parameter no active term declares
is refused in one line that lists the valid names.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from pydantic import BaseModel, Field, ValidationError

from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import Registry
from seq2final.core.schema import StrictModel, one_line
from seq2final.training.search import ParamSpec

Value = float | torch.Tensor


class FitHyperParameters(StrictModel):
    """What every fit searches, whatever its terms: Adam's learning rate and the dropout rate."""

    lr: float = Field(gt=0, json_schema_extra={"space": {"grid": [1.0e-3, 1.0e-4], "low": 1.0e-4, "high": 3.0e-3, "log": True}})  # fmt: skip
    dropout: float = Field(default=0.0, ge=0, lt=1, json_schema_extra={"space": {"grid": [0.0, 0.5], "low": 0.0, "high": 0.5}})  # fmt: skip


RESERVED = frozenset(dir(Mapping)) | {"_values"}
"""Names a hyper-parameter cannot take: :class:`HyperParameters` reads values as attributes, so
``hp.items`` must stay the mapping's method."""


def default_space(schema: type[BaseModel]) -> dict[str, dict[str, Any]]:
    """Each hyper-parameter's default search-space entry, where its schema declares one."""
    spaces: dict[str, dict[str, Any]] = {}
    for name, field in schema.model_fields.items():
        extra = field.json_schema_extra
        if isinstance(extra, dict) and "space" in extra:
            spaces[name] = dict(extra["space"])  # type: ignore[arg-type]  # JSON, a mapping
    return spaces


def register_declaring(registry: Registry[Any], base: type, name: str, cls: Any) -> None:
    """Add ``cls``, a subclass of ``base`` that declares hyper-parameters (a loss term, an
    optimiser recipe), to ``registry`` as ``name``; the class and its schema are checked here,
    when the module (a plugin) is imported, before any work."""
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise Seq2FinalError(f"{registry.kind} '{name}': {cls!r} is not a {base.__name__} subclass")
    declaring: Any = cls  # a subclass of base: its ClassVars, not object's
    check_schema(declaring.hyperparameters, f"{registry.kind} '{name}'")
    declaring.name = name
    registry.add(name, declaring)


def check_schema(schema: Any, owner: str) -> None:
    """Refuse a hyper-parameter schema the fits cannot use: it must be a pydantic model whose
    fields are floats with a default (only the learning rate may lack one), named apart from the
    mapping's methods, each default search-space entry a valid one."""
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise Seq2FinalError(
            f"{owner}: hyperparameters {schema!r} is not a pydantic model; valid: a subclass of "
            "pydantic.BaseModel whose fields are the hyper-parameters (floats with defaults)"
        )
    for name, field in schema.model_fields.items():
        if field.annotation not in (float, int):
            raise Seq2FinalError(
                f"{owner}: hyper-parameter '{name}' is typed {field.annotation}; valid: float"
            )
        if field.is_required() and schema is not FitHyperParameters:
            raise Seq2FinalError(f"{owner}: hyper-parameter '{name}' has no default; give it one")
        if name in RESERVED or name.startswith("__"):
            raise Seq2FinalError(
                f"{owner}: hyper-parameter '{name}' is a name the values' mapping uses; valid: "
                "any other name"
            )
    for name, entry in default_space(schema).items():
        try:
            ParamSpec.model_validate(entry)
        except ValidationError as error:
            raise Seq2FinalError(one_line(error, ParamSpec, f"{owner}: '{name}' space")) from None


class HyperParameters(Mapping[str, Value]):
    """The values of one fit, read as attributes (``hp.lr``) or by name (``hp["vrex_lambda"]``).

    Values are numbers, or in a fused stack tensors holding one value per stacked model. Built
    by :meth:`seq2final.training.objectives.Task.hyperparameters`, which checks the names
    against the fit's schemas and fills in their defaults.
    """

    def __init__(self, values: Mapping[str, Value] | None = None, **more: Value) -> None:
        self._values = {**(values or {}), **more}

    def __getattr__(self, name: str) -> Value:
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name: str) -> Value:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"HyperParameters({self._values!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self._values == dict(other)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))


def declared(schemas: Iterable[tuple[str, type[BaseModel]]]) -> dict[str, str]:
    """Each hyper-parameter name and who declares it, the fit's own first; a name declared twice
    is refused (two parts reading one value would silently share it)."""
    owners: dict[str, str] = {}
    every: list[tuple[str, type[BaseModel]]] = [("the fit", FitHyperParameters), *schemas]
    for owner, schema in every:
        for name in schema.model_fields:
            if name in owners:
                raise Seq2FinalError(
                    f"hyper-parameter '{name}' is declared by both {owners[name]} and {owner}; "
                    "valid: a name no other active term declares"
                )
            owners[name] = owner
    return owners


def complete(
    values: Mapping[str, Any], schemas: Iterable[tuple[str, type[BaseModel]]], where: str = "fit"
) -> HyperParameters:
    """``values`` checked against the schemas (unknown names and out-of-range values refused in
    one line) with every missing hyper-parameter at its default, as floats."""
    schemas = [("the fit", FitHyperParameters), *schemas]
    owners = declared(schemas[1:])
    unknown = sorted(set(values) - set(owners))
    if unknown:
        raise Seq2FinalError(
            f"{where}: unknown hyper-parameter(s) {', '.join(unknown)}; valid: "
            f"{', '.join(sorted(owners))}"
        )
    completed: dict[str, Value] = {}
    for owner, schema in schemas:
        own = {name: values[name] for name in schema.model_fields if name in values}
        try:
            checked = schema.model_validate(own)
        except ValidationError as error:
            raise Seq2FinalError(one_line(error, schema, f"{where} ({owner})")) from None
        completed.update({name: float(value) for name, value in checked})
    return HyperParameters(completed)
