"""Validated settings: the strict pydantic base and the one-line report of a validation error.

Every block users write (run parameters, budgets, search spaces) is a pydantic model that refuses
unknown keys, and every validation failure reaches the user as one line naming the value and what
is valid, never as pydantic's multi-line report.
"""

from __future__ import annotations

from typing import get_args

from pydantic import BaseModel, ConfigDict, ValidationError

from seq2final.core.errors import Seq2FinalError


class StrictModel(BaseModel):
    """A frozen model that refuses keys it does not declare (a typo is an error, not ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def one_line(error: ValidationError, model: type[BaseModel], what: str = "parameter") -> str:
    """The first problem of ``error`` (raised validating ``model``) as one line.

    An unknown key lists the keys its block accepts; a check that raised a
    :class:`~seq2final.core.errors.Seq2FinalError` keeps that message; anything else names the
    value and pydantic's reason. ``what`` names the kind of thing validated (``parameter``,
    ``budget 'quick'``, ...).
    """
    first = error.errors()[0]
    location = [str(part) for part in first["loc"]]
    where = ".".join(location)
    if first["type"] == "extra_forbidden":
        owner: object = model
        for part in location[:-1]:
            if part.isdigit():  # an item of a list: the list's item type
                owner = next(iter(get_args(owner)), None)
                continue
            fields = getattr(owner, "model_fields", {})
            owner = fields[part].annotation if part in fields else None
        valid = getattr(owner, "model_fields", None)
        if valid is not None and what == "parameter":
            return f"unknown parameter '{where}'; valid: {', '.join(valid)}"
        if valid is not None:
            return f"{what}: unknown key '{where}'; valid: {', '.join(valid)}"
    cause = first.get("ctx", {}).get("error")
    message = str(cause) if isinstance(cause, Seq2FinalError) else first["msg"]
    message = message.removeprefix("Value error, ")
    if not where:
        return f"{what}: {message}"
    if isinstance(cause, Seq2FinalError) or first["type"] == "missing":
        return f"{what} '{where}': {message}"
    return f"{what} '{where}' = {first['input']!r}: {message}"


def stored_problem(error: Exception) -> str:
    """What is wrong with a file a store wrote, in a few words for a one-line error: a
    validation error's first problem (the field and why), else the error's first line."""
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        return f"'{where}': {first['msg']}"
    return (str(error).splitlines() or [type(error).__name__])[0]
