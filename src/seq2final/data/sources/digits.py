"""``digits``: scikit-learn's bundled handwritten digits, the embedded default that needs no download."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from seq2final.data.sizes import DefaultSizes
from seq2final.data.sources.source import SourceData, fingerprint, source

DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0
DIGITS_SIZES = DefaultSizes(source=500, targets=(300, 500), test=200, oracle=600)


def by_parity(source: SourceData) -> SourceData:
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


@source("digits", default_sizes=DIGITS_SIZES, bundled=True, subpopulation_view=by_parity)
def load_digits(data_path: Path | None = None, raw_dir: Path | None = None) -> SourceData:
    """scikit-learn's bundled handwritten digits (1,797 real 8×8 images), as 32×32 RGB uint8.

    Needs no download, so ``kedro run`` works offline on a fresh machine. The 0-16 grey levels are
    scaled to 0-255 and upscaled bilinearly to 32×32 so the shifts and architectures see the same
    geometry as CIFAR. The train/test pools are one fixed stratified split, independent of the run
    seed, so every sequence of every seed draws its final test set from the same pool.
    """
    # lazy: scikit-learn's dataset modules take a second to import and only this loader needs them
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split  # lazy: as above

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
        fingerprint=fingerprint(images, labels, train_idx),
    )
