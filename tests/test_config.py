"""The config tree: every option resolves to its class; bad values fail before any work, naming the field."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from fedrun.app import experiment
from fedrun.app.build import parse_config, resolve_target
from fedrun.app.plan import plan
from fedrun.core.paths import config_dir
from fedrun.errors import ConfigError
from fedrun.kernels.config import SimConfig
from tests.conftest import SMALL, compose_cfg

CONF = Path(config_dir())
OPTIONS = sorted(p for p in CONF.glob("*/*.yaml") if p.parent.name not in ("experiment", "setting"))


@pytest.mark.parametrize("path", OPTIONS, ids=[f"{p.parent.name}={p.stem}" for p in OPTIONS])
def test_every_option_resolves_and_validates(path):
    node = OmegaConf.load(path)
    node.pop("defaults", None)  # a method's paper setting of the other groups (conf/setting/)
    group = path.parent.name
    if group == "sim":
        parse_config(SimConfig, node, group)
        return
    cls = resolve_target(node["_target_"], group)
    module_file = Path(__import__(cls.__module__, fromlist=["_"]).__file__)
    assert module_file.stem == path.stem.replace("-", "_"), "option name = module name (one hop from config to code)"
    assert module_file.parent.name == group
    parse_config(cls.Config, node, group)


BAD = [
    ("sim.clients_per_round=0", "sim.clients_per_round"),
    ("sim.clients_per_round=1.5", "sim.clients_per_round"),
    ("sim.max_rounds=-1", "sim.max_rounds"),
    ("sim.seed=-3", "sim.seed"),
    ("sim.checkpoint_dir=''", "sim.checkpoint_dir"),
    ("sim.resume=''", "sim.resume"),
    ("sim.epochs=abc", "sim.epochs"),
    ("sim.keep_best=2", "sim.keep_best"),  # OmegaConf alone reads a number or "yes" given to a switch as true
    ("sim.progress=yes", "sim.progress"),
    ("method.resample_negatives=0", "method.resample_negatives"),
    ("method.optimizer.lr=-1", "method.optimizer.lr"),
    ("method.optimizer.name=rmsprop", "method.optimizer.name"),
    ("+method.foo=1", "method.foo"),
    ("backbone.loss=mse", "backbone.loss"),
    ("dataset=beauty dataset.split.protocol=predefined", "dataset.split.protocol"),
    ("dataset.split.test_ratio=1.5", "dataset.split.test_ratio"),
    ("dataset=ml-1m dataset.variant=full", "dataset.variant"),
    ("eval.ks=[0]", "eval.ks"),
    ("eval.metrics=[auc]", "eval.metrics"),
    ("defense.weighting=median", "defense.weighting"),
    ("backbone=ncf backbone.layers=[63,16]", "backbone.layers"),
    ("method=fedgnn backbone=lightgcn backbone.layers=1000", "backbone.layers"),
    ("method=central method.batch_size=0", "method.batch_size"),
]


@pytest.mark.parametrize("overrides,field", BAD, ids=[b[1] for b in BAD])
def test_bad_value_names_the_field(overrides, field):
    cfg = compose_cfg(["track=none", *overrides.split()])
    with pytest.raises(ConfigError) as info:
        plan(cfg)
    assert info.value.field == field
    assert "expected" in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_requested_without_gpu_is_a_config_error():
    with pytest.raises(ConfigError, match="sim.device"):
        plan(compose_cfg(["sim.device=cuda"]))


def test_clients_per_round_as_a_fraction_of_the_clients():
    assert SimConfig(clients_per_round=0.6).round_size(943) == 566  # round(p·n)
    assert SimConfig(clients_per_round=0.001).round_size(943) == 1  # at least one client
    assert SimConfig(clients_per_round="all").round_size(943) == 943
    assert SimConfig(clients_per_round=16).round_size(943) == 16
    assert SimConfig(clients_per_round=1.0).round_size(943) == 943  # p = 1 (LightFR Fig. 6)
    assert SimConfig(clients_per_round=1).round_size(943) == 1
    with pytest.raises(ConfigError, match=r"clients_per_round.*1\.5"):
        SimConfig(clients_per_round=1.5)


@pytest.mark.parametrize("override,field", [
    ("method.optimizer.lr=inf", "method.optimizer.lr"),
    ("method.optimizer.lr=-inf", "method.optimizer.lr"),
    ("method.server_optimizer.lr=inf", "method.server_optimizer.lr"),
    ("backbone.l2=inf", "backbone.l2"),
    ("privacy=ldp", None),
    ("attack=a_hum", None),
])
def test_non_finite_numbers_are_refused_by_name_before_any_data_is_read(override, field, tmp_path, monkeypatch):
    """inf passes every "> 0" check; one walk over every parsed option refuses NaN and ±inf by name."""
    from fedrun.app.plan import plan

    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "no-data-here"))
    extra = {"privacy=ldp": ["privacy.epsilon=inf"], "attack=a_hum": ["attack.mining_lr=inf"]}.get(override, [])
    expected = field or extra[0].split("=")[0]
    with pytest.raises(ConfigError) as refused:
        plan(compose_cfg(SMALL + [override, *extra]))
    assert refused.value.field == expected and "finite" in str(refused.value) or "-inf" in override


@pytest.mark.parametrize("override,field", [
    ("sim.device=cudaX", "sim.device"), ("sim.device=cuda:-1", "sim.device"),
    ("dataset.split.seed=-1", "dataset.split.seed"),
])
def test_device_strings_and_split_seeds_are_checked_before_torch_or_numpy_sees_them(override, field, tmp_path,
                                                                                  monkeypatch):
    from fedrun.app.plan import plan

    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "no-data-here"))
    with pytest.raises(ConfigError) as refused:
        plan(compose_cfg(SMALL + [override]))
    assert refused.value.field == field


@pytest.mark.parametrize("threads", [-1, 0, True, 1.5])
def test_thread_counts_are_refused_by_name_before_torch_sets_them(threads):
    from fedrun.app.cli import set_threads

    with pytest.raises(ConfigError, match=r"sim.threads=.* null or an integer >= 1"):
        set_threads(threads, None)


def test_more_threads_than_cores_is_refused_before_torch_sets_them():
    """torch.set_num_threads(100000) raised a MemoryError traceback (issue #68 probe)."""
    from fedrun.app.cli import set_threads

    with pytest.raises(ConfigError, match=r"sim.threads=100000 .* at most the \d+ cores this process may use"):
        set_threads(100000, None)


def test_more_negatives_than_a_client_can_draw_distinct_says_they_repeat(caplog):
    """80 items, the largest client holds some: 79 negatives per positive must repeat; the run says so first."""
    from fedrun.app.plan import build_run

    with caplog.at_level("WARNING", logger="fedrun"):
        build_run(compose_cfg(SMALL + ["method.num_negatives=79"]))
    assert "method.num_negatives=79 is more than the" in caplog.text and "negatives repeat" in caplog.text


def test_a_sampled_cut_off_that_covers_every_candidate_is_refused(tmp_path, monkeypatch):
    """With 99 negatives, HR@100 is 1 for every user: a cut-off must stay below the candidate count."""
    from fedrun.app.plan import plan

    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "no-data-here"))
    with pytest.raises(ConfigError, match=r"eval.ks=\[10, 100\] .* up to num_negatives = 99 with hr") as refused:
        plan(compose_cfg(SMALL + ["eval=sampled", "eval.ks=[10,100]", "eval.num_negatives=99",
                                       "eval.metrics=[hr,mrr]"]))
    assert refused.value.field == "eval.ks"


