"""Run one experiment from a resolved Hydra config and record it: build it (``fedrun.app.plan``), resume it from a
checkpoint if asked, train and evaluate it through the run loop, judge it against the popularity floor, and
record params, tags, metrics, the dataset, the results table and the learning curve with the tracker — a run
that fails before it starts still leaves a FAILED record with its reason."""

from __future__ import annotations

import logging
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from fedrun.app.build import build
from fedrun.app.plan import Built, build_run, clear_uploads
from fedrun.app.preflight import GROUPS, PRESET_GROUPS
from fedrun.core.choices import options
from fedrun.core.interrupts import interrupts_ignored
from fedrun.data.client_store import ClientStore
from fedrun.data.files import data_dir
from fedrun.errors import ConfigError, FedrunError
from fedrun.eval.floor import at_or_below, floor_metrics
from fedrun.method.pop import Pop
from fedrun.report.curves import learning_curve
from fedrun.report.table import markdown, metrics_table
from fedrun.sim import checkpoint
from fedrun.sim.checkpoint import RunnerState
from fedrun.sim.loop import Interrupted, RunResult, log_final, run_loop
from fedrun.sim.signals import AbortedBeforeStart
from fedrun.sim.sweep import OVERRIDES
from fedrun.sim.sweep import marker as sweep_marker
from fedrun.store.calls import TrackingError
from fedrun.store.runs import RESUMED_FROM
from fedrun.track.base import Tracker
from fedrun.track.recorder import remote_or_local

log = logging.getLogger("fedrun")
def config_params(cfg: DictConfig, resolve: bool) -> dict[str, Any]:
    """The config as flat MLflow params, without a preset's published numbers (``paper:``, which the
    report reads from the preset itself) and without Hydra's own choices (``choices.hydra/launcher`` and eight
    more: how a run executes, not what it computes, and clutter on every run's page)."""
    config = OmegaConf.to_container(cfg, resolve=resolve)
    config.pop("paper", None)
    params = {k: v for k, v in flatten(config).items() if not k.startswith("choices.hydra/")}
    # Hydra records the optional protocol pair even where no file exists: then nothing was chosen
    if params.get("choices.protocol") not in (None, *options("protocol")):
        del params["choices.protocol"]
    # the step sizes a method takes with a backbone follow from the two choices, and their values are logged
    # (method.optimizer.*): a choice of its own would split a report's runs from those recorded before it existed
    params.pop("choices.steps", None)
    return params


def run_record(b: Built, sweep: str | None, job: int | None) -> tuple[dict[str, Any], dict[str, str]]:
    """MLflow params (resolved config + run-time choices) and tags (digest, commit, seeds, options)."""
    p = b.plan
    params = {**config_params(p.cfg, resolve=True),
              **{f"run.{k}": v for k, v in {**b.trainer.describe(), **b.method.describe()}.items()},
              "run.max_slots": b.plan.sim.max_slots,  # the bucket budget the run trained with (lowered to fit?)
              **{f"eval.{k}": v for k, v in b.evaluator.describe().items()}, "device": str(b.env.device)}
    tags = {"fedrun.dataset_digest": p.dataset.digest(), "fedrun.git_commit": git_commit(),
            "fedrun.platform": platform_tag(b.env.device),
            "fedrun.seed": str(p.sim.seed), "fedrun.split_seed": str(p.dataset.config.split.seed),
            **{f"fedrun.{g}": p.choices[g] for g in GROUPS if p.choices[g]},
            **{f"fedrun.{g}": v for g in PRESET_GROUPS if (v := OmegaConf.select(p.cfg, f"choices.{g}"))}}
    if sweep:
        tags.update({"fedrun.sweep": sweep, "fedrun.job": str(job)})
    clear = clear_uploads(b)
    if clear:
        tags["fedrun.clear_uploads"] = ",".join(clear)
    return params, tags


RESUME_MAY_CHANGE = ("sim.resume", "sim.checkpoint_dir", "sim.checkpoint_every", "sim.progress", "sim.max_rounds",
                     "sim.epochs", "sim.eval_every", "eval.memory_mb", "track.")
