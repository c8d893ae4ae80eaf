"""A preset's published numbers beside fedrun's: ``paper:`` in ``conf/experiment/<preset>.yaml``.

The block is ``paper.metrics`` (the metric names, in order) and ``paper.<dataset>.<backbone>.<row>``
lists of numbers in that order, ``<row>`` and ``<backbone>`` being the last part of the run's
``row`` and ``backbone`` options (``row=fedcl/fed`` → ``fed``, ``backbone=fedcl/ncf`` → ``ncf``).
``paper.best_row`` names the row the paper claims is best; the report tests that claim.
``paper.claims`` lists the paper's other ordering claims, each ``"<row> < <row>"`` (``fed < central``:
federated below centralized); the report tests each on ``paper.claim_metric`` and gives a verdict.

Runs of one dataset, backbone and row that differ in another swept parameter (a central row trained
20 epochs and one trained to convergence: ``sim.epochs``, ``sim.patience``) are variants of that
row: each gets its own line, labelled with those parameters, and is never averaged or paired with
the other.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from fedrun.report.table import natural_key, spread


def preset_paper(preset: str, conf_dir: Path) -> dict | None:
    path = conf_dir / "experiment" / f"{preset}.yaml"
    if not path.exists():
        return None
    paper = OmegaConf.to_container(OmegaConf.load(path)).get("paper")
    return paper if isinstance(paper, dict) and "metrics" in paper else None


ROW_KEYS = ["param:choices.dataset", "param:choices.backbone", "param:choices.row"]


def with_variants(done: pd.DataFrame, varying: list[str]) -> pd.DataFrame:
    """``done`` plus ``row`` (the row option's last part: ``fedcl/fed`` → ``fed``) and ``variant`` (the
    row, followed by the ``varying`` parameters whose values differ between runs of its dataset, backbone and row)
    and ``varied`` (those parameters' names, one a line)."""
    row = done["param:choices.row"].astype(str).str.split("/").str[-1]
    frame = done.copy().assign(row=row, variant=row, varied="")  # (copy: one block, not a column each)
    text = frame.astype(str)
    for _, group in text.groupby(ROW_KEYS, dropna=False):
        differing = [c for c in varying if c in group and group[c].nunique() > 1]
        frame.loc[group.index, "varied"] = "\n".join(differing)
        if differing:
            settings = group[differing].apply(
                lambda run, keys=differing: ", ".join(f"{c[len('param:'):]}={run[c]}" for c in keys), axis=1)
            frame.loc[group.index, "variant"] = group["variant"] + " (" + settings + ")"
    return frame


def beside_paper(done: pd.DataFrame, paper: dict, varying: list[str] = ()) -> tuple[list[str], list[list[str]]]:
    """Finished runs grouped by (dataset, backbone, row variant) → for each paper metric: fedrun
    mean ± std, paper. ``varying``: the swept parameters that can tell variants apart."""
    metrics = list(paper["metrics"])
    header = ["dataset", "backbone", "row", "runs"]
    for metric in metrics:
        header += [f"{metric} fedrun", f"{metric} paper"]
    rows = []
    if any(k not in done.columns for k in ROW_KEYS):
        return header, rows
    frame = with_variants(done, list(varying))
    groups = sorted(frame.groupby(ROW_KEYS[:2] + ["variant"], dropna=False), key=lambda item: natural_key(item[0]))
    for (dataset, backbone, variant), group in groups:
        row = group["row"].iloc[0]
        published = paper.get(dataset, {}).get(str(backbone).split("/")[-1], {}).get(row)
        cells = [dataset, backbone, variant, str(len(group))]
        for k, metric in enumerate(metrics):
            col = group[f"metric:{metric}"].dropna() if f"metric:{metric}" in group else pd.Series(dtype=float)
            cells += [spread(col), "" if published is None else f"{published[k]:.4f}"]
        rows.append(cells)
    return header, rows


def comparable(ours: pd.DataFrame, theirs: pd.DataFrame) -> bool:
    """Whether two row variants may be paired: every parameter that tells the variants of both rows apart (the
    attack when both rows ran under two) has the same value in both, so rCL4FedRec under A-hum is never paired with
    CL4FedRec under PSMU. A parameter swept in one row only (Fig. 5's |U_syn|) is compared against the other row's
    one setting, and what a row option sets (a defense, a weight) never blocks a pair."""
    def varied(frame: pd.DataFrame) -> set[str]:
        return {c for text in frame["varied"] for c in str(text).split("\n") if c}

    return all(set(ours[c].astype(str)) == set(theirs[c].astype(str)) for c in varied(ours) & varied(theirs))


def claim_tests(done: pd.DataFrame, paper: dict, varying: list[str] = ()) -> tuple[list[str], list[list[str]]]:
    """The paper's "``paper.best_row`` is best" claim, per (dataset, backbone) and other row variant:
    the mean difference best − other of each paper metric over the seeds both ran, and the
    two-sided paired t-test p-value (pairs share the seed, hence the split and initialisation).
    When the best row itself has variants, each is compared (its label in the ``row`` column)."""
    best, metrics = paper.get("best_row"), list(paper["metrics"])
    header = ["dataset", "backbone", "row", "seeds"] + [f"{m} {part}" for m in metrics for part in ("diff", "p")]
    if best is None or any(k not in done.columns for k in ROW_KEYS + ["param:sim.seed"]):
        return header, []
    frame = with_variants(done, list(varying))
    rows = []
    for (dataset, backbone), group in frame.groupby(ROW_KEYS[:2]):
        others = group[group["row"] != best]
        best_variants = sorted(set(group.loc[group["row"] == best, "variant"]), key=natural_key)
        for best_variant in best_variants:  # none when the best row did not run here
            ours = group[group["variant"] == best_variant].set_index("param:sim.seed")
            for variant in sorted(set(others["variant"]), key=natural_key):
                theirs = others[others["variant"] == variant].set_index("param:sim.seed")
                if not comparable(ours, theirs):
                    continue
                label = f"{variant} vs {best_variant}" if len(best_variants) > 1 else variant
                rows.append([dataset, backbone, label] + _paired(ours, theirs, metrics))
    return header, rows


ALPHA = 0.05  # the significance level of the verdicts


def order_claims(done: pd.DataFrame, paper: dict, varying: list[str] = ()) -> tuple[list[str], list[list[str]]]:
    """Each ``paper.claims`` entry ``"low < high"`` per (dataset, backbone) and row variants, on
    ``paper.claim_metric`` (default: the second paper metric, HR@10 in the FedCL tables): the means of
    both rows over the seeds both ran, their difference high − low, the two-sided paired t-test p and a
    verdict — ``holds`` / ``reversed`` (p < ALPHA), ``level`` (p ≥ ALPHA; the sign said), or ``one seed``
    (no test possible; the sign said). The same non-zero difference on every seed (ER@5 1.0 against 0 on each)
    has p 0: the paired t statistic is infinite, where scipy returns no p."""
    metric = paper.get("claim_metric") or list(paper["metrics"])[min(1, len(paper["metrics"]) - 1)]
    header = ["dataset", "backbone", "claim", "seeds", f"{metric} low", f"{metric} high", "diff", "p", "verdict"]
    claims = [_parse_claim(text) for text in paper.get("claims", [])]
    if not claims or any(k not in done.columns for k in ROW_KEYS + ["param:sim.seed", f"metric:{metric}"]):
        return header, []
    frame = with_variants(done, list(varying))
    rows = []
    for (dataset, backbone), group in frame.groupby(ROW_KEYS[:2]):
        for low, high in claims:
            for low_variant in sorted(set(group.loc[group["row"] == low, "variant"]), key=natural_key):
                for high_variant in sorted(set(group.loc[group["row"] == high, "variant"]), key=natural_key):
                    lows, highs = group[group["variant"] == low_variant], group[group["variant"] == high_variant]
                    if not comparable(lows, highs):
                        continue
                    a = lows.set_index("param:sim.seed")[f"metric:{metric}"]
                    b = highs.set_index("param:sim.seed")[f"metric:{metric}"]
                    seeds = a.index.intersection(b.index)
                    if len(seeds):
                        rows.append([dataset, backbone, f"{low_variant} < {high_variant}"]
                                    + _verdict(a.loc[seeds].astype(float), b.loc[seeds].astype(float)))
    return header, rows


def _parse_claim(text: str) -> tuple[str, str]:
    parts = [part.strip() for part in str(text).split("<")]
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"paper.claims: {text!r} is not a claim; write one as '<row> < <row>', e.g. 'fed < central'")
    return parts[0], parts[1]


