"""A search that spans sessions: Hydra's Optuna sweeper, resumed from the sweep that ran its first trials.

An Optuna study lives in memory here (optuna 2.10, which hydra-optuna-sweeper 1.3 pins, cannot use its database
storage on SQLAlchemy 2), so a search stopped midway — the end of a session, a Ctrl-C — used to be lost, and a
search longer than one session could not run at all. Every ``tune/`` preset registers the callback
``ResumeSearch`` (``conf/experiment/tune/budget.yaml``), whose one setting names the folder of the sweep to continue:

    fedrun -m +experiment=tune/bil dataset=ml-1m experiment_name=tune-bil-ml-1m \
        hydra.callbacks.resume_search.sweep=outputs/multirun/2026-12-01/01-24-09

The resumed search *replays* the recorded trials instead of running them again: the seeded sampler proposes trial
0, 1, … as it did the first time, and each proposal that a recorded trial answers is told that trial's recorded
outcome (its objective, or its failure) without training (``ReplayLauncher``, in place of the sweeper's launcher).
The study therefore holds the same history after the replay as the first search did, and the sampler goes on
exactly as an uninterrupted search would have: the trials that follow are the ones it would have run. Two checks
keep that true:

  - before anything runs, the command line (the task overrides) must be the first search's, word for word;
  - every replayed proposal must equal the recorded trial's overrides (``<sweep>/<job>/.hydra/overrides.yaml``):
    a different space, sampler seed or Optuna version proposes something else, and the search stops there with
    a named error instead of joining results from two searches.

A trial is recorded when its MLflow run (tag ``fedrun.sweep`` = the folder, ``fedrun.job`` = its number) ended
FINISHED or FAILED. It is told what it told the first time: the value in its job folder (``TOLD``: a failed trial's
is the worst value, ``failed_trial_value``); for a trial from before that file, a finished one's best validation
of the monitored metric under ``sim.keep_best`` (the same number), and a failed one "failed". Replay stops at the
first trial that is neither. If that trial was stopped with a checkpoint (a session's end: its run KILLED, ``resume
with sim.resume=…`` in its reason), it goes on from the checkpoint in its own run (``sim.resume`` added to its
overrides), so a stop loses no training; one abandoned without a checkpoint, or never started, runs from its start.
Everything after it runs. A resumed sweep can be resumed in turn: its folder names the one it continued
(``RESUMES_FILE``; its MLflow run, the tag ``fedrun.resumes``), so the chain is replayed from trial 0.

A record that outlives its machine. The sweep folders and the store live on the machine that ran them; a session's
machine may not come back (a fresh checkout, a node returned to the cluster). ``save_record`` writes what a replay
needs into a small folder of the same layout, fit to commit beside the search's trials ledger: the command line,
and each ended trial's overrides and told value, the chain flattened into one folder. Resuming from it needs no
store: a job folder that holds its told value is an ended trial whether or not the store has its run (the store is
read only for runs from before ``TOLD``, and for a stopped trial's checkpoint, which a fresh machine does not have:
that trial runs again from its start). ``python -m fedrun.app.tuning`` saves the record of every search whose last
sweep did not finish (``<out>/sweeps/<experiment>``) and, summarising a search resumed from such a record, merges
the committed trials ledger with the store's runs, so the search reads as one.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig, OmegaConf

from fedrun.errors import ConfigError, FedrunError
from fedrun.sim.sweep import exit_refused
from fedrun.store.runs import RESUMES_FILE

log = logging.getLogger(__name__)

FIELD = "hydra.callbacks.resume_search.sweep"  # where a resumed search names the sweep it continues
OPTUNA = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
TOLD = ".fedrun-objective"  # in a sweep job's folder: the value the job returned to its sweeper (repr of a float)
TOLD_FAILED = "failed"  # TOLD in a saved record (``save_record``): a trial from before TOLD that reported failure


def failed_trial_value(sweeper: Any) -> float | None:
    """What a search's failed trial (a setting refused before training, a run that diverged) tells its sampler: the
    worst value its direction allows (−inf when maximising, +inf when minimising), so that TPE learns to avoid the
    setting. Told "failed" instead, TPE leaves failed trials out of its model and keeps proposing beside the best
    trial: PerFedRec's search over C ≤ 80 lost 10 of its 16 trials in a row to settings the sign-flip rule refuses
    (lr × L2 too large), and a toy space with such a corner loses 8–10 of 16 on a quarter of the seeds against 1
    when the worst value is told. The trial stays FAILED in the record; nothing ranks it. None outside a search."""
    if str(OmegaConf.select(sweeper, "_target_") or "") != OPTUNA:
        return None
    direction = str(OmegaConf.select(sweeper, "direction")).rsplit(".", 1)[-1]
    return math.inf if direction == "minimize" else -math.inf


def tell_sweeper(value: float | None) -> float | None:
    """Return ``value`` to the sweeper, after writing it in the job's folder (``TOLD``): a resumed search replays
    exactly what each trial told (``RecordedTrial``)."""
    from hydra.core.hydra_config import HydraConfig

    if value is not None:
        (Path(HydraConfig.get().runtime.output_dir) / TOLD).write_text(repr(float(value)))
    return value


class SearchDiverged(FedrunError):
    """A resumed search proposed a trial other than the recorded one: it is not the same search."""


@dataclass(frozen=True)
class RecordedTrial:
    """A trial of an earlier sweep: the overrides it ran with, and either its end (its objective; None: it failed)
    or, for a trial stopped midway, the checkpoint it goes on from (``sim.resume``)."""

    job: int
    overrides: tuple[str, ...]
    objective: float | None
    sweep: Path
    checkpoint: str | None = None

    @property
    def ended(self) -> bool:
        return self.checkpoint is None

    def check(self, proposed: Sequence[str]) -> None:
        """Refuse a proposal other than the one this trial ran with (``SearchDiverged``); the order of the command
        line's own overrides, which may differ between the two commands, does not count."""
        if sorted(proposed) != sorted(self.overrides):
            raise SearchDiverged(
                f"the resumed search proposes trial {self.job} as `{' '.join(proposed)}`, but {self.sweep} ran it as "
                f"`{' '.join(self.overrides)}`: the space, the sampler or its seed differ from that search's; "
                f"resume it with the same ones, or start a new search without {FIELD}")

    def replay(self, proposed: Sequence[str]) -> JobReturn:
        """The job return the launcher would have given for this ended trial, once ``proposed`` is checked."""
        self.check(proposed)
        return JobReturn(overrides=list(proposed), working_dir=str(self.sweep / str(self.job)),
                         status=JobStatus.COMPLETED, _return_value=self.objective)


