"""The bad-input table of issue #36: every numeric and string key of every group's options, driven with
0, a negative, NaN, inf, a huge value, an empty value and a non-ASCII string; each case is validated and
built as a run would be (``experiment.build_run``: config, data, cross-field checks; no training).

An outcome is ``named`` (a FedrunError: one line naming the field), ``hydra`` (Hydra/OmegaConf refused the
override itself: also one message, exit 2), ``traceback`` (any other exception: a bug) or ``accepted``
(the value is valid, or silently taken: the table lists each accepted case for a reader to judge).

  python scripts/checks/fuzz_table.py [--out docs/results/fuzz-table.md] [--groups method,defense]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from unittest import mock

from omegaconf import OmegaConf

from fedrun.app.compose import compose
from fedrun.app.experiment import resume_state
from fedrun.app.plan import build_run
from fedrun.core.choices import options
from fedrun.errors import FedrunError

BASE = ["dataset=synthetic", "dataset.n_users=40", "dataset.n_items=60", "dataset.mean_length=8",
        "track=none", "sim.progress=false", "sim.clients_per_round=8"]
CLASSES = {"zero": "0", "negative": "-3", "nan": "nan", "inf": "inf", "huge": "1e30", "empty": "''",
           "non-ascii": "'é∂'"}
# each method with a backbone it runs with (the others refuse by capability, which is not a bad value)
METHOD_BACKBONE = {"fedrec": "pmf", "fedrecpp": "pmf", "metamf": "metamf/pmf", "privrec": "pmf", "svdpp": "pmf",
                   "fedmf": "pmf", "lightfr": "binary-mf", "median_quantized": "binary-mf", "fcf": "mf"}
SETTINGS = {  # (group, option) → the overrides that select it
    "dataset": [["dataset=synthetic"]],
    "backbone": [[f"backbone={b}"] for b in ("mf", "ncf", "pmf", "binary-mf", "gru4rec", "bert4rec")],
    "privacy": [["privacy=ldp"]],
    "attack": [[f"attack={a}", "method=fedavg"] for a in ("a_hum", "a_ra", "eb", "ra", "psmu", "fedrecattack")],
    "defense": [[f"defense={d}"] for d in ("median", "trimmed_mean", "krum", "multi_krum", "norm_bound", "hics")],
    "eval": [["eval=full"], ["eval=sampled", "eval.num_negatives=9", "eval.ks=[5]"]],
    "sim": [[]],
}


def method_settings() -> list[list[str]]:
    out = []
    for method in options("method"):
        backbone = METHOD_BACKBONE.get(method)
        if method.startswith(("lightfr", "median")):
            out.append([f"method={method}", f"backbone={backbone}", "eval=sampled", "eval.num_negatives=9",
                        "eval.ks=[5]", "dataset.ratings=true"])
        elif backbone == "pmf":
            out.append([f"method={method}", "backbone=pmf", "dataset.ratings=true"])
        else:
            out.append([f"method={method}"] + ([f"backbone={backbone}"] if backbone else [])
                       + (["backbone=ncf"] if method in ("cl4fedrec", "rcl4fedrec", "simgcl", "union") else []))
    return out


def leaf_keys(node, prefix: str) -> list[tuple[str, object]]:
    keys = []
    for key, value in node.items():
        path = f"{prefix}.{key}"
        if key == "_target_":
            continue
        if OmegaConf.is_dict(value):
            keys += leaf_keys(value, path)
        elif not OmegaConf.is_list(value) and (value is None or isinstance(value, (int, float, str))) \
                and not isinstance(value, bool):
            keys.append((path, value))
    return keys


def outcome(overrides: list[str]) -> tuple[str, str]:
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            cfg = compose(overrides)
            built = build_run(cfg)
            if cfg.sim.resume is not None:  # checked when the run starts, before anything is recorded
                resume_state(built, cfg)
    except FedrunError as err:
        return "named", str(err).splitlines()[0]
    except Exception as err:  # noqa: BLE001 - classifying every failure is the point
        module = type(err).__module__
        if module.startswith(("hydra", "omegaconf")):
            return "hydra", str(err).splitlines()[0][:160]
        return "traceback", f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
    return "accepted", ""


DATA_CASES = {  # what happens to one data file (Steam: no public download address, so "missing" stays missing)
    "missing": lambda path: path.unlink(),
    "empty": lambda path: path.write_bytes(b""),
    "truncated": lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
    "one byte changed": lambda path: path.write_bytes(bytes([path.read_bytes()[0] ^ 1]) + path.read_bytes()[1:]),
    "a folder in its place": lambda path: (path.unlink(), path.mkdir()),
    "a dangling link": lambda path: (path.unlink(), path.symlink_to(path.with_name("nowhere"))),
}


def data_failures(source: Path) -> list[str]:
    """Each data-file failure mode on each of Steam's two files → table rows (the outcome of building a run)."""
    rows = []
    for name in ("train.txt", "test.txt"):
        for case, damage in DATA_CASES.items():
            with tempfile.TemporaryDirectory() as root:
                shutil.copytree(source / "steam", Path(root) / "steam")
                damage(Path(root) / "steam" / name)
                with mock.patch.dict(os.environ, FEDRUN_DATA_DIR=root, FEDRUN_CACHE_DIR=str(Path(root) / "cache")):
                    result, detail = outcome(["dataset=steam", "track=none", "sim.progress=false"])
            rows.append(f"| steam/{name} | {case} | {result} | {detail[:200]} |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/fuzz-table.md"))
    parser.add_argument("--groups", default="dataset,backbone,method,privacy,attack,defense,eval,sim")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    started = time.perf_counter()
    groups = args.groups.split(",")
    counts: dict[str, Counter] = defaultdict(Counter)
    notable: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for group in groups:
        for setting in (method_settings() if group == "method" else SETTINGS[group]):
            cfg = compose(BASE + setting)
            for key, _ in leaf_keys(cfg[group], group):
                for cls, value in CLASSES.items():
                    case = (key, cls, " ".join(setting))
                    if case in seen:
                        continue
                    seen.add(case)
                    result, detail = outcome(BASE + setting + [f"{key}={value}"])
                    counts[cls][result] += 1
                    if result in ("traceback", "accepted"):
                        notable.append(f"| {result} | `{' '.join(setting) or '(defaults)'}` | `{key}={value}` | "
                                       f"{detail} |")
    lines = ["# Bad-input table (issue #36)", "",
             f"`python scripts/checks/fuzz_table.py --groups {args.groups}`: every numeric and string key of the "
             "options "
             "below, each driven with the values of every class, validated and built as a run (data loaded, "
             f"cross-field checks; no training). {sum(sum(c.values()) for c in counts.values())} cases in "
             f"{time.perf_counter() - started:.0f} s.", "",
             "| class | value | cases | named error | Hydra/OmegaConf message | traceback | accepted |",
             "|---|---|---|---|---|---|---|"]
    for cls, value in CLASSES.items():
        c = counts[cls]
        lines.append(f"| {cls} | `{value}` | {sum(c.values())} | {c['named']} | {c['hydra']} | {c['traceback']} | "
                     f"{c['accepted']} |")
    source = Path(os.environ.get("FEDRUN_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    if (source / "steam").exists():
        lines += ["", "Data-file failure modes (each file of a dataset damaged in a copy of the data folder):", "",
                  "| file | damage | outcome | message |", "|---|---|---|---|", *data_failures(source)]
    lines += ["", "Accepted cases (each a valid value or a silent acceptance) and tracebacks:", "",
              "| outcome | options | override | detail |", "|---|---|---|---|", *sorted(notable)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:16]))
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