def _verdict(low: pd.Series, high: pd.Series) -> list[str]:
    """[seeds, mean low, mean high, mean difference high − low, paired p, verdict] over paired seeds."""
    from scipy.stats import ttest_rel

    diff = float((high - low).mean())
    sign = "same direction" if diff > 0 else "reversed" if diff < 0 else "equal"
    if len(low) > 1 and (high - low).std() > 0:
        p = float(ttest_rel(high, low).pvalue)
    else:  # the same difference on every seed: t is infinite (p 0) unless that difference is 0 (no test)
        p = 0.0 if len(low) > 1 and diff != 0 else float("nan")
    if len(low) < 2:
        verdict = f"one seed, {sign}"
    elif p != p or p >= ALPHA:
        verdict = f"level, {sign}"
    else:
        verdict = "holds" if diff > 0 else "reversed"
    return [str(len(low)), f"{low.mean():.4f}", f"{high.mean():.4f}", f"{diff:+.4f}",
            "" if p != p else f"{p:.3f}", verdict]


def _paired(ours: pd.DataFrame, theirs: pd.DataFrame, metrics: list[str]) -> list[str]:
    """[seeds, then per metric: mean difference ours − theirs over shared seeds, paired t-test p]."""
    from scipy.stats import ttest_rel

    seeds = ours.index.intersection(theirs.index)
    cells = [str(len(seeds))]
    for metric in metrics:
        column = f"metric:{metric}"
        if column not in ours or not len(seeds):
            cells += ["", ""]
            continue
        a, b = ours.loc[seeds, column].astype(float), theirs.loc[seeds, column].astype(float)
        p = float(ttest_rel(a, b).pvalue) if len(seeds) > 1 and (a - b).std() > 0 else float("nan")
        cells += [f"{(a - b).mean():+.4f}", "" if p != p else f"{p:.3f}"]
    return cells
