"""Check that a device (CUDA) computes what the CPU computes, and time a round on each.

Every case builds the same run twice from the same seeds, once with ``sim.device=cpu`` and once
with ``sim.device=<--device>``; trains ``--rounds`` rounds on each; then compares

  - every tensor of the method's state (``Method.state_dict()``: private rows, public model,
    server optimizer state): max |Δ| relative to the tensor's max |x|;
  - the test metrics (full ranking, or RMSE for rating models).

What must agree depends on the case (``Case.agree``):

  - ``state``: no random draw of the run is made on the device, so every tensor must agree to
    ``--rtol``. Negatives and client sampling come from counter-based hashes or CPU generators,
    the same on every device.
  - ``metrics``: no draw on the device either, but an Adam step turns a gradient that is float
    noise into a step of ±lr (its first step is lr·g/|g|), and the noise's sign differs between
    devices: parameters the loss does not depend on (a score bias under BPR or InfoNCE, a key
    bias under softmax) or a fresh per-client Adam drift apart. The test metrics must agree to
    ``--metrics-atol``; the state difference and where it is are listed (``Case.why``).
  - ``none``: the run draws on the device (torch generators are per device: LDP noise, dropout
    masks, FedCL's semi-hard picks), so both are listed side by side for the reader to judge.

    python scripts/checks/device_check.py --device cuda [--rounds 5] [--cases fedavg-mf,...] [--data ml-100k]

Exit status 1 when a case disagrees in what it must agree on, or fails to run. Writes ``device_check.md`` /
``.csv`` to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

from fedrun.app.compose import compose  # noqa: E402
from fedrun.app.plan import build_run  # noqa: E402
from fedrun.report.table import markdown  # noqa: E402
from fedrun.testing.compare import state_difference  # noqa: E402
from fedrun.testing.measure import machine, sync  # the benchmarks' device timing and description  # noqa: E402

IMPLICIT = {"synthetic": ["dataset=synthetic", "dataset.n_users=400", "dataset.n_items=600",
                          "dataset.mean_length=15"],
            "ml-100k": ["dataset=ml-100k", "dataset.implicit_threshold=1"]}
RATED = {"synthetic": ["dataset=synthetic", "dataset.n_users=400", "dataset.n_items=600", "dataset.mean_length=15",
                       "dataset.ratings=true", "dataset.split.protocol=random_ratio",
                       "dataset.split.test_ratio=0.1", "dataset.split.valid_ratio=0.1"],
         "ml-100k": ["dataset=ml-100k", "dataset.split.protocol=random_ratio", "dataset.split.test_ratio=0.1",
                     "dataset.split.valid_ratio=0.1"]}
COMMON = ["track=none", "sim.progress=false", "sim.clients_per_round=64", "sim.eval_every=0", "sim.keep_best=false"]


@dataclass(frozen=True)
class Case:
    name: str
    data: str  # "implicit" | "rated"
    overrides: tuple[str, ...]
    agree: str  # state | metrics | none: what must agree between the devices (module docstring)
    why: str = ""  # for agree="metrics": which Adam step amplifies float noise


# FedCL without its paper's LDP (drawn on the device) and with the hardest negatives (the semi-hard pick is drawn)
FEDCL_EXACT = ("method=fedcl", "privacy=none", "method.hardest=true")
SERVER_ADAM = "server Adam on parameters the loss is invariant to (score / key / output biases)"
CASES = [
    Case("fedavg-mf", "implicit", ("method=fedavg", "backbone=mf"), "state"),
    Case("fedavg-mf-general", "implicit", ("method=fedavg", "backbone=mf", "sim.fast_path=off"), "state"),
    Case("fedavg-ncf", "implicit", ("method=fedavg", "backbone=ncf", "method.num_negatives=4"), "state"),
    Case("fedavg-mf-ldp", "implicit", ("method=fedavg", "backbone=mf", "privacy=ldp",
                                       "privacy.targets=[item_rows]"), "none"),
    Case("central-ncf", "implicit", ("method=central", "backbone=ncf"), "state"),
    Case("fedavg-ncf-ahum-median", "implicit", ("method=fedavg", "backbone=ncf", "attack=a_hum", "attack.fraction=0.05",
                                                "defense=median"), "state"),
    Case("fedavg-ncf-eb-krum", "implicit", ("method=fedavg", "backbone=ncf", "attack=eb", "attack.fraction=0.05",
                                            "defense=krum"), "state"),
    Case("fedavg-mf-fedrecattack-hics", "implicit", ("method=fedavg", "backbone=mf", "attack=fedrecattack",
                                                     "defense=hics"), "state"),
    Case("fedcl-ncf-hardest", "implicit", (*FEDCL_EXACT, "backbone=fedcl/ncf"), "metrics", SERVER_ADAM),
    Case("fedcl-ncf-general", "implicit", (*FEDCL_EXACT, "backbone=fedcl/ncf", "sim.fast_path=off"), "metrics",
         SERVER_ADAM),
    Case("fedcl-ncf-ldp", "implicit", ("method=fedcl", "backbone=fedcl/ncf", "privacy=ldp"), "none"),
    Case("fedcl-gru4rec-hardest", "implicit", (*FEDCL_EXACT, "backbone=fedcl/gru4rec", "backbone.dropout=0"),
         "metrics", SERVER_ADAM),
    Case("fedcl-gru4rec-general", "implicit", (*FEDCL_EXACT, "backbone=fedcl/gru4rec", "backbone.dropout=0",
                                               "sim.fast_path=off"), "metrics", SERVER_ADAM),
    Case("fedcl-bert4rec-hardest", "implicit", (*FEDCL_EXACT, "backbone=fedcl/bert4rec", "backbone.dropout=0"),
         "metrics", SERVER_ADAM),
    Case("bil-mf", "implicit", ("method=bil", "backbone=mf"), "state"),
    Case("fedrec-pmf", "rated", ("method=fedrec", "backbone=pmf"), "state"),
    Case("fedrecpp-pmf", "rated", ("method=fedrecpp", "backbone=pmf"), "state"),
    Case("fcf-pmf", "rated", ("method=fcf", "backbone=pmf"), "state"),
    Case("privrec-pmf", "rated", ("method=privrec", "backbone=pmf"), "none"),
    Case("metamf", "rated", ("method=metamf", "backbone=metamf/pmf"), "metrics",
         "server Adam on the meta network's item generator"),
    Case("lightfr", "rated", ("method=lightfr", "backbone=binary-mf"), "state"),
    Case("fedavg-lightgcn", "implicit", ("method=fedavg", "backbone=lightgcn"), "state"),
    Case("central-lightgcn", "implicit", ("method=central", "backbone=lightgcn"), "state"),
    Case("central-lightgcn-simgcl", "implicit", ("method=central", "backbone=lightgcn",
                                                 "method.contrast.kind=simgcl"), "none"),
    Case("fedgnn", "implicit", ("method=fedgnn", "privacy=none"), "state"),
    Case("fedgnn-ldp", "implicit", ("method=fedgnn",), "none"),
    Case("perfedrec", "implicit", ("method=perfedrec", "privacy=none"), "state"),
    Case("perfedrecpp", "implicit", ("method=perfedrecpp", "privacy=none", "method.pretrain_rounds=2"), "metrics",
         "a fresh Adam per client in pre-training (perfedrecpp-sgd, plain SGD, agrees)"),
    Case("perfedrecpp-sgd", "implicit", ("method=perfedrecpp", "privacy=none", "method.pretrain_rounds=2",
                                         "method.pretrain_optimizer.name=sgd", "method.pretrain_optimizer.lr=5"),
         "state"),
    Case("cl4fedrec", "implicit", ("method=cl4fedrec",), "none"),
    Case("rcl4fedrec", "implicit", ("method=rcl4fedrec",), "none"),
    Case("simgcl-ncf", "implicit", ("method=simgcl",), "none"),
    Case("union-ncf", "implicit", ("method=union",), "state"),
]


def train(overrides: list[str], device: str, rounds: int) -> tuple[dict, dict[str, float], float]:
    """(state, test metrics, seconds per round after the first) of ``rounds`` rounds on ``device``."""
    built = build_run(compose(overrides + [f"sim.device={device}"]))
    torch_device = built.env.device
    built.trainer.train_round(0)  # warm-up: kernels, caches, lazy allocations
    sync(torch_device)
    started = time.perf_counter()
    for round_index in range(1, rounds):
        built.trainer.train_round(round_index)
    sync(torch_device)
    seconds = (time.perf_counter() - started) / max(rounds - 1, 1)
    metrics = built.evaluator.evaluate(built.method, "test")
    return built.method.state_dict(), metrics, seconds


def check(case: Case, args) -> list[str]:
    data = (IMPLICIT if case.data == "implicit" else RATED)[args.data]
    overrides = data + COMMON + list(case.overrides)
    cpu_state, cpu_metrics, cpu_seconds = train(overrides, "cpu", args.rounds)
    dev_state, dev_metrics, dev_seconds = train(overrides, args.device, args.rounds)
    diff, where = state_difference(cpu_state, dev_state)
    metric = next((k for k in ("hr_at_10", "rmse") if k in cpu_metrics), next(iter(cpu_metrics)))
    metric_diff = max(abs(cpu_metrics[k] - dev_metrics[k]) for k in cpu_metrics)
    if case.agree == "state":
        verdict = "agrees" if diff <= args.rtol else "DIFFERS"
    elif case.agree == "metrics":
        verdict = "metrics agree" if metric_diff <= args.metrics_atol else "metrics DIFFER"
    else:
        verdict = "draws on device"
    return [case.name, case.agree, f"{diff:.1e}", where, f"{metric}",
            f"{cpu_metrics[metric]:.4f}", f"{dev_metrics[metric]:.4f}", f"{metric_diff:.1e}",
            f"{cpu_seconds:.4f}", f"{dev_seconds:.4f}", f"{cpu_seconds / dev_seconds:.1f}×", verdict]


def checked(case: Case, args) -> list[str]:
    """``check``, or a row that says why the case could not run (the other cases still run)."""
    try:
        return check(case, args)
    except Exception as error:  # noqa: BLE001 -- reported in the table and in the exit status
        return [case.name, case.agree, *[""] * 9, f"ERROR {type(error).__name__}: {error}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="the device compared with the CPU (cuda, cuda:1; cpu checks "
                                                          "the script itself)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", default=",".join(c.name for c in CASES),
                        help=f"comma-separated, from: {', '.join(c.name for c in CASES)}")
    parser.add_argument("--data", choices=sorted(IMPLICIT), default="synthetic")
    parser.add_argument("--rtol", type=float, default=1e-4, help="largest relative state difference (agree=state)")
    parser.add_argument("--metrics-atol", type=float, default=1e-6, help="largest metric difference (agree=metrics)")
    parser.add_argument("--out", default="outputs/device_check")
    args = parser.parse_args()
    known = {c.name: c for c in CASES}
    unknown = [name for name in args.cases.split(",") if name not in known]
    if unknown:
        parser.error(f"--cases: unknown {', '.join(unknown)}; expected some of {', '.join(known)}")
    if args.rounds < 2:
        parser.error(f"--rounds: {args.rounds}; at least 2 (the first round is a warm-up, not timed)")
    torch.device(args.device)  # a malformed name fails here; a missing CUDA fails as a config error below
    rows = []
    for name in args.cases.split(","):  # one line per case as it ends: a run stopped by a time limit keeps them
        rows.append(checked(known[name], args))
        print(" | ".join(rows[-1]), flush=True)
    header = ["case", "must agree", "state max rel. |Δ|", "in", "metric", "cpu", args.device, "metrics max |Δ|",
              "cpu s / round", f"{args.device} s / round", f"{args.device} speed-up", "verdict"]
    caption = (f"CPU vs {args.device} ({machine(args.device)}): {args.rounds} rounds of 64 clients on "
               f"{args.data} data, same seeds; states must agree to {args.rtol:g} (relative), metrics to "
               f"{args.metrics_atol:g}")
    table = markdown(header, rows)
    why = [f"- {row[0]}: {known[row[0]].why}" for row in rows if known[row[0]].why]
    if why:
        table += "\n\nWhere only the metrics must agree, the Adam step that moves the state apart:\n" + "\n".join(why)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "device_check.md").write_text(f"{caption}\n\n{table}\n")
    (out / "device_check.csv").write_text("\n".join(",".join(row) for row in [header, *rows]) + "\n")
    print(f"{caption}\n\n{table}")
    failed = [row[0] for row in rows if "DIFFER" in row[-1] or row[-1].startswith("ERROR")]
    if failed:
        print(f"\ncases that differ or failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
