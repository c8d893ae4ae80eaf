"""The user context (``fedrun/method/context.py``): every backbone option names one, a method's scores go through
it the same way for the whole catalogue and for pairs, a graph ranks only once prepared, and the statistics a
server program may be handed are named ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedrun.app.build import build
from fedrun.backbone.base import Backbone
from fedrun.core.paths import config_dir
from fedrun.data.statistics import server_statistics
from fedrun.method.context import CONTEXTS, GraphContext, IdContext, SequenceContext
from tests.conftest import SMALL, compose_cfg, make_method, round_of

BACKBONES = sorted(str(p.relative_to(Path(config_dir()) / "backbone").with_suffix(""))
                   for p in (Path(config_dir()) / "backbone").rglob("*.yaml"))


@pytest.mark.parametrize("option", BACKBONES)
def test_every_backbone_option_chooses_a_context(option):
    backbone = build(compose_cfg(SMALL + [f"backbone={option}"]).backbone, "backbone", Backbone)
    assert backbone.user_context in CONTEXTS


@pytest.mark.parametrize("overrides,context", [
    (["method=fedavg", "backbone=mf"], IdContext),
    (["method=fedcl", "backbone=gru4rec", "privacy=none"], SequenceContext),
    (["method=fedgnn", "backbone=lightgcn", "privacy=none"], GraphContext),
], ids=["ids", "sequence", "graph"])
def test_pair_scores_are_the_catalogue_scores_the_context_gives(overrides, context):
    method, env = make_method(overrides)
    assert type(method.client.context) is context
    round_of(method).train_round(0)
    users = torch.tensor([0, 3, 3, 7])
    items = torch.tensor([1, 2, 5, 9])
    history = [env.train]
    full = method.score_users(users, history)  # [4, I]
    pairs = method.score_pairs(users, items, history)  # [4]
    torch.testing.assert_close(pairs, full[torch.arange(4), items], rtol=1e-5, atol=1e-6)


def test_a_graph_ranks_only_after_it_was_prepared():
    method, _ = make_method(["method=fedgnn", "backbone=lightgcn", "privacy=none"])
    with pytest.raises(RuntimeError, match="prepare"):
        method.client.context.queries(method.client.private.user, torch.tensor([0]), (), method.public)
    method.ensure_prepared()
    assert method.client.context.queries(method.client.private.user, torch.tensor([0]), (), method.public).shape[0] == 1


def test_a_sequence_trains_on_its_last_items_and_reads_the_whole_history():
    method, env = make_method(["method=fedcl", "backbone=gru4rec", "privacy=none", "backbone.max_len=3"])
    context = method.client.context
    assert context.history_limit == 3 and context.per_position and not context.per_example
    users = env.clients_with_data()[:4]
    truncated = env.train.client_batch(users, 3)
    assert int(truncated.pos_mask.sum(1).max()) <= 3
    assert torch.equal(context.untruncated(truncated).pos_mask.sum(1), env.train.sizes(users))


def test_server_statistics_are_named_and_unknown_ones_refused():
    _, env = make_method(["method=fedavg", "backbone=mf"])
    (popularity,) = server_statistics(frozenset({"item_popularity"}), env.split, env.n_items).values()
    assert popularity.shape == (env.n_items,) and int(popularity.sum()) == len(env.split.train)
    with pytest.raises(ValueError, match="unknown server statistics \\['user_ages'\\]"):
        server_statistics(frozenset({"user_ages"}), env.split, env.n_items)
