"""Per-machine choices beside a model folder: this CPU's entry first, the device-type entry as fallback, a new
measurement keeps the other machines' entries."""

from __future__ import annotations

import json

import pytest

from coolsd.util import machine


@pytest.fixture
def on_cpu(monkeypatch):
    """Pretend to run on a CPU of the given model name."""
    def use(name: str) -> None:
        monkeypatch.setattr(machine, "cpu_name", lambda: name)
    return use


def test_this_cpus_entry_comes_before_the_device_type_entry(tmp_path, on_cpu):
    file = tmp_path / "precision.json"
    file.write_text(json.dumps({"cpu": "bf16", "cuda": "fp16", "by_cpu": {"AMD EPYC": "bf16", "Xeon": "fp32"}}))
    on_cpu("Xeon")
    assert machine.stored_choice(file, "cpu") == "fp32"
    on_cpu("AMD EPYC")
    assert machine.stored_choice(file, "cpu") == "bf16"
    on_cpu("a CPU never measured")
    assert machine.stored_choice(file, "cpu") == "bf16"  # the fallback: the device-type entry
    assert machine.stored_choice(file, "cuda") == "fp16"  # by_cpu is for CPUs only


@pytest.mark.parametrize("text", ["", "[1, 2]", "{\"cpu\": 3}", "{\"by_cpu\": \"fp32\"}", "not json"])
def test_a_missing_or_broken_choice_is_none(tmp_path, on_cpu, text):
    on_cpu("Xeon")
    file = tmp_path / "execution.json"
    assert machine.stored_choice(file, "cpu") is None  # no file
    file.write_text(text)
    assert machine.stored_choice(file, "cpu") is None


def test_recording_keeps_the_other_machines_and_sets_the_fallback(tmp_path, on_cpu):
    file = tmp_path / "execution.json"
    on_cpu("AMD EPYC")
    machine.record_choice(file, {"cpu": "lean", "round_ms": {"lean": 1.0}})
    on_cpu("Xeon")
    written = machine.record_choice(file, {"cpu": "eager", "round_ms": {"eager": 2.0}})
    assert written == json.loads(file.read_text())
    assert written["by_cpu"] == {"AMD EPYC": "lean", "Xeon": "eager"} and written["cpu"] == "eager"
    assert written["round_ms"] == {"eager": 2.0}
    assert machine.stored_choice(file, "cpu") == "eager"
    on_cpu("AMD EPYC")
    assert machine.stored_choice(file, "cpu") == "lean"


def test_cpu_name_is_a_nonempty_text():
    assert isinstance(machine.cpu_name(), str) and machine.cpu_name()


def test_bf16_units_are_the_flags_cpuinfo_lists(monkeypatch):
    monkeypatch.setattr(machine, "_cpuinfo", lambda: ["model name\t: X", "flags\t\t: fpu avx512_bf16 sse"])
    assert machine.bf16_units() == ["avx512_bf16"] and machine.cpu_name() == "X"
    monkeypatch.setattr(machine, "_cpuinfo", lambda: None)
    assert machine.bf16_units() == [] and machine.cpu_name()