def sweep_command(sweep: Path) -> list[str]:
    """The task overrides a sweep was started with (``fedrun.sim.sweep.OVERRIDES``), or a named error."""
    from fedrun.sim.sweep import OVERRIDES

    recorded = sweep / OVERRIDES
    if not recorded.is_file():
        raise ConfigError(FIELD, str(sweep), "the folder of a fedrun sweep (it holds "
                          f"{OVERRIDES}, written when the sweep started): "
                          + ("that folder is not one" if sweep.is_dir() else "no such folder"))
    return recorded.read_text().split()


def recorded_trials(sweep: Path, client) -> dict[int, RecordedTrial]:
    """The trials ``sweep`` and the sweeps it resumed recorded as ended (FINISHED or FAILED), by job number — only
    the unbroken run from trial 0 — and after them the first trial that did not end, where it was stopped with a
    checkpoint that is still there (it goes on from it; a trial without one runs again from its start)."""
    chain = [sweep]
    while (chain[-1] / RESUMES_FILE).is_file():
        earlier = Path((chain[-1] / RESUMES_FILE).read_text().strip())
        if earlier in chain:
            raise ConfigError(FIELD, str(sweep), f"a chain of resumed sweeps without a loop; "
                              f"{earlier} resumes itself")
        chain.append(earlier)
    records: dict[int, RecordedTrial] = {}
    for folder in reversed(chain):  # the latest sweep's record of a job wins
        records.update(_job_records(folder, client))
    prefix: dict[int, RecordedTrial] = {}
    while len(prefix) in records and records[len(prefix)].ended:
        prefix[len(prefix)] = records[len(prefix)]
    if len(prefix) in records:
        prefix[len(prefix)] = records[len(prefix)]
    return prefix


