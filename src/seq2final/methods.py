"""The benchmark's methods as recipes: a historical mode followed by a final mode.

Every method of the paper is a way to use the historical steps 0..T−1 (the *historical mode*:
train nothing, one model on all of them, or a chain of per-step models) followed by a way to fit
the final step (the *final mode*). Keeping the two apart is what lets users combine any historical
mode with any final mode (``--params historical:irm,final:lp_ft``). The registry here names the
recipes and the modes so run parameters can be checked before any work; the training code that
carries them out attaches to these names.
"""

from __future__ import annotations

from dataclasses import dataclass

from seq2final.registry import Registry

HISTORICAL_MODES: Registry[str] = Registry("historical mode")
FINAL_MODES: Registry[str] = Registry("final mode")

for _registry, _modes in (
    (
        HISTORICAL_MODES,
        {
            "none": "no historical state: the final mode sees every step itself, or only the final step",
            "erm": "one ERM model on steps 0..T−1 combined",
            "irm": "one IRM model on steps 0..T−1, one environment per step",
            "dro": "one worst-domain DRO model on steps 0..T−1",
            "sequential": "a chain of models, each fine-tuned from the previous on its step (SFT)",
            "sequential_ewc": "a sequential chain with EWC towards every earlier step (EWC)",
            "sequential_side_1": "a chain of 1-layer side modules, one per step (SST-1)",
            "sequential_side_b": "a chain of block side modules, one per step (SST-B)",
        },
    ),
    (
        FINAL_MODES,
        {
            "scratch": "train from scratch on the final step only",
            "scratch_oracle": "train from scratch on the final step at oracle size",
            "all_erm": "ERM on all steps 0..T combined",
            "all_irm": "IRM on all steps 0..T",
            "all_dro": "DRO on all steps 0..T",
            "ft": "fine-tune every layer on the final step",
            "lp_ft": "fit the head on the final step, then fine-tune every layer",
            "side_1": "freeze the historical model, add 1-layer side modules with a new stem and head",
            "side_b": "freeze the historical model, add block side modules with a new stem and head",
            "joint": "one joint model over all steps with separate modules per step (JM)",
            "joint_side_1": "one joint model over all steps with 1-layer side modules (JST-1)",
            "joint_side_b": "one joint model over all steps with block side modules (JST-B)",
        },
    ),
):
    for _mode, _description in _modes.items():
        _registry.add(_mode, _description)


@dataclass(frozen=True)
class MethodRecipe:
    """A paper method: its historical mode, its final mode and the paper's column name."""

    historical: str
    final: str
    paper_name: str


METHODS: Registry[MethodRecipe] = Registry("method")

for _name, _recipe in {
    "oracle": MethodRecipe("none", "scratch_oracle", "Oracle"),
    "baseline": MethodRecipe("none", "scratch", "Baseline"),
    "erm": MethodRecipe("none", "all_erm", "ERM"),
    "irm": MethodRecipe("none", "all_irm", "IRM"),
    "dro": MethodRecipe("none", "all_dro", "DRO"),
    "ft": MethodRecipe("erm", "ft", "FT"),
    "lp_ft": MethodRecipe("erm", "lp_ft", "LP-FT"),
    "i_ft": MethodRecipe("irm", "ft", "I-FT"),
    "d_ft": MethodRecipe("dro", "ft", "D-FT"),
    "st_1": MethodRecipe("erm", "side_1", "ST-1"),
    "st_b": MethodRecipe("erm", "side_b", "ST-B"),
    "sft": MethodRecipe("sequential", "ft", "SFT"),
    "ewc": MethodRecipe("sequential_ewc", "ft", "EWC"),
    "sst_1": MethodRecipe("sequential_side_1", "side_1", "SST-1"),
    "sst_b": MethodRecipe("sequential_side_b", "side_b", "SST-B"),
    "jm": MethodRecipe("none", "joint", "JM"),
    "jst_1": MethodRecipe("none", "joint_side_1", "JST-1"),
    "jst_b": MethodRecipe("none", "joint_side_b", "JST-B"),
}.items():
    METHODS.add(_name, _recipe)
