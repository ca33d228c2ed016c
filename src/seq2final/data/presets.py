"""Named sequences: the paper's presets and small versions of them for the embedded default."""

from __future__ import annotations

from dataclasses import dataclass

from seq2final.core.registry import Registry


@dataclass(frozen=True)
class SequencePreset:
    """A named sequence of the paper (or a small version of one for the default run)."""

    dataset: str
    spec: str
    description: str
    test_size: int | None = None
    oracle_size: int | None = None
    seed: int = 1007
    split_step: int | None = None  # the temporal protocols' split step unless one is given
    window: int | None = None  # eval_stream's window unless one is given


PRESETS: Registry[SequencePreset] = Registry("sequence preset")
NATURAL = "natural"  # the spec of a source that is a sequence by itself


def _paper(spec: str, description: str, dataset: str = "cifar10") -> SequencePreset:
    return SequencePreset(dataset, spec, description, test_size=5000, oracle_size=20000)


for _name, _preset in {
    "clr": _paper("source6000:corruption4000:label_flip6000:rotation4000", "corruption, label flip, rotation"),
    "rcl": _paper("source6000:rotation4000:corruption6000:label_flip4000", "rotation, corruption, label flip"),
    "rrr": _paper("source6000:rotation_cond4000:rotation_cond6000:rotation_cond4000", "conditional rotation x3"),
    "ttt": _paper("source6000:recolor4000:recolor6000:recolor4000", "red tinting x3"),
    "sss": _paper("source6000:subpop4000:subpop6000:subpop4000", "sub-population shift x3", "cifar100"),
    "rot2": _paper("source16000:rotation4000", "rotation length study, 2 steps"),
    "rot3": _paper("source10000:rotation6000:rotation4000", "rotation length study, 3 steps"),
    "rot4": _paper("source6000:rotation4000:rotation6000:rotation4000", "rotation length study, 4 steps"),
    "rot5": _paper("source4000" + ":rotation4000" * 4, "rotation length study, 5 steps"),
    "rot6": _paper("source4000" + ":rotation3000" * 4 + ":rotation4000", "rotation length study, 6 steps"),
    "rot7": _paper("source4000:rotation2000:rotation3000:rotation2000:rotation3000:rotation2000:rotation4000", "rotation length study, 7 steps"),
    "rot8": _paper("source4000" + ":rotation2000" * 6 + ":rotation4000", "rotation length study, 8 steps"),
    "portraits": SequencePreset("portraits", NATURAL, "yearbook portraits by decade, 1930s to 2000s"),
    # Wild-Time's Yearbook: years 1930..2013 as steps 0..83, Eval-Fix trains on 1930-1970 (0..40),
    # Eval-Stream tests each year's model on the next K = 10 years
    "yearbook": SequencePreset("portraits_1y", NATURAL, "Wild-Time's Yearbook: portraits by year, 1930 to 2013", split_step=40, window=10),
    "digits_clr": SequencePreset("digits", "corruption:label_flip:rotation", "small CLR on digits"),
    "digits_rcl": SequencePreset("digits", "rotation:corruption:label_flip", "small RCL on digits"),
    "digits_rrr": SequencePreset("digits", "rotation_cond:rotation_cond:rotation_cond", "small rrr on digits"),
    "digits_ttt": SequencePreset("digits", "recolor:recolor:recolor", "small TTT on digits"),
    "digits_sss": SequencePreset("digits", "subpop:subpop:subpop", "small sss on digits (even/odd)"),
}.items():  # fmt: skip
    PRESETS.add(_name, _preset)
