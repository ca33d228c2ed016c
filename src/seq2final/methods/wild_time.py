"""Wild-Time's methods (Yao et al., 2022) as modes: the invariant objectives over time windows,
and mixup and LISA, each on the final step's view of all steps or on the historical steps.

Wild-Time's "-T" variants treat *windows of time* as the domains of CORAL, GroupDRO and IRM.
Its code builds nested windows that all end at the present step and together reach step 0
(``scheme: nested``, the default); its paper describes ``count`` windows of ``length``
consecutive steps, the first ending at the present step and each next one ``1`` step earlier
(overlapping) or ``length`` steps earlier (``scheme: sliding``). ``time_windows`` lists both.
Every mode is registered beside the paper's, so it runs under every protocol and combines with
every final mode that continues a model (``historical:coral_t,final:ft``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from seq2final.core.schema import StrictModel
from seq2final.methods.blocks import settings_of, space_of
from seq2final.methods.context import Context
from seq2final.methods.modes import (
    FinalOutcome,
    FinalRunner,
    HistoricalState,
    HistoricalTrainer,
    ModelChain,
    StepZero,
    final_mode,
    historical_mode,
    method,
)
from seq2final.training.mixing import BatchMixing
from seq2final.training.objectives import Task
from seq2final.training.tensors import TensorSplit


class Windows(StrictModel):
    """A ``-T`` mode's ``windows`` block (Wild-Time's Yearbook setting: ``length`` L = 5, its
    appendix's Table 6 and its Yearbook configs' ``group_size``; nested windows of 6 steps and
    more).

    ``scheme``: ``nested``, the groups Wild-Time's code names and the default (``YearbookGroup``:
    every window ends at the present step, the g-th starting ``length + g`` steps before it, so
    together they reach step 0), or ``sliding``, the paper's description (``count`` windows of
    ``length`` steps; ``count`` and ``overlapping`` are this scheme's alone). ``years``: a
    window holds the images of the steps it names (``named``, the default), or the images
    Wild-Time's loader reads for it (``loaded``, nested windows only: its data is stored newest
    step first while a window's positions are counted oldest step first, so a window of m
    images reads the m oldest ones; docs/fixes.md, "Wild-Time"): the same images as its
    published numbers, each as likely (Wild-Time draws a step first, each step as likely).
    """

    count: int = Field(default=10, ge=1)
    length: int = Field(default=5, ge=1)
    overlapping: bool = True
    scheme: Literal["nested", "sliding"] = "nested"
    years: Literal["named", "loaded"] = "named"

    @model_validator(mode="after")
    def _loaded_is_nested(self) -> Windows:
        """The loader's reading is of Wild-Time's nested groups; a sliding window has none."""
        if self.years == "loaded" and self.scheme != "nested":
            raise ValueError(
                "years 'loaded' reads Wild-Time's nested windows; valid with it: scheme 'nested'"
            )
        return self


def time_windows(present: int, windows: Windows) -> list[tuple[int, ...]]:
    """The steps of each time window at step ``present``, latest first.

    ``sliding``: window g ends at ``present − g·stride`` (stride 1 when overlapping, else
    ``length``) and holds up to ``length`` steps; windows that would start before step 0 are cut
    there, and repeats (once cut, two windows can be the same) are dropped. ``nested``: window g
    (g = 0 .. max(1, present − length + 1) − 1) holds steps ``max(0, present − g − length)`` ..
    ``present``.
    """
    if windows.scheme == "nested":
        groups = max(1, present - windows.length + 1)
        return [
            tuple(range(max(0, present - g - windows.length), present + 1)) for g in range(groups)
        ]
    stride = 1 if windows.overlapping else windows.length
    listed: list[tuple[int, ...]] = []
    for g in range(windows.count):
        end = present - g * stride
        if end < 0:
            break
        window = tuple(range(max(0, end - windows.length + 1), end + 1))
        if window not in listed:
            listed.append(window)
    return listed


def window_splits(steps: Sequence[TensorSplit], windows: Windows) -> list[TensorSplit]:
    """The training images of each time window at the last of ``steps`` (steps 0..present),
    latest window first: the named steps' images, or under ``years: loaded`` as many images as
    those, taken where Wild-Time's loader finds them. Its step-``present`` array is steps
    present, present − 1, .., 0 in that order, and a window's positions are the named steps'
    oldest-first offsets, so they are the array's last m: every image of steps 0, 1, .. and the
    last images of the step that is cut."""
    named = time_windows(len(steps) - 1, windows)
    if windows.years == "named":
        return [TensorSplit.concat([steps[t] for t in window]) for window in named]
    loaded = []
    for window in named:
        left, parts = sum(len(steps[t]) for t in window), []
        for split in steps:
            take = min(left, len(split))
            parts.append(_last(split, take))
            left -= take
            if left == 0:
                break
        loaded.append(TensorSplit.concat(parts))
    return loaded


def _last(split: TensorSplit, count: int) -> TensorSplit:
    """The last ``count`` images of a split, in its order (with their weights, if any)."""
    start = len(split) - count
    weight = None if split.weight is None else split.weight[start:]
    return TensorSplit(split.x[start:], split.y[start:], weight)


def windows_of(config: Mapping[str, Any], where: str | None = None) -> Windows:
    """A ``-T`` mode's windows, read through its settings (one line naming a bad value)."""
    return settings_of(WindowSettings, config, where).windows


