"""Writing files so that a reader never sees half of one: through a temporary name, then a rename."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary name in the same folder, then rename into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".partial-{uuid.uuid4().hex[:8]}-{path.name}")
    try:
        write(partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def json_safe(value: Any) -> Any:
    """JSON without NaN tokens (epoch 0 has no training metrics): NaN becomes null."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
