"""The server side receives uploads only: it holds no reference to client data, any access to
client data during the server phase raises, and uploads carry only their declared fields."""

from __future__ import annotations

import gc
import importlib
import inspect
import pkgutil
import re
import types
from pathlib import Path

import pytest
import torch
import yaml

import fedrun.method
from fedrun.backbone.base import PublicParams
from fedrun.core.paths import config_dir
from fedrun.kernels.env import RunEnv
from fedrun.kernels.guards import UploadError
from fedrun.method.federated import ClientResult, FederatedMethod
from fedrun.method.server import Server
from fedrun.types import Uploads
from tests.conftest import SMALL, compose_cfg, make_method, round_of, unpack


class PrivacyViolation(AssertionError):
    pass


class Poison:
    """Stands in for client-side data while the server phase runs: any use raises."""

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr):
        raise PrivacyViolation(f"server phase touched {self._name}.{attr}")

    def __getitem__(self, key):
        raise PrivacyViolation(f"server phase indexed {self._name}")


class CountsOnly(Poison):
    """A split of which only the public counts (users, items) may be read."""

    def __init__(self, split):
        super().__init__("Split")
        object.__setattr__(self, "n_users", split.n_users)
        object.__setattr__(self, "n_items", split.n_items)


def poisoned(fn, name: str, method, env, calls: list[str]):
    """``fn`` run with the client store and the private parameters replaced by poison; logs ``name``."""
    def wrapper(*args, **kwargs):
        calls.append(name)
        saved = (env.train, method.client.private)
        env.train, method.client.private = Poison("ClientStore"), Poison("PrivateParams")
        try:
            return fn(*args, **kwargs)
        finally:
            env.train, method.client.private = saved
    return wrapper


def server_phase_calls(method, env) -> list[str]:
    """One round of a method whose server phase is its own (it adds noise, back-propagates, ...): the
    round's aggregation step and ``server.step``, both run with client data poisoned → the phases that
    ran, in order."""
    calls: list[str] = []
    rounds = round_of(method)
    rounds.aggregate = poisoned(rounds.aggregate, "aggregate", method, env, calls)
    method.server.step = poisoned(method.server.step, "server.step", method, env, calls)
    round_of(method).train_round(0)
    return calls


def reachable(root, limit=20000):
    """Objects reachable from ``root`` through attributes and containers (not modules or classes)."""
    seen, todo, out = set(), [root], []
    while todo and len(out) < limit:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)):
            continue
        seen.add(id(obj))
        out.append(obj)
        todo.extend(gc.get_referents(obj))
    return out


@pytest.mark.parametrize("overrides", [[], ["backbone=ncf", "sim.fast_path=off"]], ids=["fast-path", "general"])
def test_server_holds_no_reference_to_client_data(overrides):
    method, env = make_method(overrides)
    round_of(method).train_round(0)
    private = method.client.private
    client_side = [env.train, env.train.items, env.train.indptr, private, private.user, env.split,
                   env.split.train]
    server_side = reachable(method.server) + reachable(round_of(method).defense)
    leaked = [c for c in client_side if any(c is obj for obj in server_side)]
    assert not leaked
    private_storage = method.client.private.user.untyped_storage().data_ptr()
    tensors = [t for t in server_side if isinstance(t, torch.Tensor)]
    assert tensors and all(t.untyped_storage().data_ptr() != private_storage for t in tensors)


@pytest.mark.parametrize("overrides", [[], ["sim.fast_path=off"], ["defense=sum", "sim.fast_path=off"]],
                         ids=["fast-path", "general", "sum"])
def test_server_phase_never_touches_client_data(overrides):
    method, env = make_method(overrides)
    calls = []
    round_of(method).defense.aggregate = poisoned(round_of(method).defense.aggregate, "aggregate", method, env, calls)
    method.server.step = poisoned(method.server.step, "server.step", method, env, calls)
    for r in range(3):
        round_of(method).train_round(r)
    assert "server.step" in calls


