"""The server side receives uploads only: it holds no reference to client data, any access to
client data during the server phase raises, and uploads carry only their declared fields."""

from __future__ import annotations

import gc
import types

import pytest
import torch

from fedrun.method.federated import ClientResult
from fedrun.sim.guards import UploadError
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


def poisoned(fn, name: str, method, env, calls: list[str]):
    """``fn`` run with the client store and the private parameters replaced by poison; logs ``name``."""
    def wrapper(*args, **kwargs):
        calls.append(name)
        saved = (env.train, method.private)
        env.train, method.private = Poison("ClientStore"), Poison("PrivateParams")
        try:
            return fn(*args, **kwargs)
        finally:
            env.train, method.private = saved
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
    client_side = [env.train, env.train.items, env.train.indptr, method.private, method.private.user, env.split,
                   env.split.train]
    server_side = reachable(method.server) + reachable(round_of(method).defense)
    leaked = [c for c in client_side if any(c is obj for obj in server_side)]
    assert not leaked
    private_storage = method.private.user.untyped_storage().data_ptr()
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
    honest = method.client_step

    def leaky_client_step(problem):
        uploads, user, loss = unpack(honest(problem))
        dense = {**uploads.dense, "user_embedding": user}  # a private row smuggled into the upload
        return ClientResult(Uploads(uploads.n_clients, uploads.row_client, uploads.row_item, uploads.row_delta,
                                    dense, uploads.weight), user, loss)

    method.client_step = leaky_client_step
    with pytest.raises(UploadError, match=r"undeclared fields \['user_embedding'\]"):
        round_of(method).train_round(0)


@pytest.mark.parametrize("privacy,clear", [("none", ["user_embedding"]), ("ldp", [])])
def test_a_protocol_that_uploads_private_parameters_in_the_clear_says_so(privacy, clear, caplog):
    """FedCL's exchange uploads user embeddings: without LDP the run says so in its log and its tags."""
    from fedrun.experiment import build_run, run_record

    cfg = compose_cfg(SMALL + ["method=fedcl", "backbone=fedcl/ncf", f"privacy={privacy}", "method.n_clusters=4"])
    with caplog.at_level("WARNING", logger="fedrun"):
        built = build_run(cfg)
    _, tags = run_record(built, None, None)
    assert tags.get("fedrun.clear_uploads", "").split(",") == (clear or [""])
    assert ("uploads its user_embedding in the clear" in caplog.text) == bool(clear)
