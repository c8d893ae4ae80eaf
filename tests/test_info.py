"""``fedrun info``: every group and option with a line from its module, one option in full, bad input."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fedrun.app.info import GROUPS, describe, overview, presets_using, settings_of, summary
from fedrun.core.choices import options
from fedrun.core.paths import config_dir
from tests.integration.test_cli import FEDRUN


def test_the_overview_lists_every_option_of_every_group_with_a_line():
    text = overview()
    for group in GROUPS:
        assert f"\n{group}:\n" in f"\n{text}"
        for option in options(group):
            line = next(line for line in text.splitlines() if line.strip().startswith(option + " "))
            assert len(line.split(None, 1)[1]) > 10, line  # a description, not just the name


def test_a_summary_is_the_first_sentence_of_the_module_docstring():
    assert summary("method", "fedavg").startswith("FedAvg on a recommendation backbone (McMahan et al., AISTATS 2017)")
    assert summary("defense", "mean").endswith(".")


def test_one_option_shows_its_paper_defaults_partners_and_presets():
    text = describe("method=cl4fedrec")
    assert "Eq. 7" in text and "Choices where the paper is open" in text  # the module docstring
    assert "defaults (conf/method/cl4fedrec.yaml):" in text and "synthetic_users: 60" in text
    runs_with = text.split("runs with:")[1]
    assert "defense: hics, krum, mean" in runs_with
    assert "eb: attack='eb' is not allowed" in runs_with  # refused, with the capability that is missing
    assert "row/rcl4fedrec/cl4fedrec" in text


def test_presets_are_found_through_rows_and_sweeps():
    assert "row/fedcl/fedcl" in presets_using("method", "fedcl")
    assert "experiment/robustness/matrix" in presets_using("defense", "krum")


@pytest.mark.parametrize("argument, message", [("method=nope", "method=nope is not an option"),
                                               ("colour=red", "fedrun info takes <group>=<option>")])
def test_bad_selections_are_one_line_errors(argument, message):
    out = subprocess.run([FEDRUN, "info", argument], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_fedruns_help_and_hydras_help_both_work():
    out = subprocess.run([FEDRUN, "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("fedrun — ") and "method:" in out.stdout
    out = subprocess.run([FEDRUN, "--hydra-help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Hydra" in out.stdout


def test_a_method_shows_the_paper_setting_it_selects():
    text = describe("method=perfedrecpp")
    assert "its paper's setting of the other groups (conf/setting/perfedrecpp.yaml)" in text
    assert "override /backbone: perfedrecpp/lightgcn" in text and "keep_best: true" in text
    assert settings_of(Path(config_dir()) / "method" / "fedavg.yaml") == []  # no paper of its own


def test_the_overview_and_a_misspelt_option_answer_without_torch_or_mlflow():
    """``fedrun info`` reads the modules' docstrings from their sources; a misspelt option is refused by the entry
    point before the Hydra app (which imports torch) loads."""
    import sys

    code = ("import sys, io, contextlib\n"
            "from fedrun.app import info, entry\n"
            "with contextlib.redirect_stdout(io.StringIO()): info.main([])\n"
            "try:\n    entry.refuse_misspelt_options(['method=fedcll'])\nexcept SystemExit as e:\n    print(e.code)\n"
            "print('torch' in sys.modules, 'mlflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["2", "False", "False"] and "closest: fedcl" in done.stderr


def test_a_method_shows_its_steps_with_other_backbones():
    text = describe("method=fedavg")
    assert "its step sizes with backbone=ncf (conf/steps/fedavg/ncf.yaml; ~steps keeps the method's own)" in text


def test_a_methods_partner_list_is_read_from_the_cache_the_first_listing_wrote(monkeypatch):
    """Issue #66: the list composes and plans ~37 pairs (seconds); a second ``fedrun info method=<m>`` reads it back,
    without torch, and sources that change give another key."""
    import sys

    from fedrun.app import info

    composed = list(info.compatibility("method", "fedavg"))
    code = ("import sys\nfrom fedrun.app import info\n"
            "print(repr(list(info.compatibility('method', 'fedavg'))))\nprint('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    listed, torch_loaded = done.stdout.strip().rsplit("\n", 1)
    assert listed == repr(composed) and torch_loaded == "False"
    key = info.partners_key("fedavg")
    assert key is not None and key != info.partners_key("fedcl")


def test_the_partner_cache_key_follows_the_configs_and_stands_aside_for_plugins(tmp_path, monkeypatch):
    import shutil

    from fedrun.app import info

    copy = tmp_path / "conf"
    shutil.copytree(config_dir(), copy)
    monkeypatch.setattr(info, "config_dir", lambda: str(copy))
    before = info.partners_key("fedavg")
    (copy / "method" / "fedavg.yaml").write_text((copy / "method" / "fedavg.yaml").read_text() + "\n# changed\n")
    assert info.partners_key("fedavg") != before
    monkeypatch.setenv("FEDRUN_PLUGINS", str(copy))
    assert info.partners_key("fedavg") is None  # a plugin's code may live anywhere: composed every time
