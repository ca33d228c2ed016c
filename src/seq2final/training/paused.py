"""A fit paused to a file and continued in another process (synchronous halving,
:mod:`seq2final.training.halving`): what the single fit (:class:`~seq2final.training.loop.FitRun`)
and the fused stack (:class:`~seq2final.training.fused.FusedRun`) keep of the global random
state while they wait, and how a paused file is read back and checked."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import torch

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import stored_problem

P = TypeVar("P")  # what a paused file holds (load_paused)
PAUSED_LAYOUT = 2
"""The layout of a paused fit's or stack's file (2: each model's epochs in an ``EpochLog``): a
file of another layout is refused by :func:`load_paused`, not run into a missing attribute."""


def global_rng(device: torch.device) -> list[torch.Tensor]:
    """The global random states a paused fit keeps (the CPU's, and the device's on CUDA):
    another fit may draw from them while it waits."""
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


def restore_global_rng(states: list[torch.Tensor], device: torch.device) -> None:
    """Put back what :func:`global_rng` kept, as a paused fit goes on."""
    torch.set_rng_state(states[0])
    if len(states) > 1:
        torch.cuda.set_rng_state(states[1], device)


def load_paused(path: Path, kind: type[P], what: str, restart: str) -> P:
    """The paused ``what`` (fit, stack) of type ``kind`` pickled at ``path``; a damaged or
    foreign file is one line saying to delete it to restart ``restart``. Loads a pickle: only
    for files this project wrote (a tuner's own checkpoints)."""
    try:
        paused = torch.load(path, map_location=None, weights_only=False)
    except Exception as error:  # damaged, or written by another version of the class
        first = stored_problem(error)[:120]
        raise Seq2FinalError(
            f"paused {what} {path} is unreadable ({first}); delete it to restart {restart}"
        ) from None
    if not isinstance(paused, kind):
        raise Seq2FinalError(f"{path} holds no paused {what}; delete it to restart {restart}")
    if vars(paused).get("layout") != PAUSED_LAYOUT:
        raise Seq2FinalError(
            f"paused {what} {path} was written by an earlier release of seq2final; delete it to "
            f"restart {restart}"
        )
    return paused
