"""End-to-end runs on synthetic data: reproducibility, MLflow records, failure status, report."""

from __future__ import annotations

import io
import sys

import pytest
import torch
import torch.utils.deterministic
from mlflow.tracking import MlflowClient

from fedrun.app import experiment
from fedrun.app.report import main as report_main
from fedrun.errors import ConfigError, FedrunError
from fedrun.sim.loop import NumericalError
from tests.conftest import SMALL, compose_cfg, make_method, round_of


def run(overrides):
    return experiment.run(compose_cfg(SMALL + ["sim.epochs=2", *overrides]))


@pytest.mark.parametrize("method", ["fedavg", "central"])
def test_same_config_and_seed_gives_identical_metrics(method):
    first = run([f"method={method}", "sim.seed=3"]).test
    assert run([f"method={method}", "sim.seed=3"]).test == first
    assert run([f"method={method}", "sim.seed=4"]).test != first


def test_cpu_runs_are_bit_identical_on_several_threads():
    """Two threads add a batch's index gradients in thread order unless fedrun turns torch's deterministic
    algorithms on for CPU runs (``reproducible_on``): without it these tables differ in the 7th digit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        tables = []
        for _ in range(2):
            method, _env = make_method(["method=central", "method.batch_size=4096", "sim.device=cpu"],
                                       base=["dataset=synthetic", "dataset.n_users=400", "dataset.n_items=300",
                                             "dataset.mean_length=40", "track=none", "sim.progress=false"])
            for round_index in range(2):
                round_of(method).train_round(round_index)
            tables.append((method.user.detach().clone(), method.item.detach().clone()))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(tables[0][0], tables[1][0]) and torch.equal(tables[0][1], tables[1][1])
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.utils.deterministic.fill_uninitialized_memory  # its NaN fills cost time and change nothing


def test_bucketing_does_not_change_results():
    one = run(["sim.buckets=1", "method.optimizer.name=adam", "method.optimizer.lr=0.05"]).test
    many = run(["sim.buckets=6", "sim.min_bucket_clients=1", "sim.max_slots=500", "method.optimizer.name=adam",
                "method.optimizer.lr=0.05"]).test
    for name in one:
        assert many[name] == pytest.approx(one[name], abs=1e-6)


def test_mlflow_run_records_config_metrics_and_artifacts():
    result = run(["track=mlflow", "track.experiment=t1"])
    client = MlflowClient()
    (record,) = client.search_runs([client.get_experiment_by_name("t1").experiment_id])
    assert record.info.status == "FINISHED"
    assert record.data.params["sim.seed"] == "0" and record.data.params["choices.method"] == "fedavg"
    assert record.data.tags["fedrun.dataset_digest"].startswith("synthetic-")
    assert "fedrun.git_commit" in record.data.tags
    platform = record.data.tags["fedrun.platform"].split(" · ")  # what another machine may round differently
    assert platform[1:] == [torch.backends.cpu.get_cpu_capability(), f"torch {torch.__version__}"]
    history = client.get_metric_history(record.info.run_id, "train/loss")
    assert len(history) == result.rounds and [m.step for m in history] == list(range(result.rounds))
    assert record.data.metrics["test/ndcg_at_10"] == pytest.approx(result.test["ndcg_at_10"])
    per_epoch = result.rounds / int(record.data.params["sim.epochs"])  # the leaderboard's wall time per epoch
    seconds_per_epoch = result.train_seconds / result.rounds * per_epoch
    assert record.data.metrics["cost/seconds_per_epoch"] == pytest.approx(seconds_per_epoch)
    assert len(client.get_metric_history(record.info.run_id, "valid/ndcg_at_10")) == 2  # one per epoch
    artifacts = {a.path for a in client.list_artifacts(record.info.run_id)}
    assert {"last_run.md", "config.yaml"} <= artifacts


def test_an_audited_run_logs_the_attacks_and_their_table(tmp_path):
    """Issue #65: audit=server's metrics reach MLflow at the last step and its table the results file (an artifact)."""
    result = run(["track=mlflow", "track.experiment=t-audit", "audit=server"])
    client = MlflowClient()
    (record,) = client.search_runs([client.get_experiment_by_name("t-audit").experiment_id])
    assert record.data.metrics["audit/auc"] > 0.5 and record.data.metrics["audit/base_rate"] > 0
    assert [m.step for m in client.get_metric_history(record.info.run_id, "audit/auc")] == [result.rounds]
    local = client.download_artifacts(record.info.run_id, "last_run.md", str(tmp_path))
    assert "## Audit: an honest-but-curious server's inference attacks" in open(local).read()


def test_non_finite_loss_fails_the_run_with_its_reason():
    named = r"(the aggregate \(defense=Mean\)|the client step \(FedAvg\)|training loss).* round \d+"
    with pytest.raises(NumericalError, match=named):
        run(["track=mlflow", "track.experiment=t2", "method.optimizer.lr=1e30"])
    client = MlflowClient()
    (record,) = client.search_runs([client.get_experiment_by_name("t2").experiment_id])
    assert record.info.status == "FAILED"
    assert "NumericalError" in record.data.tags["fedrun.failure_reason"]


@pytest.mark.parametrize("overrides,named", [
    # finite but diverged (item rows near 1e29): was scored and FINISHED
    (["method.optimizer.lr=1e30"], r"magnitude .* past 1e\+15: the model has diverged\. Lower the learning rate"),
    # an attack's step and the privacy noise were blamed on method.optimizer.lr
    (["backbone=ncf", "attack=a_ra", "attack.fraction=0.05", "attack.lr=1e30"],
     r"the attack's uploads \(ARA\) produced values of magnitude .* Lower attack\.lr"),
    (["privacy=ldp", "privacy.epsilon=1e-300", "privacy.targets=[item_rows]"],
     r"the privacy mechanism \(LDP\) produced \d+ non-finite .* Raise privacy\.epsilon"),
])
def test_a_diverged_model_fails_naming_the_setting_that_scaled_it(overrides, named):
    """Issue #68 (5): magnitude is guarded, not only finiteness, and the error names the true cause."""
    with pytest.raises(NumericalError, match=named):
        run(overrides + ["sim.epochs=1"])


