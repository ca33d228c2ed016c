"""SFT's learning-rate schedules: the rate each step gets, and which schedules a budget runs.

The paper tries six schedules (none, two linear, three exponential) and reports the best; every
schedule starts from the same step-0 model, and the chosen one is picked on the final step's
validation accuracy (docs/methods.md), never on test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import StrictModel
from seq2final.methods.blocks import settings_of, space_of
from seq2final.training.search import SearchSpace

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


class ScheduleSettings(StrictModel):
    """A chain's learning-rate schedules beside its search space (the paper's SFT): each by name,
    and which of them each budget runs (all, where a budget is not listed)."""

    schedules: dict[str, dict[str, Any]] = Field(default_factory=lambda: {"none": {"kind": "none"}})
    budget_schedules: dict[str, list[str]] = Field(default_factory=dict)


def check_schedules(config: Mapping[str, Any], final_step: int, budget: str, where: str) -> None:
    """The budget's schedules are well formed and keep a positive rate up to the final step."""
    if "schedules" not in config:
        return
    selected = selected_schedules(config, budget, where)
    if not selected:
        raise Seq2FinalError(f"{where}.budget_schedules.{budget} lists no schedule")
    for name, schedule in selected.items():
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


def selected_schedules(
    config: Mapping[str, Any], budget_name: str, where: str
) -> dict[str, Mapping[str, Any]]:
    """The schedules a budget runs: ``budget_schedules[budget]`` or, if not listed, all of them."""
    settings = settings_of(ScheduleSettings, config, where)
    schedules = settings.schedules
    names = settings.budget_schedules.get(budget_name, list(schedules))
    unknown = [n for n in names if n not in schedules]
    if unknown:
        raise Seq2FinalError(
            f"budget '{budget_name}' names unknown schedule(s) {', '.join(unknown)}; "
            f"valid: {', '.join(schedules)}"
        )
    return {name: schedules[name] for name in names}


def step_space(
    config: Mapping[str, Any], schedule: Mapping[str, Any], step: int, where: str
) -> SearchSpace:
    """The mode's space at ``step``: its learning rate fixed by the schedule, if it sets one."""
    space = space_of(config, "space", where)
    lr = schedule_lr(schedule, step)
    return space if lr is None else space.fix({"lr": lr})
