"""Search spaces and budgets: what a fit's tuning may try, and how much of it.

A *search space* names each hyper-parameter with the paper's ``grid`` and, for other samplers, a
``low``-``high`` range, in the paper's nesting order. A *budget* names how to search: a sampler
(the grid, TPE, random), how many trials and epochs, and a pruner: Optuna's (median, its
asynchronous successive halving, Hyperband) or ``halving``, synchronous successive halving over
the grid (:mod:`~seq2final.training.halving`). ``conf/base/parameters.yml`` lists the shipped
budgets (docs/methods.md, "Tuning"); users add budgets in YAML.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from pydantic import Field, ValidationError, model_validator

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import StrictModel, one_line

SAMPLERS = ("grid", "tpe", "random")
PRUNERS = ("none", "median", "successive_halving", "hyperband", "halving")
RUNG_PRUNERS = ("successive_halving", "hyperband", "halving")
RUNG_FIELDS = ("min_epochs", "reduction_factor")


class ParamSpec(StrictModel):
    """One searched value: the paper's ``grid`` and, for other samplers, a ``low``-``high`` range.

    Without a range, non-grid samplers choose among the grid values. A grid of one value with no
    range fixes the value.
    """

    grid: tuple[float, ...] = Field(min_length=1)
    low: float | None = None
    high: float | None = None
    log: bool = False

    @model_validator(mode="after")
    def _range(self) -> ParamSpec:
        if (self.low is None) != (self.high is None):
            raise ValueError("give both low and high, or neither")
        if self.low is not None and self.high is not None:
            if self.low > self.high:
                raise ValueError(f"low {self.low} > high {self.high}")
            if self.log and self.low <= 0:
                raise ValueError(f"a log range needs low > 0, got {self.low}")
        return self

    @property
    def fixed(self) -> bool:
        return len(self.grid) == 1 and self.low is None


class Budget(StrictModel):
    """How much search a fit gets."""

    sampler: str = "tpe"
    trials: int | None = Field(default=None, ge=1)
    max_epochs: int = Field(ge=1)
    pruner: str = "none"
    startup_trials: int = Field(default=2, ge=0)
    warmup_epochs: int = Field(default=2, ge=0)  # median: epochs before a trial can be pruned
    min_epochs: int = Field(default=1, ge=1)  # successive halving, hyperband: the first rung
    reduction_factor: int = Field(default=3, ge=2)  # ... and 1/this of the trials go on per rung
    # halving: the best configuration of each value of this hyper-parameter passes the first rung
    keep_each: str | None = None
    # halving: the configuration that won the fit's previous step goes on at every rung
    keep_known: bool = False

    @model_validator(mode="after")
    def _choices(self) -> Budget:
        if self.sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler '{self.sampler}'; valid: {', '.join(SAMPLERS)}")
        if self.pruner not in PRUNERS:
            raise ValueError(f"unknown pruner '{self.pruner}'; valid: {', '.join(PRUNERS)}")
        if self.sampler != "grid" and self.trials is None:
            raise ValueError(f"sampler '{self.sampler}' needs a number of trials")
        if self.min_epochs > self.max_epochs:
            raise ValueError(f"min_epochs {self.min_epochs} > max_epochs {self.max_epochs}")
        if self.pruner == "halving" and self.sampler != "grid":
            raise ValueError(f"pruner 'halving' halves the grid; valid sampler: grid, not "
                             f"'{self.sampler}'")  # fmt: skip
        if self.keep_each is not None and self.pruner != "halving":
            raise ValueError(f"keep_each guards the first rung of pruner 'halving', not "
                             f"'{self.pruner}'")  # fmt: skip
        if self.keep_known and self.pruner != "halving":
            raise ValueError(f"keep_known keeps a known winner through the rungs of pruner "
                             f"'halving', not '{self.pruner}'")  # fmt: skip
        return self

    def results_key(self) -> dict[str, Any]:
        """What result keys cover: every field, except the rung settings of the pruners that
        have rungs when this budget's pruner has none (they change nothing it computes, and
        finished work stays valid when such options are added)."""
        values = self.model_dump()
        if self.pruner not in RUNG_PRUNERS:
            for name in RUNG_FIELDS:
                values.pop(name)
        if self.pruner != "halving":  # keys made before halving existed stay valid
            values.pop("keep_each")
        if not self.keep_known:  # ... and before keep_known did
            values.pop("keep_known")
        return values

    def pruner_of(self) -> optuna.pruners.BasePruner:
        """The Optuna pruner this budget names, judging per-epoch validation accuracy."""
        if self.pruner == "median":
            return optuna.pruners.MedianPruner(
                n_startup_trials=self.startup_trials, n_warmup_steps=self.warmup_epochs
            )
        if self.pruner == "successive_halving":
            return optuna.pruners.SuccessiveHalvingPruner(
                min_resource=self.min_epochs, reduction_factor=self.reduction_factor
            )
        if self.pruner == "hyperband":
            return optuna.pruners.HyperbandPruner(
                min_resource=self.min_epochs,
                max_resource=self.max_epochs,
                reduction_factor=self.reduction_factor,
            )
        return optuna.pruners.NopPruner()  # halving decides its rungs itself (tuner.py)


def parse_budgets(raw: Mapping[str, Any]) -> dict[str, Budget]:
    """Budgets from the ``budgets`` parameter block; a bad entry is named in one line."""
    budgets = {}
    for name, values in raw.items():
        try:
            budgets[name] = Budget.model_validate(values)
        except ValidationError as error:
            raise Seq2FinalError(one_line(error, Budget, f"budget '{name}'")) from None
    return budgets


def get_budget(raw: Mapping[str, Any], name: str) -> Budget:
    budgets = parse_budgets(raw)
    if name not in budgets:
        raise Seq2FinalError(f"unknown budget '{name}'; valid: {', '.join(budgets)}")
    return budgets[name]


@dataclass(frozen=True)
class SearchSpace:
    """Named parameters in the paper's nesting order (first listed = outermost loop)."""

    params: dict[str, ParamSpec]

    @classmethod
    def parse(cls, raw: Mapping[str, Any], where: str) -> SearchSpace:
        params = {}
        for name, values in raw.items():
            try:
                params[name] = ParamSpec.model_validate(values)
            except ValidationError as error:
                raise Seq2FinalError(
                    one_line(error, ParamSpec, f"search space {where}.{name}")
                ) from None
        return cls(params)

    def grid_size(self) -> int:
        return math.prod(len(spec.grid) for spec in self.params.values())

    def grid_points(self) -> list[dict[str, float]]:
        names = list(self.params)
        return [
            dict(zip(names, values, strict=True))
            for values in itertools.product(*(self.params[n].grid for n in names))
        ]

    def fix(self, values: Mapping[str, float]) -> SearchSpace:
        """The same space with some parameters fixed (an SFT schedule fixes the learning rate)."""
        params = dict(self.params)
        for name, value in values.items():
            params[name] = ParamSpec(grid=(float(value),))
        return SearchSpace(params)

    def suggest(self, trial: optuna.Trial) -> dict[str, float]:
        values = {}
        for name, spec in self.params.items():
            if spec.fixed:
                values[name] = spec.grid[0]
            elif spec.low is not None and spec.high is not None:
                values[name] = trial.suggest_float(name, spec.low, spec.high, log=spec.log)
            else:
                values[name] = trial.suggest_categorical(name, list(spec.grid))
        return values

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        """The grid's values of each parameter as Optuna records a grid point's trial."""
        return {
            name: optuna.distributions.CategoricalDistribution(list(spec.grid))
            for name, spec in self.params.items()
        }

    def describe(self) -> dict[str, Any]:
        return {name: spec.model_dump() for name, spec in self.params.items()}
