"""`fedrun --help` is fedrun's own and prints at once: nothing heavy imported (issue #66)."""

from __future__ import annotations

import subprocess
import sys

from fedrun.app.help import GROUPS, text
from fedrun.core.choices import options


def test_help_names_every_group_and_option_and_where_results_go():
    shown = text()
    for group in GROUPS:
        assert all(option in shown for option in options(group)), group
    assert "fedrun info" in shown and "mlflow" in shown.lower() and "+experiment=" in shown
    assert "powered by Hydra" not in shown


def test_help_imports_neither_torch_nor_hydra_nor_mlflow():
    probe = ("import sys; sys.argv = ['fedrun', '--help']; from fedrun.app.entry import main; main(); "
             "print([m for m in ('torch', 'hydra', 'mlflow') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("[]") and out.startswith("fedrun — ")
