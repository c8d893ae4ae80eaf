"""Pin a refactor to bit-identical numbers: run fixed seed-1 configurations on real data and record
every logged metric and a SHA-256 of the final model state, then compare two such records.

    python scripts/checks/equivalence.py run --out before.json [--only fedavg-mf,pop] [--set sim.fast_path=off]
    python scripts/checks/equivalence.py compare before.json after.json [--markdown table.md]

Under ``torchrun --nproc_per_node=N`` the cases run sharded over N processes (fedrun.sim.distributed) and rank 0
writes the record: compared with the one-process record of the same cases and ``--set``, it pins a sharded run to
the one-process run (docs/scale-out.md).

The cases are those of issue #30's acceptance (FedAvg MF/NCF on ml-100k, FedCL GRU4Rec/NCF on
ml-1m, BIL/FedRec/FedRec++ on ml-100k's u1 fold, LightFR/FCF/FedMF/MetaMF/PrivRec/central NCF/pop on
FilmTrust), and those issue #61 adds before splitting the methods into client and server programs: the
methods added since (CL4FedRec, rCL4FedRec, SimGCL, UNION on ml-100k; FedGNN, PerFedRec, PerFedRec++ in
PerFedRec++'s Table 4 setting on ml-100k), central LightGCN with each contrastive variant, and every attack
beside one robust defense (FedAvg MF on ml-100k). Everything runs on the CPU with one thread, so summation
order is fixed; wall-clock timings are left out of the comparison.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("FEDRUN_DATA_DIR", str(ROOT.parent / "shared" / "datasets"))

from fedrun.app.compose import compose  # noqa: E402
from fedrun.app.plan import build_run  # noqa: E402
from fedrun.track.base import Tracker  # noqa: E402

try:  # the run loop's home moves with issue #30
    from fedrun.sim.loop import log_final, run_loop
except ImportError:  # pragma: no cover - before the move
    from fedrun.kernels.runner import run_loop

# the bucketing the records were taken with (#67 made buckets sized by padding the default; a client's numbers do not
# depend on its bucket beyond float rounding, which the records pin)
COMMON = ["track=none", "sim.progress=false", "sim.seed=1", "sim.threads=1", "sim.device=cpu", "sim.buckets=8"]
U1 = ["dataset=ml-100k", "dataset.split.protocol=predefined", "dataset.split.valid=false", "sim.max_rounds=10"]
# the negatives the FilmTrust records were taken with (#63 made the split's listed negatives the setup's)
LIGHTFR = ["+experiment=lightfr/table5", "setup=lightfr/filmtrust", "sim.max_rounds=5", "eval.negatives=drawn"]
SMALL_PFR = ["dataset=ml-100k", "sim.clients_per_round=64", "sim.max_rounds=8"]
ATTACKED = ["method=fedavg", "backbone=mf", "dataset=ml-100k", "sim.max_rounds=6", "attack.fraction=0.02"]
# the schedule each attack's record was taken with (#62 made per_epoch every attack's default)
RECORDED_SCHEDULE = {"fedrecattack": "sampled"}
# the synthetic users' draw the A-ra/A-hum records were taken with (session 54 made per_upload, the code's, the default)
RECORDED_DRAW = {"a_ra": ["attack.synthetic_draw=once"], "a_hum": ["attack.synthetic_draw=once"]}
CASES: dict[str, list[str]] = {
    "fedavg-mf": ["method=fedavg", "backbone=mf", "dataset=ml-100k", "sim.epochs=2"],
    "fedavg-ncf": ["method=fedavg", "backbone=ncf", "dataset=ml-100k", "sim.epochs=2"],
    "fedavg-mf-ldp": ["method=fedavg", "backbone=mf", "dataset=ml-100k", "sim.epochs=2", "privacy=ldp",
                      "privacy.targets=[item_rows]"],  # #64: LDP noise on the uploaded item rows
    "fedcl-gru4rec": ["+experiment=fedcl/table3", "dataset=ml-1m", "backbone=fedcl/gru4rec", "row=fedcl/fedcl",
                      "sim.epochs=1"],
    "fedcl-ncf": ["+experiment=fedcl/table3", "dataset=ml-1m", "backbone=fedcl/ncf", "row=fedcl/fedcl",
                  "sim.epochs=1"],
    "bil": ["method=bil", "backbone=mf", *U1],
    "fedrec": ["+experiment=fedrecpp/table2", "row=fedrecpp/fedrec_rho1", "sim.max_rounds=10"],
    "fedrecpp": ["+experiment=fedrecpp/table2", "row=fedrecpp/fedrecpp_rho1", "sim.max_rounds=10"],
    # the rating targets lightfr's record was taken with (#63 made the authors' code's targets the default)
    "lightfr": [*LIGHTFR, "row=lightfr/lightfr", "method.targets=scaled"],
    **{name: [*LIGHTFR, f"row=lightfr/{row}"] for name, row in
       [("fcf", "fcf"), ("fedmf", "fedmf"), ("metamf", "metamf"), ("privrec", "privrec"),
        ("central-ncf", "ncf"), ("pop", "pop")]},
    # issue #61: the methods added since issue #30, the central LightGCN variants, every attack beside one defense
    **{name: [f"method={name}", "dataset=ml-100k", "sim.max_rounds=4"]
       for name in ("cl4fedrec", "rcl4fedrec", "simgcl", "union")},
    **{name: ["+experiment=perfedrecpp/table4", f"row=perfedrecpp/{name}", *SMALL_PFR, *extra] for name, extra in
       [("fedgnn", []), ("perfedrec", []), ("perfedrecpp", ["method.pretrain_rounds=2"])]},
    **{f"central-lightgcn-{kind}": ["method=central", "backbone=lightgcn", f"method.contrast.kind={kind}",
                                    "dataset=ml-100k", "sim.epochs=1"]
       for kind in ("none", "sgl", "simgcl", "xsimgcl")},
    # the centralized methods' backbone-specific training (#61: their user-context branches), recorded at b982859
    "central-gru4rec": ["method=central", "backbone=gru4rec", "dataset=ml-100k", "sim.epochs=1"],
    "central-bert4rec": ["method=central", "backbone=bert4rec", "dataset=ml-100k", "sim.epochs=1"],
    "svdpp": [*LIGHTFR, "row=lightfr/svdpp"],
    **{f"{attack}-{defense}": [*ATTACKED, f"attack={attack}", f"defense={defense}",
                               f"attack.participation={RECORDED_SCHEDULE.get(attack, 'every_round')}",
                               *RECORDED_DRAW.get(attack, [])]
       for attack, defense in
       [("a_ra", "median"), ("a_hum", "trimmed_mean"), ("eb", "krum"), ("fedrecattack", "multi_krum"),
        ("psmu", "norm_bound"), ("ra", "hics")]},
}


class Recorder(Tracker):
    """Keeps every logged metric, keyed ``name@step``."""

    def __init__(self) -> None:
        super().__init__(None)
        self.metrics: dict[str, float] = {}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.metrics.update({f"{k}@{step}": float(v) for k, v in metrics.items()})


# the privacy accountants' per-client counts in a method's state (#65): bookkeeping beside the model, which a record
# pins; their values are checked by the metrics they log (epsilon_*_spent_max)
LEDGERS = ("ledgers", "shared_count")


def state_digest(state) -> str:
    """SHA-256 of every tensor in a (nested) state dict, in key order, the privacy ledgers left out."""
    digest = hashlib.sha256()

    def walk(node, prefix=""):
        if prefix.rsplit("/", 1)[-1] in LEDGERS:
            return
        if isinstance(node, torch.Tensor):
            digest.update(prefix.encode())
            digest.update(node.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(node, dict):
            for key in sorted(node, key=str):
                walk(node[key], f"{prefix}/{key}")
        elif isinstance(node, (list, tuple)):
            for index, value in enumerate(node):
                walk(value, f"{prefix}/{index}")
        elif node is not None:
            digest.update(f"{prefix}={node!r}".encode())

    walk(state)
    return digest.hexdigest()


TIMING = ("train_seconds", "eval_seconds", "seconds_per_round", "seconds_per_epoch", "cluster_seconds_total",
          "encryption_seconds_per_client")


def untimed(metrics: dict[str, float]) -> dict[str, float]:
    """The metrics that must match bit for bit: all but wall-clock timings."""
    return {k: v for k, v in metrics.items() if not k.startswith(TIMING)}


def run_case(name: str, extra: list[str]) -> dict:
    torch.set_num_threads(1)
    built = build_run(compose([*CASES[name], *COMMON, *extra]))
    recorder = Recorder()
    started = time.perf_counter()
    result = run_loop(getattr(built, "trainer", built.method), built.evaluator, recorder, built.plan.sim, built.label)
    log_final(recorder, result)  # the test's metrics, recorded as a run records them once its results are safe
    metrics = untimed(recorder.metrics)
    return {"test": result.test, "rounds": result.rounds, "metrics": metrics,
            "state_sha256": state_digest(built.method.state_dict()), "wall_seconds": time.perf_counter() - started}


def compare(before: dict, after: dict) -> list[tuple[str, str, str, bool]]:
    rows = []
    for name in before:
        if name not in after:
            continue
        b, a = before[name], after[name]
        pinned = untimed(b["metrics"])  # every metric the record pins (a metric added since is not compared)
        same = (b["state_sha256"] == a["state_sha256"] and pinned == {k: a["metrics"].get(k) for k in pinned}
                and b["test"] == a["test"])
        key = next((k for k in ("hr_at_10", "ndcg_at_10", "rmse", "mae") if k in b["test"]), next(iter(b["test"])))
        rows.append((name, f"{key} {b['test'][key]:.6f}, state {b['state_sha256'][:12]}",
                     f"{key} {a['test'][key]:.6f}, state {a['state_sha256'][:12]}", same))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--out", required=True, type=Path)
    run.add_argument("--only", default=",".join(CASES))
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an override for every case")
    cmp = sub.add_parser("compare")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    cmp.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        leads = os.environ.get("RANK", "0") == "0"  # under torchrun: rank 0 records
        record = json.loads(args.out.read_text()) if args.out.exists() and leads else {}
        for name in args.only.split(","):
            record[name] = run_case(name, args.set)
            if leads:
                print(f"{name}: {record[name]['test']} ({record[name]['wall_seconds']:.0f}s)", flush=True)
                args.out.write_text(json.dumps(record, indent=1, sort_keys=True))
        return
    rows = compare(json.loads(args.before.read_text()), json.loads(args.after.read_text()))
    lines = ["| case | before | after | identical |", "|---|---|---|---|"]
    lines += [f"| {name} | {b} | {a} | {'yes' if same else '**no**'} |" for name, b, a, same in rows]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    sys.exit(0 if all(row[3] for row in rows) else 1)


if __name__ == "__main__":
    main()
