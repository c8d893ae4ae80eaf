r"""Run the attack papers' own code as an oracle beside fedrun, and read its logs into one table.

The A-ra/A-hum code (github.com/rdz98/PoisonFedDLRS, commit 484039e) and the FedRecAttack code
(github.com/rdz98/FedRecAttack, commit 1e3946f) are run unchanged, from a checkout outside this repository (nothing
of them enters it), on their own shipped files (byte-identical to fedrun's ``ml-1m/split80-20`` and ``steam``):

    git clone https://github.com/rdz98/PoisonFedDLRS /tmp/PoisonFedDLRS
    python scripts/oracle/attack_code.py run --code /tmp/PoisonFedDLRS --seed 1 -- \
        --dataset=ML --attack=A-hum --clients_limit=0.001 --epochs=30 > ahum_s1.log
    git clone https://github.com/rdz98/FedRecAttack /tmp/FedRecAttack
    python scripts/oracle/attack_code.py run --code /tmp/FedRecAttack --seed 1 -- \
        --dataset=steam/ --attack=FedRecAttack --clients_limit=0.05 --items_limit=60 --part_percent=1 > fra_s1.log
    python scripts/oracle/attack_code.py table ahum_s1.log fra_s1.log --out code-curves.csv

What ``run`` changes, and nothing else: the seed (both codes seed ``random``, ``numpy`` and ``torch`` with a fixed
number, 20220110 and 20211111; ``--seed`` reseeds all three the same way before ``main()``). The arguments after
``--`` are the code's own (its ``parse.py``); without a GPU both run on the CPU by their own default. The
A-hum code has no "no attack" option but ``--attack=None``; FedRecAttack's is ``--clients_limit=0``.

``table`` reads each log's ``Arguments:`` line and every ``Iteration`` line into one row per epoch: the code, its
attack, the seed (from the log's name ``…_s<seed>.log``), the epoch, the loss and the metrics the code prints
(A-hum: recall/precision/NDCG@20 on test, ER@5/10/20/30 of the target; FedRecAttack: sampled HR@10 on test,
ER@5/10 and NDCG@10 of the target).
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import re
import sys
from pathlib import Path

POISON_METRICS = ("test_recall_at_20", "test_precision_at_20", "test_ndcg_at_20",
                  "test_er_at_5", "test_er_at_10", "test_er_at_20", "test_er_at_30")
FEDRECATTACK_METRICS = ("test_hr_at_10", "test_er_at_5", "test_er_at_10", "test_target_ndcg_at_10")
ITERATION = re.compile(r"^Iteration (\d+)(?:\(init\))?(?:, loss = ([\d.naninf-]+))?.*?\(([^)]*)\) on test, \(([^)]*)\) "
                       r"on target")


def run(code: Path, seed: int, argv: list[str]) -> None:
    """The code's ``main()`` in its own folder, reseeded."""
    import numpy as np
    import torch

    os.chdir(code)
    sys.path.insert(0, str(code))
    sys.argv = ["main.py", *argv]
    main = __import__("main")  # parse.py reads sys.argv at import; FedRecAttack's main seeds at import
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    main.main()


def rows(log: Path) -> list[dict[str, object]]:
    text = log.read_text()
    arguments = re.search(r"^Arguments: (.*)$", text, re.M)
    args = dict(part.split("=", 1) for part in re.findall(r"(\w+=[^,]*(?:\[[^\]]*\])?)", arguments.group(1))) \
        if arguments else {}
    seed = re.search(r"_s(\d+)\.log$", log.name)
    out = []
    for line in text.splitlines():
        found = ITERATION.match(line)
        if not found:
            continue
        values = [float(v) for v in (found.group(3) + "," + found.group(4)).split(",")]
        names = POISON_METRICS if len(values) == len(POISON_METRICS) else FEDRECATTACK_METRICS
        args = {key: value.strip() for key, value in args.items()}
        out.append({"log": log.name, "code": "PoisonFedDLRS" if names is POISON_METRICS else "FedRecAttack",
                    "dataset": args.get("dataset", "").strip("/"), "attack": args.get("attack", ""),
                    "clients_limit": args.get("clients_limit", ""), "seed": seed.group(1) if seed else "",
                    "epoch": int(found.group(1)), "loss": found.group(2) or "", **dict(zip(names, values))})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run", help="run the code's main.py reseeded (its own arguments after --)")
    runner.add_argument("--code", required=True, type=Path, help="a checkout of the code")
    runner.add_argument("--seed", type=int, required=True)
    runner.add_argument("args", nargs=argparse.REMAINDER, help="-- then the code's own arguments")
    table = commands.add_parser("table", help="the logs' epochs as one CSV")
    table.add_argument("logs", nargs="+", type=Path)
    table.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "run":
        run(args.code.resolve(), args.seed, [a for a in args.args if a != "--"])
        return
    found = [row for log in args.logs for row in rows(log)]
    columns = list(dict.fromkeys(key for row in found for key in row))
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(found)
    print(f"{len(found)} epochs from {len(args.logs)} logs: {args.out}")


if __name__ == "__main__":
    main()
