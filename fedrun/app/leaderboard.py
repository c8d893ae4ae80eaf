"""One leaderboard across the papers, from the runs of ``fedrun -m +experiment=leaderboard``: every method in its
own paper's setting on the same split and protocol, ranked by test NDCG@10 (mean ± std over seeds), beside the
popularity floor, the bytes a client sends and receives per round, the training time per epoch and the ε of its
local differential privacy where that is on → ``<out>/table.md`` and ``<out>/leaderboard.png`` (NDCG@10
against bytes up per client per round and against seconds per epoch); docs/leaderboard.md reads them.

    python -m fedrun.app.leaderboard [--ledger docs/leaderboard/leaderboard-runs.csv] [--out docs/leaderboard]
        [--leakage docs/leaderboard/leaderboard-leakage-runs.csv]

``--leakage``: the ledger of the same commands run with ``audit=server`` (issue #65); each method's row gains what an
honest-but-curious server guesses of its clients' items from the ids they upload (AUC, and the precision of the
items uploaded in every round a client joined, beside the base rate of a random guess).

``--searches``: the tuned board (``+experiment=leaderboard/tuned``, ``--experiment leaderboard-tuned``): each row
gains its search (``searches.csv`` of ``python -m fedrun.app.tuning``: trials, best validation beside its floor) or
says that it runs its defaults, no search having run. ``--board rating``: the rating board
(``+experiment=leaderboard/tuned_rating``), RMSE and MAE beside the user + item bias floor, lower first →
``table-rating.md`` and ``leaderboard-rating.png``.

Bytes are the last round's (``bytes_*_per_client``, a per-round metric); seconds per epoch are the run's training
seconds per round times its rounds per epoch, on the machine and load the run had (the ledger keeps both).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from omegaconf import OmegaConf

from fedrun.app.report import SEED_PARAMS, drop_reruns, script_runs
from fedrun.core.paths import config_dir
from fedrun.report import ledger
from fedrun.report.table import markdown, mean_std

COSTS = ["bytes_up_per_client", "bytes_down_per_client", "seconds_per_epoch"]


@dataclass(frozen=True)
class Kind:
    """What a board ranks by: its test metrics (and how a reader names them), the one it sorts by, which way is
    better, and the floor that metric is logged beside."""

    metrics: tuple[str, ...]
    labels: tuple[str, ...]
    sort_by: str
    lower_is_better: bool
    floor_name: str

    @property
    def floor(self) -> str:
        return "floor_" + self.sort_by.removeprefix("test_")

    @property
    def label(self) -> str:
        return self.labels[self.metrics.index(self.sort_by)]


RANKING_BOARD = Kind(("test_hr_at_10", "test_ndcg_at_10", "test_hr_at_20", "test_ndcg_at_20"),
                     ("HR@10", "NDCG@10", "HR@20", "NDCG@20"), "test_ndcg_at_10", False,
                     "popularity on the same split (`method=pop`, NDCG@10 / floor = 1)")
RATING_BOARD = Kind(("test_rmse", "test_mae"), ("RMSE", "MAE"), "test_rmse", True,
                    "the user + item bias baseline on the same split (RMSE / floor under 1: better than it)")
BOARDS = {"ranking": RANKING_BOARD, "rating": RATING_BOARD}
LEAKAGE = ["audit_auc", "audit_intersect_precision", "audit_base_rate"]  # the rated-set attack (``audit=server``)


def paper_of(method: str) -> str:
    """The paper whose setting the method selects (its ``/setting/<paper>`` default), or "—"."""
    path = Path(config_dir()) / "method" / f"{method}.yaml"
    node = OmegaConf.load(path) if path.is_file() else OmegaConf.create({})
    defaults = OmegaConf.select(node, "defaults", default=[])
    settings = [str(d).removeprefix("/setting/") for d in defaults if str(d).startswith("/setting/")]
    return settings[0] if settings else "—"


def epsilon_of(group: pd.DataFrame) -> str:
    """The LDP budget of the method's runs ("—" without privacy)."""
    privacy = group.get("param:choices.privacy", pd.Series(["none"])).astype(str).iloc[0]
    if privacy == "none" or "param:privacy.epsilon" not in group:
        return "—"
    scale = str(group.get("param:privacy.scale", pd.Series(["None"])).iloc[0])
    if scale not in ("None", "nan", ""):  # FedGNN's Laplace λ set directly: its ε is per coordinate (2δ/λ)
        clip = float(group["param:privacy.clip"].iloc[0])
        return f"{2 * clip / float(scale):g} per coordinate (λ {float(scale):g})"
    return ", ".join(sorted(set(group["param:privacy.epsilon"].astype(str))))


