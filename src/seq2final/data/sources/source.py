"""Image sources: where the pixels of a sequence come from, and the registry that names them.

A source turns raw files (or scikit-learn's bundled digits) into a :class:`SourceData`: uint8
images N×3×H×W, integer labels, optional sub-class ids, split into a train pool and a test pool.
Shift sequences draw every step afresh from the train pool and the final test set from the test
pool, so the test images never overlap any training image.

Each source is a :class:`Source` in :data:`SOURCES`: its loader
``(data_path: Path | None, raw_dir: Path) -> SourceData`` plus what the rest of the benchmark needs
to know about it without loading it (default step sizes, whether it is a sequence by itself, how
it offers sub-populations). Adding a dataset is one function decorated with :func:`source`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from seq2final.core import torchvision_guard  # noqa: F401  (must precede torchvision)
from seq2final.core.errors import Seq2FinalError
from seq2final.core.registry import Registry
from seq2final.core.schema import StrictModel
from seq2final.data.sizes import PAPER_SIZES, DefaultSizes


@dataclass(frozen=True)
class SourceData:
    """The pools a sequence is drawn from.

    ``sub_*`` holds sub-population ids (0..num_subclasses-1) within each label class, or ``None``
    when the source has no sub-classes. ``time_*`` holds a natural time step per image for sources
    that are sequences by themselves (Portraits decades), else ``None``. ``split_train``: for
    such a source, the split each image must go to (0: the seeded hold-out decides, 1 train,
    2 valid, 3 test; a manifest's ``split`` column); ``final_labelled``: how many images of the
    final period adaptation may use (train and valid), the rest its test set; ``group_train``:
    each image's group (a patient, a camera: a manifest's ``group`` column), which the seeded
    hold-out keeps whole within one split.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: tuple[str, ...]
    sub_train: np.ndarray | None = None
    sub_test: np.ndarray | None = None
    subclass_names: tuple[tuple[str, ...], ...] | None = None
    time_train: np.ndarray | None = None
    time_names: tuple[str, ...] | None = None
    fingerprint: str = field(default="")
    split_train: np.ndarray | None = None
    final_labelled: int | None = None
    group_train: np.ndarray | None = None

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def num_subclasses(self) -> int | None:
        return None if self.subclass_names is None else len(self.subclass_names[0])


SourceLoader = Callable[..., SourceData]
"""``(data_path, raw_dir)``, and the checked ``data_options`` for a source that declares them."""
SubpopulationView = Callable[[SourceData], SourceData]
PeriodCounter = Callable[[str, Path | None, "StrictModel"], int]
"""``(dataset, data_path, options) -> periods``: a natural source's periods, without loading it."""


@dataclass(frozen=True)
class Source:
    """A registered dataset: its loader and what is known about it before loading.

    ``default_sizes``: step sizes for spec strings that give none. ``bundled``: it loads with no
    files (its data ships with an installed package), so it works offline. ``natural``: it is a
    sequence by itself (its images carry time periods), so only the ``natural`` spec fits it;
    ``periods``: how many time steps it has, for a natural source whose loader insists on every
    period (known before loading, so a protocol's options are checked before any work).
    ``subclasses``: its images carry sub-class ids of their own (CIFAR-100's fine labels);
    ``subpopulation_view``: otherwise, how to regroup its labels into super-classes with sub-classes
    for ``subpop`` shifts (digits: even/odd). ``options``: the model of the ``data_options`` it
    takes (a user's own data: how its times become periods), checked before any work;
    ``count``: for a natural source whose periods depend on its files, how many it has, read
    cheaply before it is loaded (the temporal protocols' views need the number).
    """

    load: SourceLoader
    default_sizes: DefaultSizes = PAPER_SIZES
    bundled: bool = False
    natural: bool = False
    subclasses: bool = False
    subpopulation_view: SubpopulationView | None = None
    periods: int | None = None
    options: type[StrictModel] | None = None
    count: PeriodCounter | None = None

    @property
    def description(self) -> str:
        return ((self.load.__doc__ or "").strip().splitlines() or [""])[0]

    @property
    def has_subpopulations(self) -> bool:
        return self.subclasses or self.subpopulation_view is not None


SOURCES: Registry[Source] = Registry("dataset")


def source(
    name: str,
    *,
    default_sizes: DefaultSizes = PAPER_SIZES,
    bundled: bool = False,
    natural: bool = False,
    subclasses: bool = False,
    subpopulation_view: SubpopulationView | None = None,
    periods: int | None = None,
    options: type[StrictModel] | None = None,
    count: PeriodCounter | None = None,
) -> Callable[[SourceLoader], SourceLoader]:
    """Register the decorated loader as dataset ``name`` (see :class:`Source` for the options)."""

    def register(load: SourceLoader) -> SourceLoader:
        SOURCES.add(
            name,
            Source(
                load,
                default_sizes,
                bundled,
                natural,
                subclasses,
                subpopulation_view,
                periods,
                options,
                count,
            ),
        )
        return load

    return register


