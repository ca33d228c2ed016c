"""``portraits``: the yearbook photos, a sequence by itself, by decade (the Seq-to-Final paper),
by 5-year block or by year (Wild-Time's Yearbook): three sources reading one folder."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from seq2final.core.errors import Seq2FinalError
from seq2final.data.sources.source import SourceData, fingerprint, require_path, source

PORTRAIT_DECADES = ("1930s", "1940s", "1950s", "1960s", "1970s", "1980s", "1990s", "2000s")
_PORTRAIT_NAME = re.compile(r"^(\d{4})_.*\.png$", re.IGNORECASE)
FIRST_YEAR, LAST_YEAR = 1930, 2013


@dataclass(frozen=True)
class Granularity:
    """How years become time steps: each year's period index, and the periods' names.

    Wild-Time's Yearbook steps are years, and its paper also reports 5-year blocks; the
    Seq-to-Final paper's Portraits steps are decades, the last one 2000-2013. 5-year blocks and
    decades cut at the same years, so the blocks of each decade hold exactly its images.
    """

    period: Callable[[int], int]
    names: tuple[str, ...]


def _blocks(width: int) -> Granularity:
    starts = range(FIRST_YEAR, LAST_YEAR + 1, width)
    last = len(starts) - 1
    names = tuple(
        str(start) if width == 1 else f"{start}-{min(start + width - 1, LAST_YEAR)}"
        for start in starts
    )
    return Granularity(lambda year: min((year - FIRST_YEAR) // width, last), names)


GRANULARITIES = {
    "decade": Granularity(
        lambda year: min((year - FIRST_YEAR) // 10, len(PORTRAIT_DECADES) - 1), PORTRAIT_DECADES
    ),
    "5 years": _blocks(5),
    "year": _blocks(1),
}


def read_portraits(
    data_path: Path | None, granularity: str, name: str, complete: bool
) -> SourceData:
    """The raw yearbook folder ``…/{F,M}/YYYY_*.png``: label 0 = male, 1 = female; each photo's
    time step its year's period at ``granularity``.

    Every image is read as grey, resized to 32×32 (bilinear) and copied to 3 channels, and kept on
    the 0-255 scale like every other source (the original's double normalisation is not kept).
    All images land in the train pool with their period as natural time step; the sequence
    builder splits them per period. With ``complete``, every year from 1930 to 2013 must have
    photos (Wild-Time's protocols count on every year); the missing ones are named in one line
    before any image is read.
    """
    root = require_path(name, data_path, "the yearbook folder with F/ and M/ inside")
    periods = GRANULARITIES[granularity]
    found: list[tuple[int, Path, int]] = []  # (label, path, year)
    for label, sex in enumerate(("M", "F")):
        folder = root / sex
        if not folder.is_dir():
            raise Seq2FinalError(
                f"data_path '{root}' has no {sex}/ folder; dataset '{name}' needs F/ and M/"
            )
        for path in sorted(folder.iterdir()):
            match = _PORTRAIT_NAME.match(path.name)
            year = int(match.group(1)) if match else None
            if year is not None and FIRST_YEAR <= year <= LAST_YEAR:
                found.append((label, path, year))
    if complete:
        missing = sorted(set(range(FIRST_YEAR, LAST_YEAR + 1)) - {year for *_, year in found})
        if missing:
            raise Seq2FinalError(
                f"data_path '{root}' has no portraits of year(s) {', '.join(map(str, missing))}; "
                f"dataset '{name}' needs photos of every year {FIRST_YEAR}-{LAST_YEAR}"
            )
    images, labels, times = [], [], []
    for label, path, year in found:
        try:
            with Image.open(path) as image:
                small = image.convert("L").resize((32, 32), Image.Resampling.BILINEAR)
        except (OSError, UnidentifiedImageError) as error:
            raise Seq2FinalError(f"cannot read portrait {path}: {error}") from None
        images.append(np.asarray(small, dtype=np.uint8))
        labels.append(label)
        times.append(periods.period(year))
    if not images:
        raise Seq2FinalError(f"data_path '{root}' holds no YYYY_*.png portraits from 1930-2013")
    x = np.repeat(np.stack(images)[:, None], 3, axis=1)
    y, t = np.asarray(labels, np.int64), np.asarray(times, np.int64)
    empty = np.zeros((0, 3, 32, 32), np.uint8)
    return SourceData(
        name=name,
        x_train=x,
        y_train=y,
        x_test=empty,
        y_test=np.zeros(0, np.int64),
        class_names=("male", "female"),
        time_train=t,
        time_names=periods.names,
        fingerprint=fingerprint(x, y, t),
    )


@source("portraits", natural=True)
def load_portraits(data_path: Path | None, raw_dir: Path) -> SourceData:
    """Yearbook portraits by decade, 1930s to 2000s (the Seq-to-Final paper's Portraits)."""
    return read_portraits(data_path, "decade", "portraits", complete=False)


@source("portraits_5y", natural=True, periods=len(GRANULARITIES["5 years"].names))
def load_portraits_5y(data_path: Path | None, raw_dir: Path) -> SourceData:
    """Yearbook portraits by 5-year block, 1930-1934 to 2010-2013 (Wild-Time's coarser Yearbook)."""
    return read_portraits(data_path, "5 years", "portraits_5y", complete=True)


@source("portraits_1y", natural=True, periods=len(GRANULARITIES["year"].names))
def load_portraits_1y(data_path: Path | None, raw_dir: Path) -> SourceData:
    """Yearbook portraits by year, 1930 to 2013 (Wild-Time's Yearbook)."""
    return read_portraits(data_path, "year", "portraits_1y", complete=True)


def write_synthetic_portraits(
    root: Path, years: Iterable[int] = range(FIRST_YEAR, LAST_YEAR + 1), per_year: int = 1
) -> Path:
    """A folder laid out as the real Yearbook data (``F/`` and ``M/`` with ``YYYY_*.png``) of
    plain grey 24×20 images, ``per_year`` per sex and year, whose shade moves with the year and
    the sex: the Yearbook datasets and protocols run on it where the photos are not at hand (the
    tests, ``benchmarks/stream_fits.py``)."""
    for sex in ("F", "M"):
        (root / sex).mkdir(parents=True, exist_ok=True)
        for year in years:
            for i in range(per_year):
                shade = (year - 1900 + 7 * i + (sex == "F") * 50) % 256
                Image.fromarray(np.full((24, 20), shade, np.uint8)).save(
                    root / sex / f"{year}_{sex}_{i}.png"
                )
    return root
