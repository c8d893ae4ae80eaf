"""scripts/checks/device_check.py: its state comparison finds a difference where there is one, and the
script runs end to end (CPU against CPU here; CUDA against CPU on a GPU machine)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedrun.core.nested import tensors
from fedrun.testing.compare import state_difference

ROOT = Path(__file__).resolve().parents[1]


def nested_state() -> dict:
    return {"private_user": torch.randn(5, 3), "server": {"item": torch.randn(7, 3), "step": torch.tensor(4),
                                                          "optimizer": [{"exp_avg": torch.randn(7, 3)}]}}


def test_tensors_walks_dicts_and_lists():
    names = [name for name, _ in tensors(nested_state())]
    assert names == ["private_user", "server.item", "server.step", "server.optimizer.0.exp_avg"]


def test_state_difference_is_zero_for_equal_states_and_finds_the_changed_tensor():
    state = nested_state()
    same = {"private_user": state["private_user"].clone(), "server": {**state["server"]}}
    assert state_difference(state, same) == (0.0, "")
    changed = {**state, "server": {**state["server"], "item": state["server"]["item"].clone()}}
    changed["server"]["item"][2, 1] += 0.5 * state["server"]["item"].abs().max()
    diff, where = state_difference(state, changed)
    assert where == "server.item" and diff == pytest.approx(0.5, rel=1e-5)
    counted = {**state, "server": {**state["server"], "step": torch.tensor(5)}}
    assert state_difference(state, counted) == (1.0, "server.step")  # integer tensors: share that differs


def test_state_difference_refuses_states_of_different_layout():
    with pytest.raises(ValueError, match="different tensors"):
        state_difference(nested_state(), {"private_user": torch.zeros(5, 3)})


def test_device_check_runs_cpu_against_cpu(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "checks" / "device_check.py"), "--device", "cpu",
                             "--rounds", "2", "--cases", "fedavg-mf,fedavg-mf-ldp,lightfr,metamf", "--out",
                             str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "device_check.md").read_text()
    assert table.count("| agrees") == 2 and "draws on device" in table and "| metrics agree" in table
    assert "- metamf: server Adam" in table  # a metrics-only case says which Adam step moves its state


def test_device_check_rejects_unknown_cases(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "checks" / "device_check.py"), "--cases", "nope"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 2 and "unknown nope" in result.stderr
