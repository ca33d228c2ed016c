"""The machine a figure was measured on, written beside every figure."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

import torch


def describe_machine(device: torch.device) -> dict[str, Any]:
    """CPU model, cores, torch threads, device (with the GPU's name) and torch version."""
    cpu = platform.processor() or platform.machine()
    info = Path("/proc/cpuinfo")
    if info.exists():
        names = re.findall(r"model name\s*:\s*(.*)", info.read_text())
        cpu = names[0].strip() if names else cpu
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
