"""Sequential backbones (GRU4Rec, BERT4Rec): equal to torch's reference layers, per-client weight
copies equal to one client at a time, histories, the Cloze draw, FedCL's per-position Eq. 1
against a direct per-client computation, and the methods that refuse them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedrun.backbone.bert4rec import BERT4Rec
from fedrun.backbone.config import BERT4RecConfig, SequentialConfig
from fedrun.backbone.gru4rec import GRU4Rec
from fedrun.backbone.sequential import SequenceView, layer_norm
from fedrun.data.client_store import ClientStore, recent_history
from fedrun.data.interactions import Interactions
from fedrun.errors import ConfigError
from tests.conftest import CPU_ORACLE, make_method, round_of

SEQ = ["sim.clients_per_round=8", "backbone.max_len=6", "backbone.dropout=0.0"]


def shared_net(backbone, seed=0):
    return backbone.init_net(torch.Generator().manual_seed(seed))


def per_client(net, B, seed=1):
    """B different copies of every weight: [B, *shape]."""
    gen = torch.Generator().manual_seed(seed)
    return {k: v.unsqueeze(0) + 0.1 * torch.randn(B, *v.shape, generator=gen) for k, v in net.items()}


def sequences(B=4, L=7, d=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randn(B, L, d, generator=gen)
    lengths = torch.tensor([L, 3, 5, 1][:B])
    mask = torch.arange(L)[None, :] < lengths[:, None]
    return rows, mask


def test_gru_equals_torch_gru():
    backbone = GRU4Rec(SequentialConfig(dim=16))
    net = shared_net(backbone)
    rows, _ = sequences()
    gru = torch.nn.GRU(16, 16, batch_first=True)
    with torch.no_grad():
        gru.weight_ih_l0.copy_(net["gru.w_ih"])
        gru.weight_hh_l0.copy_(net["gru.w_hh"])
        gru.bias_ih_l0.copy_(net["gru.b_ih"])
        gru.bias_hh_l0.copy_(net["gru.b_hh"])
    expected, _ = gru(rows)
    torch.testing.assert_close(backbone.hidden_states(rows, net), expected, rtol=1e-5, atol=1e-6)  # fused
    copies = {k: v.unsqueeze(0).repeat(rows.shape[0], *[1] * v.dim()) for k, v in net.items()}  # the step loop
    torch.testing.assert_close(backbone.hidden_states(rows, copies), expected, rtol=1e-5, atol=1e-6)


def test_fused_gru_gradients_equal_the_step_loop_with_dropout():
    """Shared weights run torch's fused GRU, per-client copies the step loop: same values and
    gradients, dropout masks included (drawn from the same generator in the same order)."""
    backbone = GRU4Rec(SequentialConfig(dim=16, dropout=0.3))
    net = shared_net(backbone)
    rows, _ = sequences()
    B = rows.shape[0]
    shared = {k: v.clone().requires_grad_(True) for k, v in net.items()}
    copies = {k: v.unsqueeze(0).repeat(B, *[1] * v.dim()).requires_grad_(True) for k, v in net.items()}
    outputs = []
    for weights in (shared, copies):
        states = backbone.hidden_states(rows, weights, torch.Generator().manual_seed(3))
        (states * torch.linspace(-1, 1, states.numel()).view_as(states)).sum().backward()
        outputs.append(states)
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)
    for name in ("gru.w_ih", "gru.w_hh", "gru.b_ih", "gru.b_hh"):
        torch.testing.assert_close(shared[name].grad, copies[name].grad.sum(0), rtol=1e-4, atol=1e-5)


def test_bert_block_equals_torch_transformer_layer():
    cfg = BERT4RecConfig(dim=16, n_layers=1, n_heads=2, max_len=8, dropout=0.0)
    backbone = BERT4Rec(cfg)
    net = shared_net(backbone)
    rows, mask = sequences()
    layer = torch.nn.TransformerEncoderLayer(16, 2, 64, dropout=0.0, activation="gelu", batch_first=True,
                                             layer_norm_eps=1e-12, norm_first=False)
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(net["l0.qkv.weight"])
        layer.self_attn.in_proj_bias.copy_(net["l0.qkv.bias"])
        layer.self_attn.out_proj.weight.copy_(net["l0.proj.weight"])
        layer.self_attn.out_proj.bias.copy_(net["l0.proj.bias"])
        for mine, theirs in (("ff1", layer.linear1), ("ff2", layer.linear2), ("ln1", layer.norm1),
                             ("ln2", layer.norm2)):
            theirs.weight.copy_(net[f"l0.{mine}.weight"])
            theirs.bias.copy_(net[f"l0.{mine}.bias"])
    layer.eval()
    x0 = layer_norm(rows + net["position"][:7], net["emb_ln.weight"], net["emb_ln.bias"])
    with torch.no_grad():
        blocks = layer(x0, src_key_padding_mask=~mask)
    expected = F.gelu(F.linear(blocks, net["head.weight"], net["head.bias"]))
    got = backbone.encode(rows, mask, SequenceView(mask, None), net)
    torch.testing.assert_close(got[mask], expected[mask], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["gru4rec", "bert4rec"])
def test_per_client_weights_equal_one_client_at_a_time(kind):
    backbone = GRU4Rec(SequentialConfig(dim=16)) if kind == "gru4rec" else \
        BERT4Rec(BERT4RecConfig(dim=16, max_len=8, dropout=0.0))
    rows, mask = sequences()
    corrupt = mask & (torch.arange(7) % 3 == 1)
    view = SequenceView(mask, corrupt if kind == "bert4rec" else None)
    nets = per_client(shared_net(backbone), rows.shape[0])
    batched = backbone.encode(rows, mask, view, nets)
    for b in range(rows.shape[0]):
        own = {k: v[b] for k, v in nets.items()}
        alone = backbone.encode(rows[b:b + 1], mask[b:b + 1], SequenceView(
            view.target[b:b + 1], None if view.corrupt is None else view.corrupt[b:b + 1]), own)
        torch.testing.assert_close(batched[b][mask[b]], alone[0][mask[b]], rtol=1e-4, atol=1e-5)


def test_gru_infer_is_the_query_for_the_next_position():
    backbone = GRU4Rec(SequentialConfig(dim=16))
    net = shared_net(backbone)
    rows, mask = sequences()
    queries = backbone.encode(rows, mask, SequenceView(mask, None), net)  # query for item t from items < t
    lengths = mask.sum(1)
    for b in range(rows.shape[0]):
        t = int(lengths[b])
        if t < rows.shape[1]:
            inferred = backbone.infer(rows[b:b + 1, :t], mask[b:b + 1, :t], net)
            torch.testing.assert_close(inferred[0], queries[b, t], rtol=1e-5, atol=1e-6)


def test_bert_infer_ignores_padding_and_other_users():
    backbone = BERT4Rec(BERT4RecConfig(dim=16, max_len=8, dropout=0.0))
    net = shared_net(backbone)
    rows, mask = sequences()
    together = backbone.infer(rows, mask, net)
    for b in range(rows.shape[0]):
        n = int(mask[b].sum())
        alone = backbone.infer(rows[b:b + 1, :n], mask[b:b + 1, :n], net)
        torch.testing.assert_close(together[b], alone[0], rtol=1e-4, atol=1e-5)


def test_cloze_draw_is_per_user_and_position_with_at_least_one_mask():
    backbone = BERT4Rec(BERT4RecConfig(dim=16, max_len=200, mask_prob=0.2))
    users = torch.arange(500)
    mask = torch.ones(500, 200, dtype=torch.bool)
    mask[1::2, 1:] = False  # every other user has a single item
    view = backbone.train_view(users, mask, seed=3)
    assert view.corrupt.any(1).all()  # at least one target per client
    assert not (view.corrupt & ~mask).any()
    assert abs(float(view.corrupt[::2].float().mean()) - 0.2) < 0.01
    alone = backbone.train_view(users[4:5], mask[4:5], seed=3)  # the draw does not depend on the batch
    assert torch.equal(alone.corrupt[0], view.corrupt[4])
    assert not torch.equal(backbone.train_view(users, mask, seed=4).corrupt, view.corrupt)


def test_recent_history_concatenates_stores_and_keeps_the_last_items():
    train = Interactions(np.array([0, 0, 0, 1, 2, 2]), np.array([5, 6, 7, 1, 2, 3]), 3, 10,
                         order=np.array([0, 1, 2, 0, 0, 1]))
    valid = Interactions(np.array([0, 1]), np.array([8, 9]), 3, 10, order=np.array([3, 1]))
    stores = [ClientStore.from_interactions(train), ClientStore.from_interactions(valid)]
    items, mask = recent_history(stores, torch.arange(3), 3)
    got = [items[u][mask[u]].tolist() for u in range(3)]
    assert got == [[6, 7, 8], [1, 9], [2, 3]]
    items, mask = recent_history(stores[:1], torch.tensor([2, 0]), 2)
    assert [items[u][mask[u]].tolist() for u in range(2)] == [[2, 3], [6, 7]]


def direct_sequence_loss(method, problem, b, net, semi_items, past_only=False):
    """Eq. 1 for client b from item ids: one client alone, position by position."""
    backbone, item = method.env.backbone, method.public.item
    batch = problem.batch
    n = int(batch.pos_mask[b].sum())
    seq = batch.pos[b, :n]
    view = SequenceView(problem.sequence.target[b:b + 1, :n],
                        None if problem.sequence.corrupt is None else problem.sequence.corrupt[b:b + 1, :n])
    queries = backbone.encode(item[seq][None], torch.ones(1, n, dtype=torch.bool), view, net)[0]  # [n, d]
    local = problem.items[b][problem.neg_slot[b]].tolist()  # [P][n] each position's local negatives, as item ids
    own = set(seq.tolist())
    semi = [i for i in semi_items if i not in own]
    total, count = 0.0, 0
    for j in range(n):
        if not view.target[0, j]:
            continue
        others = [int(seq[k]) for k in range(j if past_only else n) if int(seq[k]) != int(seq[j])]
        candidates = [int(seq[j]), *local[j], *semi, *others]
        scores = item[torch.tensor(candidates)] @ queries[j]
        total, count = total + (torch.logsumexp(scores, 0) - scores[0]), count + 1
    return total / max(count, 1)


@pytest.mark.parametrize("scope", ["all", "past"])
@pytest.mark.parametrize("backbone", ["gru4rec", "bert4rec"])
def test_sequence_mixup_loss_equals_a_direct_per_client_computation(backbone, scope):
    method, env = make_method(["method=fedcl", f"backbone={backbone}", "privacy=ldp", "method.n_clusters=3",
                               "method.semi_hard=5", f"method.in_batch_scope={scope}", *SEQ, CPU_ORACLE])
    assert method.client.in_batch
    users = round_of(method).sampler.users(0)
    server = method.hard_server
    server.receive(method.client.upload_embeddings(users, 0, round_of(method).privacy), 0)
    hard = server.negatives(users, method.public, 0)
    hard_of = {int(u): hard[b].tolist() for b, u in enumerate(users)}
    checked = 0
    for problem in method.client.problems(users, 0, hard):
        losses = method.client.local_loss(problem, method.client.private.user[problem.batch.users],
                                   method.public.item[problem.items], method.public.net)
        for b in range(problem.batch.size):
            expected = direct_sequence_loss(method, problem, b, method.public.net,
                                            hard_of[int(problem.batch.users[b])], past_only=scope == "past")
            assert float(losses[b]) == pytest.approx(float(expected), rel=1e-4)
            checked += 1
    assert checked == users.numel()


def test_sequences_train_on_their_last_max_len_items():
    method, env = make_method(["method=fedcl", "backbone=gru4rec", "method.semi_hard=0", "privacy=none", *SEQ])
    users = round_of(method).sampler.users(0)
    for problem in method.client.problems(users, 0):
        batch = problem.batch
        assert batch.pos.shape[1] <= 6
        for b in range(batch.size):
            full, full_mask, _ = env.train.gather(batch.users[b:b + 1])
            assert batch.pos[b][batch.pos_mask[b]].tolist() == full[0][full_mask[0]].tolist()[-6:]


@pytest.mark.parametrize("method", ["fedcl", "bil", "central"])
@pytest.mark.parametrize("backbone", ["gru4rec", "bert4rec"])
def test_sequential_methods_learn_on_synthetic_data(method, backbone):
    extra = ["method.n_clusters=3"] if method == "fedcl" else []
    trainer, env = make_method([f"method={method}", f"backbone={backbone}", *SEQ, *extra])
    rounds = 3 if method == "central" else 30
    losses = [round_of(trainer).train_round(r).loss for r in range(rounds)]
    assert np.isfinite(losses).all()
    assert np.mean(losses[-2:]) < np.mean(losses[:2])
    scores = trainer.score_users(torch.arange(5), [env.train])
    assert scores.shape == (5, env.n_items) and torch.isfinite(scores).all()


def test_test_time_history_includes_the_validation_item():
    method, env = make_method(["method=central", "backbone=gru4rec", *SEQ])
    users = torch.arange(10)
    valid = ClientStore.from_interactions(env.split.valid)
    with_valid = method.score_users(users, [env.train, valid])
    assert not torch.allclose(with_valid, method.score_users(users, [env.train]))


@pytest.mark.parametrize("overrides,field", [
    (["method=fedavg", "backbone=gru4rec"], "backbone"),
    (["method=fedcl", "backbone=bert4rec", "backbone.n_heads=3"], "backbone.n_heads"),
    (["method=fedcl", "backbone=gru4rec", "backbone.max_len=1"], "backbone.max_len"),
    (["method=fedcl", "backbone=bert4rec", "backbone.mask_prob=0"], "backbone.mask_prob"),
    (["method=fedcl", "backbone=gru4rec", "backbone.loss=mse"], "backbone.loss"),
])
def test_bad_sequential_settings_are_named(overrides, field):
    with pytest.raises(ConfigError) as err:
        make_method(overrides)
    assert err.value.field == field


def test_dropout_is_seeded_and_off_without_a_generator():
    backbone = GRU4Rec(SequentialConfig(dim=16, dropout=0.5))
    net = shared_net(backbone)
    rows, mask = sequences()
    run = [backbone.encode(rows, mask, SequenceView(mask, None, torch.Generator().manual_seed(s)), net)
           for s in (1, 1, 2)]
    assert torch.equal(run[0], run[1]) and not torch.equal(run[0], run[2])
    no_dropout = GRU4Rec(SequentialConfig(dim=16, dropout=0.0))  # inference (no generator) drops nothing
    assert torch.equal(backbone.encode(rows, mask, SequenceView(mask, None), net),
                       no_dropout.encode(rows, mask, SequenceView(mask, None), net))


@pytest.mark.parametrize("method,backbone", [("fedcl", "mf"), ("fedcl", "gru4rec"), ("central", "bert4rec")])
def test_pair_scores_agree_with_full_scores(method, backbone):
    """Sampled evaluation (score_pairs, each distinct user's query formed once) and full ranking
    (score_users) score a (user, item) pair the same, ID-based or sequential."""
    overrides = [f"method={method}", f"backbone={backbone}", "sim.clients_per_round=8"]
    overrides += SEQ if backbone != "mf" else []
    overrides += ["method.n_clusters=3"] if method == "fedcl" else []
    trainer, env = make_method(overrides)
    round_of(trainer).train_round(0)
    history = [env.train]
    users = torch.tensor([3, 1, 3, 7, 1, 0])
    items = torch.tensor([5, 2, 9, 0, 2, 11])
    full = trainer.score_users(torch.arange(8), history)
    torch.testing.assert_close(trainer.score_pairs(users, items, history), full[users, items], rtol=1e-5, atol=1e-6)
