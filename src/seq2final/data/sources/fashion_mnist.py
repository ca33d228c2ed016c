"""``fashion_mnist``: the standard IDX files, zero-padded to 32×32."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from seq2final.core.errors import Seq2FinalError
from seq2final.data.sources.source import SourceData, check_arrays, download, fingerprint, source

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


@source("fashion_mnist")
def load_fashion_mnist(data_path: Path | None, raw_dir: Path) -> SourceData:
    """Fashion-MNIST, zero-padded from 28×28 to 32×32 (padding keeps every pixel exact)."""
    folder = data_path if data_path is not None else raw_dir / "FashionMNIST" / "raw"
    if data_path is None and not folder.exists():
        download(
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
        fingerprint=fingerprint(x_train, y_train, x_test, y_test),
    )
