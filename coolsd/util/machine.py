"""What this CPU is: its model name and the feature flags that decide what runs fast on it."""

from __future__ import annotations

import platform
from pathlib import Path


def _cpuinfo() -> list[str] | None:
    """The lines of /proc/cpuinfo (None where there is none)."""
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one; else what the platform module says)."""
    lines = _cpuinfo()
    if lines is None:
        return platform.processor() or platform.machine()
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), platform.machine())


def cpu_flags() -> set[str]:
    """The feature flags the CPU lists in /proc/cpuinfo ("avx2", "fma", "amx_bf16", ...; empty where there is none)."""
    return set(next((ln for ln in _cpuinfo() or [] if ln.startswith("flags")), "").split(":", 1)[-1].split())


def bf16_units() -> list[str]:
    """The bf16 units the CPU lists (amx_bf16, avx512_bf16; [] when none or no /proc/cpuinfo)."""
    flags = cpu_flags()
    return [f for f in ("amx_bf16", "avx512_bf16") if f in flags]


def cpu_key() -> str:
    """This CPU in a choice file: its model name and its bf16 units, e.g. "AMD EPYC [avx512_bf16]",
    "AMD EPYC [no bf16 units]"."""
    return f"{cpu_name()} [{', '.join(bf16_units()) or 'no bf16 units'}]"
