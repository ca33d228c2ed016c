"""Interpolation paths: test accuracy along the line from where a final fit started to its end.

Paper §4.1 and Appendix G. Everything here works on a finished job's *path*: the model its final
fit started from (``s = 0``) and the model it ended with (``s = 1``), both evaluated on the final
step's test set:

* fine-tuning-style jobs (FT, LP-FT, I-FT, D-FT, SFT, EWC) start from the historical chain they
  continued (SFT: the chosen schedule) and move every weight;
* side-tuning and joint jobs end with a joint model; their path scales the modules new at the final
  step (:func:`~seq2final.models.scale_side_modules`), so ``s = 0`` is exactly step T−1's model;
* jobs trained from scratch (baseline, ERM, IRM, DRO, oracle) have no path.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
from torch import nn

from seq2final.methods import HistoricalState
from seq2final.models import JointModel, interpolate, scale_side_modules
from seq2final.training.engine import Engine, accuracy
from seq2final.training.records import ResultRecord
from seq2final.training.tensors import TensorSplit


@dataclass
class PathEnds:
    """A job's path: where its final fit started, where it ended, and the step both run at."""

    start: nn.Module
    end: nn.Module
    step: int | None
    scaled_side_modules: bool

    def at(self, s: float) -> nn.Module:
        """The model a fraction ``s`` of the way along the path."""
        if self.scaled_side_modules:
            assert self.step is not None and isinstance(self.end, JointModel)
            return scale_side_modules(self.end, self.step, s)
        return interpolate(self.start, self.end, s)


def path_ends(
    record: ResultRecord, model: nn.Module, state: HistoricalState | None
) -> PathEnds | None:
    """The path of a finished job (see the module's docstring), or ``None`` for scratch jobs."""
    step = record.eval_step
    if isinstance(model, JointModel):
        if step is None or step < 1:
            return None
        return PathEnds(scale_side_modules(model, step, 0.0), model, step, True)
    if state is None:
        return None
    chain = state.chains[record.chosen.name]
    return PathEnds(chain.last, model, None, False)


def path_key(record: ResultRecord, points: int) -> str:
    """Where a job's path sampled at ``points`` points is stored. The digest of the result record
    changes when the job is retrained (``force:true``), so a stale path is never reused; the
    record's layout version is left out, so a path outlives a change of layout."""
    fields = {k: v for k, v in record.to_json().items() if k != "format"}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return f"{record.job_key}.p{points}.{digest[:8]}"


def interpolation_path(
    ends: PathEnds, data: TensorSplit, engine: Engine, points: int
) -> pd.DataFrame:
    """Test accuracy at ``points`` evenly spaced ``s`` from 0 to 1 (paper §4.1 uses 101)."""
    weights = np.linspace(0.0, 1.0, points)
    return pd.DataFrame(
        {
            "s": weights,
            "test_accuracy": [
                accuracy(ends.at(float(s)), data, engine, ends.step) for s in weights
            ],
        }
    )
