"""Issue #68's probe, rerun: each example of its classes as the installed ``fedrun`` command, and what it does now.

    python scripts/checks/reliability_probe.py --out docs/results/reliability-probe.md

Each command runs on the synthetic dataset for one round with tracking off (unless the case is about the store),
from a scratch working directory. The outcome is read from the exit status and the output:
  - **named error**: exit 2, one ``fedrun: error:`` paragraph naming the field, no traceback;
  - **traceback**: a Python traceback reached the user;
  - **ran**: exit 0; the last column then quotes what the run said about the setting, if anything.
The faults that a command line cannot inject (a full disk under the store or the output folder at the end of a run,
a tracking server killed mid-sweep, a crafted checkpoint) are tests, named in the table's last rows.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FEDRUN = shutil.which("fedrun") or str(Path(sys.executable).parent / "fedrun")
SMALL = ["dataset=synthetic", "dataset.n_users=60", "dataset.n_items=80", "sim.clients_per_round=32",
         "sim.max_rounds=1", "sim.progress=false", "track=none"]

# (issue item, what the issue found before, the overrides)
CASES: list[tuple[str, str, list[str]]] = [
    ("3", "plain mean under Multi-Krum's label", ["defense=multi_krum", "defense.m=100000"]),
    ("3", "no item row ever updated", ["defense=hics", "defense.min_uploaders=100000"]),
    ("3", "pre-trains only, recorded as PerFedRec++",
     ["method=perfedrecpp", "method.pretrain_rounds=1000", "sim.epochs=1"]),
    ("3", "attacked another item", ["attack=a_hum", "attack.fraction=0.05", "attack.target_ids=[3]"]),
    ("3", "a target counted twice", ["attack=a_hum", "attack.fraction=0.05", "attack.targets=explicit",
                                     "attack.target_ids=[5,5]"]),
    ("3", "ratings metrics of a ranking model", ["eval.kind=rating"]),
    ("3", "reported 1.0", ["eval.ks=[100000]"]),
    ("3", "reported 1.0", ["attack=a_hum", "attack.fraction=0.05", "eval.er_ks=[100000]"]),
    ("3", "57 s per round instead of 0.2 s", ["method.num_negatives=79"]),
    ("3", "ran, mislabelled", ["method=pop", "backbone=gru4rec"]),
    ("3", "ran, mislabelled", ["method=fedavg", "backbone=binary-mf"]),
    ("3", "accepted", ["+foo=bar"]),
    ("3", "accepted", ["+bogusgroup=x"]),
    ("3", "accepted", ["sim.threads=100000"]),
    ("3", "accepted", ["backbone=lightgcn", "method=fedgnn", "backbone.layers=1000"]),
    ("4", "einsum traceback in round 0", ["method=fedcl", "attack=a_hum", "attack.fraction=0.05"]),
    ("4", "einsum traceback in round 0", ["method=fedcl", "attack=psmu", "attack.fraction=0.05"]),
    ("4", "einsum traceback in round 0", ["method=fedcl", "attack=fedrecattack", "attack.fraction=0.05"]),
    ("5", "scored and FINISHED at 8e28", ["method.optimizer.lr=1e30"]),
    ("5", "blamed on method.optimizer.lr", ["privacy=ldp", "privacy.targets=[item_rows]", "privacy.epsilon=1e-300"]),
    ("5", "refused as sim.max_slots", ["backbone.dim=512"]),
    ("6", "printed the Zen of Python, then the error", ["method._target_=this.Nothing"]),
    ("7", "accepted 2^64", ["sim.seed=18446744073709551616"]),
    ("7", "refused at 2^63 only", ["dataset.split.seed=9223372036854775808"]),
    ("7", "Hydra's OSError traceback", ["hydra.run.dir={file}/run"]),
]

TESTS = [  # (item, the fault, what the probe saw, the test that injects it now)
    ("1", "a full store disk after the test", "run RUNNING, no table, ~190 traceback lines",
     "tests/test_run.py::test_a_store_that_fails_after_the_test_loses_no_result"),
    ("1", "a full output disk after the test", "traceback, 0-byte last_run.md, a logged run marked FAILED",
     "tests/test_run.py::test_an_output_folder_that_fails_after_the_test_leaves_a_finished_run"),
    ("2", "a tracking server down under a sweep", "jobs recorded nowhere, exit 0, 8 min of retries",
     "tests/integration/test_cli.py::test_a_sweep_whose_tracking_server_is_down_says_so_and_its_folder_keeps_every_"
     "outcome"),
    ("6", "a crafted checkpoint holding resolvers", "its resolvers ran (a folder created, $HOME echoed)",
     "tests/test_checkpoint.py::test_a_checkpoint_config_is_compared_as_written_never_resolved"),
    ("7", "a run killed by SIGKILL", "RUNNING until the next run in its experiment noticed",
     "tests/test_track.py::test_fedrun_report_judges_liveness_and_lists_a_killed_run_as_unfinished_with_its_reason"),
    ("7", "a resume under new params", "listed as a failure beside its continuation",
     "tests/test_report_matrix.py::test_a_run_stopped_and_resumed_under_new_params_is_listed_as_continued_not_as_a_"
     "failure"),
]


HEADER = """# Reliability probe, rerun (issue #68): each example of the issue's classes, before and now

