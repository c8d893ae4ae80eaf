"""A sweep's own report (``fedrun -m``): when the sweep ends, ``fedrun-report`` over its child runs is printed,
written under ``<sweep>/report/<parent run id>/`` and logged on the sweep's parent run under ``report/``.

A Hydra callback (``conf/config.yaml``, after ``stop_on_signal``: Hydra ends callbacks in reverse order, so the
report comes before the parent run is ended, stopped sweeps included). A report that fails says why in one line
and leaves the runs as they are. Hydra builds its callbacks for every run, single ones too: the report's modules
(pandas, matplotlib) load only when a sweep ends.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from fedrun.store.runs import sweep_parents


class ReportSweep(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from fedrun.app.report import report_sweep

        sweep_dir = Path(config.hydra.sweep.dir)
        for entry in sweep_parents(sweep_dir):
            try:
                text = report_sweep(entry["uri"], entry["run_id"], sweep_dir / "report" / entry["run_id"])
            except Exception as err:  # noqa: BLE001 - the sweep's runs are recorded; only its summary is missing
                print(f"fedrun: the sweep's report failed ({type(err).__name__}: {err}); "
                      "`fedrun-report <experiment>` makes it from the store", file=sys.stderr)
                continue
            if text:
                print(text, flush=True)