def logged(value) -> bool:
    return not pd.isna(value) and str(value) not in ("None", "nan", "")


def current_setting(group: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A method's runs at its latest setting, and the runs of an earlier default set aside: those whose parameters
    differ from the latest run's (where both logged them; seeds and how a run executes aside)."""
    latest = group.sort_values("start_time").iloc[-1]
    params = [c for c in group.columns if c.startswith("param:") and c[len("param:"):] not in SEED_PARAMS
              and not c.startswith("param:choices.hydra/") and logged(latest[c])]

    def same(run: pd.Series) -> bool:
        return all(str(run[c]) == str(latest[c]) for c in params if logged(run[c]))

    keep = group.apply(same, axis=1).astype(bool)
    return group[keep], group[~keep]


def board(frame: pd.DataFrame, kind: Kind = RANKING_BOARD) -> pd.DataFrame:
    """Finished runs → one row per method at its current setting (``current_setting``): means and stds of the
    board's metrics, means of the costs."""
    done, _ = drop_reruns(frame)
    done = done[done["status"] == "FINISHED"]
    rows = []
    for method, runs in done.groupby("param:choices.method"):
        group, earlier = current_setting(runs)
        if len(earlier):
            print(f"{method}: {len(earlier)} run(s) of an earlier setting set aside ({', '.join(earlier['run_id'])})")
        row = {"method": method, "paper": paper_of(method), "runs": len(group),
               "backbone": group["param:choices.backbone"].astype(str).iloc[0], "epsilon": epsilon_of(group),
               "epochs": str(group.get("param:sim.epochs", pd.Series(["?"])).iloc[0])}
        for name in [*kind.metrics, *COSTS, kind.floor]:
            values = group.get(f"metric:{name}", pd.Series(dtype=float)).dropna()
            row[name] = values.mean() if len(values) else float("nan")
            row[f"{name}_std"] = values.std(ddof=1) if len(values) > 1 else 0.0
        rows.append(row)
    table = pd.DataFrame(rows)
    table.loc[table["method"] == "pop", kind.floor] = table.loc[table["method"] == "pop", kind.sort_by]
    return table.sort_values(kind.sort_by, ascending=kind.lower_is_better, ignore_index=True)


def with_leakage(table: pd.DataFrame, audited: pd.DataFrame) -> pd.DataFrame:
    """The board with each method's audited runs' rated-set leakage (means over their seeds) and their count."""
    done = audited[audited["status"] == "FINISHED"] if len(audited) else audited
    rows = {}
    for method, runs in (done.groupby("param:choices.method") if len(done) else []):
        rows[method] = {name: runs[f"metric:{name}"].mean() for name in LEAKAGE if f"metric:{name}" in runs}
        rows[method]["audit_runs"] = len(runs)
        rows[method]["audit_epochs"] = str(runs.get("param:sim.epochs", pd.Series(["?"])).iloc[0])
    leakage = pd.DataFrame.from_dict(rows, orient="index")
    return table.join(leakage, on="method") if len(leakage) else table


def with_searches(table: pd.DataFrame, searches: pd.DataFrame, board: str = "ranking") -> pd.DataFrame:
    """The board with each method's search on it (``fedrun.app.tuning``'s searches.csv, whose ``board`` column says
    which board a search is judged on): trials, failures, best validation and its floor, and the parameters at the
    edge of their space."""
    columns = {"trials": "search_trials", "failed": "search_failed", "best_valid": "search_best",
               "valid_floor": "search_floor", "at_edge": "search_edge"}
    mine = searches[searches["board"] == board]
    found = mine.set_index("method")[list(columns)].rename(columns=columns)
    return table.join(found, on="method")


def search_cell(row) -> str:
    """"16 (0 failed): .0644 / .0338; at the edge: lr" — or "defaults (no search)"."""
    trials = getattr(row, "search_trials", float("nan"))
    if pd.isna(trials):
        return "—" if row.method == "pop" else "defaults (no search)"
    edge = f"; at the edge: {row.search_edge}" if isinstance(row.search_edge, str) and row.search_edge else ""
    return f"{int(trials)} ({int(row.search_failed)} failed): {row.search_best:.4f} / {row.search_floor:.4f}{edge}"


def leakage_cell(row) -> str:
    """"AUC .996, .90 / .062 [1]": AUC, intersect precision / base rate, audited seeds (and the epochs the audited
    runs trained when fewer than the board's); "" when not audited."""
    auc = getattr(row, "audit_auc", float("nan"))
    if pd.isna(auc):
        return ""
    shorter = f", {row.audit_epochs} of {row.epochs} epochs" if str(row.audit_epochs) != str(row.epochs) else ""
    return (f"{auc:.3f}, {row.audit_intersect_precision:.2f} / {row.audit_base_rate:.3f} "
            f"[{int(row.audit_runs)}{shorter}]")


def render(table: pd.DataFrame, dataset: str, kind: Kind = RANKING_BOARD) -> str:
    header = ["#", "method", "paper's setting", "backbone", "LDP ε", "runs", *kind.labels, f"{kind.label} / floor",
              "KB up / client / round", "KB down / client / round", "s / epoch"]
    audited, searched = "audit_auc" in table, "search_trials" in table
    if searched:
        header.append(f"search: trials, best valid {kind.label} / valid floor")
    if audited:
        header.append("rated set leaked: AUC, precision / base rate [seeds]")
    rows = []
    for rank, row in enumerate(table.itertuples(), 1):
        cells = [str(rank), row.method, row.paper, row.backbone, row.epsilon, str(row.runs)]
        cells += [mean_std(getattr(row, m), getattr(row, m + "_std"), row.runs) for m in kind.metrics]
        floor = getattr(row, kind.floor)
        cells.append(f"{getattr(row, kind.sort_by) / floor:.2f}" if floor > 0 else "")
        cells += [f"{row.bytes_up_per_client / 1024:.1f}", f"{row.bytes_down_per_client / 1024:.1f}"]
        cells.append(f"{row.seconds_per_epoch:.2f}")
        if searched:
            cells.append(search_cell(row))
        if audited:
            cells.append(leakage_cell(row))
        rows.append(["" if c == "nan" else c for c in cells])
    leaked = ("; the last column is what an honest-but-curious server guesses of each client's items from the ids "
              "it uploads (`audit=server`, docs/privacy.md): the AUC of its guess, and the precision of the items a "
              "client uploaded in every round it joined beside the base rate of a random guess" if audited else "")
    return (f"Test metrics on {dataset} (mean ± std over seeds), ranked by {kind.label}; the floor is "
            f"{kind.floor_name}{leaked}.\n\n" + markdown(header, rows) + "\n")


def plot(table: pd.DataFrame, path: Path, dataset: str, title: str = "every method in its paper's setting",
         kind: Kind = RANKING_BOARD) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    floor = table.loc[table["method"] == "pop", kind.sort_by] if not kind.lower_is_better else table[kind.floor]
    for ax, cost, label in [(axes[0], "bytes_up_per_client", "KB up per client per round"),
                            (axes[1], "seconds_per_epoch", "training seconds per epoch")]:
        shown = table[(table["method"] != "pop") & (table[cost] > 0)]
        scale = 1024 if cost.startswith("bytes") else 1
        ax.errorbar(shown[cost] / scale, shown[kind.sort_by], yerr=shown[f"{kind.sort_by}_std"], fmt="o", capsize=3)
        for row in shown.itertuples():
            ax.annotate(row.method, (getattr(row, cost) / scale, getattr(row, kind.sort_by)), fontsize=8,
                        xytext=(4, 3), textcoords="offset points")
        if len(floor.dropna()):
            ax.axhline(float(floor.dropna().iloc[0]), ls="--", color="grey",
                       label="popularity floor" if not kind.lower_is_better else "user + item bias floor")
            ax.legend(loc="lower right")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.grid(alpha=.3)
    axes[0].set_ylabel(f"test {kind.label}")
    protocol = "u1 fold, rating errors" if kind.lower_is_better else "leave-one-out, full ranking"
    fig.suptitle(f"fedrun leaderboard: {title}, {dataset}, {protocol}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--leakage", type=Path, default=None)
    extra.add_argument("--searches", type=Path, default=None)
    extra.add_argument("--board", choices=sorted(BOARDS), default="ranking")
    known, rest = extra.parse_known_args(argv)
    kind = BOARDS[known.board]
    frame, out = script_runs(__doc__.splitlines()[0], "leaderboard", Path("docs/leaderboard"), rest)
    dataset = ", ".join(sorted(set(frame["param:choices.dataset"].astype(str))))
    table = board(frame, kind)
    if known.leakage is not None:
        table = with_leakage(table, ledger.read(known.leakage))
    if known.searches is not None:
        table = with_searches(table, pd.read_csv(known.searches), known.board)
    text = render(table, dataset, kind)
    name = "" if known.board == "ranking" else f"-{known.board}"
    (out / f"table{name}.md").write_text(text)
    title = "each method at the best setting of its search" if known.searches else "every method in its paper's setting"
    plot(table, out / f"leaderboard{name}.png", dataset, title, kind)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