def test_report_aggregates_seeds_and_lists_failed_runs(tmp_path):
    for method in ("fedavg", "pop"):
        for seed in (1, 2):
            run(["track=mlflow", "track.experiment=t3", f"method={method}", f"sim.seed={seed}"])
    with pytest.raises(NumericalError):
        run(["track=mlflow", "track.experiment=t3", "method.optimizer.lr=1e30"])
    assert report_main(["t3", "--out", str(tmp_path / "reports")]) == 0
    text = (tmp_path / "reports" / "t3" / "report.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| fedavg") or line.startswith("| pop")]
    assert len(rows) == 2 and all("| 2 " in row and "±" in row for row in rows)
    assert "Runs that did not finish (1)" in text and "NumericalError" in text
    assert (tmp_path / "reports" / "t3" / "report.csv").exists()
    client = MlflowClient()
    names = {r.info.run_name for r in client.search_runs([client.get_experiment_by_name("t3").experiment_id])}
    assert {"method=fedavg · backbone=mf · dataset=synthetic · seed=1",
            "method=pop · backbone=mf · dataset=synthetic · seed=2"} <= names  # a sweep's seeds told apart


def test_report_ledger_keeps_runs_the_store_lost(tmp_path):
    import pandas as pd

    from fedrun.report import ledger

    path = tmp_path / "results" / "t4-runs.csv"
    results = {seed: run(["track=mlflow", "track.experiment=t4", f"sim.seed={seed}"]).test for seed in (1, 2)}
    assert report_main(["t4", "--out", str(tmp_path / "reports"), "--ledger", str(path)]) == 0
    client = MlflowClient()
    for record in client.search_runs([client.get_experiment_by_name("t4").experiment_id]):
        client.delete_run(record.info.run_id)  # the store is lost, the ledger is not
    results[3] = run(["track=mlflow", "track.experiment=t4", "sim.seed=3"]).test
    assert report_main(["t4", "--out", str(tmp_path / "reports"), "--ledger", str(path)]) == 0

    assert report_main(["t4", "--out", str(tmp_path / "reports"), "--ledger", str(path)]) == 0  # seed 3 in both

    runs = ledger.read(path)
    assert sorted(runs["param:sim.seed"]) == ["1", "2", "3"] and set(runs["status"]) == {"FINISHED"}
    by_seed = runs.set_index("param:sim.seed")["metric:test_hr_at_10"]
    assert all(by_seed[str(seed)] == test["hr_at_10"] for seed, test in results.items())  # exact round trip
    table = pd.read_csv(tmp_path / "reports" / "t4" / "report.csv")
    assert list(table["runs"]) == [3]
    mean = pd.Series([test["hr_at_10"] for test in results.values()]).mean()
    std = pd.Series([test["hr_at_10"] for test in results.values()]).std()
    assert table["test_hr_at_10"][0] == pytest.approx(mean) and table["test_hr_at_10_std"][0] == pytest.approx(std)
    assert table["test_hr_at_10_n"][0] == 3 and table["test_hr_at_10_to_floor"][0] == pytest.approx(
        mean / table["test_hr_at_10_floor"][0])  # numbers, not "0.1611 ± 0.0255" strings


def test_report_ledger_leaves_out_runs_in_flight(tmp_path):
    from fedrun.report import ledger

    path = tmp_path / "t6-runs.csv"
    run(["track=mlflow", "track.experiment=t6", "sim.seed=1"])
    client = MlflowClient()
    in_flight = client.create_run(client.get_experiment_by_name("t6").experiment_id).info.run_id
    client.log_param(in_flight, "sim.seed", "2")
    assert report_main(["t6", "--out", str(tmp_path / "reports"), "--ledger", str(path)]) == 0
    assert "RUNNING" in (tmp_path / "reports" / "t6" / "report.md").read_text()  # the report still lists it
    runs = ledger.read(path)
    assert list(runs["param:sim.seed"]) == ["1"] and in_flight not in set(runs["run_id"])
    client.set_terminated(in_flight, status="KILLED")
    assert report_main(["t6", "--out", str(tmp_path / "reports"), "--ledger", str(path)]) == 0
    assert set(ledger.read(path)["status"]) == {"FINISHED", "KILLED"}  # recorded once it ended


def test_report_ledger_without_run_columns_is_refused(tmp_path, capsys):
    path = tmp_path / "runs.csv"
    path.write_text("seed,hr\n1,0.5\n")
    assert report_main(["t5", "--ledger", str(path)]) == 2
    assert "lacks the column(s) run_id, status, start_time, reason" in capsys.readouterr().err
    path.write_text("run_id,status,start_time,reason,metric:test_hr_at_10\na,FINISHED,1,,high\n")
    assert report_main(["t5", "--ledger", str(path)]) == 2
    assert "column 'metric:test_hr_at_10' must hold numbers" in capsys.readouterr().err


def test_report_groups_by_options_and_swept_values_only():
    import pandas as pd

    from fedrun.app.report import group_columns

    frame = pd.DataFrame({
        "param:choices.method": ["fedavg", "fedavg", "central", "central"],
        "param:choices.backbone": ["mf"] * 4, "param:choices.dataset": ["ml-1m"] * 4,
        "param:method._target_": ["F", "F", "C", "C"],  # implied by the method option
        "param:method.optimizer.lr": ["10", "30", "0.001", "0.001"],  # swept within fedavg
        "param:sim.seed": ["1", "2", "1", "2"],
    })
    assert group_columns(frame) == ["param:choices.method", "param:choices.backbone", "param:choices.dataset",
                                    "param:method.optimizer.lr"]


def test_report_rows_sort_numbers_by_value():
    import pandas as pd

    from fedrun.app.report import summarize

    frame = pd.DataFrame({
        "status": ["FINISHED"] * 4, "param:choices.method": ["rcl4fedrec"] * 4,
        "param:method.synthetic_users": ["120", "10", "30", "nan"], "metric:test_recall_at_20": [.1, .2, .3, .4],
    })
    _, rows = summarize(frame, ["test_recall_at_20"])
    assert [row[1] for row in rows] == ["10", "30", "120", "nan"]  # not "10", "120", "30"


def test_the_paper_tables_sort_row_variants_by_the_numbers_in_them():
    import pandas as pd

    from fedrun.report.paper import beside_paper, claim_tests

    frame = pd.DataFrame({
        "param:choices.dataset": ["ml-1m"] * 4, "param:choices.backbone": ["ncf"] * 4,
        "param:choices.row": ["rcl4fedrec/rcl4fedrec"] * 3 + ["rcl4fedrec/cl4fedrec"], "param:sim.seed": ["1"] * 4,
        "param:method.synthetic_users": ["120", "10", "30", "60"], "metric:test_recall_at_20": [.1, .2, .3, .4],
    })
    paper = {"metrics": ["test_recall_at_20"], "best_row": "cl4fedrec"}
    variants = [f"rcl4fedrec (method.synthetic_users={n})" for n in (10, 30, 120)]  # not 10, 120, 30
    _, rows = beside_paper(frame, paper, ["param:method.synthetic_users"])
    assert [row[2] for row in rows] == ["cl4fedrec", *variants]
    _, rows = claim_tests(frame, paper, ["param:method.synthetic_users"])
    assert [row[2] for row in rows] == variants


