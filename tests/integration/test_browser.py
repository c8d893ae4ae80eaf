"""MLflow as a researcher opens it: `mlflow server` on loopback over a store holding a small finished sweep,
read in a real browser (headless Chromium; ``make install`` installs Debian's ``chromium`` where it can).

The pages are rendered by MLflow's own JavaScript, so each check reads the DOM after the app has fetched
its data: the runs table lists the sweep's parent run and its children; a child run's page shows its name,
its dataset input and its parent; its model-metrics tab draws charts, one section per group of metrics (train,
valid, test, floor, cost: ``fedrun/store/metric_names.py``); its results table opens as a table;
the parent holds the sweep's report. Screenshots of the runs table, a run, its charts and the sweep parent are saved
beside the test's store, and copied to ``$FEDRUN_SCREENSHOTS`` when that is set (docs/mlflow/ holds the
committed ones: ``FEDRUN_SCREENSHOTS=docs/mlflow pytest tests/integration/test_browser.py``, a path
relative to the repository or absolute)."""

from __future__ import annotations

import html
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.integration.test_cli import QUICK, fedrun

pytestmark = pytest.mark.integration

BROWSERS = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]  # as the Makefile's `browser`
BROWSER = next(filter(None, map(shutil.which, BROWSERS)), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no Chromium on PATH: `apt-get install chromium` (Debian; "
                                   "make install does it when run as root) or install Google Chrome")
ROOT = Path(__file__).resolve().parents[2]
MODEL_TRAINING = "?workflowType=machine_learning"  # MLflow 3's UI in its model-training mode, not its GenAI one
RENDER_BUDGET_MS = 20_000  # virtual time the page's scripts get to fetch from the server and render


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    """`mlflow server` on a free loopback port over the test's SQLite store; yields its base URL."""
    port = free_port()
    mlflow = Path(sys.executable).parent / "mlflow"
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen([str(mlflow), "server", "--backend-store-uri", os.environ["MLFLOW_TRACKING_URI"],
                                "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, process, tmp_path / "server.log")
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        log.close()


def wait_until_up(url: str, process: subprocess.Popen, log: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"mlflow server exited {process.returncode}:\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"mlflow server did not answer on {url} within {timeout_s:.0f} s:\n{log.read_text()[-2000:]}")


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               f"--user-data-dir={profile}", f"--virtual-time-budget={RENDER_BUDGET_MS}", "--window-size=1400,1000",
               *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=180)


def page_text(profile: Path, url: str, until: tuple[str, ...] = ()) -> str:
    """The visible text of the page at ``url`` once its scripts have rendered it, whitespace collapsed. The page
    is read again (up to three times) while a text of ``until`` is missing: the virtual-time budget runs ahead
    of a server slowed by other work (the suite's other worker), and a chart's data can arrive after it."""
    for _ in range(3):
        dom = chromium(profile, "--dump-dom", url).stdout
        text = re.sub(r"<script.*?</script>|<style.*?</style>", " ", dom, flags=re.S)
        text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", text)))
        if all(part in text for part in until):
            break
    return text


def screenshot(profile: Path, url: str, path: Path) -> None:
    chromium(profile, f"--screenshot={path}", url)
    assert path.exists() and path.stat().st_size > 10_000, f"no screenshot of {url}"  # a blank page is ~5 KB
    if os.environ.get("FEDRUN_SCREENSHOTS"):
        target = ROOT / os.environ["FEDRUN_SCREENSHOTS"]  # relative to the repository (the test runs elsewhere)
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target / path.name)


@needs_browser
def test_a_finished_sweep_renders_in_a_real_browser(tmp_path, server):
    result = fedrun("-m", *QUICK, "method=pop,fedavg", "track.experiment=browser")
    assert result.returncode == 0, result.stderr
    client = MlflowClient()
    experiment = client.get_experiment_by_name("browser").experiment_id
    runs = client.search_runs([experiment])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    (child,) = [r for r in runs if r.data.tags.get("fedrun.method") == "fedavg"]
    base = f"{server}/#/experiments/{experiment}/runs"
    profile = tmp_path / "chromium-profile"

    table = page_text(profile, base, until=("3 matching runs",))
    assert parent.info.run_name in table and "3 matching runs" in table, table[:3000]
    dataset = child.data.tags["fedrun.dataset"]
    assert f"{parent.info.run_name} " in table and f" {dataset} " in table, table[:3000]  # the sweep's dataset
    screenshot(profile, base + MODEL_TRAINING, tmp_path / "runs-table.png")
    assert client.get_experiment(experiment).tags.get("mlflow.experimentKind") == "custom_model_development"
    landing = page_text(profile, f"{server}/#/experiments/{experiment}{MODEL_TRAINING}", until=("matching runs",))
    assert "3 matching runs" in landing, landing[:3000]  # the experiment opens on its runs, not on MLflow's GenAI view

    run_page = f"{base}/{child.info.run_id}"
    overview = page_text(profile, run_page, until=("test/hr_at_10", "Parent run"))
    assert child.info.run_name in overview and "test/hr_at_10" in overview, overview[:3000]
    assert f"Datasets {dataset} (" in overview, overview[:3000]  # the dataset input, with its digest
    assert f"Parent run {parent.info.run_name}" in overview, overview[:3000]
    screenshot(profile, run_page + MODEL_TRAINING, tmp_path / "run.png")

    charts = page_text(profile, f"{run_page}/model-metrics", until=("Step", f"{child.info.run_name} ("))
    assert "Step" in charts and f"{child.info.run_name} (" in charts, charts[:3000]  # an axis and a legend
    # one section per group of metrics (fedrun/store/metric_names.py), the training curve's apart from the floors
    sections = re.findall(r"\b(train|valid|test|floor|cost) \((\d+)\)", charts)
    assert {name for name, _ in sections} >= {"train", "valid", "test", "floor"}, charts[:3000]
    screenshot(profile, f"{run_page}/model-metrics{MODEL_TRAINING}", tmp_path / "run-charts.png")

    results = page_text(profile, f"{run_page}/artifacts/results.json", until=("View as table",))
    assert "View as table" in results and "metric test valid floor" in results, results[:3000]

    report_page = f"{base}/{parent.info.run_id}/artifacts/report/report.md"
    report = page_text(profile, report_page, until=(" fedavg ",))
    assert "report/report.md" in report and " fedavg " in report and " pop " in report, report[:3000]
    screenshot(profile, report_page + MODEL_TRAINING, tmp_path / "sweep-parent.png")