def _job_records(sweep: Path, client) -> dict[int, RecordedTrial]:
    """The jobs of one sweep folder whose runs ended FINISHED (with an objective) or FAILED, or were stopped with a
    checkpoint to go on from."""
    records = {}
    for run in _sweep_runs(sweep, client):
        job = run.data.tags.get("fedrun.job")
        overrides_file = sweep / str(job) / ".hydra" / "overrides.yaml"
        if job is None or not job.isdigit() or not overrides_file.is_file():
            continue
        objective, checkpoint = None, None
        told = sweep / str(job) / TOLD
        if run.info.status in ("FINISHED", "FAILED") and told.is_file():
            objective = read_told(told)
        elif run.info.status == "FINISHED":
            objective = _objective(run)
            if objective is None:
                continue
        elif run.info.status != "FAILED":
            checkpoint = _checkpoint(run, client)
            if checkpoint is None:
                continue
        records[int(job)] = RecordedTrial(int(job), _overrides(overrides_file), objective, sweep, checkpoint)
    for job_dir in sorted(sweep.iterdir()) if sweep.is_dir() else []:  # ended, kept without their runs (a record)
        overrides_file, told = job_dir / ".hydra" / "overrides.yaml", job_dir / TOLD
        if job_dir.name.isdigit() and int(job_dir.name) not in records and told.is_file() and overrides_file.is_file():
            records[int(job_dir.name)] = RecordedTrial(int(job_dir.name), _overrides(overrides_file),
                                                       read_told(told), sweep)
    return records


def _overrides(path: Path) -> tuple[str, ...]:
    """A job's overrides (``.hydra/overrides.yaml``), less the checkpoint a stopped trial went on from."""
    return tuple(str(o) for o in OmegaConf.load(path) if not str(o).startswith("sim.resume="))


def read_told(path: Path) -> float | None:
    """The value a trial told its sweeper (``TOLD``); None for a trial that reported failure (``TOLD_FAILED``)."""
    text = path.read_text().strip()
    return None if text == TOLD_FAILED else float(text)


def save_record(sweep: Path, dest: Path, client) -> int:
    """Write the ended trials of ``sweep``'s search (its chain flattened) into ``dest``: the command line and, per
    trial, ``<job>/.hydra/overrides.yaml`` and ``<job>/`` ``TOLD`` — all a resume needs, without the store. ``dest``
    is replaced (it may be the record ``sweep`` resumed: everything is read before anything is written). Returns the
    number of trials saved; the trial a stop cut short is not among them and runs again from its start."""
    import shutil

    from fedrun.sim.sweep import OVERRIDES

    command = sweep_command(sweep)
    ended = [trial for trial in recorded_trials(sweep, client).values() if trial.ended]
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    (dest / OVERRIDES).write_text(" ".join(command))
    for trial in ended:
        (dest / str(trial.job) / ".hydra").mkdir(parents=True)
        OmegaConf.save(OmegaConf.create(list(trial.overrides)), dest / str(trial.job) / ".hydra" / "overrides.yaml")
        (dest / str(trial.job) / TOLD).write_text(TOLD_FAILED if trial.objective is None else repr(trial.objective))
    return len(ended)


def _checkpoint(run, client) -> str | None:
    """Where a stopped run goes on from, as its stop reason names it (``... resume with sim.resume=<path or run
    id>``), if that checkpoint is still there."""
    from fedrun.store.runs import CHECKPOINT_DIR, FAILURE_REASON

    found = re.search(r"sim\.resume=(\S+)$", run.data.tags.get(FAILURE_REASON, "").strip())
    if found is None:
        return None
    where = found.group(1).rstrip(".")
    if Path(where).is_file():
        return where
    if where == run.info.run_id and client.list_artifacts(run.info.run_id, CHECKPOINT_DIR):
        return where
    return None


def as_tagged(sweep: Path) -> str:
    """A sweep folder as its runs' tag ``fedrun.sweep`` names it: relative to the working folder when inside it (as
    Hydra's ``outputs/multirun/…``), else absolute."""
    resolved = sweep.resolve()
    return str(resolved.relative_to(Path.cwd().resolve())) if resolved.is_relative_to(Path.cwd().resolve()) \
        else str(resolved)


def _sweep_runs(sweep: Path, client) -> list[Any]:
    """The job runs whose tag ``fedrun.sweep`` names ``sweep`` (as written, or as ``as_tagged`` writes it, or
    absolute), in every experiment of the store."""
    names = {str(sweep), as_tagged(sweep), str(sweep.resolve())}
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = []
    for name in sorted(names):
        quoted = name.replace("'", "\\'")
        for start in range(0, len(experiments), 100):
            runs += [r for r in client.search_runs(experiments[start:start + 100], max_results=50000,
                                                   filter_string=f"tags.`fedrun.sweep` = '{quoted}'")
                     if r.data.tags.get("fedrun.kind") != "sweep"]
    return list({r.info.run_id: r for r in runs}.values())


def _objective(run) -> float | None:
    """What the sweeper was told for a finished trial from before its job folder kept it (``TOLD``): under
    sim.keep_best the best validation of eval.monitor, the value ``RunResult.objective`` held; else unknown."""
    monitor = run.data.params.get("eval.monitor")
    if run.data.params.get("sim.keep_best") == "True" and monitor:
        value = run.data.metrics.get(f"valid/best_{monitor}")
        return None if value is None or math.isnan(value) else float(value)
    return None