def test_a_param_added_after_a_run_does_not_split_its_row():
    """Runs recorded before a config key existed lack its param; with its null default they ran the same."""
    import pandas as pd

    from fedrun.app.report import absent_as_null, summarize

    frame = absent_as_null(pd.DataFrame({
        "status": ["FINISHED"] * 3, "param:choices.method": ["fedavg"] * 3, "param:choices.backbone": ["mf"] * 3,
        "param:choices.dataset": ["ml-1m"] * 3, "param:sim.seed": ["1", "2", "3"],
        "param:method.optimizer.user_lr": [None, "None", "None"],  # seed 1 ran before the key existed
        "param:eval.watch": [None, "attack", "attack"],  # added with the default that keeps the old behaviour
        "param:method.duplicate_rows": [None, None, "sum"],  # likewise (session 55)
        "metric:test_hr_at_10": [0.1, 0.2, 0.3]}))
    _, rows = summarize(frame, ["test_hr_at_10"])
    assert len(rows) == 1 and rows[0][3] == "3"
    assert list(frame["param:eval.watch"]) == ["attack"] * 3
    assert list(frame["param:method.duplicate_rows"]) == ["sum"] * 3


def test_claim_test_pairs_rows_by_seed():
    import pandas as pd
    from scipy.stats import ttest_rel

    from fedrun.report.paper import claim_tests

    ours, theirs = [0.30, 0.32, 0.35], [0.20, 0.25, 0.21]
    frame = pd.DataFrame({
        "param:choices.dataset": ["ml-1m"] * 7, "param:choices.backbone": ["fedcl/gru4rec"] * 7,
        "param:choices.row": ["fedcl/fedcl"] * 3 + ["fedcl/fed"] * 3 + ["fedcl/bil"],
        "param:sim.seed": ["3", "1", "2", "1", "2", "3", "1"],
        "metric:test_hr_at_10": [ours[2], ours[0], ours[1], *theirs, 0.1],
    })
    header, rows = claim_tests(frame, {"metrics": ["test_hr_at_10"], "best_row": "fedcl"})
    assert header == ["dataset", "backbone", "row", "seeds", "test_hr_at_10 diff", "test_hr_at_10 p"]
    bil, fed = rows
    assert fed[2:4] == ["fed", "3"] and fed[4] == "+0.1033"
    assert fed[5] == f"{ttest_rel(ours, theirs).pvalue:.3f}"  # paired by seed, not by row order
    assert bil[2:] == ["bil", "1", "+0.2000", ""]  # one pair: no test
    assert claim_tests(frame, {"metrics": ["test_hr_at_10"]}) == (header, [])


def test_order_claims_give_a_verdict_per_claim_and_cell():
    import pandas as pd
    from scipy.stats import ttest_rel

    from fedrun.report.paper import order_claims

    fed, central, bil = [0.10, 0.12, 0.11], [0.20, 0.25, 0.21], [0.13, 0.10, 0.12]
    frame = pd.DataFrame({
        "param:choices.dataset": ["yelp"] * 7, "param:choices.backbone": ["fedcl/gru4rec"] * 7,
        "param:choices.row": ["fedcl/fed"] * 3 + ["fedcl/central"] * 3 + ["fedcl/bil"],
        "param:sim.seed": ["1", "2", "3", "3", "1", "2", "2"],
        "metric:test_hr_at_10": [*fed, central[2], central[0], central[1], bil[1]],
    })
    paper = {"metrics": ["test_hr_at_5", "test_hr_at_10"], "claims": ["fed < central", "fed < bil", "central < fed"]}
    header, rows = order_claims(frame, paper)
    assert header[4:6] == ["test_hr_at_10 low", "test_hr_at_10 high"]  # the second metric by default
    by_claim = {row[2]: row[3:] for row in rows}
    p = f"{ttest_rel(central, fed).pvalue:.3f}"
    assert by_claim["fed < central"] == ["3", "0.1100", "0.2200", "+0.1100", p, "holds"]  # paired by seed
    assert by_claim["central < fed"] == ["3", "0.2200", "0.1100", "-0.1100", p, "reversed"]
    assert by_claim["fed < bil"] == ["1", "0.1200", "0.1000", "-0.0200", "", "one seed, reversed"]
    level = frame.assign(**{"metric:test_hr_at_10": [0.1, 0.2, 0.3, 0.45, 0.05, 0.15, 0.0]})
    assert order_claims(level, paper)[1][0][-1] == "level, same direction"
    # the same difference on every seed (an exposure of 1.0 against 0): p 0, not "level"; no difference: level
    constant = frame.assign(**{"metric:test_hr_at_10": [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]})
    assert order_claims(constant, paper)[1][0][-2:] == ["0.000", "holds"]
    equal = frame.assign(**{"metric:test_hr_at_10": [0.5] * 7})
    assert order_claims(equal, paper)[1][0][-2:] == ["", "level, equal"]
    with pytest.raises(ValueError, match="'fed > central' is not a claim"):
        order_claims(frame, {"metrics": ["test_hr_at_10"], "claims": ["fed > central"]})


def test_row_variants_are_tabulated_and_paired_apart():
    """A central row trained 20 epochs and one trained to convergence, same seeds: two lines in both
    tables, never one mean over both nor pairs that mix them."""
    import pandas as pd

    from fedrun.report.paper import beside_paper, claim_tests

    frame = pd.DataFrame({
        "param:choices.dataset": ["sports"] * 6, "param:choices.backbone": ["fedcl/ncf"] * 6,
        "param:choices.row": ["fedcl/fedcl"] * 2 + ["fedcl/central"] * 4,
        "param:sim.epochs": ["20", "20", "20", "20", "200", "200"],
        "param:sim.seed": ["1", "2", "1", "2", "1", "2"],
        "metric:test_hr_at_10": [0.30, 0.32, 0.10, 0.13, 0.50, 0.56],
    })
    paper = {"metrics": ["test_hr_at_10"], "best_row": "fedcl", "sports": {"ncf": {"central": [0.4]}}}
    _, rows = beside_paper(frame, paper, ["param:sim.epochs"])
    by_row = {row[2]: row for row in rows}
    assert set(by_row) == {"fedcl", "central (sim.epochs=20)", "central (sim.epochs=200)"}
    assert by_row["central (sim.epochs=20)"][3:] == ["2", "0.1150 ± 0.0212", "0.4000"]
    assert by_row["central (sim.epochs=200)"][4] == "0.5300 ± 0.0424"
    _, claims = claim_tests(frame, paper, ["param:sim.epochs"])
    assert [(c[2], c[3], c[4]) for c in claims] == [("central (sim.epochs=20)", "2", "+0.1950"),
                                                     ("central (sim.epochs=200)", "2", "-0.2200")]


