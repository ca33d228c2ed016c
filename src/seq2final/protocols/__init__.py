"""Protocols: the questions asked of a sequence (the paper's final step, Wild-Time's and NED's
streams), each posed as Seq-to-Final problems on views of the sequence."""

from seq2final.protocols import builtin  # noqa: F401  (registers the built-in protocols)
from seq2final.protocols.protocol import (
    FIRST_MODEL,
    PROTOCOLS,
    STEP_SPLITS,
    WILD_TIME_TRAIN_FRACTION,
    Protocol,
    ProtocolOptions,
    StepAccuracies,
    View,
    check_warm_start,
    chosen_views,
    options_for,
    prefix,
    protocol,
    runnable,
    sequence_options,
    split_step,
    stream_times,
)

__all__ = [
    "FIRST_MODEL",
    "PROTOCOLS",
    "STEP_SPLITS",
    "WILD_TIME_TRAIN_FRACTION",
    "check_warm_start",
    "chosen_views",
    "options_for",
    "Protocol",
    "ProtocolOptions",
    "StepAccuracies",
    "View",
    "prefix",
    "protocol",
    "runnable",
    "sequence_options",
    "split_step",
    "stream_times",
]
