"""Per-machine choices beside a model folder: this CPU's entry first, the device-type entry as fallback, a new
measurement keeps the other machines' entries."""

from __future__ import annotations

import json

import pytest

from coolsd.util import machine
from coolsd.util.paths import EMBEDDED_DIR, EMOJI_DIR


@pytest.fixture
def on_cpu(monkeypatch):
    """Pretend to run on the given CPU (its `cpu_key`)."""
    def use(name: str) -> None:
        monkeypatch.setattr(machine, "cpu_key", lambda: name)
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


def test_the_cpu_key_tells_apart_cpus_of_one_name_by_their_bf16_units(monkeypatch, tmp_path):
    flags = {"avx2": "fpu avx2 sse", "avx512": "fpu avx2 avx512_bf16 sse"}
    monkeypatch.setattr(machine, "_cpuinfo", lambda: ["model name\t: AMD EPYC", f"flags\t\t: {flags[which]}"])
    which = "avx2"
    assert machine.cpu_key() == "AMD EPYC [no bf16 units]"
    file = tmp_path / "precision.json"
    machine.record_choice(file, {"cpu": "fp32"})
    which = "avx512"
    assert machine.cpu_key() == "AMD EPYC [avx512_bf16]"
    assert machine.stored_choice(file, "cpu") == "fp32"  # another CPU of that name: only the fallback
    machine.record_choice(file, {"cpu": "bf16"})
    assert machine.stored_choice(file, "cpu") == "bf16"
    which = "avx2"
    assert machine.stored_choice(file, "cpu") == "fp32"  # its own entry, not the last machine's fallback
    assert json.loads(file.read_text())["by_cpu"] == {"AMD EPYC [no bf16 units]": "fp32",
                                                      "AMD EPYC [avx512_bf16]": "bf16"}


def test_the_shipped_choice_files_key_every_cpu_by_its_bf16_units():
    files = [f for d in (EMOJI_DIR, EMBEDDED_DIR) for f in d.glob("*.json") if "by_cpu" in json.loads(f.read_text())]
    assert files
    for file in files:
        for key in json.loads(file.read_text())["by_cpu"]:
            assert key.endswith("]") and " [" in key, (file, key)


def test_an_unmeasured_cpu_takes_the_choice_of_one_with_its_bf16_units(tmp_path, on_cpu):
    file = tmp_path / "precision.json"
    file.write_text(json.dumps({"cpu": "last measured", "by_cpu": {"Intel Xeon [amx_bf16, avx512_bf16]": "fp32",
                                                          "AMD EPYC [no bf16 units]": "bf16"}}))
    on_cpu("Intel(R) Xeon(R) Platinum 8480+ [amx_bf16, avx512_bf16]")
    assert machine.stored_choice(file, "cpu") == "fp32"  # the other AMX Xeon's, not the fallback
    on_cpu("AMD EPYC 9R14 [avx512_bf16]")
    assert machine.stored_choice(file, "cpu") == "last measured"  # none with these units measured: the fallback
    on_cpu("Intel Core [no bf16 units]")
    assert machine.stored_choice(file, "cpu") == "bf16"  # the AVX2 EPYC's