RESUME_CHANGES_RESULT = ("sim.max_rounds", "sim.epochs", "sim.eval_every")  # recorded params a resume may change


def run(cfg: DictConfig, *, sweep: str | None = None, job: int | None = None,
        recording: Callable[[Tracker], Tracker] | None = None) -> RunResult:
    """One run of ``cfg``: built, trained, tested and recorded (``recording`` wraps the run's tracker, e.g. in a
    ``fedrun.track.recording.Recording`` that keeps the per-round history for the Python API)."""
    try:
        b = build_run(cfg)
    except FedrunError as err:
        record_failure(cfg, err, sweep, job)
        raise
    except KeyboardInterrupt:
        raise AbortedBeforeStart() from None
    tracker, sim = b.plan.tracker if recording is None else recording(b.plan.tracker), b.plan.sim
    state, resumed_run, same_params = resume_state(b, cfg) if sim.resume else (None, None, False)
    experiment = experiment_name(getattr(tracker.config, "experiment", None), cfg, b.plan.dataset.name)
    if not (resumed_run and same_params and tracker.resume(resumed_run)):
        # a new run: no checkpoint, a FINISHED run (its record stays as it is), or a resume that changes a
        # recorded param (the continuation is recorded under what it really runs, linked to its origin)
        params, tags = run_record(b, sweep, job)
        if resumed_run:
            tags[RESUMED_FROM] = resumed_run
        parent = tracker.sweep_parent(experiment, sweep, sweep_overrides(sweep)) if sweep else None
        if parent is not None:
            tags["mlflow.parentRunId"] = parent
        tracker.start(experiment, run_name(b.plan.cfg, sim.seed), params, tags)
    log_dataset(b, tracker)
    checkpoint_path = Path(sim.checkpoint_dir or job_dir()) / "checkpoint.pt"
    config_yaml = OmegaConf.to_yaml(cfg, resolve=True)

    def save(runner_state: RunnerState) -> Path:
        if not b.plan.world.leads:  # rank 0 writes the replicated state (fedrun.sim.distributed)
            return checkpoint_path
        tracker.flush()  # the history up to the checkpoint is in the store before the checkpoint exists
        checkpoint.save(checkpoint_path, b.method.state_dict(), runner_state, config_yaml, tracker.run_id)
        tracker.log_checkpoint(checkpoint_path)
        return checkpoint_path

    try:
        valid_floor = validation_floor(b, tracker)
        result = run_loop(b.trainer, b.evaluator, tracker, sim, b.label, state, save, sweep_marker(sweep),
                          valid_floor.get(b.evaluator.monitor))
        floor = floor_columns(b, result, valid_floor)
    except Interrupted as err:
        with interrupts_ignored():
            tracker.finish("KILLED", str(err))
        raise
    except KeyboardInterrupt:
        with interrupts_ignored():
            tracker.finish("KILLED", "aborted by a second interrupt (no checkpoint written for this round)")
        raise
    except BaseException as err:
        with interrupts_ignored():
            try:
                tracker.finish("FAILED", f"{type(err).__name__}: {err}")
            except FedrunError as tracking_error:  # the store itself failed: say so, keep the first cause
                if tracking_error is not err:
                    log.warning("could not mark the run FAILED: %s", tracking_error)
        raise
    return finish(cfg, b, result, floor, tracker) if b.plan.world.leads else result


