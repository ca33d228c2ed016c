"""A built sequence: its manifest and its steps' arrays, held in memory or loaded lazily."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pydantic import field_serializer

from seq2final.core.errors import Seq2FinalError
from seq2final.core.schema import StrictModel
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


class StepEntry(StrictModel):
    """One step as the manifest records it: its name, the shift state it was drawn in (every
    effect's value, :meth:`~seq2final.data.effects.ShiftState.describe`; none for a natural
    sequence's period), its splits' sizes and, under a support shift, its counted intensity
    against the source's (and the final step's against every historical step's)."""

    name: str
    state: dict[str, Any] | None
    sizes: dict[str, int]
    support_intensity: float | None = None
    history_support_intensity: float | None = None


class ViewEntry(StrictModel):
    """What a protocol's view of a sequence is a view of: the sequence's key, the view's name,
    its steps and the seed of its mixed draw (none: the steps' own images)."""

    of: str
    name: str
    steps: list[int]
    mixed_seed: int | None


class SequenceManifest(StrictModel):
    """A built sequence's ``manifest.json``, typed to its leaves: layout ``format``, key, spec,
    the source data's fingerprint (none in manifests written before fingerprints), class and
    sub-class names, each step's entry, whether it holds an oracle-size final draw, each step's
    content hash and the whole sequence's. A view (``view``) is never stored.

    Written back with the fields it was made or read with (:meth:`to_json`), so every stored
    manifest keeps its bytes, and the spec as :meth:`SequenceSpec.to_dict` gives it."""

    format: int
    key: str
    spec: SequenceSpec
    source_fingerprint: str | None = None
    class_names: list[str]
    subclass_names: list[list[str]] | None = None
    steps: list[StepEntry]
    has_oracle: bool
    step_hashes: dict[str, str]
    content_hash: str
    view: ViewEntry | None = None

    @field_serializer("spec")
    def _spec(self, spec: SequenceSpec) -> dict[str, Any]:
        return spec.to_dict()

    def to_json(self) -> dict[str, Any]:
        """The manifest as written: the fields it was made or read with, in the stored order."""
        return self.model_dump(mode="json", exclude_unset=True)


@dataclass
class ShiftSequence:
    """A built sequence: a manifest plus steps, held in memory or loaded lazily from a store.

    Later pipelines usually need one step at a time (the final step, or step t of a chain), so a
    stored sequence loads a step only when :meth:`step` asks for it.
    """

    manifest: SequenceManifest
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
        notes: list[dict[str, Any]] | None = None,
    ) -> ShiftSequence:
        """The sequence of ``steps`` with its manifest; ``notes`` add entries to each step's
        (a support shift's counted intensity)."""
        named = {str(i): step for i, step in enumerate(steps)}
        if oracle is not None:
            named["oracle"] = oracle
        step_hashes = {name: step.content_hash() for name, step in named.items()}
        manifest = SequenceManifest(
            format=2,
            key=spec.key,
            spec=spec,
            source_fingerprint=source.fingerprint,
            class_names=list(source.class_names),
            subclass_names=[list(n) for n in source.subclass_names]
            if source.subclass_names
            else None,
            steps=[
                StepEntry(
                    name=step.name,
                    state=state.describe() if state is not None else None,
                    sizes={s: int(len(step.arrays[f"y_{s}"])) for s in step.splits},
                    **note,
                )
                for step, state, note in zip(steps, states, notes or [{}] * len(steps), strict=True)
            ],
            has_oracle=oracle is not None,
            step_hashes=step_hashes,
            content_hash=hashlib.sha256("".join(step_hashes.values()).encode()).hexdigest(),
        )
        return cls(manifest, named)

    @property
    def key(self) -> str:
        return self.manifest.key

    @property
    def content_hash(self) -> str:
        return self.manifest.content_hash

    @property
    def history_hash(self) -> str:
        """The content hash of steps 0..T−1 and the class names: all a historical state is
        trained from, so sequences that differ only in their final step share it (the members of
        a family, with ``pretrain_historical.shared_history``; docs/intensity.md)."""
        hashes = [self.manifest.step_hashes[str(t)] for t in range(self.num_steps - 1)]
        text = json.dumps([hashes, self.class_names])
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def num_steps(self) -> int:
        return len(self.manifest.steps)

    @property
    def class_names(self) -> list[str]:
        return self.manifest.class_names

    @property
    def step_names(self) -> list[str]:
        return [s.name for s in self.manifest.steps]

    def step(self, index: int | str) -> Step:
        """Step ``index`` (0 = source, -1 = final) or ``"oracle"`` (the final step, oracle size)."""
        name = str(index % self.num_steps if isinstance(index, int) else index)
        if name not in self.manifest.step_hashes:
            raise Seq2FinalError(
                f"sequence '{self.key}' has no step '{index}'; valid: 0..{self.num_steps - 1}"
                + (", oracle" if self.manifest.has_oracle else "")
            )
        if name not in self._steps:
            assert self._loader is not None
            self._steps[name] = self._loader(name)
        return self._steps[name]

    def steps(self) -> Iterator[Step]:
        """Steps 0..T in order (the oracle variant excluded)."""
        return (self.step(i) for i in range(self.num_steps))

    def counts(self) -> pd.DataFrame:
        """Images per step (rows, in order) and class (columns), every split together, and each
        split's total: what a user checks was read before any training (``counts.csv`` beside
        a stored sequence)."""
        classes = len(self.class_names)
        rows = []
        for step in self.steps():
            per_class = np.zeros(classes, np.int64)
            totals = {}
            for split in ("train", "valid", "test"):
                labels = step.arrays.get(f"y_{split}", np.zeros(0, np.int64))
                per_class += np.bincount(labels, minlength=classes)
                totals[split] = len(labels)
            rows.append([*per_class.tolist(), *totals.values()])
        return pd.DataFrame(rows, index=pd.Index(self.step_names, name="step"),
                            columns=[*self.class_names, "train", "valid", "test"])  # fmt: skip

    def view(self, name: str, steps: Sequence[int], mixed_seed: int | None = None) -> ShiftSequence:
        """Steps ``steps`` of this sequence as a sequence of their own, the last one its final
        step: what a learner has seen at some time, for the temporal protocols.

        With ``mixed_seed``, every step of the view keeps its test split but its train and valid
        images are drawn afresh (as many as it had, no image twice in the view) from those of
        *every* step of this sequence: Wild-Time's control, where the training data span the whole
        sequence and what is left of a later step's error is its difficulty, not the shift.
        """
        if not steps or any(not 0 <= s < self.num_steps for s in steps):
            raise Seq2FinalError(
                f"view '{name}' of sequence '{self.key}' names steps {list(steps)}; "
                f"valid: 0..{self.num_steps - 1}"
            )
        chosen = [self.step(s) for s in steps] if mixed_seed is not None else []
        if mixed_seed is not None:
            chosen = _mixed(list(self.steps()), chosen, np.random.RandomState(mixed_seed))
            hashes = {str(j): step.content_hash() for j, step in enumerate(chosen)}
        else:
            hashes = {str(j): self.manifest.step_hashes[str(s)] for j, s in enumerate(steps)}
        manifest = self.manifest.model_copy(
            update={
                "key": f"{self.key}~{name}",
                "view": ViewEntry(of=self.key, name=name, steps=list(steps), mixed_seed=mixed_seed),
                "steps": [self.manifest.steps[s] for s in steps],
                "has_oracle": False,
                "step_hashes": hashes,
                "content_hash": hashlib.sha256("".join(hashes.values()).encode()).hexdigest(),
            }
        )
        if chosen:
            return ShiftSequence(manifest, {str(j): step for j, step in enumerate(chosen)})
        return ShiftSequence(manifest, _loader=lambda position: self.step(steps[int(position)]))


def _mixed(every: list[Step], chosen: list[Step], rng: np.random.RandomState) -> list[Step]:
    """``chosen`` with train and valid images drawn from the pooled splits of ``every`` step."""
    pooled = {
        split: tuple(np.concatenate([step.arrays[f"{name}_{split}"] for step in every])
                     for name in ("x", "y"))
        for split in ("train", "valid")
    }  # fmt: skip
    # one shuffle per split, each step taking the next slice: no image twice in the view
    orders = {split: rng.permutation(len(y)) for split, (_, y) in pooled.items()}
    taken = dict.fromkeys(pooled, 0)
    mixed = []
    for step in chosen:
        arrays = {k: v for k, v in step.arrays.items() if k.endswith("_test")}
        for split, (x, y) in pooled.items():
            size = len(step.arrays[f"y_{split}"])
            picked = orders[split][taken[split] : taken[split] + size]
            taken[split] += size
            arrays[f"x_{split}"], arrays[f"y_{split}"] = x[picked], y[picked]
        mixed.append(Step(f"mixed({step.name})", arrays))
    return mixed
