"""Hydra's composition errors, worded as fedrun's (``fedrun.app.composition_errors``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fedrun.app.compose import compose
from fedrun.app.composition_errors import describe, unknown_key


def composition_error(overrides: list[str]) -> Exception:
    with pytest.raises(Exception) as caught:
        compose(overrides)
    return caught.value


@pytest.mark.parametrize(("overrides", "words"), [
    (["sim.epoch=3"], "sim.epoch is not a setting: sim has no key 'epoch' (closest: epochs)"),
    (["method.optimizr.lr=1"], "method has no key 'optimizr' (closest: optimizer, server_optimizer)"),
    (["method=fedcl", "method.semihard=3"], "method has no key 'semihard' (closest: semi_hard)"),
    (["method.optimizer.lrr=1"], "method.optimizer has no key 'lrr' (closest: lr"),
])
def test_a_misspelt_key_names_the_closest_keys_and_never_the_plus_hint(overrides, words):
    text = describe(composition_error(overrides))
    assert words in text
    assert "+" not in text and "_target_" not in text


def test_a_large_node_lists_its_first_keys_and_a_count():
    text = unknown_key("a.zz", "zz", [f"k{i}" for i in range(50)])
    assert "k39, … (50 in all)" in text and "k40" not in text and "closest" not in text


def test_other_composition_errors_keep_hydras_words_on_one_line():
    text = describe(composition_error(["sim.epochs=[1"]))
    assert "\n" not in text and "[1" in text


def fedrun(*argv: str, **env: str) -> subprocess.CompletedProcess:
    code = "import sys; from fedrun.app import cli; sys.argv = ['fedrun', *sys.argv[1:]]; cli.main()"
    environ = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"} | env
    return subprocess.run([sys.executable, "-c", code, *argv, "hydra.output_subdir=null", "hydra.run.dir=.",
                           "hydra/job_logging=none", "hydra/hydra_logging=none"], capture_output=True, text=True,
                          env=environ)


def test_the_command_line_refuses_a_misspelt_key_in_one_line_with_status_2():
    done = fedrun("sim.epoch=3")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]  # one line
    assert done.stderr.startswith("fedrun: error: sim.epoch is not a setting") and "+sim.epoch" not in done.stderr


def test_hydra_full_error_set_by_the_user_still_gives_hydras_traceback():
    done = fedrun("sim.epoch=3", HYDRA_FULL_ERROR="1")
    assert done.returncode == 1 and "Traceback" in done.stderr and "ConfigCompositionException" in done.stderr