`python scripts/checks/reliability_probe.py --out docs/results/reliability-probe.md` runs each example as the installed
`fedrun` command; the faults a command line cannot inject are tests, listed in the second table. Items: (1) a late
failure must not lose a finished run; (2) a sweep must survive its tracking server; (3) no setting may silently change
what a run measures; (4) combinations that crashed at round 0; (5) a diverged model and the true cause; (6) nothing
runs before it is checked; (7) liveness, resumes, one seed rule, an output folder that cannot be created.

"""


def outcome(result: subprocess.CompletedProcess) -> tuple[str, str]:
    text = result.stdout + result.stderr
    if "Traceback" in text:
        return "traceback", text.strip().splitlines()[-1][:160]
    if result.returncode == 2:
        line = next((x for x in result.stderr.splitlines() if "error:" in x), result.stderr.strip()[:160])
        return "named error", line.replace("fedrun: error: ", "")[:160]
    if result.returncode == 0:
        said = [x for x in text.splitlines() if "WARNING" in x or "note:" in x.lower()]
        return "ran", (said[0].split(" - ", 1)[-1][:160] if said else "(nothing said)")
    return f"exit {result.returncode}", text.strip().splitlines()[-1][:160] if text.strip() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="Markdown table (default: print it)")
    args = parser.parse_args()
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        blocker = Path(scratch) / "a-file"
        blocker.write_text("")
        for item, before, overrides in CASES:
            command = [*SMALL, *(o.format(file=blocker) for o in overrides)]
            result = subprocess.run([FEDRUN, *command], capture_output=True, text=True, timeout=600, cwd=scratch)
            kind, said = outcome(result)
            keys = [o.lstrip("+").split("=")[0] for o in overrides if "fraction" not in o]
            if kind == "named error" and not any(key.split(".")[-1] in said for key in keys):
                kind = "named error (another field)"  # the case did not reach its own check
            shown = " ".join(o.replace(str(blocker), "<a file>") for o in overrides)
            rows.append(f"| {item} | `{shown}` | {before} | **{kind}** | {said.replace('|', '/')} |")
            print(rows[-1], flush=True)
    lines = ["| item | overrides (on `" + " ".join(SMALL) + "`) | before (the issue's probe) | now "
             "| what fedrun said |",
             "|---|---|---|---|---|", *rows, "",
             "| item | fault injected by a test | before (the issue's probe) | test |", "|---|---|---|---|",
             *(f"| {item} | {fault} | {before} | `{test}` |" for item, fault, before, test in TESTS), "",
             f"{len(CASES)} commands in {time.perf_counter() - started:.0f} s."]
    table = HEADER + "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