def finish(cfg: DictConfig, b: Built, result: RunResult, floor: dict[str, dict[str, float]],
           tracker: Tracker) -> RunResult:
    """A finished run's results, in the order a user can least afford to lose them: the table on the terminal,
    then in the job's folder (written atomically), then the tracking store. A failure after the test loses
    nothing before it: each is one named line, and a store that could not record the run is raised last (the
    run's record then says what the store last took; the results are on screen and on disk)."""
    table = metrics_table({"test": result.test, **({"valid": result.valid} if result.valid else {}), **floor})
    print(f"\n{b.label}  ({result.rounds} rounds, train {result.train_seconds:.1f}s, eval {result.eval_seconds:.1f}s)")
    print(table, flush=True)
    audit = audit_scores(b)  # the truth, read only now
    if audit:
        print("audit (an honest-but-curious server's inference attacks): " + ", ".join(
            f"{name[len('audit_'):]} {value:.4f}" for name, value in audit.items()), flush=True)
        table += "\n\n## Audit: an honest-but-curious server's inference attacks (docs/privacy.md)\n\n" + markdown(
            ["metric", "value"], [[name, f"{value:.4f}"] for name, value in audit.items()])
    out = job_dir()
    written = []
    try:
        written = write_outputs(cfg, b.label, table, out)  # the table artifact, audit included
    except OSError as err:
        log.error("the results table could not be written to %s (%s); it is printed above", out, err.strerror or err)
    def store_files() -> None:
        for path in written:
            tracker.log_artifact(path)

    failures: list[TrackingError] = []
    steps = (lambda: log_final(tracker, result), lambda: tracker.log_metrics(audit, step=result.rounds),
             lambda: record_floor(b, result, floor, tracker), store_files,
             lambda: log_result_views(b, result, floor, tracker, out), lambda: tracker.finish("FINISHED"))
    for step in steps:
        try:
            step()
        except TrackingError as err:
            log.error("%s", err)  # one line each; the next step is still tried (the run's status last)
            failures.append(err)
    if failures:
        kept = f" and in {written[0]}" if written else ""
        raise TrackingError(f"The run finished and its results are above{kept}, but the tracking store did not "
                            f"record all of it ({len(failures)} step(s) failed; the first: {failures[0]})")
    if tracker.link():
        print(tracker.link())
    return result


def validation_floor(b: Built, tracker: Tracker) -> dict[str, float]:
    """The floor of the run's validation part (logged as ``floor_valid_*`` before training), for the validation
    curve to be read against: a validation part carved from the training data can be easier than the test part
    (amazon-music: popularity Recall@20 .0154 on valid, .0119 on test). Empty for the floor itself and for a
    run that never validates."""
    if isinstance(b.method, Pop) or b.env.split.valid is None or not b.plan.sim.eval_every:
        return {}
    floor = floor_metrics(b.evaluator, b.env, "valid")
    tracker.log_metrics({f"floor_valid_{k}": v for k, v in floor.items()}, step=0)
    return floor


def floor_columns(b: Built, result: RunResult, valid_floor: dict[str, float]) -> dict[str, dict[str, float]]:
    """The floor of the run's split and protocol beside its test metrics; a run at or below it says so in one
    line. Nothing for the floor itself. → the table's floor columns: the test part's, then the validation part's
    (``valid_floor``) if any (recorded by ``record_floor``)."""
    if isinstance(b.method, Pop):
        return {}
    floor = floor_metrics(b.evaluator, b.env)
    kind = "user + item bias" if b.evaluator.rating else "popularity"
    metric = b.evaluator.monitor  # checked before the run to be one of the evaluator's metrics
    if at_or_below(result.test, floor, metric):
        log.warning("test %s %.4f is at or below the %s floor %.4f of this split and protocol: the run learned "
                    "nothing a count could not (a bug, too few rounds or a bad default, never a result)",
                    metric, result.test[metric], kind, floor[metric])
    return {f"floor ({kind})": floor, **({"valid floor": valid_floor} if valid_floor and result.valid else {})}


def audit_scores(b: Built) -> dict[str, float]:
    """The audit's attacks scored against the clients' training and test interactions (read only now)."""
    if not b.plan.audit.active:
        return {}
    return b.plan.audit.score(b.env.train, ClientStore.from_interactions(b.env.split.test, b.env.device))


def record_floor(b: Built, result: RunResult, floor: dict[str, dict[str, float]], tracker: Tracker) -> None:
    """The test part's floor as ``floor_*`` metrics, and the ``fedrun.below_floor`` tag of a run at or below it."""
    test_floor = next((values for name, values in floor.items() if name.startswith("floor (")), None)
    if test_floor is None:
        return
    tracker.log_metrics({f"floor_{k}": v for k, v in test_floor.items()}, step=result.rounds)
    if at_or_below(result.test, test_floor, b.evaluator.monitor):
        tracker.set_tags({"fedrun.below_floor": "true"})


