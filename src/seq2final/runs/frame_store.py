"""Computed tables that are costly to remake (interpolation paths), one CSV per key."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from kedro.io import AbstractDataset

from seq2final.core.files import atomic_write, stored_files


class FrameStore(Mapping[str, pd.DataFrame]):
    """Computed tables (one CSV per key) that are costly to remake, such as interpolation paths."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        return self.root / f"{key}.csv"

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.path(key).exists()

    def __getitem__(self, key: str) -> pd.DataFrame:
        if key not in self:
            raise KeyError(key)
        return pd.read_csv(self.path(key))

    def __iter__(self) -> Iterator[str]:
        return (p.stem for p in stored_files(self.root, ".csv"))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def put(self, key: str, frame: pd.DataFrame) -> None:
        """Store ``frame`` under ``key`` atomically (a node that writes each key as it is made)."""
        atomic_write(self.path(key), lambda p: frame.to_csv(p, index=False))


class FrameStoreDataset(
    AbstractDataset[Mapping[str, Callable[[], pd.DataFrame | None]] | FrameStore, FrameStore]
):
    """Tables saved lazily: ``save`` takes ``{key: make_table}`` and calls only the missing keys,
    each written atomically, so an interrupted run keeps what it finished. A maker returning
    ``None`` (its inputs are not there) stores nothing. Saving a :class:`FrameStore` (a node
    that put each table as it made it, and returns the store) writes nothing."""

    def __init__(self, path: str, metadata: dict[str, Any] | None = None) -> None:
        self._root = Path(path)
        self.metadata = metadata

    def load(self) -> FrameStore:
        return FrameStore(self._root)

    def save(self, data: Mapping[str, Callable[[], pd.DataFrame | None]] | FrameStore) -> None:
        if isinstance(data, FrameStore):  # a node that put each table as it made it
            return
        store = FrameStore(self._root)
        for key, make in data.items():
            if key in store:
                continue
            frame = make()
            if frame is None:  # its inputs are missing: nothing to keep, try again next run
                continue
            store.put(key, frame)

    def _exists(self) -> bool:
        return self._root.exists()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._root)}
