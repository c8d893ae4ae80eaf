"""FedCL: clustering and retrieval against brute force, semi-hard draws, the Eq. 1 mix-up loss
against a direct per-client computation, config errors, and the server seeing uploads only."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from sklearn.cluster import AgglomerativeClustering

from fedrun.errors import ConfigError
from fedrun.retrieval.cluster import cluster
from fedrun.retrieval.config import HardNegativeConfig
from fedrun.retrieval.hard_negatives import HardNegativeServer
from fedrun.retrieval.search import faiss_available, top_k_inner_product, top_k_scores
from fedrun.sim.loop import NumericalError
from tests.conftest import make_method, round_of
from tests.test_privacy_boundary import Poison, PrivacyViolation, reachable

FEDCL = ["method=fedcl", "backbone=mf", "privacy=ldp", "method.n_clusters=5", "method.recluster_every=2"]


def blobs(n=300, d=8, k=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    centers = torch.randn(k, d, generator=gen, dtype=torch.float64) * 5
    label = torch.arange(n) % k
    return centers[label] + torch.randn(n, d, generator=gen, dtype=torch.float64), label


def brute_centroids(points, assign):
    return torch.stack([points[assign == c].mean(0) for c in range(int(assign.max()) + 1)])


@pytest.mark.parametrize("method", ["ward", "kmeans"])
def test_clusters_are_partitions_with_member_mean_centroids(method):
    points, _ = blobs()
    found = cluster(points, method, 4, seed=0)
    assert found.assign.shape == (300,) and int(found.assign.max()) == 3
    assert torch.allclose(found.centroids, brute_centroids(points, found.assign))


def test_ward_equals_scikit_learn_ward():
    points, label = blobs(seed=1)
    found = cluster(points, "ward", 4, seed=0)
    reference = AgglomerativeClustering(n_clusters=4, linkage="ward").fit_predict(points.numpy())
    assert np.array_equal(found.assign.numpy(), reference)
    # well-separated blobs are recovered exactly (up to the label permutation)
    assert len({(int(a), int(b)) for a, b in zip(found.assign, label)}) == 4


def test_ward_on_a_kmeans_preaggregation_above_the_limit():
    points, label = blobs(n=400, seed=2)
    found = cluster(points, "ward", 4, seed=2**63 - 25, ward_max_points=100, pre_clusters=50)  # 64-bit seeds ok
    assert int(found.assign.max()) == 3
    assert torch.allclose(found.centroids, brute_centroids(points, found.assign))
    assert len({(int(a), int(b)) for a, b in zip(found.assign, label)}) == 4


def test_preaggregation_is_deterministic_and_independent_of_faiss_threads():
    import faiss
    points = torch.randn(3000, 16, generator=torch.Generator().manual_seed(3))
    runs = []
    for threads in (1, 2, 1):
        faiss.omp_set_num_threads(threads)
        runs.append(cluster(points, "ward", 25, seed=7, ward_max_points=1000, pre_clusters=200).assign)
    faiss.omp_set_num_threads(torch.get_num_threads())
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])
    other_seed = cluster(points, "ward", 25, seed=8, ward_max_points=1000, pre_clusters=200).assign
    assert not torch.equal(runs[0], other_seed)  # the seed reaches faiss's k-means


def test_preaggregation_without_faiss_names_the_field(monkeypatch):
    from fedrun.errors import FedrunError
    from fedrun.retrieval import cluster as clustering
    monkeypatch.setattr(clustering, "faiss_available", lambda: False)
    with pytest.raises(FedrunError, match="method.ward_max_points: 100 is below the 300 users"):
        cluster(torch.randn(300, 8), "ward", 4, seed=0, ward_max_points=100, pre_clusters=50)
    config = HardNegativeConfig(n_clusters=4, ward_max_points=100, pre_clusters=50)
    with pytest.raises(FedrunError, match="method.ward_max_points: 100 is below the 300 users"):
        HardNegativeServer(config, backbone=None, n_users=300, dim=8, seed=0, device=torch.device("cpu"))
    HardNegativeServer(config, backbone=None, n_users=100, dim=8, seed=0, device=torch.device("cpu"))  # exact Ward


def test_no_clustering_and_fewer_points_than_clusters_keep_each_point():
    points, _ = blobs(n=10)
    for method in ("none", "ward"):
        found = cluster(points, method, 25, seed=0)
        assert torch.equal(found.assign, torch.arange(10)) and torch.equal(found.centroids, points)


def brute_top_k(queries, items, k):
    scores = (queries.double() @ items.double().T).numpy()
    return [set(np.argsort(-row, kind="stable")[:k].tolist()) for row in scores]


@pytest.mark.parametrize("engine", ["torch", pytest.param("faiss", marks=pytest.mark.skipif(
    not faiss_available(), reason="faiss not installed"))])
def test_inner_product_search_matches_brute_force(engine):
    gen = torch.Generator().manual_seed(3)
    queries, items = torch.randn(25, 16, generator=gen), torch.randn(3000, 16, generator=gen)
    found = top_k_inner_product(queries, items, 750, engine)
    assert found.shape == (25, 750)
    assert torch.equal(found, found.sort(1).values)  # a set, sorted by id
    assert [set(row.tolist()) for row in found] == brute_top_k(queries, items, 750)


def test_score_based_search_is_the_top_k_set():
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.7], [1.0, -1.0, 0.0, 2.0]])
    assert top_k_scores(scores, 2).tolist() == [[1, 3], [0, 3]]


def test_semi_hard_negatives_come_from_each_users_centroid_hard_set():
    method, env = make_method(FEDCL + ["method.semi_hard=6", "method.hard_ratio=0.25"])
    server = method.hard_server
    users = round_of(method).sampler.users(0)
    server.receive(method.client.upload_embeddings(users, 0, round_of(method).privacy), 0)
    negatives = server.negatives(users, method.public, 0)
    k = math.ceil(0.25 * env.n_items)
    queries, query_of = server.queries(users)
    full = (queries @ method.public.item.T).double()
    for b in range(users.numel()):
        hard = set(torch.argsort(full[query_of[b]], descending=True)[:k].tolist())
        row = negatives[b].tolist()
        assert len(set(row)) == 6 and set(row) <= hard
    server.config = dataclasses.replace(server.config, hardest=True)
    top = server.negatives(users, method.public, 0)
    assert torch.equal(top, full.topk(6, dim=1).indices.sort(1).values[query_of])  # the 6 hardest, as a set


def direct_loss(method, env, user, item_table, net, batch, negatives, hard):
    """Eq. 1 for one client from item ids, without local tables: −mean_j log softmax."""
    backbone = env.backbone
    pos = batch["pos"]
    positive_set = set(pos.tolist())
    semi = [i for i in hard.tolist() if i not in positive_set]
    total = 0.0
    for j, p in enumerate(pos.tolist()):
        items = [p, *negatives[j].tolist(), *semi]
        scores = backbone.score(user[None], item_table[torch.tensor(items)][None], net)[0]
        total = total + (torch.logsumexp(scores, 0) - scores[0])
    return total / len(pos)


def test_mixup_loss_equals_a_direct_per_client_computation():
    method, env = make_method(FEDCL + ["method.semi_hard=8", "sim.clients_per_round=8"])
    users = round_of(method).sampler.users(0)
    server = method.hard_server
    server.receive(method.client.upload_embeddings(users, 0, round_of(method).privacy), 0)
    hard = server.negatives(users, method.public, 0)
    problems = method.client.problems(users, 0, hard)
    hard_of = {int(u): hard[b] for b, u in enumerate(users)}
    checked = 0
    for problem in problems:
        batch = problem.batch
        item_table = method.public.item[problem.items]
        client = method.client
        losses = client.local_loss(problem, client.private.user[batch.users], item_table, method.public.net)
        local = method.client.local_negatives(batch, 0)  # [B, P, n]
        for b in range(batch.size):
            mask = batch.pos_mask[b]
            expected = direct_loss(method, env, method.client.private.user[batch.users[b]], method.public.item,
                                   method.public.net, {"pos": batch.pos[b][mask]}, local[b][mask],
                                   hard_of[int(batch.users[b])])
            assert float(losses[b]) == pytest.approx(float(expected), rel=1e-5)
            checked += 1
    assert checked == users.numel()


def test_local_store_is_fixed_per_user_and_excludes_positives():
    method, env = make_method(FEDCL)
    users = round_of(method).sampler.users(0)
    batch = env.train.client_batch(users)
    first, later = method.client.local_negatives(batch, 0), method.client.local_negatives(batch, 5)
    assert not torch.equal(first, later)  # picks are redrawn each round ...
    for b in range(batch.size):
        positives = set(batch.pos[b][batch.pos_mask[b]].tolist())
        store = set(first[b].reshape(-1).tolist()) | set(later[b].reshape(-1).tolist())
        assert len(store) <= method.config.local_store  # ... from one fixed store of 100 items
        assert not store & positives


def test_fedcl_learns_on_synthetic_data():
    method, env = make_method(FEDCL + ["sim.clients_per_round=16"])
    losses = [round_of(method).train_round(r).loss for r in range(40)]
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    assert int(method.embedding_uploads.sum()) == sum(round_of(method).sampler.users(r).numel() for r in range(40))


FAST_CASES = {
    "fedcl": [], "keep-positives": ["method.exclude_positives=false"], "fed": ["method.semi_hard=0", "privacy=none"],
    "data-size": ["defense=mean", "defense.weighting=data_size"], "bil": ["method.spread_weight=0.5"],
    "l2": ["backbone.l2=0.01"],
}


@pytest.mark.parametrize("backbone,row", [(b, r) for b in ("mf", "ncf") for r in FAST_CASES]
                         + [(b, r) for b in ("gru4rec", "bert4rec") for r in ("fedcl", "data-size", "bil")])
def test_fedsgd_fast_path_equals_the_general_path(backbone, row):
    """Same draws, same model: the FedSGD pass (unpadded for Eq. 1 on ID-based backbones, per bucket
    otherwise) against per-client copies in 3 buckets. float64, since the server's Adam turns
    float32 summation noise in near-zero gradients into ±lr steps."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        base = ["method=bil"] if row == "bil" else FEDCL + ["method.semi_hard=8"]
        common = base + [f"backbone={backbone}", "sim.clients_per_round=16", "sim.buckets=3",
                         "sim.min_bucket_clients=1", *FAST_CASES[row]]
        fast, _ = make_method(common)
        slow, _ = make_method(common + ["sim.fast_path=off"])
        assert round_of(fast).uses_fast_path and not round_of(slow).uses_fast_path
        for r in range(5):  # reclusters every 2 rounds: the semi-hard sets follow the trained model
            assert round_of(fast).train_round(r).loss == pytest.approx(round_of(slow).train_round(r).loss, rel=1e-9)
        torch.testing.assert_close(fast.public.item, slow.public.item)
        torch.testing.assert_close(fast.client.private.user, slow.client.private.user)
        for name in fast.public.net:
            torch.testing.assert_close(fast.public.net[name], slow.public.net[name])
        assert (fast.public.item - make_method(common)[0].public.item).abs().max() > 1e-3  # the model did move
    finally:
        torch.set_default_dtype(previous)