def log_dataset(b: Built, tracker: Tracker) -> None:
    """The data the run trained on, as the tracker's dataset input: name (with its variant), the digest of
    its files, where it was read from, and the split's profile."""
    dataset, split = b.plan.dataset, b.env.split
    variant = getattr(dataset.config, "variant", None)
    name = dataset.name + (f"/{variant}" if variant else "")
    profile = {"users": split.n_users, "items": split.n_items, "train": len(split.train),
               "valid": len(split.valid) if split.valid is not None else 0, "test": len(split.test),
               "split": split.protocol, "split_seed": dataset.config.split.seed}
    tracker.log_dataset(name, dataset.digest(), str(data_dir() / dataset.name), profile)


def log_result_views(b: Built, result: RunResult, floor: dict[str, dict[str, float]], tracker: Tracker,
                     out: Path) -> None:
    """The results table as a table artifact (``results.json``: metric, test, valid, floor, valid floor) and the
    learning curve of the monitored metric (``learning_curve.png``), for the tracker's run page."""
    parts = {"test": result.test, **({"valid": result.valid} if result.valid else {}),
             **{("valid floor" if name == "valid floor" else "floor"): values for name, values in floor.items()}}
    names = list(result.test)
    tracker.log_table({"metric": names, **{part: [values.get(n) for n in names] for part, values in parts.items()}},
                      "results.json")
    monitor = b.evaluator.monitor
    history = tracker.metric_history(["train_loss", *(f"{part}_{monitor}" for part in
                                                      ("valid", "test", "floor", "floor_valid"))])
    figure = learning_curve(history, out / "learning_curve.png", b.label, monitor)
    if figure is not None:
        tracker.log_artifact(figure)


def resume_state(b: Built, cfg: DictConfig) -> tuple[RunnerState, str | None, bool]:
    """Load ``sim.resume`` (a path, else an MLflow run id) into the method; check the config matches →
    (runner state, the checkpoint's run id, whether the run's recorded params stay the same)."""
    target = b.plan.sim.resume
    path = Path(target)
    if not path.exists() and "/" not in target and not target.endswith(".pt"):
        path = b.plan.tracker.fetch_checkpoint(target)
    payload = checkpoint.load(path)
    # compared as written, never resolved: a checkpoint holds its run's config resolved, so an interpolation in it
    # (${oc.env:…}, ${fedrun_claim:…}) is foreign — it differs from the run's value instead of being evaluated
    saved = flatten(OmegaConf.to_container(OmegaConf.create(payload["config"]), resolve=False))
    current = flatten(OmegaConf.to_container(cfg, resolve=True))
    # settings fedrun gained after the checkpoint was written: the checkpoint's run had none of them
    added = sorted(k for k in set(current) - set(saved) if not k.startswith(RESUME_MAY_CHANGE))
    changed = sorted(k for k in set(saved) | set(current)
                     if not k.startswith(RESUME_MAY_CHANGE) and k not in added and saved.get(k) != current.get(k))
    if changed:
        diffs = ", ".join(f"{k} ({saved.get(k)!r} → {current.get(k)!r})" for k in changed[:6])
        raise ConfigError("sim.resume", target, f"the config the checkpoint was made with; these differ: {diffs}")
    if added:
        log.warning("the checkpoint predates %s: the run resumes with %s", ", ".join(added),
                    ", ".join(f"{k}={current[k]!r}" for k in added))
    b.method.load_state_dict(payload["method"])
    same_params = all(saved.get(k) == current.get(k) for k in RESUME_CHANGES_RESULT)
    return payload["runner"], payload["run_id"], same_params


