"""LightGCN: the global propagation, the clients' ego graphs, federated rounds against the loop oracle."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedrun.backbone import lightgcn
from fedrun.backbone.lightgcn import BipartiteGraph, GraphProduct, propagate_edges
from fedrun.data.client_store import ClientStore
from fedrun.errors import ConfigError
from fedrun.kernels.ego import EgoGraphs, NeighborDirectory
from fedrun.testing.ego_loop import ego_fedavg_round
from fedrun.types import EmbeddingUploads, ItemIdUploads
from tests.conftest import CPU_ORACLE, make_method, round_of


def random_graph(n_users=14, n_items=18, density=0.3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    interactions = torch.rand(n_users, n_items, generator=gen) < density
    interactions[torch.arange(n_users), torch.arange(n_users) % n_items] = True  # every user holds an item
    users, items = interactions.nonzero(as_tuple=True)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(users, minlength=n_users).cumsum(0)])
    return interactions, ClientStore(indptr, items, None, n_items)


def dense_lightgcn(interactions, user, item, layers):
    """LightGCN written out: Â = D^-½ A D^-½ over [users; items], layer mean of Â^k E."""
    U, n_items = interactions.shape
    adjacency = torch.zeros(U + n_items, U + n_items)
    adjacency[:U, U:], adjacency[U:, :U] = interactions.float(), interactions.T.float()
    degree = adjacency.sum(1).clamp_min(1)
    norm = adjacency / degree.sqrt()[:, None] / degree.sqrt()[None, :]
    x = out = torch.cat([user, item])
    for _ in range(layers):
        x = norm @ x
        out = out + x
    out = out / (layers + 1)
    return out[:U], out[U:]


def directory_of(interactions, store, shared):
    users, items = interactions.nonzero(as_tuple=True)
    return NeighborDirectory(ItemIdUploads(users, items), store.n_users, store.n_items,
                             EmbeddingUploads(torch.arange(store.n_users), shared))


@pytest.mark.parametrize("layers", [0, 1, 2, 3])
def test_sparse_propagation_equals_dense_lightgcn(layers):
    interactions, store = random_graph()
    user, item = torch.randn(store.n_users, 5), torch.randn(store.n_items, 5)
    got_user, got_item = BipartiteGraph.from_store(store).propagate(user, item, layers)
    want_user, want_item = dense_lightgcn(interactions, user, item, layers)
    torch.testing.assert_close(got_user, want_user, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_item, want_item, rtol=1e-5, atol=1e-6)


def test_edge_list_propagation_equals_sparse_and_is_differentiable():
    interactions, store = random_graph()
    graph = BipartiteGraph.from_store(store)
    user = torch.randn(store.n_users, 4, requires_grad=True)
    item = torch.randn(store.n_items, 4, requires_grad=True)
    users, items = interactions.nonzero(as_tuple=True)
    w = (graph.user_degree[users] * graph.item_degree[items]).float().rsqrt()
    src = torch.cat([users, store.n_users + items])
    dst = torch.cat([store.n_users + items, users])
    out = propagate_edges(torch.cat([user, item]), src, dst, torch.cat([w, w]), 3)
    want_user, want_item = graph.propagate(user, item, 3)
    torch.testing.assert_close(out[:store.n_users], want_user)
    (out.sum() - want_user.sum() - want_item.sum()).backward()
    assert user.grad.abs().max() < 1e-5 and item.grad.abs().max() < 1e-5


def segment_sums_and_products(dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(output, input gradient) of 3 propagation layers over a random edge list with duplicates, edges in no
    particular order and a perturbation between layers: by one-thread segment sums, by the CPU's default CSR
    products, and by a caller's own ``EdgeOperator`` (as ego graphs keep it)."""
    gen = torch.Generator().manual_seed(3)
    n_nodes, n_edges, d = 300, 4000, 16
    src = torch.randint(0, n_nodes, (n_edges,), generator=gen)
    dst = torch.randint(0, n_nodes, (n_edges,), generator=gen)
    src, dst = torch.cat([src, src[:50]]), torch.cat([dst, dst[:50]])  # 50 duplicate edges
    weight = torch.rand(src.numel(), generator=gen)  # float32, as ego graphs keep it
    upstream = torch.randn(n_nodes, d, generator=gen, dtype=dtype)

    def run(operator):
        x0 = torch.randn(n_nodes, d, generator=torch.Generator().manual_seed(4), dtype=dtype, requires_grad=True)
        out = propagate_edges(x0, src, dst, weight, 3, lambda k, x: x * (1 + k / 10), operator)
        (out * upstream).sum().backward()
        return out.detach(), x0.grad

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        segment_sums = run(lightgcn.SegmentSums(src, dst, weight))
    finally:
        torch.set_num_threads(threads)
    kept = lightgcn.EdgeOperator.build(src, dst, weight.to(dtype), n_nodes)
    return [segment_sums, run(None), run(kept)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_edge_operator_gives_the_segment_sums_forward_and_backward(dtype):
    """The CSR products (CPU) compute what the segment sums over the edge list compute, forward and backward,
    on any CPU: equal to rounding (the order in which MKL adds a row's products depends on its code path)."""
    (want, want_grad), *products = segment_sums_and_products(dtype)
    for got, got_grad in products:
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_grad, want_grad)