@pytest.mark.parametrize("override,field,base", [
    ("method._target_=fedrun.backbone.mf.MF", "method._target_", "Method"),
    ("method._target_=os.path.join", "method._target_", "Method"),
    ("eval._target_=fedrun.method.fedavg.FedAvg", "eval._target_", "Evaluator"),
    ("privacy._target_=math.sqrt", "privacy._target_", "Privacy"),
])
def test_a_target_of_the_wrong_kind_is_named_before_its_config_is_read(override, field, base, tmp_path, monkeypatch):
    from fedrun.app.plan import plan

    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "no-data-here"))
    with pytest.raises(ConfigError, match=f"expected a subclass of {base}") as refused:
        plan(compose_cfg(SMALL + [override]))
    assert refused.value.field == field


@pytest.mark.parametrize("target", ["this.Nothing", "antigravity.Fly", "probe_options.side_effect.Missing"])
def test_a_target_is_checked_before_its_module_runs(target, tmp_path, monkeypatch, capsys):
    """Issue #68: ``method._target_=this.Nothing`` printed the Zen of Python before its error. A module whose
    source does not define the class is refused by name without being imported."""
    import sys

    from fedrun.app.plan import plan

    package = tmp_path / "probe_options"  # a user's own options package whose module has a side effect
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "side_effect.py").write_text("print('this module ran')\nclass Present: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module_name = target.rpartition(".")[0]
    with pytest.raises(ConfigError, match=r"a subclass of Method, defined in its module's source") as refused:
        plan(compose_cfg(SMALL + [f"method._target_={target}"]))
    assert refused.value.field == "method._target_"
    assert module_name not in sys.modules and capsys.readouterr().out == ""


def test_a_bucket_budget_below_the_largest_client_is_refused_before_training():
    """sim.max_slots=1 used to be accepted and ran every client alone (minutes per round)."""
    with pytest.raises(ConfigError, match=r"sim.max_slots=1 .* at least \d+: the largest client"):
        experiment.run(compose_cfg(SMALL + ["sim.max_slots=1"]))


# What `fedrun method=X` runs with nothing else: the paper's setting of the other groups (conf/setting/,
# selected in each method's defaults list). (backbone, privacy, eval, defense, sim.clients_per_round). A method
# without a paper setting of its own runs the global defaults (conf/config.yaml), DEFAULT_SETTING.
PAPER_SETTING = {
    "fedcl": ("fedcl/gru4rec", "ldp", "full", "mean", 16),
    "bil": ("fedcl/gru4rec", "none", "full", "mean", 16),
    "lightfr": ("binary-mf", "none", "lightfr/sampled", "mean", 0.6),
    **{m: ("lightfr/pmf", "none", "lightfr/sampled", "mean", 0.6)
       for m in ("fcf", "fedmf", "privrec", "svdpp", "median_quantized")},
    "metamf": ("metamf/pmf", "none", "lightfr/sampled", "mean", 0.6),  # lightfr/pmf without the L2 it never reads
    "fedrec": ("pmf", "none", "full", "mean", "all"),
    "fedrecpp": ("pmf", "none", "full", "mean", "all"),
    **{m: ("rcl4fedrec/ncf", "none", "full", "sum", 256) for m in ("cl4fedrec", "rcl4fedrec", "simgcl", "union")},
    **{m: ("perfedrecpp/lightgcn", "perfedrecpp/ldp", "full", "mean", 256)
       for m in ("fedgnn", "perfedrec", "perfedrecpp")},
}
DEFAULT_SETTING = ("mf", "none", "full", "mean", 256)  # fedavg, central, pop: no paper of their own
METHODS = sorted(p.stem for p in (CONF / "method").glob("*.yaml"))


def test_the_paper_setting_table_names_shipped_methods():
    assert set(PAPER_SETTING) <= set(METHODS)


@pytest.mark.parametrize("method", METHODS)
def test_a_bare_method_runs_its_papers_setting(method):
    cfg = compose_cfg([f"method={method}"])
    choices = cfg.choices
    assert (choices.backbone, choices.privacy, choices.eval, choices.defense, cfg.sim.clients_per_round) == \
        PAPER_SETTING.get(method, DEFAULT_SETTING)
    plan(cfg)  # and the combination validates


def test_the_command_line_wins_over_a_methods_paper_setting():
    cfg = compose_cfg(["method=fedcl", "backbone=mf", "privacy=none", "sim.clients_per_round=5", "eval.ks=[3]"])
    assert (cfg.choices.backbone, cfg.choices.privacy, cfg.sim.clients_per_round, list(cfg.eval.ks)) == \
        ("mf", "none", 5, [3])


def test_a_presets_rows_win_over_their_methods_paper_setting():
    fed = compose_cfg(["+experiment=fedcl/table2", "row=fedcl/fed"])  # "+Fed": FedCL's method without LDP
    assert (fed.choices.method, fed.choices.privacy, fed.choices.backbone) == ("fedcl", "none", "fedcl/ncf")
    hics = compose_cfg(["+experiment=rcl4fedrec/table3", "row=rcl4fedrec/cl4fedrec_hics"])
    assert hics.choices.defense == "hics" and hics.defense.reduce == "sum"


@pytest.mark.parametrize("row", ["fedmf", "fedgnn", "perfedrec", "perfedrecpp"])
def test_a_perfedrecpp_row_swaps_its_ldp_whole_from_the_command_line(row):
    """The rows select the LDP as an option, not as field values, so ε = ∞ is privacy=none (a privacy-utility
    point) and other budgets are privacy.scale=…"""
    plain = compose_cfg(["+experiment=perfedrecpp/table4", f"row=perfedrecpp/{row}", "privacy=none"])
    assert plain.choices.privacy == "none" and set(plain.privacy) == {"_target_"}
    plan(plain)
    noisier = compose_cfg(["+experiment=perfedrecpp/table4", f"row=perfedrecpp/{row}", "privacy.scale=0.4"])
    assert (noisier.privacy.scale, noisier.privacy.clip, noisier.privacy.norm) == (0.4, 0.5, "linf")


def test_a_field_given_to_an_option_without_fields_says_it_takes_none():
    from fedrun.privacy.config import NoPrivacyConfig
    with pytest.raises(ConfigError, match="this option takes no fields") as info:
        parse_config(NoPrivacyConfig, {"scale": 0.1}, "privacy")
    assert info.value.field == "privacy.scale"


def flat(node, prefix: str = "") -> dict:
    out = {}
    for key, value in node.items():
        out.update(flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
    return out


# The README's paper commands and the preset cell each one equals: the preset's measured numbers are what the
# command gives. (Beauty's S3-Rec files are 5-core: dataset.min_item_count=5 removes no item there.)
README_EQUALS_PRESET = [
    ("method=fedcl dataset=beauty dataset.min_item_count=5",
     "+experiment=fedcl/table2 row=fedcl/fedcl dataset=beauty backbone=fedcl/gru4rec"),
    ("method=fedrecpp dataset=ml-100k", "+experiment=fedrecpp/table2 row=fedrecpp/fedrecpp_rho1"),
    ("method=lightfr dataset=filmtrust", "+experiment=lightfr/table5 row=lightfr/lightfr"),
    ("method=cl4fedrec dataset=ml-1m", "+experiment=rcl4fedrec/table2 row=rcl4fedrec/cl4fedrec"),
    ("method=perfedrecpp dataset=yelp-perfedrec", "+experiment=perfedrecpp/table4 row=perfedrecpp/perfedrecpp"),
    ("method=fedgnn dataset=yelp-perfedrec", "+experiment=perfedrecpp/table4 row=perfedrecpp/fedgnn"),
    ("method=perfedrec dataset=yelp-perfedrec", "+experiment=perfedrecpp/table4 row=perfedrecpp/perfedrec"),
    ("method=bil dataset=beauty dataset.min_item_count=5",
     "+experiment=fedcl/table2 row=fedcl/bil dataset=beauty backbone=fedcl/gru4rec"),
]


@pytest.mark.parametrize("command,preset", README_EQUALS_PRESET, ids=[c.split()[0] for c, _ in README_EQUALS_PRESET])
def test_a_papers_command_runs_what_its_preset_measured(command, preset):
    def values(overrides: str) -> dict:
        cfg = flat(OmegaConf.to_container(compose_cfg(overrides.split()), resolve=True))
        return {k: v for k, v in cfg.items()  # names of what runs, not what runs
                if not k.startswith(("choices.", "paper.", "figure.")) and k not in ("row", "experiment_name")}

    assert values(command) == values(preset)


@pytest.mark.parametrize("field", ["sim.seed", "dataset.split.seed", "dataset.seed", "attack.target_seed",
                                   "attack.known_seed", "eval.seed"])
def test_every_seed_follows_one_rule(field):
    """Issue #68: sim.seed accepted 2^64 while dataset.split.seed refused 2^63, and a seed past 2^32 named a new run
    while its streams (keyed by the low 32 bits) gave the numbers of an old one. One rule: [0, 2^32)."""
    from fedrun.app.plan import plan

    extra = {"attack.known_seed": ["attack=fedrecattack"], "eval.seed": ["eval=sampled", "eval.num_negatives=9",
                                                                      "eval.ks=[5]"],
             "attack.target_seed": ["attack=a_ra", "attack.targets=random"]}.get(field, [])
    plan(compose_cfg(SMALL + extra + [f"{field}={2 ** 32 - 1}"]))  # the largest seed is accepted
    for bad in (2 ** 32, 2 ** 64, -1):
        with pytest.raises(ConfigError, match=r"an integer in \[0, 2\^32\)") as refused:
            plan(compose_cfg(SMALL + extra + [f"{field}={bad}"]))
        assert refused.value.field == field


@pytest.mark.parametrize("overrides,field", [
    (["defense=multi_krum", "defense.m=100000"], "defense.m"),  # every upload averaged: the plain mean
    (["defense=hics", "defense.min_uploaders=100000"], "defense.min_uploaders"),  # no row ever updated
    (["method=perfedrecpp", "backbone=lightgcn", "privacy=none", "method.clusters=3", "method.pretrain_rounds=1000",
      "sim.epochs=1"], "method.pretrain_rounds"),  # only pre-trains, recorded as PerFedRec++
    (["method=perfedrec", "backbone=lightgcn", "privacy=none", "method.clusters=3", "method.cluster_from=1000",
      "sim.epochs=1"], "method.cluster_from"),  # the clusters never form
    (["attack=a_ra", "attack.target_ids=[3]"], "attack.target_ids"),  # attacked the least popular item instead
    (["attack=a_ra", "attack.targets=explicit", "attack.target_ids=[5,5]"], "attack.target_ids"),  # counted twice
    (["dataset.ratings=true", "eval.kind=rating"], "eval.kind"),  # an RMSE of ranking scores
    (["eval.ks=[80]"], "eval.ks"),  # the whole catalogue: every hit 1
    (["attack=a_ra", "attack.fraction=0.05", "eval.er_ks=[5,80]"], "eval.er_ks"),
    (["sim.threads=100000"], "sim.threads"),
    (["dataset.ratings=true", "backbone=binary-mf"], "backbone"),  # FedAvg's gradients on ±1 codes
    (["dataset.ratings=true", "method=central", "backbone=binary-mf"], "backbone"),
    (["method=pop", "backbone=gru4rec"], "backbone"),  # popularity labelled as a sequential model
    (["method=pop", "backbone=lightgcn"], "backbone"),
])
def test_a_setting_that_would_change_what_the_run_measures_is_refused_before_training(overrides, field):
    """Issue #68 (3): each of these kept its run's label while measuring something else."""
    with pytest.raises(ConfigError) as refused:
        experiment.build_run(compose_cfg(SMALL + overrides))
    assert refused.value.field == field


def test_a_wide_backbone_lowers_the_default_bucket_budget_and_says_so(monkeypatch, caplog):
    """Issue #68: a valid backbone.dim=512 was refused as sim.max_slots=2097152, a value the user never set. At
    the default the budget is lowered to what fits (logged, recorded as run.max_slots); set by hand, refused."""
    import logging
    import os

    page, pages = 4096, (2 << 30) // 4096  # a machine with 2 GiB
    monkeypatch.setattr("fedrun.app.validate.os.sysconf",
                        lambda name: {"SC_PAGE_SIZE": page, "SC_PHYS_PAGES": pages}[name] if isinstance(name, str)
                        else os.sysconf(name))
    with caplog.at_level(logging.INFO, logger="fedrun"):
        built = experiment.build_run(compose_cfg(SMALL + ["backbone.dim=64"]))  # 2^21 slots x 64 x 32 B = 4 GiB
    assert built.plan.sim.max_slots == 1 << 19 and "sim.max_slots lowered from 2097152 to 524288" in caplog.text
    with pytest.raises(ConfigError, match=r"sim.max_slots=4194304 .* at most 524288 at width 64") as refused:
        experiment.build_run(compose_cfg(SMALL + ["backbone.dim=64", "sim.max_slots=4194304"]))
    assert refused.value.field == "sim.max_slots"


@pytest.mark.parametrize("key", ["foo", "experimnt_name", "sims"])
def test_a_top_level_key_nothing_reads_is_refused_before_any_data_is_read(key):
    with pytest.raises(ConfigError, match=rf"{key}=1 is not allowed: expected a key fedrun reads: a config group"):
        plan(compose_cfg(SMALL + [f"+{key}=1"]))


def test_every_key_the_presets_set_is_known():
    from fedrun.app.preflight import known_top_level_keys

    assert {"experiment_name", "paper", "matrix", "server_reduce", "figure", "row", "choices"} <= known_top_level_keys()


@pytest.mark.parametrize("override", ["hydra.run.dir={file}/x", "hydra.sweep.dir={file}/deeper/x", None])
def test_an_output_folder_that_cannot_be_created_is_named_before_hydra_runs(override, tmp_path, monkeypatch, capsys):
    """A folder under a file (or read-only) made Hydra print its OSError traceback; now one named line, exit 2.
    Without an override the default ``outputs/`` under the working directory is checked."""
    import sys

    from fedrun.app import cli

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.chdir(tmp_path)
    if override is None:
        (tmp_path / "outputs").write_text("")  # the default folder's name taken by a file
    args = ["dataset=synthetic"] + ([override.format(file=blocker)] if override else [])
    monkeypatch.setattr(sys, "argv", ["fedrun", *args])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err
    assert "is a file, not a folder" in err and ("hydra.run.dir" in err or "hydra.sweep.dir" in err)


@pytest.mark.parametrize("override,expected", [("method.optimizer.lr=abc", "a number"),
                                               ("method.optimizer.user_lr=abc", "a number or null"),
                                               ("sim.epochs=abc", "an integer")])
def test_a_value_of_the_wrong_type_names_the_type_a_reader_knows(override, expected):
    """Issue #66: a nested field's wrong value said "expected ClientOptimizer" (the class of the outer field)."""
    from fedrun.app.plan import plan

    with pytest.raises(ConfigError, match=rf"expected {expected}\.$"):
        plan(compose_cfg(SMALL + [override]))


@pytest.mark.parametrize("overrides, lr, user_lr", [
    (["method=fedavg", "backbone=ncf"], 3.0, 3.0),  # conf/steps/fedavg/ncf.yaml
    (["method=fedavg"], 0.3, 3.0),  # MF: FedAvg's own
    (["method=fedavg", "backbone=ncf", "method.optimizer.lr=0.5"], 0.5, 3.0),  # the command line wins
    (["method=fedavg", "backbone=ncf", "~steps"], 0.3, 3.0),  # opted out
    (["+experiment=attacks/ahum_code"], 0.001, None),  # a preset's own steps stay
])
def test_a_method_takes_its_measured_steps_with_a_backbone_other_than_its_own(overrides, lr, user_lr):
    cfg = compose_cfg(overrides)
    assert (cfg.method.optimizer.lr, cfg.method.optimizer.user_lr) == (lr, user_lr)
    assert "choices.steps" not in experiment.config_params(cfg, resolve=False)  # follows from method and backbone


def test_a_misspelt_steps_choice_is_refused_by_name():
    from fedrun.core.choices import check_group_choices

    with pytest.raises(ConfigError, match=r"steps.*fedavg/ncff.*fedavg/ncf"):
        check_group_choices(["steps=fedavg/ncff"])


@dataclasses.dataclass
class _Switches:
    switch: bool = False
    maybe: bool | None = None


@dataclasses.dataclass
class _Nested:
    inner: _Switches = dataclasses.field(default_factory=_Switches)
    count: int = 1


def test_a_boolean_field_takes_only_true_or_false_at_any_depth():
    parsed = parse_config(_Nested, {"inner": {"switch": True, "maybe": None}, "count": 2}, "g")
    assert parsed.inner.switch is True and parsed.count == 2
    for given in (1, 0, "true", "no", 2.0):
        with pytest.raises(ConfigError) as err:
            parse_config(_Nested, {"inner": {"switch": given}}, "g")
        assert err.value.field == "g.inner.switch" and err.value.value == given
    with pytest.raises(ConfigError, match="true or false"):
        parse_config(_Nested, {"inner": {"maybe": 1}}, "g")
