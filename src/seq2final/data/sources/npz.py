"""``npz``: uint8 arrays a user brings in one ``.npz`` file."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from seq2final.core.errors import Seq2FinalError
from seq2final.data.sources.source import (
    SourceData,
    check_arrays,
    fingerprint,
    require_path,
    source,
)


@source("npz")
def load_npz(data_path: Path | None, raw_dir: Path) -> SourceData:
    """``x_train, y_train, x_test, y_test[, label_names]`` uint8 arrays from one ``.npz`` file."""
    path = require_path("npz", data_path, "an .npz file with x_train, y_train, x_test, y_test")
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
        fingerprint=fingerprint(x_train, y_train, x_test, y_test),
    )