def test_non_finite_user_rows_from_the_fast_path_are_named(monkeypatch):
    """The FedSGD pass writes the clients' private rows itself: checked as on the general path, so
    a diverging run stops with a named error before the server clusters their next uploads."""
    method, _ = make_method(FEDCL)
    assert round_of(method).uses_fast_path
    fast_round = method.fast_round

    def diverging(users, round_index, sent, rule):
        result = fast_round(users, round_index, sent, rule)
        method.client.private.user[users[0]] = float("inf")
        return result

    monkeypatch.setattr(method, "fast_round", diverging)
    with pytest.raises(NumericalError, match=r"the client step \(FedCL\).* round 0"):
        round_of(method).train_round(0)


def test_non_finite_embedding_uploads_are_named_before_clustering():
    method, _ = make_method(FEDCL)
    users = round_of(method).sampler.users(0)
    uploads = method.client.upload_embeddings(users, 0, round_of(method).privacy)
    uploads.vectors[0, 0] = float("-inf")
    with pytest.raises(NumericalError, match=r"the uploaded user embeddings .* round 0"):
        method.hard_server.receive(uploads, 0)


def test_fast_path_is_off_where_not_exact():
    assert not round_of(make_method(FEDCL + ["sim.local_epochs=2"])[0]).uses_fast_path
    assert not round_of(make_method(FEDCL + ["method.optimizer.name=adam"])[0]).uses_fast_path
    assert not round_of(make_method(FEDCL + ["privacy.targets=[user_embedding,item_rows]"])[0]).uses_fast_path
    assert not round_of(make_method(FEDCL + ["backbone=gru4rec", "sim.local_epochs=2"])[0]).uses_fast_path


