"""A built sequence: its manifest and its steps' arrays, held in memory or loaded lazily."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seq2final.core.errors import Seq2FinalError
from seq2final.data.effects import ShiftState
from seq2final.data.sources import SourceData
from seq2final.data.spec import SequenceSpec


@dataclass
class Step:
    """One time step's arrays (``x_<split>``, ``y_<split>``, ``idx_<split>``, ``sub_<split>``)."""

    name: str
    arrays: dict[str, np.ndarray]

    def split(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """Images (N×3×H×W uint8) and labels of ``split`` (train, valid or test)."""
        if f"x_{split}" not in self.arrays:
            raise Seq2FinalError(f"step '{self.name}' has no {split} split; valid: {self.splits}")
        return self.arrays[f"x_{split}"], self.arrays[f"y_{split}"]

    @property
    def splits(self) -> list[str]:
        return [key[2:] for key in self.arrays if key.startswith("x_")]

    def content_hash(self) -> str:
        digest = hashlib.sha256()
        for key in sorted(self.arrays):
            array = np.ascontiguousarray(self.arrays[key])
            digest.update(f"{key}{array.dtype}{array.shape}".encode())
            digest.update(array.tobytes())
        return digest.hexdigest()


@dataclass
class ShiftSequence:
    """A built sequence: a manifest plus steps, held in memory or loaded lazily from a store.

    Later pipelines usually need one step at a time (the final step, or step t of a chain), so a
    stored sequence loads a step only when :meth:`step` asks for it.
    """

    manifest: dict[str, Any]
    _steps: dict[str, Step] = field(default_factory=dict)
    _loader: Callable[[str], Step] | None = None

    @classmethod
    def from_steps(
        cls,
        spec: SequenceSpec,
        source: SourceData,
        steps: list[Step],
        states: list[ShiftState | None],
        oracle: Step | None,
    ) -> ShiftSequence:
        named = {str(i): step for i, step in enumerate(steps)}
        if oracle is not None:
            named["oracle"] = oracle
        step_hashes = {name: step.content_hash() for name, step in named.items()}
        manifest = {
            "format": 2,
            "key": spec.key,
            "spec": spec.to_dict(),
            "source_fingerprint": source.fingerprint,
            "class_names": list(source.class_names),
            "subclass_names": [list(n) for n in source.subclass_names]
            if source.subclass_names
            else None,
            "steps": [
                {
                    "name": step.name,
                    "state": state.describe() if state is not None else None,
                    "sizes": {s: int(len(step.arrays[f"y_{s}"])) for s in step.splits},
                }
                for step, state in zip(steps, states, strict=True)
            ],
            "has_oracle": oracle is not None,
            "step_hashes": step_hashes,
            "content_hash": hashlib.sha256("".join(step_hashes.values()).encode()).hexdigest(),
        }
        return cls(manifest, named)

    @property
    def key(self) -> str:
        return self.manifest["key"]

    @property
    def content_hash(self) -> str:
        return self.manifest["content_hash"]

    @property
    def num_steps(self) -> int:
        return len(self.manifest["steps"])

    @property
    def class_names(self) -> list[str]:
        return self.manifest["class_names"]

    @property
    def step_names(self) -> list[str]:
        return [s["name"] for s in self.manifest["steps"]]

    def step(self, index: int | str) -> Step:
        """Step ``index`` (0 = source, -1 = final) or ``"oracle"`` (the final step, oracle size)."""
        name = str(index % self.num_steps if isinstance(index, int) else index)
        if name not in self.manifest["step_hashes"]:
            raise Seq2FinalError(
                f"sequence '{self.key}' has no step '{index}'; valid: 0..{self.num_steps - 1}"
                + (", oracle" if self.manifest["has_oracle"] else "")
            )
        if name not in self._steps:
            assert self._loader is not None
            self._steps[name] = self._loader(name)
        return self._steps[name]

    def steps(self) -> Iterator[Step]:
        """Steps 0..T in order (the oracle variant excluded)."""
        return (self.step(i) for i in range(self.num_steps))
