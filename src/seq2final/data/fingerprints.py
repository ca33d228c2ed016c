"""What a source's data is now, as a digest of its arrays, computed once per version of its files.

A stored sequence records the fingerprint of the source it was drawn from. Before a pipeline trains
on it, the fingerprint is compared with the source as it is now, so an ``npz`` replaced at the same
path (or a re-downloaded dataset) is noticed instead of silently training on, or reusing results
of, the old data. Loading a source to fingerprint it costs seconds (CIFAR) so the digest is cached
under the raw-data folder, keyed by the size and modification time of every file the source may
read (``data_path``, else the whole raw-data folder, where sources keep their downloads); an
unchanged file set never loads twice.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seq2final.core.files import atomic_write
from seq2final.data.sources import SOURCES, load_source

log = logging.getLogger(__name__)

CACHE_FOLDER = ".fingerprints"


def files_signature(paths: list[Path]) -> str:
    """A digest of the names, sizes and modification times of every file under ``paths``."""
    entries = []
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if CACHE_FOLDER in path.parts:
                continue
            stat = path.stat()
            entries.append((str(path.resolve()), stat.st_size, stat.st_mtime_ns))
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:20]


def source_fingerprint(
    dataset: str,
    data_path: str | None,
    raw_dir: str | Path,
    options: Mapping[str, Any] | None = None,
) -> str:
    """The fingerprint :func:`load_source` would give now (a source's ``SourceData.fingerprint``),
    with the dataset's ``options``. A dataset with options reads the folder a manifest lies in
    (its images), so that folder is watched whole."""
    entry = SOURCES[dataset]
    if entry.bundled and data_path is None:
        return _bundled_fingerprint(dataset, str(raw_dir))
    raw = Path(raw_dir)
    paths = [Path(data_path)] if data_path else [raw]
    if entry.options is not None and data_path and Path(data_path).is_file():
        paths = [Path(data_path).parent]
    watched = [p for p in paths if p.exists()]
    if not watched:  # nothing on disk yet: the loader downloads it or says what is missing
        return load_source(dataset, data_path, raw_dir, options).fingerprint
    chosen = hashlib.sha256(json.dumps(options or {}, sort_keys=True).encode()).hexdigest()[:8]
    cache = raw / CACHE_FOLDER / f"{dataset}-{files_signature(watched)}-{chosen}.txt"
    if cache.exists():
        return cache.read_text().strip()
    value = load_source(dataset, data_path, raw_dir, options).fingerprint
    atomic_write(cache, lambda partial: partial.write_text(value))
    log.info("fingerprinted dataset %s: %s", dataset, value)
    return value


def source_change(
    recorded: str | None,
    dataset: str,
    data_path: str | None,
    raw_dir: str | Path,
    options: Mapping[str, Any] | None = None,
) -> tuple[str, str] | None:
    """``(recorded, current)`` when a stored sequence (its manifest's ``recorded`` fingerprint)
    was drawn from other data than the source holds now; None when they agree or the sequence
    predates fingerprints."""
    if not recorded:
        return None
    current = source_fingerprint(dataset, data_path, raw_dir, options)
    return None if recorded == current else (recorded, current)


@functools.cache
def _bundled_fingerprint(dataset: str, raw_dir: str) -> str:
    """Bundled data changes only with its package, so once per process is enough."""
    return load_source(dataset, None, raw_dir).fingerprint
