"""Per-machine choices stored with a model folder: which CPU this is (its name, its bf16 units), and the choice
measured on it.

CPUs differ in what is fast on them (measured on the emoji model, one thread: a bf16 round beat fp32 on an AMD
EPYC with avx512_bf16, 5.53 vs 5.94 ms; on an Intel Xeon with AMX it lost, 5.58 vs 4.29 ms; on an AMD EPYC with
AVX2 only, no bf16 units, an eager bf16 step took 10.6 ms against fp32's 3.0). A model name does not tell those
AMD EPYCs apart (a VM reports "AMD EPYC" for both), so a CPU is keyed by its name and its bf16 units (`cpu_key`).
A choice file beside a model (`precision.json`, `execution.json`) keeps, beside the device-type entry
(`{"cpu": "bf16"}`, the last measured machine's choice and the fallback), one entry per CPU it was measured on:

    {"cpu": "fp32", "by_cpu": {"AMD EPYC [avx512_bf16]": "bf16", "AMD EPYC [no bf16 units]": "fp32"}, ...}

`stored_choice` reads this machine's entry first, then that of a CPU with the same bf16 units; `record_choice`
writes a new measurement, keeping the other machines' entries.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

BY_CPU = "by_cpu"


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


def stored_choice(file: Path, device_type: str) -> str | None:
    """The choice stored in the JSON `file` for a device of `device_type` ("cpu", "cuda"): on a CPU this CPU's
    own entry (`by_cpu`, keyed by `cpu_key`) when there is one, else the first entry measured on a CPU with the
    same bf16 units (what the precision and path choices turn on), else the device-type entry; None when the file,
    the entry or its JSON is missing or not a text (the caller checks the name)."""
    try:
        data = json.loads(Path(file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    measured = data.get(BY_CPU) if device_type == "cpu" else None
    measured = measured if isinstance(measured, dict) else {}  # {cpu_key: choice}
    here = cpu_key()  # (reads /proc/cpuinfo: once)
    alike = [choice for key, choice in measured.items() if _units_of(key) == _units_of(here)]
    choice = measured.get(here, alike[0] if alike else data.get(device_type))
    return choice if isinstance(choice, str) else None


def _units_of(key: str) -> str:
    """The bf16 units part of a `cpu_key`: "AMD EPYC [avx512_bf16]" -> "avx512_bf16"."""
    return key.rpartition(" [")[2]


def record_choice(file: Path, choice: dict, device_type: str = "cpu") -> dict:
    """Write `choice` (its `device_type` entry the choice just measured, the rest what was measured) to the JSON
    `file`, adding this CPU's entry to the `by_cpu` entries already there. -> what was written."""
    try:
        old = json.loads(Path(file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = {}
    machines = old.get(BY_CPU) if isinstance(old, dict) and isinstance(old.get(BY_CPU), dict) else {}
    written = dict(choice)
    if device_type == "cpu":
        written[BY_CPU] = {**machines, cpu_key(): choice[device_type]}
    Path(file).write_text(json.dumps(written, indent=1) + "\n", encoding="utf-8")
    return written