def test_edge_operator_gives_the_segment_sums_bits_where_mkl_adds_in_stored_order():
    """Each CSR row keeps its in-edges in edge order, so a kernel that walks a row in stored order adds exactly
    what ``index_add`` over the edge list adds on one thread: the same bits. MKL's reference path does
    (``MKL_CBWR=COMPATIBLE``, set here in a child process, since MKL reads it once at start), and so did the
    default path of the machines that recorded W13. MKL's vectorised path on this session's Intel Xeon (AVX-512)
    adds in another order: two thirds of the entries differ in their last bits (float32: relative 8e-5 at most,
    where terms cancel; float64: 4e-13), which the test above allows."""
    check = ("import torch; from tests.test_lightgcn import segment_sums_and_products as run\n"
             "for dtype in (torch.float32, torch.float64):\n"
             "    (want, want_grad), *products = run(dtype)\n"
             "    assert all(torch.equal(a, want) and torch.equal(b, want_grad) for a, b in products), dtype\n")
    env = {**os.environ, "MKL_CBWR": "COMPATIBLE"}
    child = subprocess.run([sys.executable, "-c", check], cwd=Path(__file__).parents[1], env=env,
                           capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-2000:]


def test_graph_product_gradient_equals_autograds_bit_for_bit():
    """The hand-written backward (the prebuilt transpose) gives autograd's numbers exactly, on CPU."""
    _, store = random_graph()
    graph = BipartiteGraph.from_store(store)
    item = torch.randn(store.n_items, 6, requires_grad=True)
    weight = torch.randn(store.n_users, 6)
    grads = []
    products = (lambda: torch.sparse.mm(graph.norm, item), lambda: GraphProduct.apply(graph.norm, graph.norm_t, item))
    for product in products:
        item.grad = None
        out = product()  # [U, 6]
        (out * weight).sum().backward()
        grads.append((out.detach(), item.grad.clone()))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])
    assert grads[1][1].abs().sum() > 0


def client_tables(store, clients, extra_items=None):
    """The clients' local tables: their training items (linked) plus ``extra_items`` [B, n] (not linked)."""
    pos, mask, _ = store.gather(clients)
    if extra_items is None:
        return pos, mask, mask.clone()
    items = torch.cat([pos, extra_items], 1)
    item_mask = torch.cat([mask, torch.ones_like(extra_items, dtype=torch.bool)], 1)
    linked = torch.cat([mask, torch.zeros_like(extra_items, dtype=torch.bool)], 1)
    return items, item_mask, linked


