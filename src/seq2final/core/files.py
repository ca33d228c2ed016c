"""Writing files so that a reader never sees half of one, even after a crash or a power cut.

Every store writes through a temporary name that starts with ``.partial-`` in the target's folder,
flushes the data and the folder to disk, then renames into place. Listings skip every name that
starts with a dot, so a write killed half-way never shows up as a key.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PARTIAL = ".partial-"
"""The prefix of every temporary file or folder a store writes (hidden: listings skip it)."""


def partial_path(path: Path) -> Path:
    """A fresh temporary name beside ``path``, unique across processes and machines."""
    return path.with_name(f"{PARTIAL}{uuid.uuid4().hex[:12]}-{path.name}")


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Write through a temporary name in the same folder, fsync it, then rename into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(path)
    try:
        write(partial)
        fsync_path(partial)
        os.replace(partial, path)
        fsync_path(path.parent)
    finally:
        partial.unlink(missing_ok=True)


def fsync_path(path: Path) -> None:
    """Flush a file's data, or a folder's entries, to disk (a rename is durable only after this)."""
    flags = os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() and hasattr(os, "O_DIRECTORY") else 0)
    try:
        descriptor = os.open(path, flags)
    except OSError:  # some platforms cannot open folders; their renames are as durable as they get
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # e.g. a folder on a file system that does not sync folders
    finally:
        os.close(descriptor)


def fsync_tree(folder: Path) -> None:
    """Flush every file under ``folder``, then the folders themselves."""
    for path in sorted(folder.rglob("*"), reverse=True):
        fsync_path(path)
    fsync_path(folder)


def replace_folder(partial: Path, final: Path) -> None:
    """Move the finished folder ``partial`` to ``final``, atomically even when ``final`` exists.

    Readers see the old folder or the new one, never neither: on Linux the two are exchanged in
    one ``renameat2(RENAME_EXCHANGE)`` call; elsewhere the old folder is renamed aside first (a
    reader may then briefly find no folder, and is told to retry or rebuild).
    """
    fsync_tree(partial)
    if not final.exists():
        try:
            os.replace(partial, final)
            fsync_path(final.parent)
            return
        except OSError:  # another writer created it meanwhile: swap with theirs below
            pass
    if _exchange(partial, final):
        shutil.rmtree(partial)  # now holds the old contents
    else:
        aside = partial_path(final)
        os.replace(final, aside)
        os.replace(partial, final)
        shutil.rmtree(aside)
    fsync_path(final.parent)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2``); False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    result = renameat2(
        _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
    )
    return result == 0


def stored_files(folder: Path, suffix: str) -> Iterator[Path]:
    """The finished files of a store folder: ``*suffix`` without hidden (temporary) names."""
    if not folder.exists():
        return iter(())
    return (p for p in sorted(folder.glob(f"*{suffix}")) if not p.name.startswith("."))


def json_safe(value: Any) -> Any:
    """JSON without NaN tokens (epoch 0 has no training metrics): NaN becomes null."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
