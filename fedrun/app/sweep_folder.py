"""A sweep's outcome read from its folder alone (``fedrun-report --folder <sweep dir>``), for when the tracking store
is down or lost: what each job ran and how it ended.

A job leaves its outcome in the sweep folder whatever the store does (issue #68):
  - a finished job writes ``<job>/last_run.md`` (its results table) before it calls the store;
  - a failed job (a named error: a bad value, a store that does not answer) writes its reason under
    ``.fedrun-failed/<job>``;
  - a job with neither was killed before it could say so (SIGKILL, out of memory), or is still running.
Its overrides are Hydra's ``<job>/.hydra/overrides.yaml``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from fedrun.report.table import markdown
from fedrun.sim.sweep import failed_jobs

LAST_RUN = "last_run.md"


@dataclass(frozen=True)
class JobOutcome:
    job: int
    overrides: list[str]
    status: str  # FINISHED, FAILED, or UNKNOWN (no outcome recorded)
    detail: str  # the headline test metric, the reason, or why there is none


def table_metrics(table: str) -> dict[str, str]:
    """metric → test value from a ``last_run.md`` table (``| metric | test | ... |`` rows)."""
    metrics = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] not in ("metric", "") and not set(cells[0]) <= set("-:"):
            metrics[cells[0]] = cells[1]
    return metrics


def headline(metrics: dict[str, str], preferred: Sequence[str]) -> str:
    """The first of ``preferred`` (``test_…`` names, the report's defaults) the job's table holds."""
    for name in (m.removeprefix("test_") for m in preferred):
        if name in metrics:
            return f"{name} {metrics[name]}"
    return next((f"{k} {v}" for k, v in metrics.items()), "results table without metrics")


def outcomes(sweep_dir: Path, preferred: Sequence[str]) -> list[JobOutcome]:
    failed = failed_jobs(sweep_dir)
    jobs = sorted({int(p.name) for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()} | set(failed))
    found = []
    for job in jobs:
        folder = sweep_dir / str(job)
        overrides_file = folder / ".hydra" / "overrides.yaml"
        overrides = yaml.safe_load(overrides_file.read_text()) if overrides_file.exists() else []
        if job in failed:
            found.append(JobOutcome(job, overrides, "FAILED", failed[job].splitlines()[0]))
        elif (folder / LAST_RUN).exists():
            table = (folder / LAST_RUN).read_text()
            found.append(JobOutcome(job, overrides, "FINISHED", headline(table_metrics(table), preferred)))
        else:
            found.append(JobOutcome(job, overrides, "UNKNOWN", "no outcome recorded: killed before it could say so, "
                                                               "or still running"))
    return found


def folder_report(sweep_dir: Path, preferred: Sequence[str]) -> str:
    """The sweep's jobs, one row each: the overrides that differ between them, the status and its detail (a
    finished job's first metric of ``preferred``)."""
    found = outcomes(sweep_dir, preferred)
    if not found:
        raise ValueError(f"{sweep_dir} holds no job folders: not a sweep's folder (hydra.sweep.dir)")
    shared = set.intersection(*(set(o.overrides) for o in found)) if all(o.overrides for o in found) else set()
    rows = [[str(o.job), " ".join(x for x in o.overrides if x not in shared) or "-", o.status, o.detail]
            for o in found]
    counts = {s: sum(o.status == s for o in found) for s in ("FINISHED", "FAILED", "UNKNOWN")}
    summary = ", ".join(f"{n} {s.lower()}" for s, n in counts.items() if n)
    common = f"\nCommon to every job: {' '.join(sorted(shared))}\n" if shared else ""
    return (f"# Sweep {sweep_dir}: {len(found)} jobs ({summary}), read from its folder\n{common}\n"
            + markdown(["job", "overrides", "status", "test / reason"], rows) + "\n")
