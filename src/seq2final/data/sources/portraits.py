"""``portraits``: the yearbook photos, a sequence by itself (decades as time steps)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from seq2final.core.errors import Seq2FinalError
from seq2final.data.sources.base import SourceData, fingerprint, require_path, source

PORTRAIT_DECADES = ("1930s", "1940s", "1950s", "1960s", "1970s", "1980s", "1990s", "2000s")
_PORTRAIT_NAME = re.compile(r"^(\d{4})_.*\.png$", re.IGNORECASE)


def _decade_index(year: int) -> int | None:
    if 1930 <= year <= 1999:
        return (year - 1930) // 10
    if 2000 <= year <= 2013:
        return 7
    return None


@source("portraits", natural=True)
def load_portraits(data_path: Path | None, raw_dir: Path) -> SourceData:
    """The raw yearbook folder ``…/{F,M}/YYYY_*.png``: label 0 = male, 1 = female.

    Every image is read as grey, resized to 32×32 (bilinear) and copied to 3 channels, and kept on
    the 0-255 scale like every other source (the original's double normalisation is not kept).
    All images land in the train pool with their decade as natural time step; the sequence
    builder splits them per decade (the final decade 40/10/50 into train/valid/test).
    """
    root = require_path("portraits", data_path, "the yearbook folder with F/ and M/ inside")
    images, labels, decades = [], [], []
    for label, sex in enumerate(("M", "F")):
        folder = root / sex
        if not folder.is_dir():
            raise Seq2FinalError(
                f"data_path '{root}' has no {sex}/ folder; dataset 'portraits' needs F/ and M/"
            )
        for path in sorted(folder.iterdir()):
            match = _PORTRAIT_NAME.match(path.name)
            decade = _decade_index(int(match.group(1))) if match else None
            if decade is None:
                continue
            try:
                with Image.open(path) as image:
                    small = image.convert("L").resize((32, 32), Image.Resampling.BILINEAR)
            except (OSError, UnidentifiedImageError) as error:
                raise Seq2FinalError(f"cannot read portrait {path}: {error}") from None
            images.append(np.asarray(small, dtype=np.uint8))
            labels.append(label)
            decades.append(decade)
    if not images:
        raise Seq2FinalError(f"data_path '{root}' holds no YYYY_*.png portraits from 1930-2013")
    x = np.repeat(np.stack(images)[:, None], 3, axis=1)
    y, t = np.asarray(labels, np.int64), np.asarray(decades, np.int64)
    empty = np.zeros((0, 3, 32, 32), np.uint8)
    return SourceData(
        name="portraits",
        x_train=x,
        y_train=y,
        x_test=empty,
        y_test=np.zeros(0, np.int64),
        class_names=("male", "female"),
        time_train=t,
        time_names=PORTRAIT_DECADES,
        fingerprint=fingerprint(x, y, t),
    )