@pytest.mark.parametrize("layers", [1, 2])
def test_ego_graph_holds_the_clients_two_hop_neighbourhood(layers):
    """With every neighbour sent, a client's representation after K ≤ 2 layers and its items' after
    K = 1 equal the global LightGCN's: its ego graph holds its whole 2-hop neighbourhood."""
    interactions, store = random_graph()
    user, item = torch.randn(store.n_users, 6), torch.randn(store.n_items, 6)
    want_user, want_item = dense_lightgcn(interactions, user, item, layers)
    clients = torch.tensor([2, 5, 11])
    items, item_mask, linked = client_tables(store, clients)
    ego = EgoGraphs.build(directory_of(interactions, store, user), clients, items, item_mask, linked, 0, 0)
    got_user, got_item = ego.propagate(user[clients], item[items], layers)
    torch.testing.assert_close(got_user, want_user[clients], rtol=1e-5, atol=1e-6)
    if layers == 1:
        torch.testing.assert_close(got_item[item_mask], want_item[items[item_mask]], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cap", [0, 2])
def test_a_buckets_ego_graphs_equal_each_clients_own(cap):
    """Block-diagonal: a client's representations do not depend on the bucket it trains in (the
    neighbour draws are keyed by client, item and draw)."""
    interactions, store = random_graph(n_users=20, n_items=12, density=0.5)
    user, item = torch.randn(store.n_users, 4), torch.randn(store.n_items, 4)
    directory = directory_of(interactions, store, torch.randn(store.n_users, 4))
    clients = torch.tensor([0, 3, 7, 19])
    negatives = torch.tensor([[1, 4], [2, 9], [11, 0], [5, 6]])
    items, item_mask, linked = client_tables(store, clients, negatives)
    ego = EgoGraphs.build(directory, clients, items, item_mask, linked, cap, seed=7)
    bucket_user, bucket_item = ego.propagate(user[clients], item[items], 3)
    for b in range(clients.numel()):
        one = EgoGraphs.build(directory, clients[b:b + 1], items[b:b + 1], item_mask[b:b + 1], linked[b:b + 1],
                              cap, seed=7)
        alone_user, alone_item = one.propagate(user[clients[b:b + 1]], item[items[b:b + 1]], 3)
        torch.testing.assert_close(bucket_user[b:b + 1], alone_user)
        torch.testing.assert_close(bucket_item[b:b + 1][item_mask[b:b + 1]], alone_item[item_mask[b:b + 1]])


def test_ego_download_counts_each_neighbour_row_once_and_every_answered_edge():
    """What the directory sends a client, counted by hand: every other holder of each item of its table is an edge
    of 8 bytes (index, degree), each distinct neighbour's 4-float row comes once; ``neighbors = 2`` sends less."""
    interactions, store = random_graph(n_users=20, n_items=12, density=0.5)
    directory = directory_of(interactions, store, torch.randn(store.n_users, 4))
    clients = torch.tensor([0, 3, 7, 19])
    items, item_mask, linked = client_tables(store, clients, torch.tensor([[1, 4], [2, 9], [11, 0], [5, 6]]))
    every = EgoGraphs.build(directory, clients, items, item_mask, linked, 0, seed=7).download_bytes()
    for b, user in enumerate(clients.tolist()):
        held = items[b][item_mask[b]].tolist()
        answered = [(v, i) for i in held for v in interactions[:, i].nonzero().flatten().tolist() if v != user]
        assert every[b] == len({v for v, _ in answered}) * 4 * 4 + len(answered) * 8
    sampled = EgoGraphs.build(directory, clients, items, item_mask, linked, 2, seed=7).download_bytes()
    assert bool((sampled < every).all())


def test_sampled_neighbours_are_an_unbiased_estimate():
    """``neighbors = n``: n draws per item weighted d_i / n — over many seeds the mean of an item's
    layer-1 neighbour sum equals the full sum (the client's own draws dropped)."""
    interactions, store = random_graph(n_users=40, n_items=6, density=0.6)
    # seeded: with the global generator the data, and so the test, depended on which tests ran before it
    shared = torch.randn(store.n_users, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    directory = directory_of(interactions, store, shared)
    client = torch.tensor([0])
    items = torch.tensor([[0, 1, 2]])
    mask = torch.ones_like(items, dtype=torch.bool)
    linked = torch.zeros_like(mask)
    x_item = torch.zeros(1, 3, 3, dtype=torch.float64)
    exact = EgoGraphs.build(directory, client, items, mask, linked, 0, 0).propagate(
        torch.zeros(1, 3, dtype=torch.float64), x_item, 1)[1]
    draws = torch.stack([EgoGraphs.build(directory, client, items, mask, linked, 4, seed).propagate(
        torch.zeros(1, 3, dtype=torch.float64), x_item, 1)[1] for seed in range(3000)])
    assert (interactions[:, :3].sum(0) > 4).all()  # the cap binds on every item
    torch.testing.assert_close(draws.mean(0), exact, atol=0.03, rtol=0.05)


GRAPH = ["backbone=lightgcn", "backbone.dim=8", "backbone.layers=2", "backbone.l2=0.01", "sim.buckets=3",
         "sim.min_bucket_clients=1", "method.optimizer.lr=0.5"]
LIGHTGCN = ["method=fedavg", "method.loss_reduction=mean", "method.optimizer.user_lr=null", *GRAPH]  # the oracle's


@pytest.mark.parametrize("neighbors", [0, 1])
def test_a_graph_rounds_download_counts_the_neighbours_beside_the_model(neighbors):
    """A FedGNN round's bytes down per client: the model's rows (as for MF) plus what the directory answered its ego
    graph; the fewer neighbours sent, the less."""
    method, _ = make_method(["method=fedgnn", "privacy=none", f"backbone.neighbors={neighbors}", *GRAPH])
    rounds = round_of(method)
    users = rounds.sampler.users(0)
    method.exchange(users, 0, rounds.privacy)
    problems = method.client.problems(users, 0)
    rows = torch.cat([p.item_mask.sum(1) for p in problems])
    fetched = torch.cat([p.context_bytes_down() for p in problems])
    assert bool((fetched > 0).all())
    stats = rounds.train_round(0)
    assert stats.bytes_down == pytest.approx(method.download_bytes(rows) + float(fetched.mean()))


def test_vectorized_ego_rounds_match_the_per_client_loop():
    """Each round the oracle starts from the simulator's state (user rows, item rows, the rows the
    neighbours last shared) and both must end equal."""
    torch.set_default_dtype(torch.float64)
    try:
        method, env = make_method(LIGHTGCN + [CPU_ORACLE])
        rounds = round_of(method)
        store = env.train
        n_users, n_items = env.n_users, env.n_items
        interactions = torch.zeros(n_users, n_items, dtype=torch.bool)
        owner, _, items, _ = store.flat(torch.arange(n_users))
        interactions[owner, items] = True
        shared = method.client.private.user.clone()  # registration: every client shares its initial row
        start = method.public.item.clone()
        for r in range(3):
            users = rounds.sampler.users(r)
            shared[users] = method.client.private.user[users]  # the round's clients refresh first
            user_table, item_table = method.client.private.user.clone(), method.public.item.clone()
            method.exchange(users, r, rounds.privacy)  # (train_round repeats it: the same rows again)
            problems = method.client.problems(users, r)
            clients = []
            for problem in problems:
                batch = problem.batch
                for b in range(batch.size):
                    mask = batch.pos_mask[b]
                    negatives = problem.items[b][problem.neg_slot[b][mask]]
                    clients.append((int(batch.users[b]), batch.pos[b][mask], negatives))
            ego_fedavg_round(2, 0.01, user_table, shared, item_table, clients, interactions, lr=0.5)
            rounds.train_round(r)
            torch.testing.assert_close(method.public.item, item_table, rtol=1e-8, atol=1e-10)
            torch.testing.assert_close(method.client.private.user, user_table, rtol=1e-8, atol=1e-10)
        assert (method.public.item - start).abs().max() > 1e-3
    finally:
        torch.set_default_dtype(torch.float32)


def test_federated_lightgcn_ranks_with_the_union_graph():
    method, env = make_method(LIGHTGCN + [CPU_ORACLE])
    round_of(method).train_round(0)
    users = torch.arange(5)
    user, item = BipartiteGraph.from_store(env.train).propagate(method.client.private.user, method.public.item, 2)
    torch.testing.assert_close(method.score_users(users), user[users] @ item.T)
    torch.testing.assert_close(method.score_pairs(users, users), (user[users] * item[users]).sum(1))


def test_federated_lightgcn_resumes_with_the_directory():
    first, _ = make_method(LIGHTGCN)
    for r in range(2):
        round_of(first).train_round(r)
    state = first.state_dict()
    second, _ = make_method(LIGHTGCN)
    for r in range(2):
        round_of(second).train_round(r)
    resumed, _ = make_method(LIGHTGCN)
    resumed.load_state_dict(state)
    round_of(resumed).train_round(2)
    round_of(second).train_round(2)
    torch.testing.assert_close(resumed.public.item, second.public.item)
    torch.testing.assert_close(resumed.client.private.user, second.client.private.user)


def test_central_lightgcn_learns_and_ranks_with_propagated_tables():
    method, env = make_method(["method=central", "backbone=lightgcn", "backbone.dim=16", "method.optimizer.lr=0.01",
                               "method.batch_size=64"])
    losses = [round_of(method).train_round(r).loss for r in range(10)]
    assert losses[-1] < 0.6 * losses[0]  # BPR starts at log 2
    user, item = BipartiteGraph.from_store(env.train).propagate(method.user, method.item, 3)
    torch.testing.assert_close(method.score_users(torch.arange(4)), user[:4] @ item.T)


@pytest.mark.parametrize("overrides,field", [
    (["method=fedcl"], "backbone"),
    (["method=svdpp"], "backbone"),
    (["method=cl4fedrec"], "backbone"),
    (["method=fedavg", "attack=a_ra"], "attack"),
])
def test_graph_backbone_refusals_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field):
        make_method(["backbone=lightgcn", *overrides])


# -- FedGNN: pseudo items and masking ------------------------------------------------------------------

def test_pseudo_items_replace_a_share_of_each_clients_pairs():
    from fedrun.method._pseudo import perturb_pairs
    _, store = random_graph(n_users=30, n_items=60, density=0.3)
    users = torch.arange(30)
    batch = store.client_batch(users)
    out, pseudo = perturb_pairs(batch, 60, seed=3, pseudo_share=0.2, mask_share=0.1)
    sizes = batch.pos_mask.sum(1)
    # the authors' code: max(1, ⌊0.1·n⌋) pseudo pairs for n ≥ 2; ⌊share·n⌋ masked; one real pair stays
    want_pseudo = torch.where(sizes >= 2, torch.floor(0.2 * sizes).long().clamp_min(1), 0).minimum(sizes - 1)
    assert torch.equal(pseudo.sum(1), want_pseudo)
    dropped = batch.pos_mask & ~out.pos_mask
    assert torch.equal(dropped.sum(1), torch.floor(0.1 * sizes).long().minimum(sizes - 1 - want_pseudo))
    assert (out.pos_mask.sum(1) >= 1).all()
    for b in range(30):
        held = set(batch.pos[b][batch.pos_mask[b]].tolist())
        assert not set(out.pos[b][pseudo[b]].tolist()) & held  # pseudo items are items the client does not hold
        assert torch.equal(out.pos[b][out.pos_mask[b] & ~pseudo[b]], batch.pos[b][out.pos_mask[b] & ~pseudo[b]])
    # a client's draws do not depend on its bucket
    part, part_pseudo = perturb_pairs(store.client_batch(users[5:9]), 60, seed=3, pseudo_share=0.2, mask_share=0.1)
    width = part.pos.shape[1]
    assert torch.equal(part.pos, out.pos[5:9, :width]) and torch.equal(part_pseudo, pseudo[5:9, :width])


def test_fedgnn_clients_train_and_link_their_pseudo_items():
    """Each client trains max(1, ⌊0.25·n⌋) items it does not hold in place of held ones, links them in its
    ego graph (Eq. 5: N ∪ N̂) and uploads their rows; the FedSGD shortcut is off."""
    method, env = make_method(["method=fedgnn", "method.pseudo_share=0.25", *GRAPH])
    rounds = round_of(method)
    users = rounds.sampler.users(0)
    method.exchange(users, 0, rounds.privacy)
    for problem in method.client.problems(users, 0):
        for b in range(problem.batch.size):
            held = env.train.client_batch(problem.batch.users[b:b + 1]).pos[0]
            trained = problem.batch.pos[b][problem.batch.pos_mask[b]]
            n = held.numel()
            pseudo = trained[~torch.isin(trained, held)]
            assert pseudo.numel() == (max(1, n // 4) if n >= 2 else 0)
            # every pseudo item's slot is linked to the client: an edge client -> slot node
            slots = torch.nonzero(torch.isin(problem.items[b], pseudo) & problem.item_mask[b]).squeeze(1)
            nodes = problem.batch.size + b * problem.items.shape[1] + slots
            edges = problem.ego.src == b
            assert torch.isin(nodes, problem.ego.dst[edges]).all()
        uploads = method.client.step(problem).uploads
        assert torch.isin(problem.items[problem.item_mask], uploads.row_item).all()
    assert not rounds.uses_fast_path


def test_fedgnn_runs_with_linf_ldp_on_both_uploads():
    method, _ = make_method(["method=fedgnn", "privacy=ldp", "privacy.norm=linf", "privacy.clip=0.1",
                             "privacy.targets=[item_rows,user_embedding]", *GRAPH])
    before = method.public.item.clone()
    round_of(method).train_round(0)
    assert (method.public.item - before).abs().max() > 0
    # the neighbours' shared rows are the protected ones, not the private rows
    assert not torch.allclose(method.client.context.ego.directory.shared, method.client.private.user)


# -- PerFedRec: clusters, selection, the prediction mixture --------------------------------------------

PERFEDREC = ["method=perfedrec", "method.clusters=3", "privacy=none", *GRAPH]


def test_cluster_aggregation_equals_fedavg_one_cluster_at_a_time():
    """Each cluster model moves by the mean of its members' deltas, computed here cluster by cluster."""
    method, env = make_method(PERFEDREC + ["method.pseudo_share=0", CPU_ORACLE])
    rounds = round_of(method)
    rounds.train_round(0)
    rounds.train_round(1)  # clusters from round 1 on
    assert method.clusters.ready
    users = rounds.method.round_users(rounds.sampler, 2)
    before = method.clusters.tables.clone()
    method.exchange(users, 2, rounds.privacy)
    labels = method.clusters.labels.clone()
    results = [method.client.step(p) for p in method.client.problems(users, 2)]
    # the direct computation: every member's uploads, grouped by its cluster
    problems = method.client.problems(users, 2)
    sums = torch.zeros_like(before)
    counts = torch.zeros(before.shape[:2])
    for problem, result in zip(problems, results):
        up = result.uploads
        cluster = labels[problem.batch.users][up.row_client]
        sums.index_put_((cluster, up.row_item), up.row_delta, accumulate=True)
        counts.index_put_((cluster, up.row_item), torch.ones(up.row_item.numel()), accumulate=True)
    want = before + sums / counts.clamp_min(1).unsqueeze(-1)
    # the round itself (same draws: the round re-derives everything from the seed and round index)
    state = method.state_dict()
    again, _ = make_method(PERFEDREC + ["method.pseudo_share=0", CPU_ORACLE])
    again.load_state_dict(state)
    round_of(again).train_round(2)
    torch.testing.assert_close(again.clusters.tables, want, rtol=1e-5, atol=1e-6)


def test_cluster_selection_is_proportional_to_cluster_sizes():
    method, _ = make_method(PERFEDREC + ["sim.clients_per_round=30"])
    rounds = round_of(method)
    for r in range(2):
        rounds.train_round(r)
    clients = rounds.sampler.clients
    sizes = method.clusters.sizes(clients).double()
    chosen = method.round_users(rounds.sampler, 5)
    assert chosen.numel() == 30 and chosen.unique().numel() == 30
    got = torch.bincount(method.clusters.labels[chosen], minlength=3).double()
    assert (got - 30 * sizes / sizes.sum()).abs().max() < 1


def test_mixture_prediction_equals_the_direct_computation():
    method, env = make_method(PERFEDREC + ["method.alpha=[1.0,2.0,3.0]", CPU_ORACLE])
    rounds = round_of(method)
    for r in range(3):
        rounds.train_round(r)
    users = torch.arange(env.n_users)
    graph = BipartiteGraph.from_store(env.train)
    user_g, item_g = graph.propagate(method.client.private.user, method.public.item, 2)
    want = torch.empty(env.n_users, env.n_items)
    for u in range(env.n_users):
        k = int(method.clusters.labels[u])
        user_k, item_k = graph.propagate(method.client.private.user, method.clusters.tables[k], 2)
        alpha = torch.tensor([1.0 if method.client.has_local[u] else 0.0, 2.0, 3.0])
        alpha = alpha / alpha.sum()
        want[u] = (alpha[0] * method.client.local_user[u] @ item_k.T + alpha[1] * user_k[u] @ item_k.T
                   + alpha[2] * user_g[u] @ item_g.T)
    torch.testing.assert_close(method.score_users(users), want, rtol=1e-4, atol=1e-5)
    items = torch.arange(env.n_users) % env.n_items
    torch.testing.assert_close(method.score_pairs(users, items), want[users, items], rtol=1e-4, atol=1e-5)


def test_more_clusters_than_clients_is_refused_before_training():
    with pytest.raises(ConfigError, match="method.clusters"):
        make_method(["method=perfedrec", "method.clusters=1000", *GRAPH])


# -- PerFedRec++: federated contrastive pre-training -------------------------------------------------

PERFEDRECPP = ["method=perfedrecpp", "method.clusters=3", "method.pretrain_rounds=2", *GRAPH]


def test_pretraining_views_do_not_depend_on_the_bucket():
    """A client's contrastive loss is the same trained in a bucket or alone (noise keyed per node)."""
    method, _ = make_method(PERFEDRECPP + ["method.pseudo_share=0"])
    rounds = round_of(method)
    users = rounds.sampler.users(0)
    sent = method.exchange(users, 0, rounds.privacy).sent
    assert sent is not None and sent.shape[0] == min(256, method.env.n_users)  # the random users' rows
    problem = method.client.problems(users, 0, sent)[0]
    user0, items0 = method.client.private.user[problem.batch.users], method.public.item[problem.items]
    bucket = method.client.local_loss(problem, user0, items0, {})
    for b in range(3):
        alone = method.client.problems(problem.batch.users[b:b + 1], 0, sent)[0]
        client = method.client
        loss = client.local_loss(alone, client.private.user[alone.batch.users], method.public.item[alone.items], {})
        torch.testing.assert_close(loss, bucket[b:b + 1], rtol=1e-5, atol=1e-6)


def test_infonce_terms_equal_their_direct_forms():
    from fedrun.method.perfedrecpp import item_infonce, random_user_infonce, user_infonce
    torch.manual_seed(0)
    B, Lu, V, d, tau = 2, 4, 5, 3, 0.2
    center1, center2 = torch.randn(B, d), torch.randn(B, d)
    neighbors2 = torch.randn(V, d)
    owner = torch.tensor([0, 0, 1, 1, 1])
    ego = EgoGraphs(B, Lu, torch.zeros(V, d), owner, torch.tensor([0, 1, 0, 1, 2]), torch.zeros(0, dtype=torch.long),
                    torch.zeros(0, dtype=torch.long), torch.zeros(0), torch.zeros(B, dtype=torch.long))
    got = user_infonce((center1, None, None), (center2, None, neighbors2), ego, tau)
    cos = torch.nn.functional.cosine_similarity
    for b in range(B):
        logits = torch.stack([cos(center1[b], center2[b], dim=0)] +
                             [cos(center1[b], neighbors2[j], dim=0) for j in range(V) if owner[j] == b]) / tau
        torch.testing.assert_close(got[b], -torch.log_softmax(logits, 0)[0])
    others = torch.randn(6, d)
    got = random_user_infonce(center1, center2, others, tau)
    for b in range(B):
        logits = torch.stack([cos(center1[b], center2[b], dim=0)] + [cos(center1[b], o, dim=0) for o in others]) / tau
        torch.testing.assert_close(got[b], -torch.log_softmax(logits, 0)[0])
    items1, items2 = torch.randn(B, Lu, d), torch.randn(B, Lu, d)
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    got = item_infonce(items1, items2, mask, tau)
    for b in range(B):
        n = int(mask[b].sum())
        logits = torch.stack([torch.stack([cos(items1[b, i], items2[b, j], dim=0) for j in range(n)])
                              for i in range(n)]) / tau
        torch.testing.assert_close(got[b], (torch.logsumexp(logits, 1) - logits.diagonal()).mean())


def test_pretraining_rounds_then_perfedrec_rounds():
    method, _ = make_method(PERFEDRECPP)
    rounds = round_of(method)
    start = method.public.item.clone()
    for r in range(2):
        rounds.train_round(r)
        assert not method.clusters.ready  # clusters only after pre-training
    assert (method.public.item - start).abs().max() > 1e-4  # pre-training moved the item rows
    rounds.train_round(2)
    rounds.train_round(3)
    assert method.clusters.ready


def test_lightgcn_with_no_layers_is_mf():
    """K = 0: the same model as backbone=mf (the MF rows of the perfedrecpp presets)."""
    common = ["method=fedavg", "backbone.dim=8", "method.optimizer.lr=0.5", "sim.buckets=3",
              "sim.min_bucket_clients=1", "sim.fast_path=off", "backbone.init_std=0.1"]
    graph, _ = make_method(common + ["backbone=lightgcn", "backbone.layers=0", "backbone.l2=0"])
    mf, _ = make_method(common + ["backbone=mf"])
    for r in range(2):
        round_of(graph).train_round(r)
        round_of(mf).train_round(r)
    torch.testing.assert_close(graph.public.item, mf.public.item)
    torch.testing.assert_close(graph.score_users(torch.arange(4)), mf.score_users(torch.arange(4)))


# -- centralized graph contrastive baselines (SGL, SimGCL, XSimGCL) --------------------------------------

def test_info_nce_equals_its_direct_form():
    from fedrun.method.graph_contrast import info_nce
    a, b = torch.randn(5, 3), torch.randn(5, 3)
    cos = torch.nn.functional.cosine_similarity(a.unsqueeze(1), b.unsqueeze(0), dim=-1) / 0.2  # [5, 5]
    want = torch.stack([-torch.log_softmax(cos[i], 0)[i] for i in range(5)]).mean()
    torch.testing.assert_close(info_nce(a, b, 0.2), want)


def test_sgl_subgraphs_drop_edges_and_renormalise():
    interactions, store = random_graph(n_users=30, n_items=40, density=0.3)
    graph = BipartiteGraph.from_store(store)
    keep = torch.rand(graph.n_edges, generator=torch.Generator().manual_seed(0)) >= 0.3
    dropped = graph.dropped(keep)
    assert dropped.n_edges == int(keep.sum())
    kept = torch.zeros_like(interactions)
    users, items = graph.norm.to_sparse_coo().coalesce().indices()
    kept[users[keep], items[keep]] = True
    user, item = torch.randn(30, 4), torch.randn(40, 4)
    want = dense_lightgcn(kept, user, item, 2)
    got = dropped.propagate(user, item, 2)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["sgl", "simgcl", "xsimgcl"])
def test_central_graph_contrast_trains_and_ranks_without_noise(kind):
    method, env = make_method(["method=central", "backbone=lightgcn", "backbone.dim=16", "backbone.layers=2",
                               "method.optimizer.lr=0.01", "method.batch_size=64", f"method.contrast.kind={kind}"])
    losses = [round_of(method).train_round(r).loss for r in range(6)]
    assert losses[-1] < losses[0]
    layer_users, layer_items = BipartiteGraph.from_store(env.train).layers(method.user, method.item, 2)
    start = 1 if kind in ("simgcl", "xsimgcl") else 0  # SimGCL's readout skips the input layer
    user, item = torch.stack(layer_users[start:]).mean(0), torch.stack(layer_items[start:]).mean(0)
    torch.testing.assert_close(method.score_users(torch.arange(4)), user[:4] @ item.T)
    assert torch.equal(method.score_users(torch.arange(4)), method.score_users(torch.arange(4)))  # no noise


def test_graph_contrast_needs_a_graph_backbone():
    with pytest.raises(ConfigError, match="contrast.kind"):
        make_method(["method=central", "backbone=mf", "method.contrast.kind=simgcl"])


def test_clients_start_from_the_global_model_or_their_clusters():
    """Algorithm 1 downloads the global model; ``train_from=cluster`` (the CIKM code) the cluster's."""
    for source in ("global", "cluster"):
        method, _ = make_method(PERFEDREC + [f"method.train_from={source}"])
        rounds = round_of(method)
        for r in range(3):
            rounds.train_round(r)
        users = rounds.sampler.users(3)
        method.exchange(users, 3, rounds.privacy)
        problem = method.client.problems(users, 3)[0]
        rows = method.client.download_rows(problem)
        if source == "global":
            want = method.public.item[problem.items]
        else:
            want = method.clusters.tables[method.clusters.labels[problem.batch.users].unsqueeze(1), problem.items]
            assert not torch.equal(want, method.public.item[problem.items])  # the cluster models have drifted
        torch.testing.assert_close(rows, want)


def test_curve_script_counts_each_round_in_its_epoch_and_finds_the_best_one():
    pytest.importorskip("mlflow", reason="the script reads MLflow (not on the GPU image)")
    import pandas as pd

    from fedrun.app import perfedrecpp_curves as curves
    assert [curves.epoch_of_round(r, 21) for r in (0, 20, 21, 41, 42)] == [1, 1, 2, 2, 3]
    frame = pd.DataFrame({"row": ["a"] * 3 + ["b"] * 3, "seed": [1] * 6, "metric": [curves.VALID] * 6,
                          "epoch": [1, 2, 3] * 2, "value": [.1, .3, .2, .4, .2, .1]})
    best = curves.epochs_to_best(frame).set_index("row")
    assert best.loc["a", "best_epoch"] == 2 and best.loc["b", "best_epoch"] == 1
    assert best.loc["a", "best_valid_ndcg_at_20"] == .3


def test_anchor_script_reads_the_test_metrics_every_few_epochs(tmp_path):
    """scripts/investigations/lightgcn_anchor.py on synthetic data (the anchor itself is gowalla on a GPU): a
    reading every
    --eval-every epochs and at the last, flushed to anchor.csv, and a caption with the published anchor."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "investigations" / "lightgcn_anchor.py"
    result = subprocess.run([sys.executable, str(script), "--device", "cpu", "--epochs", "3", "--eval-every", "2",
                             "--out", str(tmp_path), "dataset=synthetic", "dataset.n_users=60",
                             "dataset.n_items=80", "dataset.mean_length=8", "sim.clients_per_round=all",
                             "backbone.layers=1"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (tmp_path / "anchor.csv").read_text().splitlines()
    assert lines[0] == "epoch,train s,recall_at_20,ndcg_at_20"
    assert [line.split(",")[0] for line in lines[1:]] == ["2", "3"]
    assert 0 < float(lines[-1].split(",")[2]) < 1
    assert "Published (converged): 0.183 / 0.1554" in (tmp_path / "anchor.md").read_text()
