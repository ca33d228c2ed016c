"""``folder`` and ``manifest``: a user's own images collected over time, with no code (docs/data.md).

Two layouts become one table of (path, label, time[, group, split]):

* ``folder``: ``root/<period>/<class>/<image>``, CLEAR's layout. A period folder is named by an
  integer or an ISO date; periods are ordered by value, never as strings (``95`` before
  ``1003``, which Kedro's ``PartitionedDataset`` and a plain sort get wrong).
* ``manifest``: a CSV or Parquet file with ``path`` (or Hugging Face ``imagefolder``'s
  ``file_name``), relative to the manifest's folder and never outside it, ``label``, ``time``
  (integer, float, ISO date or datetime) and optional ``group`` and ``split``
  (``train``/``valid``/``test``; empty: the seeded hold-out decides). A ``metadata.csv`` given as
  a folder is read as that folder's manifest.

Times are binned into periods (:class:`TemporalOptions`) and the images decoded in threads (no
fork, ENVIRONMENT.md), converted to RGB at ``image_size`` (one warning saying what was
converted), and cached by content under the raw-data folder: the table's bytes plus every
file's size and modification time name the cache, so a second build reads one array instead of
decoding again. Every bad input is one line naming the file (and row) and the first offenders,
before anything is decoded or written.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from PIL import Image
from pydantic import Field, field_validator, model_validator

from seq2final.core.errors import Seq2FinalError
from seq2final.core.files import atomic_write
from seq2final.core.schema import StrictModel
from seq2final.data.sources.source import SourceData, fingerprint, source

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
SPLITS = ("train", "valid", "test")
CACHE_FOLDER = ".temporal"
SHOWN = 3
"""How many offenders a message names."""


class TemporalOptions(StrictModel):
    """``data_options`` of the ``folder`` and ``manifest`` datasets: how times become periods,
    which period is final, how much of it adaptation may use, and how images are read.

    ``periods``: ``as_given`` (each distinct time a period), ``year``, ``month`` (dates and
    datetimes; integer times are taken as years), ``quantiles`` (``bins`` periods of about equal
    size) or ``edges`` (period k holds ``edges[k] <= time < edges[k+1]``). ``final_period``: the
    name of the final period (default: the last; later ones are left out). ``final_labelled``:
    how many labelled images of the final period adaptation may use (train and validation,
    80/20), the rest its test set; default: the natural split's (40 % train, 10 % valid).
    """

    periods: Literal["as_given", "year", "month", "quantiles", "edges"] = "as_given"
    bins: int | None = Field(default=None, ge=2)
    edges: list[float | str] | None = None
    final_period: str | int | float | None = None  # a year arrives as a number
    final_labelled: int | None = Field(default=None, ge=2)
    image_size: int = Field(default=32, ge=8, le=512)
    on_missing: Literal["error", "skip"] = "error"

    @field_validator("edges")
    @classmethod
    def _two_edges(cls, edges: list[float | str] | None) -> list[float | str] | None:
        if edges is not None and len(edges) < 3:
            raise ValueError(f"edges {edges}: valid: at least three edges (two periods)")
        return edges

    @model_validator(mode="after")
    def _binning(self) -> TemporalOptions:
        if self.periods == "quantiles" and self.bins is None:
            raise ValueError("periods quantiles needs bins: the number of periods (at least 2)")
        if self.periods == "edges" and self.edges is None:
            raise ValueError("periods edges needs edges: the periods' boundaries, in order")
        return self


def _offenders(items: Sequence[object]) -> str:
    shown = ", ".join(str(item) for item in items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


# ---- the two layouts, as one table ------------------------------------------------------------


def folder_table(root: Path) -> pd.DataFrame:
    """``root/<period>/<class>/<image>`` as a table (``path`` relative to ``root``)."""
    if not root.is_dir():
        raise Seq2FinalError(f"data_path '{root}' is no folder; dataset 'folder' needs "
                             "root/<period>/<class>/<image>")  # fmt: skip
    rows, misplaced, empty = [], [], []
    # strings: a walk of 50,000 files in a blink; linked folders followed (a period gathered from
    # elsewhere), but never one that is the folder itself or holds it, so a link back up cannot
    # loop (two periods may link the same folder: each reads it)
    for folder, folders, files in os.walk(root, followlinks=True):
        here = os.path.realpath(folder)

        def around(real: str, here: str = here) -> bool:
            return here == real or here.startswith(real.rstrip(os.sep) + os.sep)

        folders[:] = sorted(name for name in folders if not name.startswith(".")
                            and not around(os.path.realpath(os.path.join(folder, name))))  # fmt: skip
        parts = Path(folder).relative_to(root).parts
        images = sorted(name for name in files if not name.startswith(".")
                        and os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES)  # fmt: skip
        if len(parts) == 2 and not folders and not images:  # (files of other kinds alone too)
            empty.append("/".join(parts))
        for name in images:
            if len(parts) != 2:
                misplaced.append("/".join([*parts, name]))
            else:
                rows.append(("/".join([*parts, name]), parts[1], parts[0]))
    if misplaced:
        raise Seq2FinalError(
            f"data_path '{root}': images at mixed depths ({_offenders(misplaced)}); valid: every "
            "image at root/<period>/<class>/<image>"
        )
    if empty:
        raise Seq2FinalError(f"data_path '{root}': empty class folder(s) {_offenders(empty)}; "
                             "valid: at least one image in each, or no such folder")  # fmt: skip
    if not rows:
        raise Seq2FinalError(f"data_path '{root}' holds no images at root/<period>/<class>/<image>")
    table = pd.DataFrame(rows, columns=["path", "label", "time"])
    bad = [name for name in table["time"].unique() if _time_of(name) is None]
    if bad:
        raise Seq2FinalError(
            f"data_path '{root}': period folder name(s) {_offenders(sorted(bad))} do not parse; "
            "valid: integers or ISO dates (1995, 2004-06, 2004-06-30)"
        )
    spelled: dict[object, list[str]] = {}  # 01 and 1, 2004-06 and 2004-06-01: one time
    for name in sorted(table["time"].unique()):
        spelled.setdefault(_time_of(name), []).append(name)
    twice = [" and ".join(names) for names in spelled.values() if len(names) > 1]
    if twice:
        raise Seq2FinalError(f"data_path '{root}': period folders {_offenders(twice)} name the "
                             "same time; valid: one folder per period")  # fmt: skip
    return table


def manifest_table(path: Path) -> tuple[pd.DataFrame, Path]:
    """A CSV or Parquet manifest as a table, and the folder its paths are relative to."""
    if path.is_dir():
        path = path / "metadata.csv"  # Hugging Face imagefolder's manifest, read where it lives
    if not path.is_file():
        raise Seq2FinalError(f"manifest '{path}' does not exist; dataset 'manifest' needs a CSV "
                             "or Parquet file (or a folder holding metadata.csv)")  # fmt: skip
    try:
        if path.suffix.lower() == ".parquet":
            table = pd.read_parquet(path)
        else:
            table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception as error:  # pandas and pyarrow raise many kinds for a bad file
        first = (str(error).splitlines() or [type(error).__name__])[0][:160]
        raise Seq2FinalError(f"manifest '{path}' cannot be read ({first})") from None
    if "path" not in table.columns and "file_name" in table.columns:
        table = table.rename(columns={"file_name": "path"})
    missing = [name for name in ("path", "label", "time") if name not in table.columns]
    if missing:
        raise Seq2FinalError(
            f"manifest '{path}': missing column(s) {', '.join(missing)}; found: "
            f"{', '.join(map(str, table.columns))}; valid: path (or file_name), label, time, and "
            "optional group and split"
        )
    columns = [c for c in ("path", "label", "time", "group", "split") if c in table.columns]
    table = table[columns].copy()
    for column in ("path", "label"):  # a blank cell (a Parquet null, an empty CSV field)
        blank = [f"row {row + 2}" for row, value in enumerate(table[column]) if _blank(value)]
        if blank:
            raise Seq2FinalError(f"manifest '{path}': missing {column}(s) ({_offenders(blank)}); "
                                 f"valid: a {column} for every image")  # fmt: skip
    table["path"] = [os.path.normpath(str(p)) for p in table["path"]]  # ./a, x/../a: a
    table["label"] = table["label"].astype(str)
    root = path.parent.resolve()
    outside = [f"row {row + 2}: {value}" for row, value in enumerate(table["path"])
               if os.path.isabs(value) or value == ".." or value.startswith("../")]  # fmt: skip
    if outside:
        raise Seq2FinalError(
            f"manifest '{path}': path(s) outside its folder ({_offenders(outside)}); valid: "
            f"paths relative to {root}, inside it"
        )
    labels = table.groupby("path")["label"].nunique()
    relabelled = sorted(labels[labels > 1].index)
    if relabelled:
        raise Seq2FinalError(f"manifest '{path}': path(s) with two labels "
                             f"({_offenders(relabelled)}); valid: one label per image")  # fmt: skip
    repeated = sorted(table["path"][table["path"].duplicated()].unique())
    if repeated:
        raise Seq2FinalError(f"manifest '{path}': duplicate path(s) ({_offenders(repeated)}); "
                             "valid: each image once")  # fmt: skip
    if "split" in table.columns:
        split = pd.Series(["" if _blank(v) else str(v).strip() for v in table["split"]],
                          index=table.index)  # fmt: skip
        bad = [f"row {row + 2}: {value!r}" for row, value in enumerate(split)
               if value not in ("", *SPLITS)]  # fmt: skip
        if bad:
            raise Seq2FinalError(f"manifest '{path}': bad split value(s) ({_offenders(bad)}); "
                                 f"valid: {', '.join(SPLITS)} or empty")  # fmt: skip
        table["split"] = split
    return table, root


# ---- times and periods ------------------------------------------------------------------------

_INTEGER = re.compile(r"^[+-]?\d+$")


def _blank(value: object) -> bool:
    """An empty cell: a null (pandas reads a Parquet null as None or NaN) or blank text."""
    return (
        value is None
        or (isinstance(value, float) and math.isnan(value))
        or (isinstance(value, str) and not value.strip())
    )


def _time_of(value: object) -> float | pd.Timestamp | None:
    """One time value as a number or a timestamp; None where it does not parse (or is not a
    finite number: ``inf`` names no period)."""
    if isinstance(value, int | np.integer | float | np.floating):
        return float(value) if math.isfinite(float(value)) else None
    if isinstance(value, pd.Timestamp | np.datetime64):
        return pd.Timestamp(value)
    text = str(value).strip()
    if not text or text.lower() in ("nan", "nat", "none"):
        return None
    if _INTEGER.match(text):
        return float(int(text))
    try:
        number = float(text)
        return number if math.isfinite(number) else None
    except ValueError:
        pass
    try:
        return pd.Timestamp(text) if re.match(r"^\d{4}-\d{2}", text) else None
    except ValueError:
        return None


def parse_times(
    values: Sequence[object], where: str, rows: Sequence[int] | None = None
) -> tuple[np.ndarray, str]:
    """The times as one kind: ``number`` (float array) or ``date`` (datetime64[ns] array); an
    unparseable, missing or mixed-type time is one line naming rows (``rows``: each value's
    row in the file, where some were left out; by default the file's rows in order)."""
    line = list(rows) if rows is not None else [row + 2 for row in range(len(values))]
    parsed = [_time_of(value) for value in values]
    bad = [f"row {line[row]}: {values[row]!r}" for row, value in enumerate(parsed) if value is None]
    if bad:
        raise Seq2FinalError(f"{where}: missing or unparseable time(s) ({_offenders(bad)}); "
                             "valid: integers, numbers, ISO dates or datetimes")  # fmt: skip
    kinds = {isinstance(value, pd.Timestamp) for value in parsed}
    if len(kinds) > 1:
        first_date = next(r for r, v in enumerate(parsed) if isinstance(v, pd.Timestamp))
        first_number = next(r for r, v in enumerate(parsed) if not isinstance(v, pd.Timestamp))
        raise Seq2FinalError(
            f"{where}: mixed-type times (row {line[first_number]}: {values[first_number]!r} is a "
            f"number, row {line[first_date]}: {values[first_date]!r} a date); valid: one kind"
        )
    if kinds == {True}:
        stamps = pd.DatetimeIndex([pd.Timestamp(v).tz_convert("UTC").tz_localize(None)
                                   if pd.Timestamp(v).tzinfo else v for v in parsed])  # fmt: skip
        return stamps.values.astype("datetime64[ns]"), "date"
    return np.asarray(parsed, dtype=np.float64), "number"


def _name_of(value: float | np.datetime64, kind: str) -> str:
    if kind == "date":
        stamp = pd.Timestamp(value)
        return stamp.isoformat() if stamp != stamp.normalize() else stamp.date().isoformat()
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def bin_periods(
    times: np.ndarray, kind: str, options: TemporalOptions, where: str
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Each image's period index (ordered by time) and the periods' names."""
    how = options.periods
    if how == "as_given":
        values, index = np.unique(times, return_inverse=True)
        return index.astype(np.int64), tuple(_name_of(v, kind) for v in values)
    if how in ("year", "month"):
        if kind == "number":
            if how == "month":
                raise Seq2FinalError(f"{where}: periods month needs dates; the times are numbers; "
                                     "valid: as_given, year, quantiles or edges")  # fmt: skip
            keys = times.astype(np.int64)
            values, index = np.unique(keys, return_inverse=True)
            return index.astype(np.int64), tuple(str(v) for v in values)
        unit = "Y" if how == "year" else "M"
        keys = times.astype(f"datetime64[{unit}]")
        values, index = np.unique(keys, return_inverse=True)
        return index.astype(np.int64), tuple(str(v) for v in values)
    numeric = times.astype(np.int64).astype(np.float64) if kind == "date" else times
    if how == "quantiles":
        assert options.bins is not None
        cuts = np.quantile(numeric, np.linspace(0, 1, options.bins + 1))
        inner = np.unique(cuts[1:-1])
        index = np.searchsorted(inner, numeric, side="right")
        lows = [cuts[0], *inner]
        highs = [*inner, cuts[-1]]
    else:
        assert options.edges is not None
        try:
            if kind == "date":
                edges = [float(pd.Timestamp(str(e)).value) for e in options.edges]
            else:
                edges = [float(e) for e in options.edges]
        except ValueError:
            wanted = "ISO dates" if kind == "date" else "numbers"
            raise Seq2FinalError(f"edges {options.edges}: valid: {wanted}, as the times of "
                                 f"{where} are") from None  # fmt: skip
        if any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
            raise Seq2FinalError(f"edges {options.edges}: valid: increasing boundaries")
        outside = [str(_name_of(t, kind)) for t, n in zip(times, numeric, strict=True)
                   if not edges[0] <= n < edges[-1]]  # fmt: skip
        if outside:
            raise Seq2FinalError(f"{where}: time(s) outside the edges ({_offenders(outside)}); "
                                 f"valid: {options.edges[0]} <= time < {options.edges[-1]}")  # fmt: skip
        index = np.searchsorted(np.asarray(edges[1:-1]), numeric, side="right")
        lows, highs = edges[:-1], edges[1:]

    def shown(value: float) -> str:
        return _name_of(np.datetime64(int(value), "ns") if kind == "date" else value, kind)

    names = tuple(f"{shown(lo)}–{shown(hi)}" for lo, hi in zip(lows, highs, strict=True))
    used = np.unique(index)  # a bin no image falls in is no period
    return np.searchsorted(used, index).astype(np.int64), tuple(names[i] for i in used)


# ---- images -----------------------------------------------------------------------------------


def _signature(table: pd.DataFrame, root: Path, options: TemporalOptions) -> str:
    """The cache's name: the folder, every file's path, size and modification time, and the
    image size (not the labels or times: a manifest relabelled decodes nothing again)."""
    digest = hashlib.sha256("\n".join([str(root), *table["path"]]).encode())
    base = str(root)
    for relative in table["path"]:
        stat = os.stat(os.path.join(base, relative))
        digest.update(f"{stat.st_size}:{stat.st_mtime_ns};".encode())
    digest.update(str(options.image_size).encode())
    return digest.hexdigest()[:20]


def _decode(path: str, size: int) -> tuple[np.ndarray | None, str, tuple[int, int], str]:
    """One image as 3×size×size uint8, its original mode and size; an error message instead."""
    try:
        with Image.open(path) as image:
            mode, original = image.mode, image.size
            # a JPEG at least twice the side is decoded at 1/2, 1/4 or 1/8 scale by libjpeg
            # (no smaller than the side), then resized: most of a large photo's decode saved
            image.draft("RGB", (size, size))
            rgb = image.convert("RGB")
            if rgb.size != (size, size):
                rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
            return np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1), mode, original, ""
    except Exception as error:  # noqa: BLE001 - PIL fails in many ways; each is "unreadable"
        return None, "", (0, 0), str(error).splitlines()[0][:80] if str(error) else "unreadable"


def decode_images(paths: Sequence[str], size: int, where: str) -> np.ndarray:
    """Every image decoded into one preallocated N×3×size×size array (no full-size copies
    kept), in threads; an unreadable image is one line naming the first ones."""
    x = np.empty((len(paths), 3, size, size), dtype=np.uint8)
    failed: list[str] = []
    modes: dict[str, int] = {}
    sizes: dict[tuple[int, int], int] = {}
    workers, counting = min(8, os.cpu_count() or 1), threading.Lock()

    def some(indices: range) -> None:
        """A contiguous share of the images (a task per image costs more than a small decode)."""
        seen_modes: dict[str, int] = {}
        seen_sizes: dict[tuple[int, int], int] = {}
        errors = []
        for index in indices:
            array, mode, original, error = _decode(paths[index], size)
            if array is None:
                errors.append(f"{paths[index]} ({error})")
                continue
            x[index] = array
            seen_modes[mode] = seen_modes.get(mode, 0) + 1
            if original != (size, size):
                seen_sizes[original] = seen_sizes.get(original, 0) + 1
        with counting:
            failed.extend(errors)
            for mode, n in seen_modes.items():
                modes[mode] = modes.get(mode, 0) + n
            for shape, n in seen_sizes.items():
                sizes[shape] = sizes.get(shape, 0) + n

    share = -(-len(paths) // workers)
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(some, [range(start, min(start + share, len(paths)))
                             for start in range(0, len(paths), share)]))  # fmt: skip
    if failed:
        raise Seq2FinalError(f"{where}: unreadable image(s) {_offenders(sorted(failed))}")
    converted = []
    if sizes:
        shown = ", ".join(f"{w}×{h}" for w, h in sorted(sizes)[:SHOWN])
        converted.append(f"{sum(sizes.values())} resized to {size}×{size} (from {shown}"
                         f"{', …' if len(sizes) > SHOWN else ''})")  # fmt: skip
    other = {mode: n for mode, n in modes.items() if mode != "RGB"}
    if other:
        converted.append(", ".join(f"{n} from mode {mode}" for mode, n in sorted(other.items()))
                         + " to RGB")  # fmt: skip
    if converted:
        log.warning("%s: images converted to the architectures' input: %s", where,
                    "; ".join(converted))  # fmt: skip
    return x


def _cached_images(
    table: pd.DataFrame, root: Path, options: TemporalOptions, raw_dir: Path, where: str
) -> np.ndarray:
    cache = raw_dir / CACHE_FOLDER / f"{_signature(table, root, options)}.npy"
    if cache.exists():
        log.info("%s: decoded images read from %s", where, cache)
        return np.load(cache)
    base = str(root)
    x = decode_images([os.path.join(base, p) for p in table["path"]], options.image_size, where)

    def write(partial: Path) -> None:
        with partial.open("wb") as file:  # straight from the array: no copy of it in memory
            np.save(file, x)

    atomic_write(cache, write)
    return x


# ---- the source -------------------------------------------------------------------------------


def _periods(
    table: pd.DataFrame, root: Path, options: TemporalOptions, where: str
) -> tuple[pd.DataFrame, np.ndarray, tuple[str, ...]]:
    """The images that will be read (missing ones skipped only when asked), each one's period
    and the periods' names, up to the final period asked; at least two periods."""
    base = str(root)
    exists = np.array([os.path.isfile(os.path.join(base, p)) for p in table["path"]])
    if not exists.all():
        missing = [f"row {row + 2}: {path}" for row, path in table["path"][~exists].items()]
        if options.on_missing == "error":
            raise Seq2FinalError(f"{where}: missing image(s) {_offenders(missing)}; valid: "
                                 "existing files, or data_options.on_missing: skip")  # fmt: skip
        log.warning("%s: %d missing image(s) skipped (on_missing: skip), e.g. %s", where,
                    len(missing), _offenders(missing))  # fmt: skip
        table = table[exists]  # its index still the file's rows, for the messages below
    times, kind = parse_times(list(table["time"]), where, list(table.index + 2))
    period, names = bin_periods(times, kind, options, where)
    if options.final_period is not None:
        final = options.final_period
        wanted = final if isinstance(final, str) else _name_of(float(final), "number")
        if wanted not in names:
            raise Seq2FinalError(f"data_options.final_period '{final}' is no "
                                 f"period of {where}; valid: {', '.join(names)}")  # fmt: skip
        last = names.index(wanted)
        kept = period <= last
        table, period, names = table[kept].reset_index(drop=True), period[kept], names[: last + 1]
    else:
        table = table.reset_index(drop=True)
    if len(names) < 2:
        raise Seq2FinalError(f"{where} has {len(names)} period(s) ({', '.join(names)}); valid: "
                             "at least 2 (earlier ones to learn from, a final one)")  # fmt: skip
    final = int(np.sum(period == len(names) - 1))
    if options.final_labelled is not None and final - options.final_labelled < 1:
        raise Seq2FinalError(
            f"{where}: the final period {names[-1]} has {final} image(s); "
            f"data_options.final_labelled {options.final_labelled} leaves none to test on; "
            f"valid: at most {final - 1}"
        )
    return table, period, names


def temporal_source(
    name: str, table: pd.DataFrame, root: Path, options: TemporalOptions, raw_dir: Path,
    where: str,
) -> SourceData:  # fmt: skip
    """The table as a natural source: one label vocabulary, periods in time order, the final
    period as asked, images decoded (or read from the cache)."""
    table, period, names = _periods(table, root, options, where)
    classes = tuple(sorted(table["label"].unique(), key=_label_order))
    y = np.asarray([classes.index(label) for label in table["label"]], np.int64)
    split = group = None
    if "split" in table.columns:
        split = np.asarray([("", *SPLITS).index(s) for s in table["split"]], np.int64)
    if "group" in table.columns:
        named = [
            str(g) if str(g).strip() and str(g) not in ("nan", "None") else f"\0{row}"
            for row, g in enumerate(table["group"])
        ]  # an ungrouped image: a group alone
        group = np.unique(named, return_inverse=True)[1].astype(np.int64)
    x = _cached_images(table, root, options, raw_dir, where)
    arrays = [x, y, period] + [a for a in (split, group) if a is not None]
    return SourceData(
        name=name,
        x_train=x,
        y_train=y,
        x_test=np.zeros((0, *x.shape[1:]), np.uint8),
        y_test=np.zeros(0, np.int64),
        class_names=classes,
        time_train=period,
        time_names=names,
        split_train=split,
        final_labelled=options.final_labelled,
        group_train=group,
        fingerprint=fingerprint(*arrays, np.array(classes), np.array(names)),
    )


def _label_order(label: str) -> tuple[int, float | str]:
    """Labels that are all numbers sort by value (class ``10`` after ``9``), others by name."""
    try:
        return 0, float(label)
    except ValueError:
        return 1, label


def _read(name: str, data_path: Path | None) -> tuple[pd.DataFrame, Path, str]:
    """Dataset ``name``'s table, the folder its paths are relative to, and how to name it."""
    if name == "folder":
        if data_path is None:
            raise Seq2FinalError("dataset 'folder' needs data_path: a folder "
                                 "root/<period>/<class>/<image>")  # fmt: skip
        return folder_table(data_path), data_path, f"folder '{data_path}'"
    if data_path is None:
        raise Seq2FinalError("dataset 'manifest' needs data_path: a CSV or Parquet file with "
                             "columns path, label, time")  # fmt: skip
    table, root = manifest_table(data_path)
    return table, root, f"manifest '{data_path}'"


def count_periods(name: str, data_path: Path | None, options: StrictModel) -> int:
    """How many periods dataset ``name`` has at ``data_path`` under ``options``, from its table
    alone (no image is decoded): what the temporal protocols' views need before any work, and
    where a bad table is found first."""
    assert isinstance(options, TemporalOptions)
    table, root, where = _read(name, data_path)
    return len(_periods(table, root, options, where)[2])


@source("folder", natural=True, options=TemporalOptions, count=count_periods)
def load_folder(
    data_path: Path | None, raw_dir: Path, options: TemporalOptions | None = None
) -> SourceData:
    """Your own images by time: a folder root/<period>/<class>/<image> (docs/data.md)."""
    table, root, where = _read("folder", data_path)
    return temporal_source("folder", table, root, options or TemporalOptions(), raw_dir, where)


@source("manifest", natural=True, options=TemporalOptions, count=count_periods)
def load_manifest(
    data_path: Path | None, raw_dir: Path, options: TemporalOptions | None = None
) -> SourceData:
    """Your own images by time: a CSV or Parquet manifest of path, label, time (docs/data.md)."""
    table, root, where = _read("manifest", data_path)
    return temporal_source("manifest", table, root, options or TemporalOptions(), raw_dir, where)
