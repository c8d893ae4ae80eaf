"""One experiment over several processes (fedrun.sim.distributed): the deal of buckets to ranks, the capability
that lets a method's client step run on another rank, and the refusals before training."""

from __future__ import annotations

import gc
import types

import pytest
import torch

from fedrun.errors import ConfigError
from fedrun.method.client import Client
from fedrun.sim.distributed import World, check_shardable
from tests.conftest import make_method, round_of
from tests.test_privacy_boundary import SETTINGS, federated_options


def test_the_deal_is_a_pure_function_of_the_sizes_and_balances_them():
    sizes = [900, 50, 400, 400, 300, 100, 20, 700]
    for size in (1, 2, 3, 4, 8, 16):
        owners = World(0, size).owners(sizes)
        assert owners == World(size - 1, size).owners(sizes)  # every rank computes the same deal
        load = [sum(s for s, o in zip(sizes, owners) if o == r) for r in range(size)]
        assert max(load) <= max(max(sizes), sum(sizes) / size + max(sizes))  # greedy: within one bucket of even
        assert set(owners) == set(range(min(size, len(sizes))))  # no rank idle while another holds two buckets
    assert World(0, 1).owners(sizes) == [0] * len(sizes)


def state_of(client: Client) -> dict[str, object]:
    """Every tensor and scalar reachable from the client program (its env's data, its view of the server too)."""
    seen, todo, state = set(), [client], {}
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (types.ModuleType, type, types.FunctionType)):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            dense = obj if obj.layout == torch.strided else obj.values()  # a sparse graph: its stored values
            state[f"tensor {id(obj)}"] = dense.detach().clone()
            continue
        if hasattr(obj, "__dict__"):
            for name, value in vars(obj).items():
                if isinstance(value, (int, float, bool, str)) or value is None:
                    state[f"{id(obj)}.{name}"] = value
        todo.extend(gc.get_referents(obj))
    return state


@pytest.mark.parametrize("option", federated_options())
def test_a_client_step_keeps_nothing_beside_its_result_unless_it_says_why(option):
    """What lets a rank step a bucket for the others: the step's only effect is the ``ClientResult`` every rank
    then receives. A client program whose step changes anything else declares ``unshardable`` (and a sharded run
    refuses it), and one that declares it really does keep something (the declaration is not stale)."""
    method, _ = make_method([f"method={option}", *SETTINGS.get(option, []), "sim.fast_path=off"])
    rounds = round_of(method)
    rounds.train_round(0)
    if rounds.uses_fast_path:  # its only path is one pass over the round (FCF): no step per bucket to deal
        assert method.client.unshardable is not None
        return
    users = method.round_users(rounds.sampler, 1)
    problems = method.client.problems(users, 1, method.exchange(users, 1, rounds.privacy).sent)
    before = state_of(method.client)
    for problem in problems:
        method.client.step(problem)
    after = state_of(method.client)
    changed = sorted(key for key in before if key in after and not (
        torch.equal(before[key], after[key]) if isinstance(before[key], torch.Tensor) else before[key] == after[key]))
    assert bool(changed) == (method.client.unshardable is not None), (option, changed[:5])


def test_a_share_pickles_its_own_rows_not_the_rounds_whole_buffer():
    import pickle

    from fedrun.core.world import own_storage

    buffer = torch.randn(1000, 8)  # the round's upload rows; one bucket's are a slice of it
    part = buffer[100:110]
    sent = own_storage(part)
    assert torch.equal(sent, part) and sent.untyped_storage().nbytes() == part.numel() * part.element_size()
    assert len(pickle.dumps(sent)) * 10 < len(pickle.dumps(part))
    whole = torch.randn(10, 8)
    assert own_storage(whole) is whole  # nothing copied where nothing is shared


def test_a_sharded_run_refuses_what_it_cannot_deal():
    method, _ = make_method(["sim.clients_per_round=4"])
    with pytest.raises(ConfigError, match=r"WORLD_SIZE=8 is not allowed: expected at most the 4 clients of a round"):
        check_shardable(method, World(0, 8), 4)
    check_shardable(method, World(0, 4), 4)
    method.client.unshardable = "it keeps a local model"
    with pytest.raises(ConfigError, match="cannot deal its client steps over ranks: it keeps a local model"):
        check_shardable(method, World(0, 2), 4)


def test_nccl_without_a_gpu_per_rank_is_refused_before_joining(monkeypatch):
    from fedrun.sim.distributed import world_from_env

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ConfigError, match=r"sim.device='cuda' is not allowed: expected cpu: NCCL needs a GPU per rank"):
        world_from_env("cuda")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not world_from_env("cuda").sharded  # one process: no process group, the device check is plan's
