"""The plugin path (``fedrun.core.plugins``), through the worked example ``scripts/examples/plugin`` (RFA's
geometric median as a defense): found by path or by entry point, composed, refused when misspelt, listed by
``fedrun info`` and ``--help``, run end to end, and its aggregation checked against its definition."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fedrun.core import plugins
from fedrun.core.choices import options
from fedrun.errors import ConfigError

PLUGIN = Path(__file__).resolve().parents[1] / "scripts" / "examples" / "plugin"
CONF = PLUGIN / "fedrun_rfa" / "conf"


@pytest.fixture()
def plugin(monkeypatch):
    monkeypatch.setenv("FEDRUN_PLUGINS", str(CONF))
    monkeypatch.syspath_prepend(str(PLUGIN))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(PLUGIN), os.environ.get("PYTHONPATH", "")]))


def test_a_plugins_options_join_the_groups(plugin):
    assert "geomedian" in options("defense") and "median" in options("defense")


def test_without_plugins_there_is_no_such_option():
    assert "geomedian" not in options("defense") and plugins.search_path_override([]) == []


def test_entry_points_name_the_module_whose_conf_folder_joins(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))
    import fedrun_rfa

    entry = SimpleNamespace(name="rfa", value="fedrun_rfa", load=lambda: fedrun_rfa)
    monkeypatch.setattr(plugins, "_entry_points", lambda: [entry])
    assert plugins.plugin_conf_dirs() == [CONF]
    assert "geomedian" in options("defense")


def test_a_plugin_folder_that_is_not_there_is_a_named_error(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDRUN_PLUGINS", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="FEDRUN_PLUGINS.*nowhere.*folders of config groups"):
        plugins.plugin_conf_dirs()


def test_the_plugins_option_composes_runs_and_is_refused_when_misspelt(plugin):
    import fedrun
    from tests.conftest import SMALL

    cfg = fedrun.compose(*SMALL, "defense=geomedian")
    assert cfg.defense._target_ == "fedrun_rfa.GeoMedian" and cfg.defense.iterations == 3
    result = fedrun.run(*SMALL, "sim.epochs=1", "defense=geomedian", "track=none")
    assert result.test["ndcg_at_10"] > 0
    with pytest.raises(ConfigError, match="closest: geomedian"):
        fedrun.compose(*SMALL, "defense=geomedan")


def test_the_command_line_lists_the_plugins_option(plugin, tmp_path):
    info = subprocess.run([sys.executable, "-m", "fedrun", "info", "defense=geomedian"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)
    assert info.returncode == 0, info.stderr[-2000:]
    assert "Robust Aggregation for Federated" in info.stdout and str(CONF) in info.stdout
    help_text = subprocess.run([sys.executable, "-m", "fedrun", "--help"], capture_output=True, text=True,
                               cwd=tmp_path, timeout=300).stdout
    assert "geomedian" in help_text


def test_geometric_median_is_robust_where_the_mean_is_not():
    from fedrun_rfa import geometric_median

    torch.manual_seed(0)
    honest = torch.randn(4, 9, 5) * 0.1 + 1.0  # [rows, uploads, d] around 1
    attacked = torch.cat([honest, torch.full((4, 2, 5), 100.0)], 1)  # two far uploads per row
    median = geometric_median(attacked, iterations=50)
    assert (median - 1.0).abs().max() < 0.5 < (attacked.mean(1) - 1.0).abs().min()
    # the optimum of Σ‖z − v_k‖: no small step in any direction lowers it
    cost = lambda z: (attacked - z.unsqueeze(1)).norm(dim=2).sum(1)  # noqa: E731
    for direction in torch.eye(5):
        assert (cost(median + 1e-3 * direction) >= cost(median) - 1e-4).all()
    symmetric = torch.tensor([[[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]])
    torch.testing.assert_close(geometric_median(symmetric), torch.zeros(1, 2))
