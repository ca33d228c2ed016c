"""``cifar10`` and ``cifar100``: torchvision's python pickles, read without torchvision's checksums."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np

from seq2final.core.errors import Seq2FinalError
from seq2final.data.sources.source import SourceData, download, fingerprint, source

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
    download(
        "CIFAR10" if source == "cifar10" else "CIFAR100",
        target,
        f"dataset '{source}' is not in {target}/{folder} and could not be downloaded",
        f"put the extracted {folder}/ folder there, or pass data_path, or use dataset:npz",
    )
    return target / folder


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


@source("cifar10")
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
        fingerprint=fingerprint(x_train, y_train, x_test, y_test),
    )


def cifar100_hierarchy() -> dict:
    """The super-class table of the benchmark (coarse names, sub-class fine ids in shift order)."""
    with (Path(__file__).parent / "cifar100_subpopulations.json").open() as handle:
        return json.load(handle)


@source("cifar100", subclasses=True)
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
        fingerprint=fingerprint(x_train, fine_train, x_test, fine_test),
    )
