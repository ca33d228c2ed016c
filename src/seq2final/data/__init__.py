"""Data: where pixels come from (sources), how they shift (effects advanced by shift blocks), how
a sequence is specified, drawn and stored, and how far its steps lie apart.

A plugin adding a dataset or a shift needs only the names exported here.
"""

from seq2final.data.effects import EFFECTS, ShiftState, Weights, effect
from seq2final.data.shifts import SHIFTS, Dial, shift_block
from seq2final.data.sizes import PAPER_SIZES, DefaultSizes
from seq2final.data.sources import SOURCES, SourceData, check_arrays, source

__all__ = [
    "EFFECTS", "PAPER_SIZES", "SHIFTS", "SOURCES", "DefaultSizes", "Dial", "ShiftState", "SourceData",
    "Weights", "check_arrays", "effect", "shift_block", "source",
]  # fmt: skip
