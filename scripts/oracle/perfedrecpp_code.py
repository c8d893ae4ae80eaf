"""Run the PerFedRec++ authors' code (github.com/sichunluo/PerFedRec-Plus, commit c8c4f17) as an oracle beside fedrun.

Nothing of that code enters this repository: clone it anywhere and point ``--code`` at its ``PerFedRec++`` folder.
It needs ``numba`` beside fedrun's packages (``pip install --target <dir> numba`` and ``PYTHONPATH=<dir>``).

    git clone https://github.com/sichunluo/PerFedRec-Plus /tmp/PerFedRec-Plus
    python scripts/oracle/perfedrecpp_code.py --code /tmp/PerFedRec-Plus/PerFedRec++ --seed 0 --rounds 100

What this script changes, and nothing else:
- the shipped Yelp files (``dataset/yelp_test``) are adjacency lists with CRLF line ends (``user item item …``) that
  the code's own loader cannot read (it splits ``user item weight``); they are written once, unchanged in content,
  as ``user item 1`` lines to ``dataset/yelp_triples`` (byte-identical sources: ``$FEDRUN_DATA_DIR/yelp-perfedrec``);
- ``.cuda()`` and ``.to('cuda')`` are the identity (no GPU here);
- ``random``, ``numpy`` and ``torch`` are seeded (the code seeds nothing);
- ``--rounds`` sets ``num.max.epoch`` (the code's "epoch" is one round of 256 clients; its conf says 500).
The code prints its validation every 5 rounds (the best global model kept) and its final test line: HR, precision,
recall, NDCG at 10, then at 20.
"""

from __future__ import annotations

import argparse
import os
import random
import runpy
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn


def triples(code: Path) -> None:
    """dataset/yelp_test/*.txt (user item item …) → dataset/yelp_triples/*.txt (user item 1)."""
    out = code / "dataset" / "yelp_triples"
    out.mkdir(exist_ok=True)
    for part in ("train", "valid", "test"):
        lines = (code / "dataset" / "yelp_test" / f"{part}.txt").read_text().replace("\r", "").splitlines()
        pairs = (line.split() for line in lines if line.strip())
        rows = [f"{user} {item} 1" for user, *items in pairs for item in items]
        (out / f"{part}.txt").write_text("\n".join(rows) + "\n")


def on_cpu() -> None:
    torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    nn.Module.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    to = torch.Tensor.to
    torch.Tensor.to = lambda self, *a, **k: self if (a and a[0] == "cuda") else to(self, *a, **k)  # type: ignore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--code", required=True, type=Path, help="the PerFedRec++ folder of a checkout")
    parser.add_argument("--model", default="PerFedRec_plus", help="PerFedRec_plus | PerFedRec | FedGNN | …")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    code = args.code.resolve()
    triples(code)
    on_cpu()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    os.chdir(code)
    sys.path.insert(0, str(code))
    from util import conf as conf_module  # the authors' module

    read = conf_module.ModelConf.read_configuration

    def with_rounds(self, file):
        read(self, file)
        self.config["num.max.epoch"] = str(args.rounds)

    conf_module.ModelConf.read_configuration = with_rounds
    sys.argv = ["main.py", "--model", args.model, "--dataset", "yelp_triples"]
    runpy.run_path("main.py", run_name="__main__")


if __name__ == "__main__":
    main()
