"""How the benchmarks measure (scripts/bench/, scripts/checks/device_check.py): a device sync before reading a
timer, the process's peak resident memory, and a one-line description of the machine."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch


def sync(device: torch.device) -> None:
    """Wait for the device's queued kernels, so that a timer measures the work, not its launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_rss_gb() -> float:
    try:
        status = Path("/proc/self/status").read_text()
        return int(status.split("VmHWM:")[1].split()[0]) / 2**20
    except (OSError, IndexError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def machine(device: str = "cpu") -> str:
    host = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    if torch.device(device).type == "cuda":
        return f"{torch.cuda.get_device_name(torch.device(device))} (CUDA {torch.version.cuda}), host {host}"
    return host
