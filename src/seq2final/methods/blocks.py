"""A mode's YAML block: its search spaces and its settings, read the way every mode reads them.

A block is checked before any work (:func:`seq2final.config.checks.check_mode_configs`), which
parses its search spaces; the checked block (:class:`ModeBlock`) keeps them parsed, and the plan
hands it to the mode, so a space is parsed once per run (docs/architecture.md). A key still
hashes the block's raw values: a ``ModeBlock`` reads as the mapping the user wrote.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ValidationError

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import StrictModel, one_line
from seq2final.training.search import SearchSpace

S = TypeVar("S", bound=StrictModel)


@dataclass(frozen=True, eq=False)  # equal as the mapping it reads as
class ModeBlock(Mapping[str, Any]):
    """A checked block: its values (``raw``: as written, with the mode's default for each search
    space the YAML does not give, and for a mode no YAML names its settings' defaults too;
    ``where`` names the block in messages), its search spaces,
    parsed when it was checked, and its settings, read by the mode's ``settings`` schema (every
    missing one at its default; ``None`` for a mode without settings)."""

    where: str
    raw: Mapping[str, Any] = field(default_factory=dict)
    spaces: Mapping[str, SearchSpace] = field(default_factory=dict, repr=False)
    settings: Any = field(default=None, repr=False)

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)


def _where(config: Mapping[str, Any], where: str | None) -> str:
    """The block's name in messages: the checked block's own (the registry's group and mode,
    set when it was checked), else ``where``."""
    if where is not None:
        return where
    return config.where if isinstance(config, ModeBlock) else "the mode's block"


def space_of(config: Mapping[str, Any], key: str, where: str | None = None) -> SearchSpace:
    """The search space ``key`` of a mode's YAML block (the parsed one of a checked block); a
    missing one names the keys it has. ``where`` names a block that is not a checked one."""
    if isinstance(config, ModeBlock) and key in config.spaces:
        return config.spaces[key]
    if key not in config:
        raise Seq2FinalError(
            f"{_where(config, where)} has no '{key}' search space; valid keys: {', '.join(config)}"
        )
    return SearchSpace.parse(config[key], f"{_where(config, where)}.{key}")


def settings_of(model: type[S], config: Mapping[str, Any], where: str | None = None) -> S:
    """A mode's settings beside its spaces (its ``settings`` schema, read from its YAML block),
    checked: one line naming the bad value. A checked block hands back the settings its check
    read (no second parse); the run's checks refuse a key that is neither a setting nor a space
    before any work (:func:`seq2final.config.checks.check_mode_configs`)."""
    if isinstance(config, ModeBlock) and isinstance(config.settings, model):
        return config.settings
    values = {key: config[key] for key in model.model_fields if key in config}
    try:
        return model.model_validate(values)
    except ValidationError as error:
        raise Seq2FinalError(one_line(error, model, _where(config, where))) from None
