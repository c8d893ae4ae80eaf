"""A non-editable install (issue #64, item 4): the wheel carries ``conf/`` and the installed ``fedrun`` runs an
experiment from outside the checkout.

The wheel is built from this checkout and installed, without its dependencies, into a fresh environment whose only
other packages are this environment's (a path file): the fedrun that runs is the wheel's, not the editable one
(the editable install's finder is a path file of the development environment, which the fresh one does not read).
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args, **kwargs):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result


def test_the_wheel_ships_its_configs_and_runs_outside_the_checkout(tmp_path):
    wheels = tmp_path / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels, ROOT,
        cwd=tmp_path)
    (wheel,) = wheels.glob("fedrun-*.whl")
    shipped = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("fedrun/conf/")}
    assert {f"fedrun/conf/{path.relative_to(ROOT / 'conf')}" for path in (ROOT / "conf").rglob("*.yaml")} == shipped

    fresh = tmp_path / "fresh"
    run(sys.executable, "-m", "venv", "--without-pip", fresh)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(fresh), "platbase": str(fresh)}))
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run(sys.executable, "-m", "pip", "--python", fresh / "bin" / "python", "install", "-q", "--no-deps", wheel)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run(fresh / "bin" / "python", "-c", "import fedrun, fedrun.core.paths as p; print(fedrun.__file__); "
                "print(p.config_dir())", cwd=elsewhere).stdout.split()
    assert all(str(fresh) in path for path in where), where  # the wheel's package and the wheel's configs
    result = run(fresh / "bin" / "fedrun", "method=fedavg", "dataset=synthetic", "dataset.n_users=60",
                 "dataset.n_items=80", "sim.clients_per_round=16", "sim.epochs=1", "sim.progress=false", cwd=elsewhere)
    assert "| ndcg_at_10" in result.stdout and "#/experiments/" in result.stdout  # recorded in MLflow
