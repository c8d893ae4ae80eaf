"""Plan and build one run: every option validated against its Config and checked in combination before any
data is read (``plan``), then the data loaded, the method, its rounds and the evaluator built, and the attack
set up (``build_run``). ``fedrun.app.experiment`` runs and records what this builds."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from fedrun.app.build import build, check_combination, parse_config, resolve_target
from fedrun.app.preflight import GROUPS, check_top_level_keys
from fedrun.app.validate import check_run, check_selection
from fedrun.attack._known import sample_known
from fedrun.attack._targets import choose_targets
from fedrun.attack.base import Attack, AttackSetup
from fedrun.attack.config import AttackConfig
from fedrun.audit.base import Auditor
from fedrun.backbone.base import Backbone
from fedrun.core.seeding import derive_seed
from fedrun.data.splits import Split
from fedrun.dataset.base import Dataset
from fedrun.defense.base import Defense
from fedrun.errors import ConfigError
from fedrun.eval.base import Evaluator
from fedrun.kernels.config import SimConfig
from fedrun.kernels.env import RunEnv
from fedrun.method.base import Method
from fedrun.method.federated import FederatedMethod
from fedrun.privacy.base import Privacy
from fedrun.sim.distributed import SINGLE, Follower, World, rank_device, world_from_env
from fedrun.sim.round import FederatedRound
from fedrun.sim.trainer import Trainer, trainer_for
from fedrun.store.runs import check_experiment_name
from fedrun.track.base import Tracker
from fedrun.track.recorder import remote_or_local

log = logging.getLogger("fedrun")



@dataclass
class Plan:
    """Every option built and validated; nothing read or trained yet."""

    dataset: Dataset
    backbone: Backbone
    sim: SimConfig
    privacy: Privacy
    attack: Attack
    defense: Defense
    audit: Auditor
    tracker: Tracker
    method_config: Any
    eval_config: Any
    cfg: DictConfig
    world: World = SINGLE  # the run's processes under torchrun (fedrun.sim.distributed)

    @property
    def choices(self) -> dict[str, str]:
        return {g: str(OmegaConf.select(self.cfg, f"choices.{g}", default="")) for g in GROUPS}


def plan(cfg: DictConfig) -> Plan:
    """Validate every group against its Config before any work starts."""
    check_top_level_keys(cfg)
    sim = parse_config(SimConfig, cfg.sim, "sim")
    world = world_from_env(sim.device)
    sim.device = rank_device(sim.device, world)
    sim.torch_device()  # a requested but absent device fails here
    if not world.leads:  # rank 0 alone shows progress, tracks and writes
        sim.progress = False
        logging.getLogger("fedrun").setLevel(logging.ERROR)  # its warnings would repeat rank 0's
    configs: dict[str, Any] = {}
    classes: dict[str, Any] = {}  # group → the option's class (its ``Config`` parses the group)
    for group, base in (("method", Method), ("eval", Evaluator)):
        target = cfg[group].get("_target_")
        if not target:
            raise ConfigError(f"{group}._target_", target, "the class implementing this option")
        classes[group] = resolve_target(target, group, base)
        configs[group] = parse_config(classes[group].Config, cfg[group], group)
    tracker = remote_or_local(build(cfg.track, "track", Tracker))
    p = Plan(
        dataset=build(cfg.dataset, "dataset", Dataset),
        backbone=build(cfg.backbone, "backbone", Backbone),
        sim=sim,
        privacy=build(cfg.privacy, "privacy", Privacy),
        attack=build(cfg.attack, "attack", Attack),
        defense=build(cfg.defense, "defense", Defense),
        audit=build(cfg.audit, "audit", Auditor),
        tracker=tracker if world.leads else Follower(tracker),
        method_config=configs["method"],
        eval_config=configs["eval"],
        cfg=cfg,
        world=world,
    )
    check_combination(classes["method"], p.method_config, p.backbone, p.privacy, p.attack, p.defense, p.choices,
                      p.sim)
    if p.audit.active and not issubclass(classes["method"], FederatedMethod):
        raise ConfigError("audit", p.choices["audit"], "none for a centralized method: no server receives uploads")
    if p.audit.active and (why := classes["method"].needs(p.method_config).no_audit):
        raise ConfigError("audit", p.choices["audit"], f"none for method={p.choices['method']}: {why}")
    check_experiment_name("experiment_name", cfg.get("experiment_name"))  # a preset's; track.experiment: its Config
    return p


@dataclass
class Built:
    plan: Plan
    env: RunEnv
    method: Method
    trainer: Trainer  # the method's rounds: the federated round, or a central method's own steps
    evaluator: Evaluator
    label: str


def build_run(cfg: DictConfig) -> Built:
    """Validate, load the data, build the method and the evaluator."""
    p = plan(cfg)
    label = " ".join(f"{g}={p.choices[g]}" for g in ("method", "backbone", "dataset") if p.choices[g])
    started = time.perf_counter()
    split = p.dataset.load()
    log.info("%s: %d users, %d items, train/valid/test = %d/%s/%d (%s split, %.1fs)", p.dataset.name,
             split.n_users, split.n_items, len(split.train), len(split.valid) if split.valid else "-",
             len(split.test), split.protocol, time.perf_counter() - started)
    check_run(p.dataset.name, split, p.backbone, p.sim, p.method_config, p.eval_config.kind)
    env = RunEnv.create(split, p.sim, p.backbone)
    method = build(cfg.method, "method", Method, env=env)
    trainer = trainer_for(method, p.privacy, p.attack, p.defense, p.sim, p.world)
    if p.audit.active and isinstance(trainer, FederatedRound):  # (plan refused an audit of a centralized method)
        p.audit.start(split.n_users, split.n_items, env.backbone, env.device)
        trainer.audit_uploads(p.audit)
    evaluator = build(cfg.eval, "eval", Evaluator, split=split, device=env.device,
                      rating=p.backbone.rating_model, bytes_per_pair=p.backbone.full_score_bytes_per_pair())
    evaluator.world = p.world
    check_selection(p.sim, evaluator)
    method.check_length(trainer.rounds_per_epoch() * p.sim.epochs)  # the run's length (max_rounds only cuts it)
    if p.attack.active and isinstance(p.attack.config, AttackConfig):
        if not (isinstance(method, FederatedMethod) and isinstance(trainer, FederatedRound)):  # (check_combination)
            raise ConfigError("attack", p.choices["attack"], "none for a centralized method: it has no clients")
        setup_attack(p, split, method, trainer, evaluator, env.device)
    elif p.eval_config.watch == "least_popular":  # no attack: the exposure the attacks' default target has anyway
        targets = choose_targets(AttackConfig(), split)
        evaluator.watch_targets(targets)
        if isinstance(trainer, FederatedRound):
            trainer.watch_targets(targets)
    built = Built(p, env, method, trainer, evaluator, label)
    for name in clear_uploads(built):
        log.warning("privacy: every sampled client uploads its %s in the clear (privacy=%s); the server sees "
                    "private parameters. privacy=ldp perturbs it as the paper does.", name, p.choices["privacy"])
    return built


def client_lr(method_config: Any, attack_config: AttackConfig) -> float:
    """The client learning rate a malicious client uses (its own ``lr``, else the method's)."""
    if attack_config.lr is not None:
        return attack_config.lr
    optimizer = getattr(method_config, "optimizer", None)
    lr = getattr(optimizer, "lr", None) or getattr(method_config, "lr", None)
    if lr is None:
        raise ConfigError("attack.lr", None, "a number > 0: this method has no client learning rate to take")
    return float(lr)


def clear_uploads(b: Built) -> list[str]:
    """Private parameters the run's clients upload that no privacy mechanism covers."""
    return b.method.clear_private_uploads(b.plan.privacy)


def setup_attack(p: Plan, split: Split, method: FederatedMethod, trainer: FederatedRound, evaluator: Evaluator,
                 device: torch.device) -> None:
    """After the data loads: the attack's targets, what it knows as a client (the architecture, the client lr,
    its odds of being sampled, the protocol's client step if offered, known interactions if it needs them),
    and the evaluator watching the targets' exposure."""
    config = p.attack.config
    targets = choose_targets(config, split)
    share = trainer.sampler.per_round / trainer.sampler.clients.numel()  # a benign client's odds per round
    step = method.client.fabricated_step if "client_step" in type(method).offers(p.method_config) else None
    known = None
    if "known_interactions" in p.attack.needs:  # (FedRecAttack's config holds what it knows)
        known = sample_known(split.train, config.known_fraction, config.known_seed)
    sampler = trainer.sampler
    schedule = (int(sampler.clients.numel()), sampler.per_round, sampler.rounds_per_epoch)
    p.attack.setup(AttackSetup(p.backbone, split.n_users, share, client_lr(p.method_config, config), targets,
                               derive_seed(p.sim.seed, "attack"), device, split.n_items, step, known, schedule))
    evaluator.watch_targets(targets)
    trainer.watch_targets(targets)
    log.info("attack: %d malicious clients promote item(s) %s", getattr(p.attack, "n_clients", 0), targets.tolist())
