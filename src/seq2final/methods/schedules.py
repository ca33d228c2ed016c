"""SFT's learning-rate schedules: the rate each step gets, and which schedules a budget runs.

The paper tries six schedules (none, two linear, three exponential) and reports the best; every
schedule starts from the same step-0 model, and the chosen one is picked on the final step's
validation accuracy (docs/methods.md), never on test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import StrictModel
from seq2final.methods.blocks import settings_of, space_of
from seq2final.training.search import SearchSpace


class NoSchedule(StrictModel):
    """The learning rate tuned at every step, as any other fit's."""

    kind: Literal["none"]


class LinearSchedule(StrictModel):
    """``start − t · decrement`` at step t."""

    kind: Literal["linear"]
    start: float = Field(gt=0)
    decrement: float


class ExponentialSchedule(StrictModel):
    """``start · factor^t`` at step t."""

    kind: Literal["exponential"]
    start: float = Field(gt=0)
    factor: float = Field(gt=0)


Schedule = Annotated[NoSchedule | LinearSchedule | ExponentialSchedule, Field(discriminator="kind")]
"""One SFT schedule, told apart by its ``kind``: a key another kind has (or none has) is
refused by name, as in every other block."""


def schedule_lr(schedule: Schedule, step: int) -> float | None:
    """The learning rate an SFT schedule gives step ``step`` (``None``: tuned per step)."""
    if isinstance(schedule, LinearSchedule):
        return schedule.start - step * schedule.decrement
    if isinstance(schedule, ExponentialSchedule):
        return schedule.start * schedule.factor**step
    return None


_TUNED: dict[str, Schedule] = {"none": NoSchedule(kind="none")}


class ScheduleSettings(StrictModel):
    """A chain's learning-rate schedules beside its search space (the paper's SFT): each by name,
    every one checked whether a budget runs it or not, and which of them each budget runs (all,
    where a budget is not listed)."""

    schedules: dict[str, Schedule] = Field(default_factory=lambda: dict(_TUNED))
    budget_schedules: dict[str, list[str]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_names(self) -> ScheduleSettings:
        for budget, names in self.budget_schedules.items():
            unknown = [name for name in names if name not in self.schedules]
            if unknown:
                raise ValueError(
                    f"budget '{budget}' names unknown schedule(s) {', '.join(unknown)}; "
                    f"valid: {', '.join(self.schedules)}"
                )
            if not names:
                raise ValueError(f"budget '{budget}' lists no schedule")
        return self


def check_schedules(config: Mapping[str, Any], final_step: int, budget: str, where: str) -> None:
    """The budget's schedules keep a positive rate up to the final step (their form, and every
    declared one's, is checked with the block's settings)."""
    if "schedules" not in config:
        return
    for name, schedule in selected_schedules(config, budget, where).items():
        for step in range(1, final_step + 1):
            lr = schedule_lr(schedule, step)
            if lr is not None and lr <= 0:
                raise Seq2FinalError(
                    f"{where}.schedules.{name} reaches learning rate {lr:.3g} at step {step}; "
                    "it must stay positive up to the final step"
                )


def selected_schedules(
    config: Mapping[str, Any], budget_name: str, where: str | None = None
) -> dict[str, Schedule]:
    """The schedules a budget runs: ``budget_schedules[budget]`` or, if not listed, all of them."""
    settings = settings_of(ScheduleSettings, config, where)
    names = settings.budget_schedules.get(budget_name, list(settings.schedules))
    return {name: settings.schedules[name] for name in names}


def step_space(
    config: Mapping[str, Any], schedule: Schedule, step: int, where: str | None = None
) -> SearchSpace:
    """The mode's space at ``step``: its learning rate fixed by the schedule, if it sets one."""
    space = space_of(config, "space", where)
    lr = schedule_lr(schedule, step)
    return space if lr is None else space.fix({"lr": lr})
