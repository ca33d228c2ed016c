"""A user's own images by time declared in the Kedro catalog (docs/data.md, "Your own temporal
data"): the ``folder`` or ``manifest`` dataset with its options, as a read-only Kedro dataset.

    scans:
      type: seq2final.runs.temporal_dataset.TemporalImagesDataset
      path: /data/scans            # the folder, or the manifest
      layout: folder               # or manifest
      options: {periods: year, final_labelled: 40}

``catalog.load("scans")`` gives the :class:`~seq2final.data.sources.SourceData` the pipelines
build the sequence from with ``dataset:folder,data_path:/data/scans`` and the same
``data_options`` (the same fingerprint, and the same decode cache under ``raw_dir``), so a
notebook or a pipeline of the user's own reads exactly what the benchmark reads. The layout and
options are checked when the dataset is made (Kedro makes a catalog's datasets when first
used), in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from kedro.io import AbstractDataset, DatasetError

from seq2final.data.sources import SourceData, checked_options, load_source


class TemporalImagesDataset(AbstractDataset[SourceData, SourceData]):
    """Images over time (``layout`` ``folder`` or ``manifest`` at ``path``), loaded as the
    pipelines load them; never saved to."""

    def __init__(
        self,
        path: str,
        layout: Literal["folder", "manifest"] = "folder",
        options: dict[str, Any] | None = None,
        raw_dir: str = "data/01_raw",
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if layout not in ("folder", "manifest"):
            raise DatasetError(f"layout '{layout}': valid: folder, manifest")
        checked_options(layout, options)  # a bad option: one line, when the dataset is made
        self._path, self._layout, self._options, self._raw_dir = path, layout, options, raw_dir
        self.metadata = metadata

    def load(self) -> SourceData:
        return load_source(self._layout, self._path, self._raw_dir, self._options)

    def save(self, data: SourceData) -> None:
        raise DatasetError(f"{self._path}: a user's images are read, never written by a pipeline")

    def _exists(self) -> bool:
        return Path(self._path).exists()

    def _describe(self) -> dict[str, Any]:
        return {"path": self._path, "layout": self._layout, "options": self._options}
