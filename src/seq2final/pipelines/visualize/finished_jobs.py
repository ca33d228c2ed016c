"""What the visualize nodes read of finished jobs: their models, historical states, test data
and engines, each loaded once per node."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from torch import nn

from seq2final.methods import HistoricalState
from seq2final.models import JointModel, network_of
from seq2final.training.records import ResultRecord
from seq2final.training.tensors import TensorSplit

log = logging.getLogger(__name__)


class JobModels:
    """Loads a job's final model, historical state and final-step test data once each."""

    def __init__(self, results: Any, states: Mapping[str, HistoricalState], sequences: Any) -> None:
        self.results, self.states, self.sequences = results, states, sequences
        self._finals: dict[str, nn.Module] = {}
        self._states: dict[str, HistoricalState | None] = {}

    def final(self, record: ResultRecord) -> nn.Module:
        """The job's adapted model, as stored: the architecture's model, without an output
        transform (which moves no weight these figures draw)."""
        key = record.job_key
        if key not in self._finals:
            self._finals[key] = network_of(self.results.model(key))
        return self._finals[key]

    def state(self, record: ResultRecord) -> HistoricalState | None:
        """The historical state the job continued; ``None`` for none, or one no longer stored
        (warned once)."""
        key = record.historical_state
        if key is None:
            return None
        if key not in self._states:
            found = key in self.states
            if not found:
                log.warning("historical state %s of job %s is missing", key, record.job_key)
            self._states[key] = self.states[key] if found else None
        return self._states[key]

    def missing_state(self, record: ResultRecord) -> bool:
        """The job continued a historical state that is not stored (any more)."""
        return record.historical_state is not None and self.state(record) is None

    def test_data(self, record: ResultRecord, limit: int | None = None) -> TensorSplit | None:
        """The first ``limit`` test images of the job's final step; ``None`` where its sequence
        is not built (warned)."""
        key = record.sequence_key
        if key not in self.sequences:
            log.warning("sequence %s is not built; skipping job %s", key, record.job_key)
            return None
        x, y = self.sequences[key].step(-1).split("test")
        return TensorSplit.from_arrays(x[:limit], y[:limit])

    def trajectory(self, record: ResultRecord) -> list[tuple[nn.Module, int | None]]:
        """The job's models over time, each with the step it runs at, ending with its final model.

        Chains give their models at steps 0..T−1; a joint model trained at once is read at each
        of its steps; scratch jobs are a single point.
        """
        final, state = self.final(record), self.state(record)
        points: list[tuple[nn.Module, int | None]] = []
        if state is not None:
            chain = state.chains[record.chosen.name]
            points = [
                (m, m.num_steps - 1 if isinstance(m, JointModel) else None) for m in chain.models
            ]
        elif isinstance(final, JointModel) and record.eval_step:
            points = [(final, t) for t in range(record.eval_step)]
        return [*points, (final, record.eval_step)]