def test_execution_settings_are_not_row_variants():
    """Seeds of one row run with different thread counts or checkpoint folders are one row; a
    setting that changes what is computed (epochs) still splits it."""
    import pandas as pd

    from fedrun.app.report import group_columns

    frame = pd.DataFrame({
        "param:choices.method": ["fedcl"] * 4, "param:choices.backbone": ["fedcl/ncf"] * 4,
        "param:choices.dataset": ["sports"] * 4, "param:sim.seed": ["1", "2", "3", "1"],
        "param:sim.threads": ["1", "2", "1", "1"], "param:sim.checkpoint_dir": ["a", "b", "c", "d"],
        "param:sim.epochs": ["20", "20", "20", "200"],
        "param:choices.hydra/launcher": ["joblib", "basic", "joblib", "basic"],  # a sweep's jobs, a single rerun
        "param:figure.x": ["method.synthetic_users"] * 3 + ["None"],  # a figure's point borrowed from a table's run
    })
    assert group_columns(frame) == ["param:choices.method", "param:choices.backbone",
                                    "param:choices.dataset", "param:sim.epochs"]


@pytest.mark.parametrize("name", ["nan", "2024"])
def test_numeric_looking_experiment_names_stay_names(name):
    run(["track=mlflow", f"track.experiment={name}", "sim.max_rounds=1"])
    assert MlflowClient().get_experiment_by_name(name) is not None


def test_evaluation_chunk_size_does_not_change_metrics():
    small = run(["eval.memory_mb=1", "sim.max_rounds=3"])
    large = run(["eval.memory_mb=512", "sim.max_rounds=3"])
    assert small.test == large.test and small.valid == large.valid


def test_report_counts_the_latest_of_rerun_seeds_and_lists_the_others():
    import pandas as pd

    from fedrun.app.report import drop_reruns, summarize

    frame = pd.DataFrame({
        "run_id": ["old", "a", "new", "b", "failed"], "status": ["FINISHED"] * 4 + ["FAILED"],
        "start_time": [1, 2, 5, 3, 4], "param:choices.method": ["fedcl"] * 5,
        "param:choices.backbone": ["ncf"] * 5, "param:choices.dataset": ["beauty"] * 5,
        "param:sim.seed": ["1", "2", "1", "3", "1"], "param:sim.threads": ["1"] * 5,
        "metric:test_hr_at_10": [0.9, 0.2, 0.1, 0.3, None],
    })
    kept, superseded = drop_reruns(frame)
    assert list(superseded["run_id"]) == ["old"]
    assert sorted(kept["run_id"]) == ["a", "b", "failed", "new"]  # failed runs stay, to be listed
    _, rows = summarize(kept, ["test_hr_at_10"])
    assert rows == [["fedcl", "ncf", "beauty", "3", "0.2000 ± 0.1000"]]


def test_runs_that_differ_where_a_choice_was_not_logged_are_not_reruns():
    """A choice some runs never logged (a preset's row) still counts as varying, so the setting it separates keeps
    runs at different ε apart (pandas 3's astype(str) kept the missing cells missing and grouped them away)."""
    import pandas as pd

    from fedrun.app.report import drop_reruns

    nan = float("nan")
    frame = pd.DataFrame({
        "run_id": ["eps0.5", "eps1", "fedmf", "fedgnn"], "status": ["FINISHED"] * 4, "start_time": [1, 2, 3, 4],
        "param:choices.method": ["fedavg"] * 4, "param:choices.backbone": ["mf"] * 4,
        "param:choices.dataset": ["ml-100k"] * 4,
        "param:choices.row": [nan, nan, "perfedrecpp/fedmf", "perfedrecpp/fedgnn"],  # the later runs have rows
        "param:privacy.epsilon": ["0.5", "1.0", "4.0", "4.0"], "param:sim.seed": ["1"] * 4,
    })
    kept, superseded = drop_reruns(frame)
    assert superseded.empty and sorted(kept["run_id"]) == ["eps0.5", "eps1", "fedgnn", "fedmf"]


def test_test_every_logs_learning_curves_without_selecting():
    """sim.test_every=1: the test metrics of every epoch but the last are logged at that epoch's step,
    and the final test is the last model's (nothing is selected on them)."""
    from fedrun.track.base import Tracker

    class Recorder(Tracker):
        def __init__(self):
            super().__init__(None)
            self.steps = {}

        def log_metrics(self, metrics, step):
            for name in metrics:
                self.steps.setdefault(name, []).append(step)

    built = experiment.build_run(compose_cfg(SMALL + ["sim.epochs=3", "sim.test_every=1", "sim.eval_every=0"]))
    recorder = Recorder()
    from fedrun.sim.loop import log_final, run_loop

    log_final(recorder, run_loop(built.trainer, built.evaluator, recorder, built.plan.sim, "t"))
    per_epoch = built.trainer.rounds_per_epoch()
    assert recorder.steps["test_ndcg_at_10"] == [per_epoch, 2 * per_epoch, 3 * per_epoch]


def test_negatives_drawn_once_stay_the_same_every_round():
    from tests.conftest import make_method, round_of

    fixed, _ = make_method(["method.resample_negatives=false", "sim.fast_path=off"])
    fresh, _ = make_method(["sim.fast_path=off"])
    users = round_of(fixed).sampler.users(0)
    first, later = fixed.client.problems(users, 0), fixed.client.problems(users, 7)
    assert all(torch.equal(a.items, b.items) for a, b in zip(first, later))
    refreshed = zip(fresh.client.problems(users, 0), fresh.client.problems(users, 7))
    assert not all(torch.equal(a.items, b.items) for a, b in refreshed)


def test_a_model_that_diverged_in_its_last_round_is_never_scored():
    """The loop checks the model before testing: a NaN in any floating tensor of its state ends the run
    with the component and round named, instead of a FINISHED run scored on NaN."""
    from fedrun.kernels.guards import NumericalError, check_model

    method, _ = make_method(["backbone=ncf"])
    check_model(method.state_dict(), 3)  # a healthy model passes
    method.public.net["head.weight"][0, 0] = float("nan")
    with pytest.raises(NumericalError, match=r"the model to be tested \(.*head.weight\) .* round 3"):
        check_model(method.state_dict(), 3)


