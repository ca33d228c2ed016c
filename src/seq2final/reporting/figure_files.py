"""One catalog dataset per figure family, written in every format a reader needs."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from kedro.io.core import get_filepath_str
from kedro_datasets._utils import validate_sub_path
from kedro_datasets.matplotlib import MatplotlibDataset
from matplotlib.figure import Figure


class FigureFilesDataset(MatplotlibDataset):
    """A dict of figures saved as ``<key>.<format>`` for each of ``formats`` under one folder:
    PNG to look at, PDF for a paper.

    One dataset per figure family rather than one per format: kedro-viz draws every output of a
    pipeline outside its collapsed namespace, so a PDF twin of each figure doubled the row of
    reporting datasets under ``__default__`` (docs/architecture.md, "Where to put a new thing").
    ``save_args`` apply to every format (``dpi`` matters only to the raster ones). One save is
    one version and one ``overwrite``: every format lands in the same folder.
    """

    _save_args: dict[str, Any]  # MatplotlibDataset's
    _fs_open_args_save: dict[str, Any]

    def __init__(self, *, formats: Sequence[str] = ("png", "pdf"), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._formats = tuple(formats)

    def save(self, data: Mapping[str, Figure]) -> None:
        """Write each figure once per format. The figures are drawn without pyplot
        (``reporting.plots``), so nothing is left open to close."""
        save_path = self._get_save_path()
        if self._overwrite and self._exists():
            self._fs.rm(get_filepath_str(save_path, self._protocol), recursive=True)
        for key, figure in data.items():
            for extension in self._formats:
                name = f"{key}.{extension}"
                validate_sub_path(name, str(save_path))
                buffer = io.BytesIO()
                figure.savefig(buffer, **{**self._save_args, "format": extension})
                path = get_filepath_str(save_path / name, self._protocol)
                with self._fs.open(path, **self._fs_open_args_save) as file:
                    file.write(buffer.getvalue())
        self._invalidate_cache()

    def _describe(self) -> dict[str, Any]:
        return {**super()._describe(), "formats": self._formats}
