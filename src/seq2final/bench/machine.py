"""The machine a figure was measured on, written beside every figure."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch


def _first_processor() -> dict[str, str]:
    """``/proc/cpuinfo``'s fields of the first processor (none where there is no such file)."""
    fields: dict[str, str] = {}
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text().splitlines():
            name, _, value = line.partition(":")
            if not name.strip():
                break  # the first processor's block is enough
            fields.setdefault(name.strip(), value.strip())
    return fields


def cpu_kind() -> str:
    """The CPU as far as it decides float results: vendor, family, model and stepping, and the
    instruction set torch's kernels use. Two machines of one kind compute the same bits for the
    same seed and thread count; any other kind may differ in the last digits, which a few epochs
    of training turn into other predictions (docs/architecture.md, "Reproducibility")."""
    fields = _first_processor()
    part = " ".join(
        f"{label} {fields[name]}"
        for label, name in (("family", "cpu family"), ("model", "model"), ("stepping", "stepping"))
        if name in fields
    )
    vendor = fields.get("vendor_id", platform.processor() or platform.machine())
    kind = f"{vendor} {part} {torch.backends.cpu.get_cpu_capability()}".replace("  ", " ")
    # oneDNN's and MKL's own instruction-set pins change their kernels too
    pins = [f"{name}={os.environ[name]}" for name in ("ONEDNN_MAX_CPU_ISA", "MKL_CBWR")
            if os.environ.get(name)]  # fmt: skip
    return " ".join([kind, *pins])


def describe_machine(device: torch.device) -> dict[str, Any]:
    """CPU model, cores, torch threads, device (with the GPU's name) and torch version."""
    cpu = _first_processor().get("model name") or platform.processor() or platform.machine()
    shown = str(device)
    if device.type == "cuda":
        shown = f"{device} ({torch.cuda.get_device_name(device)})"
    return {
        "cpu": cpu,
        "cores": os.cpu_count() or 0,
        "torch_threads": torch.get_num_threads(),
        "device": shown,
        "torch": torch.__version__,
    }