def test_split_seeds_that_draw_nothing_are_not_counted_as_replicates():
    """Under loo the split is the same whatever dataset.split.seed says: two such runs with one training
    seed are one replicate (the later counts); under random_ratio they are two."""
    import pandas as pd

    from fedrun.app.report import drop_reruns

    frame = pd.DataFrame({
        "run_id": ["loo-a", "loo-b", "ratio-a", "ratio-b"], "status": ["FINISHED"] * 4, "start_time": [1, 2, 3, 4],
        "param:choices.method": ["fedavg"] * 4, "param:choices.backbone": ["mf"] * 4,
        "param:choices.dataset": ["ml-1m"] * 4, "param:sim.seed": ["1"] * 4,
        "param:dataset.split.protocol": ["loo", "loo", "random_ratio", "random_ratio"],
        "param:dataset.split.seed": ["0", "7", "0", "7"], "metric:test_hr_at_10": [0.1, 0.2, 0.3, 0.4],
    })
    kept, superseded = drop_reruns(frame)
    assert list(superseded["run_id"]) == ["loo-a"]
    assert sorted(kept["run_id"]) == ["loo-b", "ratio-a", "ratio-b"]


def test_an_interrupt_while_the_run_is_being_built_records_nothing_and_says_so(monkeypatch, capsys):
    """Ctrl-C during data loading used to print "the run is marked KILLED" although no run existed."""
    from mlflow.tracking import MlflowClient

    from fedrun.app import cli
    from fedrun.sim.signals import AbortedBeforeStart

    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(experiment, "build_run", interrupted)
    cfg = compose_cfg(SMALL + ["track=mlflow", "track.experiment=aborted"])
    with pytest.raises(AbortedBeforeStart):
        experiment.run(cfg)
    assert MlflowClient().get_experiment_by_name("aborted") is None
    with pytest.raises(SystemExit) as exited:
        cli._app(cfg)
    assert exited.value.code == 130
    assert "interrupted before the run started; nothing was recorded" in capsys.readouterr().err
    from fedrun.track import recorder

    assert recorder._recorder is None  # the run's recorder ended with it: later runs here record as configured


def test_collapse_is_detected_on_tied_scores_only():
    from fedrun.eval.config import EvalConfig
    from fedrun.eval.full import Full

    method, env = make_method(["backbone=ncf"])
    evaluator = Full(EvalConfig(), env.split, env.device, rating=False)
    assert not evaluator.collapsed(method)
    method.public.net["head.weight"].zero_()  # every score is the head's bias
    assert evaluator.collapsed(method)


def test_a_collapsed_model_is_named_and_tagged(monkeypatch, caplog):
    from fedrun.eval.base import Evaluator

    monkeypatch.setattr(Evaluator, "collapsed", lambda self, method, sample=64: True)
    run(["track=mlflow", "track.experiment=t9"])
    client = MlflowClient()
    (record,) = client.search_runs([client.get_experiment_by_name("t9").experiment_id])
    assert record.data.tags["fedrun.collapsed"] == "true" and record.info.status == "FINISHED"
    assert any("collapsed model" in r.getMessage() for r in caplog.records)


def test_every_result_has_the_floor_of_its_split_beside_it(caplog):
    """A run that ends at the popularity floor says so (one line, the fedrun.below_floor tag); the floor's
    metrics are logged beside the run's, and the floor itself (method=pop) is not judged against itself."""
    run(["track=mlflow", "track.experiment=floor", "method.optimizer.lr=1e-6", "sim.max_rounds=1"])
    client = MlflowClient()
    (record,) = client.search_runs([client.get_experiment_by_name("floor").experiment_id])
    assert record.data.tags["fedrun.below_floor"] == "true"
    assert record.data.metrics["floor/ndcg_at_10"] >= record.data.metrics["test/ndcg_at_10"]
    assert any("at or below the popularity floor" in r.getMessage() for r in caplog.records)
    caplog.clear()
    run(["track=mlflow", "track.experiment=floor-pop", "method=pop"])
    (record,) = client.search_runs([client.get_experiment_by_name("floor-pop").experiment_id])
    assert "fedrun.below_floor" not in record.data.tags and "floor/ndcg_at_10" not in record.data.metrics


def test_the_validation_curve_has_the_floor_of_the_validation_part(caplog):
    """Validation has a floor of its own (a part carved from the training data can be easier than the test
    part): logged as floor_valid_* before training, shown in each epoch's line, a column of the results table."""
    import json
    import logging

    from fedrun.eval.config import FullConfig
    from fedrun.eval.floor import floor_metrics
    from fedrun.eval.full import Full

    caplog.set_level(logging.INFO, logger="fedrun")
    run(["track=mlflow", "track.experiment=valid-floor", "sim.progress=false", "sim.max_rounds=8"])
    client = MlflowClient()
    (record,) = client.search_runs([client.get_experiment_by_name("valid-floor").experiment_id])
    _, env = make_method([])
    expected = floor_metrics(Full(FullConfig(), env.split, env.device, rating=False), env, "valid")
    test_floor = floor_metrics(Full(FullConfig(), env.split, env.device, rating=False), env)
    assert expected != test_floor  # another part, another floor
    logged = record.data.metrics
    assert logged["floor/valid_ndcg_at_10"] == pytest.approx(expected["ndcg_at_10"])
    assert logged["floor/ndcg_at_10"] == pytest.approx(test_floor["ndcg_at_10"])
    epoch_lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert epoch_lines and all(f"(floor {expected['ndcg_at_10']:.4f}" in line for line in epoch_lines)
    local = client.download_artifacts(record.info.run_id, "results.json")
    table = json.loads(open(local).read())
    assert table["columns"] == ["metric", "test", "valid", "floor", "valid floor"]
    row = next(r for r in table["data"] if r[0] == "ndcg_at_10")
    assert row[4] == pytest.approx(expected["ndcg_at_10"])


def test_a_run_without_validation_has_no_validation_floor():
    run(["track=mlflow", "track.experiment=no-valid-floor", "sim.eval_every=0", "sim.max_rounds=2"])
    client = MlflowClient()
    (record,) = client.search_runs([client.get_experiment_by_name("no-valid-floor").experiment_id])
    assert "floor/valid_ndcg_at_10" not in record.data.metrics and "floor/ndcg_at_10" in record.data.metrics


