"""Data: where pixels come from (sources), how they shift (effects advanced by shift blocks), how
a sequence is specified, drawn and stored, and how far its steps lie apart.

A plugin adding a dataset or a shift needs only the names exported here (and one testing its
own mode on a small sequence: ``resolve_spec``, ``load_source``, ``build_sequence``).
"""

from seq2final.data.effects import EFFECTS, ShiftState, Weights, effect
from seq2final.data.sampler import build_sequence
from seq2final.data.shifts import SHIFTS, Dial, shift_block
from seq2final.data.sizes import PAPER_SIZES, DefaultSizes
from seq2final.data.sources import SOURCES, SourceData, check_arrays, load_source, source
from seq2final.data.spec import resolve_spec

__all__ = [
    "EFFECTS", "PAPER_SIZES", "SHIFTS", "SOURCES", "DefaultSizes", "Dial", "ShiftState", "SourceData",
    "Weights", "build_sequence", "check_arrays", "effect", "load_source", "resolve_spec",
    "shift_block", "source",
]  # fmt: skip
