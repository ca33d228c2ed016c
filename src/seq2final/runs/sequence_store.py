"""The stored sequences: one folder per sequence key, one ``.npz`` per step and a manifest.

Like Kedro's ``PartitionedDataset``, :class:`SequenceStoreDataset` saves a ``{key: sequence}``
dict and loads a mapping whose values load lazily, so a later pipeline reads only the steps it
needs. A sequence is written to a temporary folder and renamed into place, so an interrupted save
never leaves a half-written sequence behind, and replacing a stored sequence swaps the two
folders in one step (a reader in another process sees the old one or the new one).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from kedro.io import AbstractDataset
from pydantic import ValidationError

from seq2final.core.errors import Seq2FinalError
from seq2final.core.files import partial_path, replace_folder
from seq2final.core.schema import stored_problem
from seq2final.data.sequence import SequenceManifest, ShiftSequence, Step

MANIFEST = "manifest.json"
COUNTS = "counts.csv"  # images per step and class, for a person to read (ShiftSequence.counts)


class SequenceStore(Mapping[str, ShiftSequence]):
    """The sequences in a store folder, by key; steps load on first use and are hash-checked."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _folder(self, key: str) -> Path:
        return self.root / key

    def __getitem__(self, key: str) -> ShiftSequence:
        manifest_path = self._folder(key) / MANIFEST
        if not manifest_path.exists():
            raise KeyError(key)
        try:
            manifest = SequenceManifest.model_validate_json(manifest_path.read_text())
        except (OSError, ValidationError) as error:
            raise Seq2FinalError(
                f"stored sequence '{key}' has an unreadable manifest ({stored_problem(error)}); "
                "rebuild it"
            ) from None
        return ShiftSequence(manifest, _loader=lambda name: self._load_step(key, name, manifest))

    def _load_step(self, key: str, name: str, manifest: SequenceManifest) -> Step:
        path = self._folder(key) / f"step_{name}.npz"
        try:
            with np.load(path, allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
        except (OSError, ValueError) as error:
            raise Seq2FinalError(
                f"stored sequence step {path} is unreadable ({error}); rebuild it"
            ) from None
        index = None if name == "oracle" else int(name)
        step = Step("oracle" if index is None else manifest.steps[index].name, arrays)
        if step.content_hash() != manifest.step_hashes[name]:
            raise Seq2FinalError(
                f"stored sequence step {path} is corrupt (hash mismatch); rebuild it"
            )
        return step

    def __iter__(self) -> Iterator[str]:
        if not self.root.exists():
            return iter(())
        return iter(
            sorted(
                p.name
                for p in self.root.iterdir()
                if not p.name.startswith(".") and (p / MANIFEST).exists()
            )
        )

    def __len__(self) -> int:
        return sum(1 for _ in self)


class SequenceStoreDataset(AbstractDataset[Mapping[str, ShiftSequence], SequenceStore]):
    """Saves ``{key: ShiftSequence}`` under ``path/key/``; loads a lazy :class:`SequenceStore`."""

    def __init__(self, path: str, metadata: dict[str, Any] | None = None) -> None:
        self._root = Path(path)
        self.metadata = metadata

    def load(self) -> SequenceStore:
        return SequenceStore(self._root)

    def save(self, data: Mapping[str, ShiftSequence]) -> None:
        self._root.mkdir(parents=True, exist_ok=True)
        for key, sequence in data.items():
            self._save_one(key, sequence)

    def _save_one(self, key: str, sequence: ShiftSequence) -> None:
        final = self._root / key
        partial = partial_path(final)
        partial.mkdir()
        try:
            names = [str(i) for i in range(sequence.num_steps)]
            names += ["oracle"] if sequence.manifest.has_oracle else []
            for name in names:
                arrays: dict[str, Any] = dict(sequence.step(name).arrays)
                np.savez(partial / f"step_{name}.npz", **arrays)
            (partial / MANIFEST).write_text(json.dumps(sequence.manifest.to_json(), indent=1))
            sequence.counts().to_csv(partial / COUNTS)
            replace_folder(partial, final)
        finally:
            if partial.exists():
                shutil.rmtree(partial)

    def _exists(self) -> bool:
        return self._root.exists()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._root)}