def test_the_floor_is_computed_once_per_split_and_protocol(monkeypatch):
    from fedrun.eval.config import FullConfig
    from fedrun.eval.floor import floor_metrics
    from fedrun.eval.full import Full
    from fedrun.method.pop import Pop

    method, env = make_method([])
    calls = []
    real = Pop.score_users
    monkeypatch.setattr(Pop, "score_users", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    first = floor_metrics(Full(FullConfig(), env.split, env.device, rating=False), env)
    assert calls and first == floor_metrics(Full(FullConfig(), env.split, env.device, rating=False), env)
    done = len(calls)
    other = floor_metrics(Full(FullConfig(ks=[3]), env.split, env.device, rating=False), env)  # another protocol
    assert len(calls) > done and set(other) != set(first)


def test_the_rating_floor_is_the_damped_bias_baseline():
    from fedrun.eval.floor import BiasBaseline

    _, env = make_method(["method=fedrec", "backbone=pmf", "dataset.ratings=true"])
    baseline = BiasBaseline(env, damping=10.0)
    train = env.split.train
    mean = float(train.rating.mean())
    item = int(train.item[0])
    rows = train.item == item
    b_i = float((train.rating[rows] - mean).sum()) / (10.0 + rows.sum())
    assert float(baseline.item_bias[item]) == pytest.approx(b_i, rel=1e-6)
    user = int(train.user[0])
    mine = train.user == user
    b_u = float((train.rating[mine] - mean - baseline.item_bias[torch.as_tensor(train.item[mine])].numpy()).sum())
    assert float(baseline.user_bias[user]) == pytest.approx(b_u / (10.0 + mine.sum()), rel=1e-6)
    got = baseline.score_pairs(torch.tensor([user]), torch.tensor([item]))
    assert float(got) == pytest.approx(mean + b_u / (10.0 + mine.sum()) + b_i, rel=1e-5)


def test_the_report_marks_rows_at_or_below_their_floor(tmp_path):
    for seed in (1, 2):
        run(["track=mlflow", "track.experiment=t-floor", "method.optimizer.lr=1e-6", "sim.max_rounds=1",
             f"sim.seed={seed}"])
        run(["track=mlflow", "track.experiment=t-floor", "method=pop", f"sim.seed={seed}"])
    assert report_main(["t-floor", "--out", str(tmp_path / "reports"), "--metrics", "test_ndcg_at_10"]) == 0
    text = (tmp_path / "reports" / "t-floor" / "report.md").read_text()
    (fedavg,) = [line for line in text.splitlines() if line.startswith("| fedavg")]
    (pop,) = [line for line in text.splitlines() if line.startswith("| pop")]
    assert "(≤ floor " in fedavg and "floor" not in pop
    assert "at or below the popularity floor" in text


def test_the_report_reads_validation_metrics_against_the_validation_floor():
    import pandas as pd

    from fedrun.app.report import floor_mark

    group = pd.DataFrame({"metric:floor_recall_at_20": [.0119, .0119],
                          "metric:floor_valid_recall_at_20": [.0154, .0154]})
    at_valid_floor = pd.Series([.0150, .0157])  # mean .01535: above the test floor, at the validation floor
    assert floor_mark(group, "best_valid_recall_at_20", at_valid_floor) == " (≤ floor 0.0154)"
    assert floor_mark(group, "valid_recall_at_20", at_valid_floor) == " (≤ floor 0.0154)"
    assert floor_mark(group, "test_recall_at_20", at_valid_floor) == ""
    assert floor_mark(group, "test_recall_at_20", pd.Series([.0110])) == " (≤ floor 0.0119)"
    assert floor_mark(group.drop(columns="metric:floor_valid_recall_at_20"), "best_valid_recall_at_20",
                      at_valid_floor) == ""  # runs from before the validation floor was logged


def test_a_row_from_before_the_floor_was_logged_takes_it_from_runs_on_the_same_split():
    """The first CL4FedRec run of Table 2 (Recall@20 .0150, under the split's floor .0183) predates the logged
    floor and went unmarked; the report now reads the floor of the other runs on the same split and protocol."""
    import pandas as pd

    from fedrun.app.report import floor_mark

    runs = pd.DataFrame({"param:dataset._target_": ["Ml1m", "Ml1m", "Ml1m", "Yelp"],
                         "param:dataset.split.protocol": ["predefined"] * 3 + ["loo"],
                         "param:eval.ks": ["[20]"] * 4,
                         "param:eval.memory_mb": [None, "256", "256", "256"],  # added after the first run
                         "metric:floor_recall_at_20": [None, .0183, .0183, .0095]})
    old, new_ml1m, yelp = runs.iloc[[0]], runs.iloc[[1, 2]], runs.iloc[[3]]
    under = pd.Series([.0150])
    assert floor_mark(old, "test_recall_at_20", under) == ""  # no floor of its own
    assert floor_mark(old, "test_recall_at_20", under, peers=runs) == " (≤ floor 0.0183)"  # not Yelp's .0095
    assert floor_mark(old, "test_recall_at_20", pd.Series([.0200]), peers=runs) == ""
    assert floor_mark(old, "test_recall_at_20", under, peers=yelp) == ""  # no run on its split
    assert floor_mark(new_ml1m, "test_recall_at_20", under, peers=yelp) == " (≤ floor 0.0183)"  # its own first


def test_a_store_that_fails_mid_run_is_one_named_error(monkeypatch, caplog):
    """A SQLite store that turns read-only during the run (or fills up) ends it with one line naming the store
    and the step, and the run keeps its first cause (it used to end in a traceback from inside MLflow)."""
    import sqlite3

    from mlflow.tracking import MlflowClient as Client

    from fedrun.store.calls import TrackingError

    real = Client.log_batch

    def log_batch(self, run_id, metrics=(), params=(), tags=()):
        if metrics:
            raise sqlite3.OperationalError("attempt to write a readonly database")
        return real(self, run_id, metrics=metrics, params=params, tags=tags)

    monkeypatch.setattr(Client, "log_batch", log_batch)
    with pytest.raises(TrackingError, match=r"tracking store sqlite:///.* failed while logging metrics: attempt to "
                                            r"write a readonly database\. .*sim.resume"):
        run(["track=mlflow", "track.experiment=readonly", "track.flush_every=1"])
    assert any("could not mark the run FAILED" in r.getMessage() for r in caplog.records)


def test_a_run_logs_its_learning_curve_and_results_table():
    import json

    result = run(["track=mlflow", "track.experiment=views"])
    client = MlflowClient()
    (record,) = client.search_runs([client.get_experiment_by_name("views").experiment_id])
    artifacts = {a.path for a in client.list_artifacts(record.info.run_id)}
    assert {"learning_curve.png", "results.json"} <= artifacts
    local = client.download_artifacts(record.info.run_id, "results.json")
    table = json.loads(open(local).read())
    assert table["columns"][:2] == ["metric", "test"] and "floor" in table["columns"]
    row = next(r for r in table["data"] if r[0] == "ndcg_at_10")
    assert row[1] == pytest.approx(result.test["ndcg_at_10"])


def test_a_run_records_its_dataset_as_an_input():
    import json

    run(["track=mlflow", "track.experiment=inputs"])
    client = MlflowClient()
    (record,) = client.search_runs([client.get_experiment_by_name("inputs").experiment_id])
    (entry,) = record.inputs.dataset_inputs
    assert entry.dataset.name == "synthetic" and entry.dataset.digest.startswith("synthetic-")
    profile = json.loads(entry.dataset.profile)
    assert profile["users"] == 60 and profile["test"] > 0 and profile["split"] == "loo"


def test_a_report_borrows_the_matching_runs_of_another_ledger_without_keeping_them(tmp_path, capsys):
    """rCL4FedRec's CL4FedRec row is a row of its Tables 2, 3 and 4 alike: Table 3's report pairs its defense rows
    with the CL4FedRec runs recorded under Table 2, which keep their own ledger."""
    import pandas as pd

    from fedrun.report import ledger

    def runs(experiment, rows):  # (row, lr, seed, recall)
        return pd.DataFrame({
            "run_id": [f"{experiment}-{k}" for k in range(len(rows))], "status": "FINISHED",
            "start_time": range(len(rows)), "reason": "",
            "param:choices.experiment": f"paper/{experiment}", "param:experiment_name": experiment,
            "param:choices.dataset": "ml-1m", "param:choices.backbone": "ncf", "param:choices.method": "cl",
            "param:choices.row": [f"paper/{row}" for row, *_ in rows], "param:method.lr": [lr for _, lr, *_ in rows],
            "param:sim.seed": [seed for *_, seed, _ in rows], "metric:test_recall_at_20": [r for *_, r in rows]})

    host, other = tmp_path / "table3-runs.csv", tmp_path / "table2-runs.csv"
    ledger.write(runs("table3", [("krum", "0.1", "1", 0.20), ("krum", "0.1", "2", 0.22)]), host)
    ledger.write(runs("table2", [("cl", "0.1", "1", 0.30), ("cl", "0.1", "2", 0.31), ("cl", "1.0", "1", 0.9),
                                 ("other", "0.1", "1", 0.5)]), other)
    out = tmp_path / "reports"
    borrow = ["--borrow", str(other), "row=cl", "method.lr=0.10"]  # a number matches by value
    assert report_main(["table3", "--out", str(out), "--ledger", str(host), *borrow]) == 0
    table = pd.read_csv(out / "table3" / "report.csv")
    assert list(zip(table["row"], table["runs"])) == [("paper/cl", 2), ("paper/krum", 2)]  # one preset, no lr=1.0
    assert table["test_recall_at_20"][0] == pytest.approx(0.305)
    text = (out / "table3" / "report.md").read_text()
    assert "borrowed from other experiments' ledgers (2)" in text and "table2-0: row paper/cl, seed 1" in text
    assert len(ledger.read(host)) == 2  # the host's ledger keeps its own runs only

    figure = ledger.borrow(ledger.read(host), other, ["row=cl"], relabel=False)  # a figure keeps their own names
    assert set(figure["param:experiment_name"]) == {"table2"} and len(figure) == 3

    for bad, message in [(["row"], "'row' is not a filter"), (["seed=1"], "has no parameter 'seed'"),
                         (["row=none"], "no finished run of"), ([], "no ledger at")]:
        source = str(tmp_path / "missing.csv") if not bad else str(other)
        assert report_main(["table3", "--out", str(out), "--ledger", str(host), "--borrow", source, *bad]) == 2
        assert message in capsys.readouterr().err


def test_without_the_progress_bar_each_epoch_logs_one_line(caplog, monkeypatch):
    """A batch job or sweep runs with sim.progress=false; its log still shows the run moving: per epoch the mean
    loss, the validation just taken with its floor and the best so far, the time per epoch and what is left."""
    caplog.set_level("INFO", logger="fedrun")
    run(["sim.progress=false", "sim.eval_every=2", "sim.epochs=3", "sim.keep_best=true"])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert [line.split(":")[0] for line in lines] == ["epoch 1/3", "epoch 2/3", "epoch 3/3"]
    assert "valid" not in lines[0] and "valid ndcg_at_10" in lines[1] and "; best " in lines[1]
    assert "(floor " in lines[1]  # the validation floor beside the validation
    assert all(" per epoch, " in line and line.endswith(" left") for line in lines)
    caplog.clear()
    run(["sim.progress=true", "sim.epochs=1"])  # not on a terminal (pytest's stderr): still one line per epoch
    assert [r for r in caplog.records if r.getMessage().startswith("epoch ")]
    caplog.clear()

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    run(["sim.progress=true", "sim.epochs=1"])
    assert not [r for r in caplog.records if r.getMessage().startswith("epoch ")]  # the bar shows it instead


def test_the_time_left_counts_training_and_the_validations_left_apart(caplog):
    """A FedCL run resumed at round 10,324 validated 800 rounds later and said "30 min per epoch, 7.5 h left":
    the validation's minutes were spread over those 800 rounds as if each round cost that much. Resumed here
    at epoch 8 of 20 with validation every 5 epochs: 200 rounds at .1 s and one 30 s validation since, so
    10 s of training per epoch and 1,000 rounds (100 s) plus two validations (60 s) left."""
    from fedrun.sim.checkpoint import RunnerState
    from fedrun.sim.loop import _Pace

    caplog.set_level("INFO", logger="fedrun")
    pace = _Pace(first_round=800, n_rounds=2000, per_epoch=100, train_seconds=50.0, eval_every=5)
    pace.validation_seconds.append(30.0)
    pace.losses.append(0.5)
    pace.close_epoch(RunnerState(next_round=1000, train_seconds=70.0), None, log_it=True)
    assert caplog.records[-1].getMessage() == "epoch 10/20: loss 0.5000; 10 s per epoch, 3 min left"  # 160 s


def test_the_run_loop_checks_every_run_for_a_risen_loss(monkeypatch):
    """The check is wired into every run: with the threshold at 1× (any last epoch at or above the lowest), an
    ordinary run is tagged."""
    from fedrun.sim.loop import _Pace

    monkeypatch.setattr(_Pace, "RISE", 1.0)
    run(["track=mlflow", "track.experiment=rise", "sim.epochs=2"])
    client = MlflowClient()
    (record,) = client.search_runs([client.get_experiment_by_name("rise").experiment_id])
    assert "fedrun.loss_rose" in record.data.tags


@pytest.mark.parametrize("privacy, names_noise", [("item_rows/ldp", True), ("none", False)])
def test_a_risen_loss_names_the_privacy_noise_only_where_it_reaches_the_model(monkeypatch, caplog, privacy,
                                                                                names_noise):
    """FedMF under FedGNN's LDP on Gowalla ended at a training loss of 166 (from .78) and was told to lower its
    learning rate, while the loss grows with the noise scale (Yelp: .23 without noise, 13.6 at λ .2). Noise on
    the model updates (``item_rows``) is now named beside the step size; a run without it is told the step size
    only."""
    from fedrun.sim.loop import _Pace

    monkeypatch.setattr(_Pace, "RISE", 1.0)
    run(["method=fedavg", f"privacy={privacy}"])
    (line,) = [r.getMessage() for r in caplog.records if "training loss rose" in r.getMessage()]
    assert ("privacy noise" in line) == names_noise and "method.optimizer.lr" in line


def test_a_training_loss_that_rose_tenfold_is_said_and_tagged(caplog):
    """FedGNN without its LDP clip at the lr chosen under it: the loss went from .69 to 4,657, still finite, and
    the run reported the best validated model of epoch 2 as if training had gone well. Such a run now says so."""
    from fedrun.sim.loop import _Pace

    class Tags:
        tags: dict = {}

        def set_tags(self, tags):
            self.tags = {**self.tags, **tags}

    diverged, trained = _Pace(0, 60, 20), _Pace(0, 60, 20)
    diverged.epoch_losses, trained.epoch_losses = [0.69, 0.06, 3.7], [0.69, 0.06, 0.05]
    first, second = Tags(), Tags()
    diverged.check_rise(first)
    trained.check_rise(second)
    assert first.tags == {"fedrun.loss_rose": "0.06 -> 3.7"} and second.tags == {}
    assert [r.getMessage() for r in caplog.records if "training loss rose" in r.getMessage()] == [
        "the training loss rose from 0.06 (epoch 2 of this run) to 3.7 in its last epoch: training diverged; "
        "lower the learning rate (method.optimizer.lr)"]


def test_a_store_that_fails_after_the_test_loses_no_result(tmp_path, monkeypatch, capsys):
    """Issue #68 (1): the store's disk filled after the test: the run stayed RUNNING with no test metrics, no table
    and no last_run.md, after ~190 lines of tracebacks. Now the table is printed and written first; each failing
    store step is one line, and the run says it finished."""
    import sqlite3

    from mlflow.tracking import MlflowClient as Client

    from fedrun.app import experiment as experiment_module
    from fedrun.store.calls import TrackingError

    monkeypatch.setattr(experiment_module, "job_dir", lambda: tmp_path)
    real = Client.log_batch

    def full_after_the_test(self, run_id, metrics=(), **kwargs):
        if any(m.key.startswith("test/") and m.step > 0 for m in metrics):
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, run_id, metrics=metrics, **kwargs)

    monkeypatch.setattr(Client, "log_batch", full_after_the_test)
    with pytest.raises(TrackingError, match=r"The run finished and its results are above and in .*last_run.md.* "
                                            r"disk is full"):
        run(["track=mlflow", "track.experiment=late", "track.flush_every=100000"])
    shown = capsys.readouterr().out
    assert "hr_at_10" in shown and "Traceback" not in shown
    assert "hr_at_10" in (tmp_path / "last_run.md").read_text()