def record_failure(cfg: DictConfig, err: Exception, sweep: str | None, job: int | None) -> None:
    """A run that fails before it starts (bad config, missing data) still leaves a FAILED run with its reason,
    so a sweep's report lists it — except a single run's refused config, which the command line already answered
    (a typo leaves nothing to clean up in the store). Skipped when tracking is off or broken."""
    if sweep is None and isinstance(err, ConfigError):
        return
    try:
        tracker = remote_or_local(build(cfg.track, "track", Tracker))  # tracking off (``track=none``) records nothing
    except FedrunError:
        return  # the tracker's own config is what failed: there is nowhere to record
    try:
        choices = {g: str(OmegaConf.select(cfg, f"choices.{g}", default="")) for g in GROUPS}
        configured = getattr(tracker.config, "experiment", None)
        experiment = experiment_name(configured, cfg, choices.get("dataset") or "fedrun")
        tags = {f"fedrun.{g}": v for g, v in choices.items() if v}
        if sweep:
            tags.update({"fedrun.sweep": sweep, "fedrun.job": str(job)})
            parent = tracker.sweep_parent(experiment, sweep, sweep_overrides(sweep))
            if parent is not None:
                tags["mlflow.parentRunId"] = parent
        params = config_params(cfg, resolve=False)
        tracker.start(experiment, run_name(cfg, OmegaConf.select(cfg, "sim.seed", default="?")), params, tags)
        tracker.finish("FAILED", f"{type(err).__name__}: {err}")
    except Exception as tracking_error:  # never hide the user's error behind a tracking one
        log.warning("could not record the failed run with its tracker: %s", tracking_error)


def write_outputs(cfg: DictConfig, label: str, table: str, out: Path) -> list[Path]:
    """The results table and resolved config, in this job's own Hydra output dir ``out`` (sweep-safe), each written
    whole or not at all (a full disk leaves no half-written file)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    files = {"last_run.md": f"# {label}\n\n{table}\n", "config.yaml": OmegaConf.to_yaml(cfg, resolve=True)}
    for name, text in files.items():
        written.append(write_atomically(out / name, text))
    return written


def write_atomically(path: Path, text: str) -> Path:
    """``text`` into ``path`` through a temporary file beside it and a rename; the temporary file is removed if the
    write fails."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        temporary.write_text(text)
        temporary.replace(path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def run_name(cfg: DictConfig, seed: Any) -> str:
    """The MLflow run's name: what it runs and its seed, so a sweep's seeds are told apart in the runs table —
    ``method=fedcl · backbone=gru4rec · dataset=beauty · seed=2``, with the preset's row and an attack or a
    defense where the run has one."""
    def choice(group: str) -> str:
        return str(OmegaConf.select(cfg, f"choices.{group}", default="") or "")

    parts = [f"{g}={choice(g)}" for g in ("method", "backbone", "dataset") if choice(g)]
    parts += [f"{g}={choice(g).split('/')[-1]}" for g in ("row", "attack", "defense")
              if choice(g) and choice(g).split("/")[-1] not in ("none", "mean", "sum")]
    return " · ".join([*parts, f"seed={seed}"])


def experiment_name(configured: Any, cfg: DictConfig, dataset: str) -> str:
    """track.experiment, else the preset's experiment_name, else the dataset's name — always a
    string (``track.experiment=2024`` or ``=nan`` arrive from the command line as numbers)."""
    for name in (configured, cfg.get("experiment_name")):
        if name is not None and str(name) != "":
            return str(name)
    return dataset


def sweep_overrides(sweep: str) -> list[str]:
    """The overrides the sweep was started with (the command line of ``fedrun -m``, kept by ``StopOnSignal``)."""
    recorded = Path(sweep) / OVERRIDES
    return recorded.read_text().split() if recorded.exists() else []


def job_dir() -> Path:
    try:
        return Path(HydraConfig.get().runtime.output_dir)
    except (ValueError, AttributeError, KeyError, MissingMandatoryValue):  # not inside a Hydra job
        return Path(tempfile.mkdtemp(prefix="fedrun-"))


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def platform_tag(device: Any) -> str:
    """What a run's numbers depend on beyond its config and seeds: the processor, the instruction set torch's CPU
    kernels use, and torch's version (and the GPU, on CUDA). One machine repeats a run bit for bit; another
    processor may round differently, and a long run then drifts by about a seed's spread (docs/data.md)."""
    import platform

    import torch

    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text(errors="replace").splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    parts = [cpu, torch.backends.cpu.get_cpu_capability(), f"torch {torch.__version__}"]
    if str(device).startswith("cuda"):
        parts.append(torch.cuda.get_device_name(device))
    return " · ".join(parts)


def git_commit() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (commit or "unknown") + ("-dirty" if dirty else "")
