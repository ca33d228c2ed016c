"""One catalog dataset per figure family, written in every format a reader needs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kedro_datasets.matplotlib import MatplotlibDataset
from matplotlib.figure import Figure


class FigureFilesDataset(MatplotlibDataset):
    """A dict of figures saved as ``<key>.<format>`` for each of ``formats`` under one folder:
    PNG to look at, PDF for a paper.

    One dataset per figure family rather than one per format: kedro-viz draws every output of a
    pipeline outside its collapsed namespace, so a PDF twin of each figure doubled the row of
    reporting datasets under ``__default__`` (docs/architecture.md, "Where to put a new thing"). ``save_args`` apply to
    every format (``dpi`` matters only to the raster ones).
    """

    _save_args: dict[str, Any]  # MatplotlibDataset's, read by its save

    def __init__(self, *, formats: Sequence[str] = ("png", "pdf"), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._formats = tuple(formats)

    def save(self, data: Mapping[str, Figure]) -> None:
        """Write each figure once per format; Kedro's own save closes the figures after, which
        leaves them drawable (pyplot merely forgets them)."""
        given: dict[str, Any] = dict(self._save_args)
        try:
            for extension in self._formats:
                self._save_args = {**given, "format": extension}
                super().save({f"{key}.{extension}": figure for key, figure in data.items()})
        finally:
            self._save_args = given

    def _describe(self) -> dict[str, Any]:
        return {**super()._describe(), "formats": self._formats}