def test_an_output_folder_that_fails_after_the_test_leaves_a_finished_run(tmp_path, monkeypatch, caplog):
    """Issue #68 (1): a full output disk raised a traceback, left a 0-byte last_run.md and marked FAILED a run
    whose metrics were all logged. Now: one line, nothing half-written, the run FINISHED with its metrics."""
    from pathlib import Path

    from fedrun.app import experiment as experiment_module

    monkeypatch.setattr(experiment_module, "job_dir", lambda: tmp_path)
    real = Path.write_text

    def full_disk(self, text, *args, **kwargs):
        if self.name.endswith(".tmp"):
            real(self, text[:3])  # part of it lands, then the disk is full
            raise OSError(28, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk)
    result = run(["track=mlflow", "track.experiment=late-out"])
    assert result.test and "could not be written" in caplog.text and "No space left" in caplog.text
    assert not list(tmp_path.glob("last_run.md*"))  # no half-written table, no temporary file
    client = MlflowClient()
    (record,) = client.search_runs([client.get_experiment_by_name("late-out").experiment_id])
    assert record.info.status == "FINISHED" and "test/hr_at_10" in record.data.metrics


def test_a_refused_config_leaves_no_run_and_missing_data_leaves_a_failed_one(tmp_path, monkeypatch):
    """Issue #66: each config typo left a FAILED run in MLflow. A single run's refused config now records nothing
    (the error is on the command line); a run that fails past its config (missing data) is still recorded, and a
    sweep's refused job too (its report lists it: tests/integration/test_cli.py)."""
    with pytest.raises(ConfigError):
        run(["track=mlflow", "track.experiment=t-typo", "sim.clients_per_round=1.5"])
    client = MlflowClient()
    assert client.get_experiment_by_name("t-typo") is None
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path))  # nothing there
    with pytest.raises(FedrunError):
        experiment.run(compose_cfg(["dataset=ml-1m", "track=mlflow", "track.experiment=t-nodata"]))
    (record,) = client.search_runs([client.get_experiment_by_name("t-nodata").experiment_id])
    assert record.info.status == "FAILED"


def test_the_determinism_switch_is_torchs_without_loading_its_compiler():
    """``reproducible_on`` sets torch's deterministic flag as ``torch.use_deterministic_algorithms`` does, and a
    run that never compiles does not import the compiler stack for it (1.1 s of every run's start)."""
    import subprocess
    import sys

    code = ("import sys, torch\nfrom fedrun.core.seeding import reproducible_on\n"
            "reproducible_on(torch.device('cpu')); on = torch.are_deterministic_algorithms_enabled()\n"
            "reproducible_on(torch.device('cuda')); off = torch.are_deterministic_algorithms_enabled()\n"
            "print(on, off, 'torch._inductor' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "False", "False"]