def run_server_phase(method, env, rounds=3):
    """The negative-sampling exchange with client data poisoned while the server side runs."""
    saved = (env.train, method.client.private)
    for r in range(rounds):
        users = round_of(method).sampler.users(r)
        uploads = method.client.upload_embeddings(users, r, round_of(method).privacy)
        env.train, method.client.private = Poison("ClientStore"), Poison("PrivateParams")
        try:
            method.hard_server.receive(uploads, r)
            method.hard_server.negatives(users, method.public, r)
        finally:
            env.train, method.client.private = saved


@pytest.mark.parametrize("backbone", ["mf", "gru4rec"])
def test_hard_negative_server_sees_uploads_only(backbone):
    method, env = make_method(FEDCL + [f"backbone={backbone}"])
    run_server_phase(method, env)
    server = method.hard_server
    private_storage = method.client.private.user.untyped_storage().data_ptr()
    held = [t for t in reachable(server) if isinstance(t, torch.Tensor)]
    assert held and all(t.untyped_storage().data_ptr() != private_storage for t in held)
    assert not any(obj is env.train or obj is method.client.private for obj in reachable(server))


def test_poison_catches_a_hard_negative_server_that_reads_client_data():
    """Negative control: the same harness catches a server step that looks at client data."""
    method, env = make_method(FEDCL)
    honest = method.hard_server.receive

    def leaky_receive(uploads, round_index):
        _ = env.train.items  # e.g. clustering on the true histories instead of the uploads
        return honest(uploads, round_index)

    method.hard_server.receive = leaky_receive
    with pytest.raises(PrivacyViolation, match="ClientStore.items"):
        run_server_phase(method, env)