def test_poison_catches_a_leaky_server():
    """Negative control: a server step that reads client data is caught by the poison."""
    method, env = make_method(["sim.fast_path=off"])
    original = method.server.step

    def leaky_step(aggregate, ctx):
        _ = env.train.items  # what a buggy server might do
        return original(aggregate, ctx)

    def wrapper(*args):
        saved = env.train
        env.train = Poison("ClientStore")
        try:
            return leaky_step(*args)
        finally:
            env.train = saved

    method.server.step = wrapper
    with pytest.raises(PrivacyViolation, match="ClientStore.items"):
        round_of(method).train_round(0)


def test_uploads_with_undeclared_fields_are_refused():
    method, _ = make_method(["sim.fast_path=off"])
    honest = method.client.step

    def leaky_client_step(problem):
        uploads, user, loss = unpack(honest(problem))
        dense = {**uploads.dense, "user_embedding": user}  # a private row smuggled into the upload
        return ClientResult(Uploads(uploads.n_clients, uploads.row_client, uploads.row_item, uploads.row_delta,
                                    dense, uploads.weight), user, loss)

    method.client.step = leaky_client_step
    with pytest.raises(UploadError, match=r"undeclared fields \['user_embedding'\]"):
        round_of(method).train_round(0)


@pytest.mark.parametrize("privacy,clear", [("none", ["user_embedding"]), ("ldp", [])])
def test_a_protocol_that_uploads_private_parameters_in_the_clear_says_so(privacy, clear, caplog):
    """FedCL's exchange uploads user embeddings: without LDP the run says so in its log and its tags."""
    from fedrun.app.experiment import run_record
    from fedrun.app.plan import build_run

    cfg = compose_cfg(SMALL + ["method=fedcl", "backbone=fedcl/ncf", f"privacy={privacy}", "method.n_clusters=4"])
    with caplog.at_level("WARNING", logger="fedrun"):
        built = build_run(cfg)
    _, tags = run_record(built, None, None)
    assert tags.get("fedrun.clear_uploads", "").split(",") == (clear or [""])
    assert ("uploads its user_embedding in the clear" in caplog.text) == bool(clear)


# -- the server program of every federated method (issue #61) ---------------------------------------

CLIENT_SIDE_TYPES = {"RunEnv", "ClientStore", "PrivateParams", "Split", "Interactions"}
SMALL_VIEWS = ["method.synthetic_users=6", "method.synthetic_items=5", "method.synthetic_fit_steps=5"]
RATED = ["dataset.ratings=true", "backbone=pmf", "backbone.loss=mse"]
SETTINGS = {  # what a method needs on the synthetic data beyond `method=<option>` (none by default)
    "cl4fedrec": ["backbone=ncf", *SMALL_VIEWS], "rcl4fedrec": ["backbone=ncf", "method.hot_items=10", *SMALL_VIEWS],
    "simgcl": ["backbone=ncf"], "union": ["backbone=ncf"],
    "fedgnn": ["backbone=lightgcn"], "perfedrec": ["backbone=lightgcn", "method.clusters=3"],
    "perfedrecpp": ["backbone=lightgcn", "method.clusters=3", "method.pretrain_rounds=1"],
    "fedmf": RATED, "fcf": RATED, "fedrec": RATED, "fedrecpp": RATED,
    # (PrivRec's noise, σ = zS = 50 on the round's sum, swamps 16 clients' mean: all 60 in one round)
    "privrec": ["dataset.ratings=true", "backbone=pmf", "backbone.dim=4", "backbone.init_std=0.1",
                "dataset.split.protocol=random_ratio", "sim.clients_per_round=all"],
    "metamf": ["dataset.ratings=true", "backbone=metamf/pmf", "backbone.dim=8", "method.hidden=16", "method.memory=8",
               "method.user_dim=4", "method.item_factors=3"],
    "lightfr": ["dataset.ratings=true"], "fedcl": ["backbone=ncf"],
}


def federated_options() -> list[str]:
    """Every `method=` option whose class is a federated method, read from conf/method/."""
    options = []
    for path in sorted((Path(config_dir()) / "method").glob("*.yaml")):
        module, _, name = yaml.safe_load(path.read_text())["_target_"].rpartition(".")
        if issubclass(getattr(importlib.import_module(module), name), FederatedMethod):
            options.append(path.stem)
    return options


