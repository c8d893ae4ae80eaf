"""What the server receives for the attacked item's row (issue #31): why do Median and Krum stop A-hum
and A-ra on the target's own row, and on what scale must a norm bound's τ sit?

Runs a robustness matrix's setting (``--preset``: ``robustness/matrix``, the server's sum, by default) for
``--rounds`` rounds with one attack row and records, each round, what reaches the defense:

  - the target row: how many benign clients upload it (as a positive or a sampled negative) and how
    many malicious ones; their row norms; the malicious uploads' mean pairwise cosine (do they agree?)
    and the cosine of their mean with the benign mean;
  - the push each rule gives the target row along the attack's direction (the malicious mean, unit
    length): the sum, the coordinate median × uploaders and the trimmed mean × uploaders (the matrix's
    ``server_reduce: sum``), all over the same uploads;
  - every uploaded row's L2 norm, benign and malicious: the quantiles that put ``norm_bound``'s τ on
    the uploads' scale.

    python scripts/investigations/target_row_uploads.py --row robustness/a_hum --rounds 48 --out \
        docs/reproductions/attacks
    python scripts/investigations/target_row_uploads.py --preset robustness/matrix_mf --row robustness/a_hum \
        defense=mean

Writes ``target-row-<attack>.csv`` (one line per round) and ``target-row-<attack>.md`` (the summary).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

from fedrun.app.compose import compose  # noqa: E402
from fedrun.app.plan import build_run  # noqa: E402
from fedrun.defense.diagnostics import target_row_record  # noqa: E402
from fedrun.report.table import markdown  # noqa: E402
from fedrun.types import RoundContext, Uploads  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", default="robustness/a_hum", help="a conf/row/robustness/ option with an attack")
    parser.add_argument("--preset", default="robustness/matrix",
                        help="the matrix preset whose setting runs (robustness/matrix_mf: FedAvg-MF; add defense=mean)")
    parser.add_argument("--rounds", type=int, default=48)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="outputs/target-row")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: at least 1")
    built = build_run(compose([f"+experiment={args.preset}", f"row={args.row}", "defense=sum",
                               f"sim.seed={args.seed}", "track=none", "sim.progress=false", *args.overrides]))
    rounds = built.trainer
    if not rounds.attack.active:
        parser.error(f"--row {args.row}: no attack in that row")
    target = int(rounds.attack.targets[0])
    aggregate, records = rounds.defense.aggregate, []

    def recording(uploads: Uploads, ctx: RoundContext | None = None):
        records.append(target_row_record(uploads, ctx, target))
        return aggregate(uploads, ctx)

    rounds.defense.aggregate = recording
    for round_index in range(args.rounds):
        rounds.train_round(round_index)
    keys = list(dict.fromkeys(k for r in records for k in r))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = args.row.split("/")[-1]
    lines = [",".join(keys)] + [",".join(f"{r.get(k, float('nan')):.6g}" for k in keys) for r in records]
    (out / f"target-row-{name}.csv").write_text("\n".join(lines) + "\n")
    summary = []
    for key in keys[1:]:  # after "round"
        values = torch.tensor([r.get(key, float("nan")) for r in records], dtype=torch.float64)
        seen = values[~values.isnan()]
        summary.append([key, *(f"{v:.4g}" for v in (seen.median(), seen.min(), seen.max()))] if seen.numel()
                       else [key, "–", "–", "–"])
    caption = (f"{args.row} on the setting of +experiment={args.preset} (seed {args.seed}, "
               f"{type(rounds.defense).__name__}), target item "
               f"{target}: what reaches the defense in rounds 0–{args.rounds - 1} (median over rounds, min, max)")
    text = f"{caption}\n\n{markdown(['quantity', 'median', 'min', 'max'], summary)}\n"
    (out / f"target-row-{name}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
