"""Families: one sequence spec over a list of intensities (docs/intensity.md).

A family writes ``@*`` where a block's intensity goes and lists the intensities beside it::

    sequence: source600:rotation@*/300:rotation@*/300
    intensities: [0, 10, 20, 30, 40]

Each member is the spec with every ``@*`` replaced by one intensity, an ordinary sequence with
its own key; ``kedro run`` and ``kedro sweep`` train the members one by one, and the
``robustness`` pipeline reads them together.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from seq2final.core.errors import Seq2FinalError
from seq2final.data.shifts import SHIFTS, intensity_text

PLACEHOLDER = "@*"


@dataclass(frozen=True)
class Member:
    """One sequence of a family: its intensity and its spec string."""

    intensity: float
    sequence: str


def is_family(sequence: str, intensities: Sequence[float] | None) -> bool:
    """Whether the parameters ask for a family (both halves are checked by :func:`members`)."""
    return PLACEHOLDER in sequence or intensities is not None


def members(sequence: str, intensities: Sequence[float] | None) -> tuple[Member, ...]:
    """The family's members in the order given; one line for a family that is half written (a
    placeholder without intensities or intensities without a placeholder), empty or repeating
    an intensity. Each member's spec is checked where it is resolved."""
    if PLACEHOLDER not in sequence:
        raise Seq2FinalError(
            f"intensities {list(intensities or [])} but sequence '{sequence}' has no '@*' to put "
            "them in; valid: a spec with '@*' where the intensity goes, e.g. "
            "'source600:rotation@*/300'"
        )
    if intensities is None:
        raise Seq2FinalError(
            f"sequence '{sequence}' is a family ('@*') without intensities; valid: "
            "intensities: [0, 10, 20] beside it"
        )
    if not intensities:
        raise Seq2FinalError(
            f"sequence '{sequence}': an empty family (intensities: []); valid: one or more "
            "intensities"
        )
    written = [intensity_text(value) for value in intensities]
    repeated = sorted({text for text in written if written.count(text) > 1})
    if repeated:
        raise Seq2FinalError(
            f"intensities {list(intensities)} repeat {', '.join(repeated)}; valid: each "
            "intensity once"
        )
    return tuple(Member(float(text), sequence.replace(PLACEHOLDER, f"@{text}")) for text in written)


def expand_sequences(
    sequences: Sequence[str], intensities: Sequence[float] | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A sweep's sequences with each family replaced by its members, and the families: a list
    may mix families and single sequences, and ``intensities`` apply to every family in it."""
    families = tuple(s for s in sequences if PLACEHOLDER in s)
    if intensities is not None and not families:
        members(sequences[0], intensities)  # intensities with nothing to put them in: refused
    expanded: list[str] = []
    for sequence in sequences:
        if PLACEHOLDER in sequence:
            expanded += [m.sequence for m in members(sequence, intensities)]
        else:
            expanded.append(sequence)
    return tuple(dict.fromkeys(expanded)), families


def intensity_label(sequence: str) -> str:
    """A family's intensity as a figure's axis names it: the block its ``@*`` dials and that
    block's unit, e.g. ``"rotation@*: degrees per step"``; "intensity" where the block is not
    a registered one."""
    units = []
    for name in dict.fromkeys(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)@\*", sequence)):
        dial = SHIFTS[name].dial if name in SHIFTS else None
        if dial is not None:
            units.append(f"{name}@*: {dial.unit}")
    return "; ".join(units) or "intensity"