IRM_DUMMIES = {"scalar": "irm_v1", "per_class": "irm"}
"""IRM-T's penalty by its dummy multiplier (``irm_dummy``): Wild-Time's scalar IRMv1, averaged
over the windows (``irm_v1``, the default), or the Seq-to-Final paper's original code's
per-class vector, summed over them (the ``irm`` term the paper's IRM keeps)."""


class WindowSettings(StrictModel):
    """A ``-T`` mode's settings beside its search space: the windows its objective's domains are."""

    windows: Windows = Field(default_factory=Windows)


class IrmWindowSettings(WindowSettings):
    """IRM-T's: its windows, and the dummy multiplier of its penalty (``IRM_DUMMIES``)."""

    irm_dummy: Literal["scalar", "per_class"] = "scalar"


class MixSettings(StrictModel):
    """A mixing mode's Beta concentration α (Wild-Time: 2, so λ ~ Beta(2, 2))."""

    mix_alpha: float = Field(default=2.0, gt=0)


def irm_objective(config: Mapping[str, Any], where: str | None = None) -> str:
    """The loss term IRM-T trains with, from its ``irm_dummy`` key (default ``scalar``)."""
    return IRM_DUMMIES[settings_of(IrmWindowSettings, config, where).irm_dummy]


def mix_alpha(config: Mapping[str, Any], where: str | None = None) -> float:
    """A mixing mode's Beta concentration α."""
    return settings_of(MixSettings, config, where).mix_alpha


def _task(
    ctx: Context, config: Mapping[str, Any], kind: str, last: int, valid: TensorSplit
) -> Task:
    """The task of a Wild-Time mode over steps 0..``last``, validated on ``valid``."""
    if kind in ("coral", "irm", "dro"):
        steps = [ctx.split(t, "train") for t in range(last + 1)]
        domains = window_splits(steps, windows_of(config))
        objective = irm_objective(config) if kind == "irm" else kind
        return Task(domains, valid, objective=objective)
    pooled = TensorSplit.concat([ctx.split(t, "train") for t in range(last + 1)])
    return Task([pooled], valid, callbacks=[BatchMixing(kind, mix_alpha(config))])


def _final(kind: str) -> FinalRunner:
    def run(ctx: Context, config: Mapping[str, Any], state: HistoricalState | None) -> FinalOutcome:
        task = _task(ctx, config, kind, ctx.final_index, ctx.split(-1, "valid"))
        space = space_of(config, "space")
        return FinalOutcome(
            ctx.tuned_fit("final", space, lambda: ctx.new_model("final"), task), None
        )

    return run


def _historical(kind: str) -> HistoricalTrainer:
    def train(
        ctx: Context, config: Mapping[str, Any], step0: StepZero | None
    ) -> dict[str, ModelChain]:
        task = _task(ctx, config, kind, ctx.final_index - 1, ctx.history("valid"))
        space = space_of(config, "space")
        model = ctx.tuned_fit(_NAMES[kind], space, lambda: ctx.new_model(_NAMES[kind]), task)
        return {"main": ModelChain([model])}

    return train


_SETTINGS: dict[str, type[StrictModel]] = {
    "coral": WindowSettings, "irm": IrmWindowSettings, "dro": WindowSettings,
    "mixup": MixSettings, "lisa": MixSettings,
}  # fmt: skip
_NAMES = {"coral": "coral_t", "irm": "irm_t", "dro": "dro_t", "mixup": "mixup", "lisa": "lisa"}
_TEXTS = {
    "coral": ("CORAL between time windows", "CORAL-T", "Sun & Saenko 2016; over time, Yao et al. 2022"),
    "irm": ("IRM with time windows as environments", "IRM-T", "Arjovsky et al. 2019; over time, Yao et al. 2022"),
    "dro": ("worst-window DRO over time windows", "GroupDRO-T", "Sagawa et al. 2020; over time, Yao et al. 2022"),
    "mixup": ("ERM on mixup batches", "mixup", "Zhang et al. 2018"),
    "lisa": ("ERM on images mixed with same-label images (LISA, intra-label)", "LISA", "Yao et al. 2022"),
}  # fmt: skip

for _kind, (_text, _column, _citation) in _TEXTS.items():
    _name = _NAMES[_kind]
    _terms = (_kind,) if _kind in ("coral", "irm", "dro") else ()
    historical_mode(_name, f"{_text}, on steps 0..T−1", settings=_SETTINGS[_kind], terms=_terms)(
        _historical(_kind)
    )
    final_mode(
        f"all_{_name}", f"{_text}, on all steps 0..T", ("nothing",), settings=_SETTINGS[_kind],
        terms=_terms, pooled=True,
    )(_final(_kind))  # fmt: skip
    method(_name, "none", f"all_{_name}", _column, None, _citation)