def test_no_server_program_is_built_from_client_data():
    """The boundary in the types: no ``Server`` subclass takes the env, a client store, the split or private
    rows when it is built (what it reads of the data comes as a value, e.g. CL4FedRec's popularity)."""
    for module in pkgutil.iter_modules(fedrun.method.__path__):
        importlib.import_module(f"fedrun.method.{module.name}")
    servers, todo = [], [Server]
    while todo:
        cls = todo.pop()
        servers.append(cls)
        todo += [sub for sub in cls.__subclasses__() if sub.__module__.startswith("fedrun.")]
    assert len(servers) > 8
    for cls in servers:
        assert not client_side_parameters(cls), f"{cls.__qualname__}.__init__ takes {client_side_parameters(cls)}"


def client_side_parameters(cls: type) -> list[str]:
    """The client-side types named in the annotations of ``cls.__init__``."""
    annotations = " ".join(str(p.annotation) for p in inspect.signature(cls.__init__).parameters.values())
    return sorted(name for name in CLIENT_SIDE_TYPES if re.search(rf"\b{name}\b", annotations))


def test_the_type_check_sees_a_server_built_from_the_env():
    class LeakyServer(Server):
        def __init__(self, public: PublicParams, env: RunEnv | None = None):
            super().__init__(public)

    assert client_side_parameters(LeakyServer) == ["RunEnv"]


@pytest.mark.parametrize("option", federated_options())
def test_every_server_program_holds_and_reads_no_client_data(option):
    """One epoch of each federated method with the client store, the split and the private rows poisoned
    while its server program aggregates and steps; afterwards nothing reachable from the server program
    is client data."""
    method, env = make_method([f"method={option}", *SETTINGS.get(option, [])])
    calls: list[str] = []
    saved = (env.train, env.split, method.client.private)

    def poisoned_call(fn, name):
        def wrapper(*args, **kwargs):
            calls.append(name)
            env.train, env.split = Poison("ClientStore"), Poison("Split")
            method.client.private = Poison("PrivateParams")
            try:
                return fn(*args, **kwargs)
            finally:
                env.train, env.split, method.client.private = saved
        return wrapper

    server = method.server
    server.aggregate = poisoned_call(server.aggregate, "aggregate")
    server.step = poisoned_call(server.step, "step")
    rounds = round_of(method)
    for r in range(rounds.rounds_per_epoch()):
        rounds.train_round(r)
    assert "step" in calls
    private = method.client.private
    client_side = [env.train, env.train.items, env.split, env.split.train, private, private.user]
    held = reachable(server)
    assert not [c for c in client_side if any(c is obj for obj in held)]
    private_storage = method.client.private.user.untyped_storage().data_ptr()
    assert all(t.untyped_storage().data_ptr() != private_storage for t in held if isinstance(t, torch.Tensor))


@pytest.mark.parametrize("option", federated_options())
def test_every_server_program_is_built_from_declared_statistics_only(option, monkeypatch):
    """``make_server`` runs with the client store and the split poisoned, before the client program (the private
    rows) exists: what the server program gets of the data is the statistics its method declares
    (``Needs.server_reads``), no more."""
    cfg = compose_cfg(SMALL + [f"method={option}", *SETTINGS.get(option, [])])
    module, _, name = cfg.method._target_.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    build_server, built = cls.make_server, []

    def poisoned_make_server(self, public, statistics):
        # the private rows live in the client program, which is built after the server (from its model view)
        assert not hasattr(self, "client"), "the server program must be built before any client program exists"
        env, saved = self.env, (self.env.train, self.env.split)
        env.train, env.split = Poison("ClientStore"), CountsOnly(env.split)
        try:
            built.append(sorted(statistics))
            return build_server(self, public, statistics)
        finally:
            env.train, env.split = saved

    monkeypatch.setattr(cls, "make_server", poisoned_make_server)
    method, _ = make_method([f"method={option}", *SETTINGS.get(option, [])])
    assert built == [sorted(method.needs(method.config).server_reads)]