@pytest.mark.parametrize("backbone", ["mf", "gru4rec"])
def test_uploaded_embeddings_are_perturbed_under_ldp(backbone):
    method, env = make_method(FEDCL + [f"backbone={backbone}"])
    users = round_of(method).sampler.users(0)
    uploads = method.client.upload_embeddings(users, 0, round_of(method).privacy)
    clean = method.client.user_embeddings(users)  # ID-based: the private rows; sequential: inferred from the history
    assert clean.shape == uploads.vectors.shape
    assert not torch.allclose(uploads.vectors, clean)
    l1 = (uploads.vectors - clean).abs().sum(1)
    assert float(l1.mean()) > 1.0  # Laplace(0.5) noise in 32 / 64 dims: E‖n‖₁ = 16 / 32


@pytest.mark.parametrize("overrides,field", [
    (FEDCL + ["method.in_batch=on"], "method.in_batch"),
    (FEDCL + ["method.n_clusters=1000"], "method.n_clusters"),
    (FEDCL + ["method.semi_hard=0", "method.local_negatives=0", "privacy=none"], "method.semi_hard"),
    (["method=fedavg", "privacy=ldp"], "privacy.targets"),  # LDP on an embedding fedavg never uploads
    (FEDCL + ["method.semi_hard=0"], "privacy.targets"),  # the "+Fed" row uploads no embedding either
    (FEDCL + ["privacy.epsilon=0"], "privacy.epsilon"),
])
def test_bad_fedcl_settings_are_named_before_training(overrides, field):
    with pytest.raises(ConfigError, match=field):
        make_method(overrides)