def sources_with_subpopulations() -> list[str]:
    """The datasets ``subpop`` shifts can run on."""
    return [name for name, entry in SOURCES.items() if entry.has_subpopulations]


def with_subpopulations(data: SourceData) -> SourceData:
    """The view of ``data`` whose labels are super-classes with sub-class ids.

    Data that carries sub-class ids already is that view; a registered source may offer one
    (:attr:`Source.subpopulation_view`); any other is refused, naming the datasets that fit.
    """
    if data.sub_train is not None:
        return data
    entry = SOURCES.get(data.name)
    if entry is not None and entry.subpopulation_view is not None:
        return entry.subpopulation_view(data)
    raise Seq2FinalError(
        f"dataset '{data.name}' has no sub-populations for 'subpop' shifts; "
        f"valid: {', '.join(sources_with_subpopulations())}"
    )


def check_arrays(name: str, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate one split and return it as (N×3×H×W uint8, int64 labels).

    Accepts NHWC or NCHW, gray (N×H×W, one channel) or RGB, because users bring arrays from many
    libraries; anything else is refused with the shape that was found.
    """
    if x.dtype != np.uint8:
        raise Seq2FinalError(f"{name}: images must be uint8 (0-255), got dtype {x.dtype}")
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4:
        raise Seq2FinalError(
            f"{name}: images must be N×H×W, N×H×W×C or N×C×H×W with C in (1, 3), got shape {x.shape}"
        )
    if x.shape[1] not in (1, 3) and x.shape[3] in (1, 3):
        x = x.transpose(0, 3, 1, 2)
    if x.shape[1] not in (1, 3) or x.shape[2] < 8 or x.shape[3] < 8:
        raise Seq2FinalError(
            f"{name}: images must be N×H×W, N×H×W×C or N×C×H×W with C in (1, 3) and H, W >= 8, "
            f"got shape {x.shape}"
        )
    if x.shape[1] == 1:
        x = np.repeat(x, 3, axis=1)
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != len(x):
        raise Seq2FinalError(f"{name}: labels must be a vector of length {len(x)}, got {y.shape}")
    if not np.issubdtype(y.dtype, np.integer) or (len(y) and y.min() < 0):
        raise Seq2FinalError(f"{name}: labels must be non-negative integers, got {y.dtype}")
    return np.ascontiguousarray(x), y.astype(np.int64)


def fingerprint(*arrays: np.ndarray) -> str:
    """A short digest of arrays' shapes and bytes: a built sequence records which data it drew."""
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(str(array.shape).encode())
        digest.update(np.ascontiguousarray(array).data)  # the bytes, not a copy of them
    return digest.hexdigest()[:16]


def require_path(source: str, data_path: Path | None, what: str) -> Path:
    """``data_path`` if it exists; otherwise one line saying what the source needs there."""
    if data_path is None:
        raise Seq2FinalError(f"dataset '{source}' needs data_path: {what}")
    if not data_path.exists():
        raise Seq2FinalError(
            f"data_path '{data_path}' does not exist; dataset '{source}' needs {what}"
        )
    return data_path


def download(dataset_class: str, root: Path, problem: str, remedy: str) -> None:
    """Download a torchvision dataset into ``root``; any failure becomes one line with a remedy."""
    from torchvision import datasets  # lazy: only a download needs torchvision's dataset classes

    try:
        root.mkdir(parents=True, exist_ok=True)
        getattr(datasets, dataset_class)(str(root), train=True, download=True)
    except Exception as error:  # network errors come in many types; all mean the same here
        raise Seq2FinalError(f"{problem} ({type(error).__name__}); {remedy}") from None


def checked_options(name: str, options: Mapping[str, Any] | None) -> StrictModel | None:
    """Dataset ``name``'s ``data_options``, checked against what it declares: one line for a
    bad key or value, or for options given to a dataset that takes none."""
    entry = SOURCES[name]
    if entry.options is None:
        if options:
            takers = [n for n, e in SOURCES.items() if e.options is not None]
            raise Seq2FinalError(f"dataset '{name}' takes no data_options (got "
                                 f"{', '.join(options)}); valid: for {', '.join(takers)}")  # fmt: skip
        return None
    try:
        return entry.options(**(options or {}))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise Seq2FinalError(
            f"data_options{'.' + where if where else ''}: {first['msg']}"
        ) from None


def load_source(
    name: str,
    data_path: str | Path | None,
    raw_dir: str | Path,
    options: Mapping[str, Any] | None = None,
) -> SourceData:
    """Load source ``name`` (an unknown name is answered with the valid ones), with its
    ``data_options`` where it declares them."""
    entry = SOURCES[name]
    checked = checked_options(name, options)
    path = Path(data_path) if data_path else None
    if checked is None:
        return entry.load(path, Path(raw_dir))
    return entry.load(path, Path(raw_dir), checked)