class ReplayLauncher(Launcher):
    """A launcher that answers the recorded trials (``RecordedTrial.replay``) and launches the others with the
    sweep's own launcher, under the job numbers an uninterrupted search would have given them."""

    def __init__(self, launcher: Launcher, recorded: dict[int, RecordedTrial]) -> None:
        self.launcher = launcher
        self.recorded = recorded

    def setup(self, **kwargs: Any) -> None:  # the inner launcher is set up already
        pass

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        replayed: list[JobReturn] = []
        for proposed in job_overrides:
            trial = self.recorded.get(initial_job_idx + len(replayed))
            if trial is None or not trial.ended:
                break
            replayed.append(trial.replay(proposed))
            shown = f"{trial.objective:.6g}" if trial.objective is not None and math.isfinite(trial.objective) \
                else f"failed (told {trial.objective})"
            log.info("trial %d replayed from %s: %s", trial.job, trial.sweep, shown)
        rest = [list(o) for o in job_overrides][len(replayed):]
        if not rest:
            return replayed
        first = initial_job_idx + len(replayed)
        stopped = self.recorded.get(first)
        if stopped is not None:  # stopped midway: it goes on from its checkpoint, in its own run
            stopped.check(rest[0])
            rest[0].append(f"sim.resume={stopped.checkpoint}")
            log.info("trial %d goes on from its checkpoint %s", first, stopped.checkpoint)
        return replayed + list(self.launcher.launch(rest, initial_job_idx=first))


_pending: dict[str, dict[int, RecordedTrial]] = {}  # the recorded trials a resumed sweep's sweeper will replay


class ResumeSearch(Callback):
    """``hydra.callbacks.resume_search.sweep=<folder>``: continue the search that sweep ran (module docstring)."""

    def __init__(self, sweep: str | None = None) -> None:
        self.sweep = None if sweep in (None, "") else Path(str(sweep))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if self.sweep is None:
            return
        try:
            _pending["recorded"] = self._recorded(config)
            _replay_in(str(config.hydra.sweeper._target_))
        except FedrunError as err:
            exit_refused(config.hydra.sweep.dir, err)
        Path(config.hydra.sweep.dir).mkdir(parents=True, exist_ok=True)
        (Path(config.hydra.sweep.dir) / RESUMES_FILE).write_text(as_tagged(self.sweep))
        log.info("resuming the search of %s: %d recorded trial(s) to replay", self.sweep, len(_pending["recorded"]))

    def _recorded(self, config: DictConfig) -> dict[int, RecordedTrial]:
        from fedrun.store.runs import default_uri, open_client

        assert self.sweep is not None
        command = [str(o) for o in config.hydra.overrides.task]
        earlier = sweep_command(self.sweep)
        if sorted(earlier) != sorted(command):
            raise ConfigError(FIELD, str(self.sweep),
                              f"a sweep of this search: it ran `{' '.join(earlier)}`, this one is "
                              f"`{' '.join(command)}` (the command line must be the same, hydra.* settings aside)")
        if Path(config.hydra.sweep.dir).resolve() == self.sweep.resolve():
            raise ConfigError(FIELD, str(self.sweep), "an earlier sweep's folder, not this one's")
        uri = OmegaConf.select(config, "track.uri") or default_uri()
        return recorded_trials(self.sweep, open_client(str(uri)))


def _replay_in(target: str) -> None:
    """Make the sweeper class ``target`` (Optuna's: it asks its sampler, launches, then tells) launch through a
    ``ReplayLauncher`` of the pending recorded trials, wrapping its ``setup`` once."""
    from hydra.utils import get_class

    if target != OPTUNA:
        raise ConfigError("hydra/sweeper", target.rsplit(".", 1)[-1], "the Optuna sweeper (hydra/sweeper=optuna): "
                          f"{FIELD} resumes a search")
    cls: Any = get_class(target)
    if getattr(cls.setup, "fedrun_replays", False):
        return
    original = cls.setup

    def setup(self, *args, **kwargs):
        original(self, *args, **kwargs)
        recorded = _pending.pop("recorded", None)
        if recorded is not None:  # Optuna's sweeper keeps its launcher on its implementation
            self.sweeper.launcher = ReplayLauncher(self.sweeper.launcher, recorded)

    setup.fedrun_replays = True  # type: ignore[attr-defined]
    cls.setup = setup