@pytest.mark.parametrize("kind", ["hinge", "logistic"])
def test_bil_loss_equals_a_direct_computation(kind):
    """Ning et al.'s hinge (or −log σ) on the cosine of the user row and each positive, per client."""
    method, env = make_method(["method=bil", "backbone=mf", "sim.clients_per_round=8", f"method.positive_loss={kind}"])
    assert method.client.cosine
    users = round_of(method).sampler.users(0)
    for problem in method.client.problems(users, 0):
        batch = problem.batch
        table = method.public.item[problem.items]
        losses = method.client.local_loss(problem, method.client.private.user[batch.users], table, method.public.net)
        for b in range(batch.size):
            pos = batch.pos[b][batch.pos_mask[b]]
            user = method.client.private.user[batch.users[b]]
            cosines = [float(method.public.item[p] @ user / (method.public.item[p].norm() * user.norm())) for p in pos]
            if kind == "hinge":
                expected = np.mean([max(0.0, 0.9 - c) ** 2 for c in cosines])
            else:
                expected = np.mean([math.log1p(math.exp(-c)) for c in cosines])
            assert float(losses[b]) == pytest.approx(expected, rel=1e-4)


def test_spread_out_is_the_root_of_the_squared_cosines_over_distinct_items():
    from fedrun.method.bil import spread_out

    item = torch.randn(7, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    unit = item / item.norm(dim=1, keepdim=True)
    pairs = [float(unit[k] @ unit[m]) ** 2 for k in range(7) for m in range(7) if k != m]
    assert float(spread_out(item)) == pytest.approx(math.sqrt(sum(pairs)), rel=1e-12)
    assert float(spread_out(torch.eye(4))) == pytest.approx(0.0, abs=1e-5)  # orthogonal rows: nothing to spread


def test_bil_server_adds_the_spread_out_step_each_client_would_take():
    """Server SGD (lr 1) on the aggregate: public item rows move by the clients' mean delta minus
    lr_client · λ · ∇S(V) — on every row, touched by a client or not."""
    from fedrun.method.bil import spread_out

    overrides = ["method=bil", "backbone=mf", "method.server_optimizer.name=sgd", "method.server_optimizer.lr=1",
                 "method.spread_weight=0.5", "method.optimizer.lr=2"]
    method, _ = make_method(overrides)
    before = method.public.item.clone()
    leaf = before.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(spread_out(leaf), leaf)
    no_spread, _ = make_method(overrides[:-2] + ["method.spread_weight=0", "method.optimizer.lr=2"])
    round_of(method).train_round(0)
    round_of(no_spread).train_round(0)
    client_step = no_spread.public.item - before
    torch.testing.assert_close(method.public.item - before, client_step - 2 * 0.5 * gradient)
    untouched = (client_step == 0).all(1)
    assert untouched.any() and (method.public.item[untouched] != before[untouched]).any()


def test_bil_ranks_by_cosine():
    """A long item row does not win: the ranking uses unit rows, as the loss does."""
    method, env = make_method(["method=bil", "backbone=mf"])
    with torch.no_grad():
        method.public.item[3] *= 100
    users = torch.arange(4)
    unit = method.public.item / method.public.item.norm(dim=1, keepdim=True)
    user = method.client.private.user[users] / method.client.private.user[users].norm(dim=1, keepdim=True)
    torch.testing.assert_close(method.score_users(users), user @ unit.T)
    items = torch.tensor([3, 5, 7, 3])
    torch.testing.assert_close(method.score_pairs(users, items), (user * unit[items]).sum(1))


def test_bil_cosine_needs_an_inner_product_backbone():
    with pytest.raises(ConfigError, match="method.similarity"):
        make_method(["method=bil", "backbone=ncf", "method.similarity=cosine"])
    for field, value in [("similarity", "dot"), ("positive_loss", "bpr"), ("margin", "0")]:
        with pytest.raises(ConfigError, match=field):
            make_method(["method=bil", "backbone=mf", f"method.{field}={value}"])
    method, _ = make_method(["method=bil", "backbone=ncf"])
    assert not method.client.cosine and method.describe()["bil_similarity"] == "score"


def test_bil_learns_and_uploads_no_embedding():
    method, _ = make_method(["method=bil", "backbone=ncf"])
    losses = [round_of(method).train_round(r).loss for r in range(30)]
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    assert method.hard_server is None and int(method.embedding_uploads.sum()) == 0
