"""Reading a user's own images (dataset ``folder``): decode throughput against a bare PIL loop on
the same files, the cached re-read against the first read, and peak memory against the final
array's size (docs/data.md, "Your own temporal data").

    .venv/bin/python benchmarks/own_data.py [IMAGES [WIDTH HEIGHT]]   # default 50,000 of 64×48

Generates IMAGES photos of WIDTH×HEIGHT pixels (4 periods × 5 classes; smooth shades with noise,
JPEG quality 90) in a temporary folder, then, in
one process: the project's first read (``load_source("folder", …)``: table, threads, cache
written), its second read (the cache), and a bare loop (PIL open, the same reduced-scale JPEG
decode, RGB, resize to 32×32, one image after another). Peak memory is the process's resident high-water mark after the first read over
the mark before it (``resource.getrusage``), against the decoded array's bytes. Prints one JSON
line.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from seq2final.bench.machine import cpu_kind
from seq2final.data.sources import load_source

PERIODS, CLASSES = ("2019", "2020", "2021", "2022"), ("a", "b", "c", "d", "e")


def generate(root: Path, images: int, width: int = 64, height: int = 48) -> list[Path]:
    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 80, width)[None, :, None] + np.linspace(0, 80, height)[:, None, None]
    paths = []
    per_folder = images // (len(PERIODS) * len(CLASSES))
    for period in PERIODS:
        for label in CLASSES:
            folder = root / period / label
            folder.mkdir(parents=True)
            for i in range(per_folder):
                path = folder / f"{i}.jpg"
                shade = rng.integers(0, 170, 3)[None, None, :]
                noise = rng.normal(0, 8, (height, width, 3))
                pixels = np.clip(ramp + shade + noise, 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(path, quality=90)
                paths.append(path)
    return paths


def bare(paths: list[Path]) -> np.ndarray:
    out = np.empty((len(paths), 3, 32, 32), np.uint8)
    for index, path in enumerate(paths):
        with Image.open(path) as image:
            image.draft("RGB", (32, 32))  # the same decode as the project's: like with like
            small = image.convert("RGB").resize((32, 32), Image.Resampling.BILINEAR)
        out[index] = np.asarray(small).transpose(2, 0, 1)
    return out


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(images: int, width: int, height: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root, raw = Path(folder) / "photos", Path(folder) / "raw"
        paths = sorted(generate(root, images, width, height), key=str)
        baseline = peak_mib()  # the project's read first: its peak is its own
        started = time.perf_counter()
        first = load_source("folder", root, raw)
        first_s = time.perf_counter() - started
        first_peak = peak_mib()
        started = time.perf_counter()
        again = load_source("folder", root, raw)
        cached_s = time.perf_counter() - started
        assert again.fingerprint == first.fingerprint
        array_mib = first.x_train.nbytes / 2**20
        del first, again
        started = time.perf_counter()
        reference = bare(paths)
        bare_s = time.perf_counter() - started
        del reference
    print(json.dumps({
        "images": len(paths), "size": f"{width}x{height}", "cpu": cpu_kind(),
        "bare_images_per_s": round(len(paths) / bare_s), "first_read_images_per_s":
        round(len(paths) / first_s), "ratio_first_to_bare": round(bare_s / first_s, 3),
        "cached_read_s": round(cached_s, 3), "first_read_s": round(first_s, 3),
        "ratio_cached_to_first": round(first_s / cached_s, 1),
        "array_mib": round(array_mib, 1), "peak_mib_over_start": round(first_peak - baseline, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    count, *size = sys.argv[1:] or ["50000"]
    main(int(count), *(int(side) for side in size or ["64", "48"]))
