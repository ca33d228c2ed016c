"""Image sources: where the pixels of a sequence come from.

A source turns raw files (or scikit-learn's bundled digits) into a :class:`SourceData`: uint8
images N×3×H×W, integer labels, optional sub-class ids, split into a train pool and a test pool.
Shift sequences draw every step afresh from the train pool and the final test set from the test
pool, so the test images never overlap any training image.

Sources are registered by name in :data:`SOURCES`; each is a function
``(data_path: Path | None, raw_dir: Path) -> SourceData``. Adding a dataset is one decorated
function.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from seq2final.errors import Seq2FinalError
from seq2final.registry import Registry

logger = logging.getLogger(__name__)

SourceLoader = Callable[[Path | None, Path], "SourceData"]
SOURCES: Registry[SourceLoader] = Registry("dataset")


@dataclass(frozen=True)
class SourceData:
    """The pools a sequence is drawn from.

    ``sub_*`` holds sub-population ids (0..num_subclasses-1) within each label class, or ``None``
    when the source has no sub-classes. ``time_*`` holds a natural time step per image for sources
    that are sequences by themselves (Portraits decades), else ``None``.
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

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def num_subclasses(self) -> int | None:
        return None if self.subclass_names is None else len(self.subclass_names[0])

    def with_subpopulations(self) -> SourceData:
        """The view of this source whose labels are super-classes with sub-class ids.

        CIFAR-100 already is that view (coarse labels, fine sub-classes). Digits becomes two
        super-classes (even, odd) with the five digits of each as sub-classes.
        """
        if self.sub_train is not None:
            return self
        if self.name == "digits":
            return _digits_by_parity(self)
        raise Seq2FinalError(
            f"dataset '{self.name}' has no sub-populations for 'subpop' shifts; "
            "valid: cifar100, digits"
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


def _fingerprint(*arrays: np.ndarray) -> str:
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(str(array.shape).encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]


def _require_path(source: str, data_path: Path | None, what: str) -> Path:
    if data_path is None:
        raise Seq2FinalError(f"dataset '{source}' needs data_path: {what}")
    if not data_path.exists():
        raise Seq2FinalError(
            f"data_path '{data_path}' does not exist; dataset '{source}' needs {what}"
        )
    return data_path


# --------------------------------------------------------------------------------------------
# digits: the embedded default
# --------------------------------------------------------------------------------------------

DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0


@SOURCES.register("digits")
def load_digits(data_path: Path | None = None, raw_dir: Path | None = None) -> SourceData:
    """scikit-learn's bundled handwritten digits (1,797 real 8×8 images), as 32×32 RGB uint8.

    Needs no download, so ``kedro run`` works offline on a fresh machine. The 0-16 grey levels are
    scaled to 0-255 and upscaled bilinearly to 32×32 so the shifts and architectures see the same
    geometry as CIFAR. The train/test pools are one fixed stratified split, independent of the run
    seed, so every sequence of every seed draws its final test set from the same pool.
    """
    import torch
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    bunch = sklearn_digits()
    grey = torch.from_numpy(bunch.images.astype(np.float32) * (255.0 / 16.0))[:, None]
    big = torch.nn.functional.interpolate(grey, size=(32, 32), mode="bilinear", align_corners=False)
    images = big.round().clamp(0, 255).to(torch.uint8).repeat(1, 3, 1, 1).numpy()
    labels = bunch.target.astype(np.int64)
    train_idx, test_idx = train_test_split(
        np.arange(len(labels)),
        test_size=DIGITS_TEST_FRACTION,
        stratify=labels,
        random_state=DIGITS_SPLIT_SEED,
    )
    train_idx.sort()
    test_idx.sort()
    return SourceData(
        name="digits",
        x_train=images[train_idx],
        y_train=labels[train_idx],
        x_test=images[test_idx],
        y_test=labels[test_idx],
        class_names=tuple(str(d) for d in range(10)),
        fingerprint=_fingerprint(images, labels, train_idx),
    )


def _digits_by_parity(source: SourceData) -> SourceData:
    """Even/odd super-classes with the digits as sub-classes: digit d → (d % 2, d // 2)."""
    return replace(
        source,
        y_train=source.y_train % 2,
        y_test=source.y_test % 2,
        sub_train=source.y_train // 2,
        sub_test=source.y_test // 2,
        class_names=("even", "odd"),
        subclass_names=(("0", "2", "4", "6", "8"), ("1", "3", "5", "7", "9")),
    )


# --------------------------------------------------------------------------------------------
# CIFAR-10 / CIFAR-100 (python pickles, as torchvision downloads them)
# --------------------------------------------------------------------------------------------

CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip


def _cifar_folder(source: str, data_path: Path | None, raw_dir: Path, folder: str) -> Path:
    """Find ``folder`` (e.g. ``cifar-10-batches-py``) locally, or download it with torchvision."""
    candidates = [p for p in (data_path, raw_dir / source) if p is not None]
    for base in candidates:
        for path in (base / folder, base):
            if (path / ("meta" if "100" in folder else "batches.meta")).exists():
                return path
    if data_path is not None:
        raise Seq2FinalError(
            f"data_path '{data_path}' holds no {folder}/ folder; dataset '{source}' needs the "
            f"python version of the files (torchvision's layout)"
        )
    target = raw_dir / source
    _download(
        "CIFAR10" if source == "cifar10" else "CIFAR100",
        target,
        f"dataset '{source}' is not in {target}/{folder} and could not be downloaded",
        f"put the extracted {folder}/ folder there, or pass data_path, or use dataset:npz",
    )
    return target / folder


def _download(dataset_class: str, root: Path, problem: str, remedy: str) -> None:
    """Download a torchvision dataset into ``root``; any failure becomes one line with a remedy."""
    from seq2final import _torchvision_guard  # noqa: F401, I001  (must precede torchvision)
    from torchvision import datasets

    try:
        root.mkdir(parents=True, exist_ok=True)
        getattr(datasets, dataset_class)(str(root), train=True, download=True)
    except Exception as error:  # network errors come in many types; all mean the same here
        raise Seq2FinalError(f"{problem} ({type(error).__name__}); {remedy}") from None


def _unpickle(path: Path) -> dict:
    try:
        with path.open("rb") as handle:
            return pickle.load(handle, encoding="latin1")
    except (OSError, pickle.UnpicklingError, EOFError) as error:
        raise Seq2FinalError(f"cannot read {path}: {error}") from None


def _cifar_images(batch: dict, path: Path) -> np.ndarray:
    data = np.asarray(batch.get("data"))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise Seq2FinalError(f"{path}: 'data' must be uint8 N×3072, got {data.dtype} {data.shape}")
    return data.reshape(-1, 3, 32, 32)


@SOURCES.register("cifar10")
def load_cifar10(data_path: Path | None, raw_dir: Path) -> SourceData:
    """CIFAR-10 from torchvision's python pickles (``cifar-10-batches-py``)."""
    folder = _cifar_folder("cifar10", data_path, raw_dir, "cifar-10-batches-py")
    xs, ys = [], []
    for k in range(1, 6):
        batch = _unpickle(folder / f"data_batch_{k}")
        xs.append(_cifar_images(batch, folder / f"data_batch_{k}"))
        ys.append(np.asarray(batch["labels"], dtype=np.int64))
    test = _unpickle(folder / "test_batch")
    x_train, y_train = np.concatenate(xs), np.concatenate(ys)
    x_test, y_test = (
        _cifar_images(test, folder / "test_batch"),
        np.asarray(test["labels"], np.int64),
    )
    return SourceData(
        name="cifar10",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        class_names=CIFAR10_CLASSES,
        fingerprint=_fingerprint(x_train, y_train, x_test, y_test),
    )


def cifar100_hierarchy() -> dict:
    """The super-class table of the benchmark (coarse names, sub-class fine ids in shift order)."""
    with (Path(__file__).parent / "cifar100_subpopulations.json").open() as handle:
        return json.load(handle)


@SOURCES.register("cifar100")
def load_cifar100(data_path: Path | None, raw_dir: Path) -> SourceData:
    """CIFAR-100 with its 20 coarse labels and, per image, the sub-class column 0-4.

    The column order is the benchmark's: columns 0-1 form the source, and each ``subpop`` step
    brings in the next column and drops the oldest, so the final step's sub-classes are unseen.
    """
    folder = _cifar_folder("cifar100", data_path, raw_dir, "cifar-100-python")
    table = cifar100_hierarchy()
    fine_to_coarse = np.full(100, -1, np.int64)
    fine_to_column = np.full(100, -1, np.int64)
    for coarse, row in enumerate(table["subclasses"]):
        for column, fine in enumerate(row["fine_ids"]):
            fine_to_coarse[fine], fine_to_column[fine] = coarse, column
    splits = {}
    for split in ("train", "test"):
        batch = _unpickle(folder / split)
        fine = np.asarray(batch["fine_labels"], np.int64)
        splits[split] = (_cifar_images(batch, folder / split), fine)
    (x_train, fine_train), (x_test, fine_test) = splits["train"], splits["test"]
    return SourceData(
        name="cifar100",
        x_train=x_train,
        y_train=fine_to_coarse[fine_train],
        x_test=x_test,
        y_test=fine_to_coarse[fine_test],
        class_names=tuple(row["name"] for row in table["subclasses"]),
        sub_train=fine_to_column[fine_train],
        sub_test=fine_to_column[fine_test],
        subclass_names=tuple(tuple(row["fine_names"]) for row in table["subclasses"]),
        fingerprint=_fingerprint(x_train, fine_train, x_test, fine_test),
    )


# --------------------------------------------------------------------------------------------
# Fashion-MNIST (the standard idx files)
# --------------------------------------------------------------------------------------------

FASHION_CLASSES = (
    "t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot",
)  # fmt: skip
_IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (optionally gzipped) into a uint8 array."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            raw = handle.read()
    except (OSError, EOFError) as error:
        raise Seq2FinalError(f"cannot read {path}: {error}") from None
    if len(raw) < 4 or raw[:2] != b"\x00\x00" or raw[2] != 0x08:
        raise Seq2FinalError(f"{path} is not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise Seq2FinalError(f"{path} is truncated: header says {dims}, found {data.size} bytes")
    return data.reshape(dims)


@SOURCES.register("fashion_mnist")
def load_fashion_mnist(data_path: Path | None, raw_dir: Path) -> SourceData:
    """Fashion-MNIST, zero-padded from 28×28 to 32×32 (padding keeps every pixel exact)."""
    folder = data_path if data_path is not None else raw_dir / "FashionMNIST" / "raw"
    if data_path is None and not folder.exists():
        _download(
            "FashionMNIST",
            raw_dir,
            f"dataset 'fashion_mnist' is not in {folder} and could not be downloaded",
            "pass data_path to a folder of the *-idx*-ubyte.gz files",
        )
    if not folder.is_dir():
        raise Seq2FinalError(
            f"data_path '{folder}' is not a folder; dataset 'fashion_mnist' needs the "
            "*-idx*-ubyte(.gz) files"
        )
    arrays = {}
    for key, stem in _IDX_FILES.items():
        found = [folder / f"{stem}.gz", folder / stem]
        path = next((p for p in found if p.exists()), None)
        if path is None:
            raise Seq2FinalError(
                f"'{found[0]}' is missing; dataset 'fashion_mnist' needs {stem}.gz"
            )
        arrays[key] = read_idx(path)
    x_train, y_train = check_arrays("fashion_mnist train", arrays["x_train"], arrays["y_train"])
    x_test, y_test = check_arrays("fashion_mnist test", arrays["x_test"], arrays["y_test"])
    pad = ((0, 0), (0, 0), (2, 2), (2, 2))
    return SourceData(
        name="fashion_mnist",
        x_train=np.pad(x_train, pad),
        y_train=y_train,
        x_test=np.pad(x_test, pad),
        y_test=y_test,
        class_names=FASHION_CLASSES,
        fingerprint=_fingerprint(x_train, y_train, x_test, y_test),
    )


# --------------------------------------------------------------------------------------------
# Portraits (yearbook photos by decade)
# --------------------------------------------------------------------------------------------

PORTRAIT_DECADES = ("1930s", "1940s", "1950s", "1960s", "1970s", "1980s", "1990s", "2000s")
_PORTRAIT_NAME = re.compile(r"^(\d{4})_.*\.png$", re.IGNORECASE)


def _decade_index(year: int) -> int | None:
    if 1930 <= year <= 1999:
        return (year - 1930) // 10
    if 2000 <= year <= 2013:
        return 7
    return None


@SOURCES.register("portraits")
def load_portraits(data_path: Path | None, raw_dir: Path) -> SourceData:
    """The raw yearbook folder ``…/{F,M}/YYYY_*.png``: label 0 = male, 1 = female.

    Every image is read as grey, resized to 32×32 (bilinear) and copied to 3 channels, and kept on
    the 0-255 scale like every other source (the original's double normalisation is not kept).
    All images land in the train pool with their decade as natural time step; the sequence
    builder splits them per decade (the final decade 40/10/50 into train/valid/test).
    """
    from PIL import Image, UnidentifiedImageError

    root = _require_path("portraits", data_path, "the yearbook folder with F/ and M/ inside")
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
        fingerprint=_fingerprint(x, y, t),
    )


# --------------------------------------------------------------------------------------------
# npz: arrays a user brings
# --------------------------------------------------------------------------------------------


@SOURCES.register("npz")
def load_npz(data_path: Path | None, raw_dir: Path) -> SourceData:
    """``x_train, y_train, x_test, y_test[, label_names]`` uint8 arrays from one ``.npz`` file."""
    path = _require_path("npz", data_path, "an .npz file with x_train, y_train, x_test, y_test")
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except (OSError, ValueError) as error:
        raise Seq2FinalError(f"cannot read npz data_path '{path}': {error}") from None
    missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in arrays]
    if missing:
        raise Seq2FinalError(
            f"npz data_path '{path}' lacks {', '.join(missing)}; it needs x_train, y_train, "
            "x_test, y_test (label_names optional)"
        )
    x_train, y_train = check_arrays(f"{path.name} train", arrays["x_train"], arrays["y_train"])
    x_test, y_test = check_arrays(f"{path.name} test", arrays["x_test"], arrays["y_test"])
    if x_train.shape[1:] != x_test.shape[1:]:
        raise Seq2FinalError(
            f"{path.name}: train images {x_train.shape[1:]} and test images {x_test.shape[1:]} differ"
        )
    num_classes = int(max(y_train.max(initial=0), y_test.max(initial=0))) + 1
    names = arrays.get("label_names")
    class_names = (
        tuple(str(n) for n in names) if names is not None else tuple(map(str, range(num_classes)))
    )
    if len(class_names) < num_classes:
        raise Seq2FinalError(
            f"{path.name}: label_names has {len(class_names)} names but labels go up to "
            f"{num_classes - 1}"
        )
    return SourceData(
        name="npz",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        class_names=class_names,
        fingerprint=_fingerprint(x_train, y_train, x_test, y_test),
    )


def load_source(name: str, data_path: str | Path | None, raw_dir: str | Path) -> SourceData:
    """Load source ``name`` (an unknown name is answered with the valid ones)."""
    loader = SOURCES[name]
    return loader(Path(data_path) if data_path else None, Path(raw_dir))
