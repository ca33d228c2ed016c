"""Small temporal image sets made at test time: a folder root/<period>/<class>/<image> and its
manifest, as a user's own data (src/seq2final/data/sources/temporal.py)."""

import numpy as np
import pandas as pd
from PIL import Image

PERIODS = ("95", "1003", "2000")  # as strings 1003 < 2000 < 95: ordered by value here
CLASSES = ("cat", "dog")


def write_images(root, periods=PERIODS, classes=CLASSES, per_class=4, suffix=".png"):
    """root/<period>/<class>/<image>: plain images whose shade moves with period and class,
    some RGB 40×30 and some grey 24×24 (to be converted), as PNG or JPEG."""
    paths = []
    for p, period in enumerate(periods):
        for c, label in enumerate(classes):
            folder = root / period / label
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                shade = (40 * p + 90 * c + 5 * i) % 256
                if i % 2:
                    image = Image.fromarray(np.full((24, 24), shade, np.uint8))  # grey
                else:
                    image = Image.fromarray(np.full((30, 40, 3), shade, np.uint8))
                path = folder / f"{i}{suffix}"
                image.save(path)
                paths.append((path, label, period))
    return paths


def manifest_of(root, paths, name="manifest.csv", **extra):
    table = pd.DataFrame({"path": [str(p.relative_to(root)) for p, _, _ in paths],
                          "label": [label for _, label, _ in paths],
                          "time": [period for _, _, period in paths], **extra})  # fmt: skip
    target = root / name
    if name.endswith(".parquet"):
        table.to_parquet(target)
    else:
        table.to_csv(target, index=False)
    return target
