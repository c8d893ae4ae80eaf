"""The server audit (issue #65): rated-set inference from upload ids, interaction inference from shared user vectors,
rating inference from consecutive MF gradients. Their guesses against cases whose answer is known, the AUC against a
brute-force count, and the contract: it sees only what the server receives, reads the truth only when it scores,
and changes no training number."""

from __future__ import annotations

import pytest
import torch

from fedrun.audit.config import ServerAuditConfig
from fedrun.audit.rated_set import RatedSetInference
from fedrun.audit.server import ServerAudit
from fedrun.audit.shared import SharedEmbeddingInference
from fedrun.backbone.base import PublicParams
from fedrun.data.client_store import ClientStore
from fedrun.errors import ConfigError
from fedrun.types import EmbeddingUploads, Uploads
from tests.conftest import SMALL, compose_cfg, make_method, needs_data, round_of
from tests.test_fedrec import ML100K
from tests.test_privacy_boundary import RATED, SETTINGS, Poison, federated_options, reachable

GENERAL = ["sim.fast_path=off"]


def audited(overrides: list[str], rounds: int = 4, base: list[str] = SMALL, **options):
    method, env = make_method(overrides, base=base)
    auditor = ServerAudit(ServerAuditConfig(**options))
    auditor.start(env.n_users, env.n_items, env.backbone, env.device)
    round_of(method).audit_uploads(auditor)
    for r in range(rounds):
        round_of(method).train_round(r)
    return method, env, auditor


def test_the_audit_changes_no_training_number():
    plain, _ = make_method(GENERAL)
    for r in range(4):
        round_of(plain).train_round(r)
    watched, _, _ = audited(GENERAL)
    assert torch.equal(plain.client.private.user, watched.client.private.user)
    assert torch.equal(plain.public.item, watched.public.item)


def test_fedavg_uploads_its_items_every_round_so_the_intersection_finds_them():
    """A FedAvg client uploads the rows of its positives and of fresh negatives: every round guess holds all of its
    items (recall 1), and intersecting the rounds leaves mostly its items."""
    _, env, auditor = audited(["sim.clients_per_round=all"], rounds=3)
    metrics = auditor.score(env.train)
    assert metrics["audit_round_recall"] == 1.0 and metrics["audit_intersect_recall"] == 1.0
    assert metrics["audit_intersect_precision"] > metrics["audit_round_precision"] > metrics["audit_base_rate"]
    assert metrics["audit_auc"] > 0.9


@needs_data
def test_on_ml100k_five_rounds_of_fedrec_uncover_the_rated_items():
    """One round hides I_u at precision 1/(1+ρ); intersecting a client's five rounds recovers it."""
    _, env, auditor = audited(ML100K + ["method=fedrec", "method.rho=1"], rounds=5, base=[])
    metrics = auditor.score(env.train)
    assert metrics["audit_round_recall"] == 1.0 and metrics["audit_round_precision"] == pytest.approx(0.5, abs=0.01)
    assert metrics["audit_intersect_precision"] > 0.95 and metrics["audit_intersect_recall"] == 1.0


@pytest.mark.parametrize("rho", [1, 3])
def test_fedrec_hides_each_rated_item_among_rho_sampled_ones_per_round(rho):
    """FedRec's hybrid filling: a round's uploads are I_u and ρ|I_u| sampled unrated items, so the round guess has
    precision 1/(1+ρ) as the paper states; the sampled items are redrawn, so the intersection sheds them."""
    _, env, auditor = audited([*RATED, "method=fedrec", f"method.rho={rho}", "sim.clients_per_round=all"], rounds=3)
    metrics = auditor.score(env.train)
    assert metrics["audit_round_precision"] == pytest.approx(1 / (1 + rho), rel=0.05)
    assert metrics["audit_intersect_precision"] > metrics["audit_round_precision"]


def test_the_auc_is_the_brute_force_count():
    n_users, n_items = 5, 9
    auditor = RatedSetInference(n_users, n_items, torch.device("cpu"))
    gen = torch.Generator().manual_seed(3)
    for _ in range(4):
        senders = torch.randperm(n_users, generator=gen)[:3]
        mask = torch.rand(3, n_items, generator=gen) < 0.4
        client, item = mask.nonzero(as_tuple=True)
        auditor.observe(Uploads(3, client, item, torch.zeros(item.numel(), 1)), senders)
    truth_mask = torch.rand(n_users, n_items, generator=gen) < 0.3
    truth_mask[:, 0] = True  # everyone holds an item and lacks another
    truth_mask[:, -1] = False
    user, item = truth_mask.nonzero(as_tuple=True)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(user, minlength=n_users).cumsum(0)])
    truth = ClientStore(indptr, item, None, n_items)
    counts = torch.zeros(n_users, n_items)
    counts.view(-1)[auditor.keys] = auditor.counts.float()
    seen = auditor.rounds > 0
    expected = []
    for u in torch.nonzero(seen).squeeze(1).tolist():
        score = counts[u] / auditor.rounds[u]
        pos, neg = score[truth_mask[u]], score[~truth_mask[u]]
        wins = (pos.unsqueeze(1) > neg.unsqueeze(0)).double() + 0.5 * (pos.unsqueeze(1) == neg.unsqueeze(0)).double()
        expected.append(float(wins.mean()))
    assert auditor.score(truth)["audit_auc"] == pytest.approx(sum(expected) / len(expected), abs=1e-12)


@pytest.mark.parametrize("overrides", [GENERAL, [*RATED, "method=fedmf", "method.encryption=none"],
                                       ["method=fedcl", "backbone=mf", "privacy=none", "method.n_clusters=4"]],
                         ids=["fedavg", "fedmf", "fedcl"])
def test_the_auditor_holds_no_client_data_and_observes_with_it_poisoned(overrides):
    method, env = make_method(overrides)
    auditor = ServerAudit(ServerAuditConfig())
    auditor.start(env.n_users, env.n_items, env.backbone, env.device)

    def poisoned(observe):
        def call(*args):
            saved = (env.train, env.split, method.client.private)
            env.train, env.split = Poison("ClientStore"), Poison("Split")
            method.client.private = Poison("PrivateParams")
            try:
                return observe(*args)
            finally:
                env.train, env.split, method.client.private = saved
        return call

    auditor.observe = poisoned(auditor.observe)  # type: ignore[method-assign]
    auditor.observe_shared = poisoned(auditor.observe_shared)  # type: ignore[method-assign]
    round_of(method).audit_uploads(auditor)
    for r in range(2):
        round_of(method).train_round(r)
    held = reachable(auditor)
    client_side = [env.train, env.train.items, env.split, method.client.private, method.client.private.user]
    assert not [c for c in client_side if any(c is obj for obj in held)]


def test_an_audit_of_fcf_is_refused_by_its_declared_capability():
    """FCF's round is one closed-form sum over its clients: no per-client upload exists for an auditor to see."""
    from fedrun.app.plan import plan

    with pytest.raises(ConfigError, match=r"audit='server' is not allowed: expected none for method=fcf: its server"):
        plan(compose_cfg([*SMALL, *RATED, "method=fcf", "audit=server"]))


def test_an_audit_of_a_centralized_method_is_refused_before_any_data_is_read():
    from fedrun.app.plan import plan

    with pytest.raises(ConfigError, match="audit='server' is not allowed: expected none for a centralized method"):
        plan(compose_cfg(["dataset=synthetic", "dataset.n_users=60", "dataset.n_items=80", "track=none",
                               "method=central", "audit=server"]))


def test_a_graph_methods_registration_reaches_the_auditor_and_a_refresh_replaces_it():
    """Before its first round every FedGNN client registers its protected row: the auditor guesses every client
    from it, not only the round's; a client that refreshes in the same round is guessed from its newer row."""
    _, env, auditor = audited(["method=fedgnn", "backbone=lightgcn", "sim.clients_per_round=4"], rounds=1)
    assert auditor.score(env.train)["audit_shared_clients"] == float(env.n_users)
    shared = auditor.shared
    registered = EmbeddingUploads(torch.arange(3), torch.eye(3, shared.backbone.config.dim))
    refreshed = EmbeddingUploads(torch.tensor([1]), -torch.eye(3, shared.backbone.config.dim)[1:2])
    items = torch.eye(env.n_items, shared.backbone.config.dim)
    shared.observe(EmbeddingUploads(torch.cat([registered.users, refreshed.users]),
                                    torch.cat([registered.vectors, refreshed.vectors])), PublicParams(items))
    assert shared.guess[0, 0] == 0 and shared.guess[2, 0] == 2
    assert shared.guess[1, 0] != 1  # the refresh's −e₁ ranks item 1 last, not first


# -- attack 3: interaction inference from shared user vectors -------------------------------------------------------

def shared_guess(vectors: torch.Tensor, items: torch.Tensor, k: int, truth: ClientStore) -> dict[str, float]:
    from fedrun.backbone.config import BackboneConfig
    from fedrun.backbone.mf import MF

    inference = SharedEmbeddingInference(vectors.shape[0], items.shape[0], k, MF(BackboneConfig(dim=items.shape[1])),
                                         torch.device("cpu"))
    inference.observe(EmbeddingUploads(torch.arange(vectors.shape[0]), vectors), PublicParams(items))
    return inference.score(truth)


def store_of(held: torch.Tensor) -> ClientStore:
    """[U, I] bool → the clients' training items."""
    user, item = held.nonzero(as_tuple=True)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(user, minlength=held.shape[0]).cumsum(0)])
    return ClientStore(indptr, item, None, held.shape[1])


def test_a_shared_vector_whose_top_items_are_the_clients_gives_them_all_away_and_noise_hides_them():
    """Each client holds exactly the 5 items its vector scores highest: the guess finds them all (recall 1). Under
    noise far larger than the vectors, recall falls to the chance level K / |I|, below the popularity guess."""
    gen = torch.Generator().manual_seed(0)
    users, n_items, k = 200, 60, 5
    items = torch.nn.functional.normalize(torch.randn(n_items, 8, generator=gen), dim=1)  # no item favoured by its norm
    vectors = torch.randn(users, 8, generator=gen)
    held = torch.zeros(users, n_items, dtype=torch.bool)
    held.scatter_(1, (vectors @ items.T).topk(k, dim=1).indices, True)
    exact = shared_guess(vectors, items, k, store_of(held))
    assert exact["audit_shared_recall_at_5"] == 1.0
    assert exact["audit_shared_popularity_recall_at_5"] < 1.0
    noised = shared_guess(vectors + 1e3 * torch.randn(users, 8, generator=gen), items, k, store_of(held))
    assert noised["audit_shared_recall_at_5"] == pytest.approx(k / n_items, abs=0.05)
    assert noised["audit_shared_random_recall_at_5"] == k / n_items


def test_fedcl_shares_its_user_vectors_with_the_server_and_ldp_noise_hides_what_they_tell():
    """FedCL's exchange uploads every sampled client's user embedding: the audit scores every client it saw. In the
    clear, the vector ranks the client's own items far above popularity; under LDP noise of a small ε the guess
    falls below popularity, to near chance."""
    fedcl = ["method=fedcl", "backbone=mf", "sim.clients_per_round=all", "method.n_clusters=4"]
    _, env, auditor = audited([*fedcl, "privacy=none"], rounds=6, k=5)
    clear = auditor.score(env.train)
    assert clear["audit_shared_clients"] == float(env.clients_with_data().numel())
    assert clear["audit_shared_recall_at_5"] > 1.5 * clear["audit_shared_popularity_recall_at_5"]
    _, env, auditor = audited([*fedcl, "privacy=ldp", "privacy.epsilon=0.01"], rounds=6, k=5)
    noised = auditor.score(env.train)
    assert noised["audit_shared_recall_at_5"] < min(noised["audit_shared_popularity_recall_at_5"],
                                                    2 * noised["audit_shared_random_recall_at_5"])


# -- attack 2: rating inference from consecutive MF gradients --------------------------------------------------------

def test_plain_fedmf_gives_the_server_every_rating_to_float_precision():
    """FedMF without encryption: two consecutive uploads of a client fix its rating of every item it uploaded."""
    _, env, auditor = audited([*RATED, "method=fedmf", "method.encryption=none", "sim.clients_per_round=all"],
                              rounds=3)
    metrics = auditor.score(env.train)
    assert metrics["audit_rating_coverage"] == 1.0
    assert metrics["audit_rating_mae"] < 1e-3 < 0.5 < metrics["audit_rating_mean_mae"]


def test_encrypted_fedmf_leaks_no_values_and_fulltext_hides_the_rated_items():
    _, env, auditor = audited([*RATED, "method=fedmf", "method.mode=full", "sim.clients_per_round=all"], rounds=2)
    metrics = auditor.score(env.train)
    assert metrics["audit_values_hidden"] == 1.0 and "audit_rating_mae" not in metrics
    assert metrics["audit_auc"] == 0.5 and metrics["audit_round_precision"] == metrics["audit_base_rate"]


def test_paillier_fedmf_parttext_gives_the_ids_but_no_value():
    """Real ciphertexts (a short key): the server adds them without reading one; PartText's ids still tell."""
    _, env, auditor = audited([*RATED, "method=fedmf", "method.encryption=paillier", "method.key_length=128",
                               "sim.clients_per_round=8"], rounds=2)
    metrics = auditor.score(env.train)
    assert metrics["audit_values_hidden"] == 1.0 and "audit_rating_mae" not in metrics
    assert metrics["audit_intersect_precision"] == 1.0


def test_lightfr_grad_uploads_give_every_rating_away_in_one_round_and_para_uploads_none():
    """LightFR's Agg_grad rows are (R − s)·b_u + α_d·d_i: their signs are the user's code and their size the
    residual, so one round gives the ratings exactly; Agg_para uploads code copies, which the attack cannot read."""
    lightfr = ["dataset.ratings=true", "method=lightfr", "sim.clients_per_round=all"]
    _, env, auditor = audited([*lightfr, "method.targets=scaled"], rounds=1)
    metrics = auditor.score(env.train)
    assert metrics["audit_rating_coverage"] == 1.0 and metrics["audit_rating_mae"] < 1e-6
    # the authors' code's targets: only ratings above the midpoint leave the client, each to within the
    # integer truncation of its target (one code unit = half a 1/f of the rating range)
    method, env, auditor = audited(lightfr, rounds=1)
    metrics = auditor.score(env.train)
    half_step = (method.scale.high - method.scale.low) / (2 * env.backbone.config.dim)
    assert 0 < metrics["audit_rating_coverage"] < 1 and metrics["audit_rating_mae"] <= half_step
    _, env, auditor = audited([*lightfr, "method.aggregation=para"], rounds=1)
    metrics = auditor.score(env.train)
    assert "audit_rating_mae" not in metrics and "audit_shared_clients" not in metrics
    assert metrics["audit_intersect_precision"] == 1.0  # the ids still tell the rated items


def test_fedrec_hybrid_filling_blurs_the_rating_attack():
    """FedRec's sampled items enter the attacker's system as if rated: the inferred ratings are far from exact."""
    _, env, auditor = audited([*RATED, "method=fedrec", "method.rho=1", "sim.clients_per_round=all"], rounds=3)
    assert auditor.score(env.train)["audit_rating_mae"] > 1e-2


# -- bad input ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("override,field", [("audit.attacks=[rated_set,gradients]", "audit.attacks"),
                                            ("audit.k=0", "audit.k"), ("audit.k=1000", "audit.k")])
def test_bad_audit_settings_are_named_before_training(override, field):
    from fedrun.app.experiment import build_run

    with pytest.raises(ConfigError, match=field):
        build_run(compose_cfg([*SMALL, "audit=server", override]))


def test_the_report_gives_the_audited_runs_leakage_over_seeds_and_leaves_unaudited_runs_out():
    import pandas as pd

    from fedrun.app.report import audit_section

    def run(seed: int, audit: str, auc: float | None) -> dict:
        row = {"run_id": f"{audit}{seed}", "status": "FINISHED", "start_time": seed, "param:choices.method": "fedrec",
               "param:choices.backbone": "pmf", "param:choices.dataset": "ml-100k", "param:choices.audit": audit,
               "param:sim.seed": str(seed)}
        return row if auc is None else {**row, "metric:audit_auc": auc}

    section = audit_section(pd.DataFrame([run(1, "server", 0.9), run(2, "server", 0.8), run(1, "none", None)]))
    assert "| fedrec | pmf      | ml-100k | 2    | 0.8500 ± 0.0707 |" in section
    assert audit_section(pd.DataFrame([run(1, "none", None)])) == ""
    # runs that differ only in what the audit looked at are one row: the audit changes no training number
    attacks = [{**run(1, "server", 0.9), "param:audit.attacks": "[rated_set]"},
               {**run(2, "server", 0.8), "param:audit.attacks": "[rated_set, membership]"}]
    assert "| fedrec | pmf      | ml-100k | 2    | 0.8500 ± 0.0707 |" in audit_section(pd.DataFrame(attacks))


@pytest.mark.parametrize("option", federated_options())
def test_every_federated_method_runs_a_round_under_the_audit_or_refuses_it_by_name(option):
    from hydra.utils import get_class

    from fedrun.app.plan import plan

    overrides = [f"method={option}", *SETTINGS.get(option, [])]
    p = plan(compose_cfg([*SMALL, *overrides]))
    if get_class(p.cfg.method._target_).needs(p.method_config).no_audit:  # FCF: one closed-form sum, nothing to see
        with pytest.raises(ConfigError, match="audit='server' is not allowed"):
            plan(compose_cfg([*SMALL, *overrides, "audit=server"]))
        return
    _, env, auditor = audited(overrides, rounds=2)
    assert "audit_clients" in auditor.score(env.train)


# -- attack 4: an uploaded row's membership from its direction --------------------------------------------------------

def mf_round(user_vectors: torch.Tensor, held: list[list[int]], negatives: list[list[int]]) -> Uploads:
    """The BPR-MF rows of one round: +c·u for each of the client's items, −c·u for each negative (c varies)."""
    client, item, delta = [], [], []
    for c, (mine, others) in enumerate(zip(held, negatives)):
        for i in mine + others:
            client.append(c)
            item.append(i)
            delta.append((1.0 if i in mine else -1.0) * (0.5 + 0.1 * (i % 5)) * user_vectors[c])
    return Uploads(len(held), torch.tensor(client), torch.tensor(item), torch.stack(delta))


def test_the_rows_direction_tells_a_clients_items_from_its_negatives_once_it_has_a_history():
    """Rows on each client's line, items on one side and fresh negatives on the other: the line is found exactly
    (|cos| = 1). From the second round the client's recurring items orient it, and every guess is right."""
    from fedrun.audit.membership import SignMembershipInference

    gen = torch.Generator().manual_seed(0)
    users = torch.randn(3, 8, generator=gen)
    held = [[0, 1, 2], [3, 4], [5, 6, 7, 8]]
    inference = SignMembershipInference(3, 40, torch.device("cpu"))
    for r in range(3):
        negatives = [[10 + 3 * r + c, 20 + 3 * r + c] for c in range(3)]  # redrawn each round
        inference.observe(mf_round(users, held, negatives), torch.tensor([0, 1, 2]))
    assert torch.allclose(torch.cat(inference.scores[1:]).abs(), torch.ones(2 * 15), atol=1e-5)
    later = torch.cat(inference.scores[1:])
    truth_side = torch.tensor([1.0 if (int(k) % 40) < 9 else -1.0 for k in torch.cat(inference.keys[1:])])
    assert torch.equal(torch.sign(later), truth_side)
    metrics = inference.score(store_of(torch.zeros(3, 40, dtype=torch.bool).index_put_(
        (torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2]), torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8])), torch.tensor(True))))
    assert metrics["audit_sign_precision"] > 0.9 and metrics["audit_sign_item_recall"] == 1.0
    assert metrics["audit_line_auc"] == pytest.approx(0.5, abs=0.02)  # every row on its line: distance tells nothing


def test_the_pooled_auc_equals_a_brute_force_count():
    from fedrun.audit.membership import pooled_auc

    gen = torch.Generator().manual_seed(3)
    scores = torch.randint(0, 6, (200,), generator=gen).double()  # many ties
    positive = torch.rand(200, generator=gen) < 0.3
    pos, neg = scores[positive], scores[~positive]
    brute = ((pos[:, None] > neg[None, :]).double() + 0.5 * (pos[:, None] == neg[None, :]).double()).mean()
    assert pooled_auc(scores, positive) == pytest.approx(float(brute), abs=1e-12)


@pytest.mark.parametrize("overrides", [["sim.clients_per_round=all"],
                                       ["method=fedcl", "backbone=mf", "sim.clients_per_round=all",
                                        "method.n_clusters=4"]])
def test_the_sign_of_an_uploaded_row_says_what_its_id_does_not(overrides):
    """FedAvg's and FedCL's rows of a client lie on its user vector's line: their signs separate its items from its
    negatives far better than the ids alone (whose precision is the share of items among the uploaded rows)."""
    _, env, auditor = audited(overrides, rounds=6)
    metrics = auditor.score(env.train)
    assert metrics["audit_sign_auc"] > 0.85
    assert metrics["audit_sign_precision"] > 1.5 * metrics["audit_round_precision"]


def test_ciphertexts_leave_the_sign_attack_nothing():
    _, env, auditor = audited([*RATED, "method=fedmf", "sim.clients_per_round=all"], rounds=2)
    assert "audit_sign_auc" not in auditor.score(env.train)


def test_fedrecpp_denoises_the_sum_not_what_each_client_sends():
    """FedRec++'s ordinary clients upload FedRec's rows, virtual ratings included: the rating attack reads them
    blurred, as FedRec's at the same ρ, though the model equals FedRec with ρ = 0 (at ρ = 0 the attack is exact)."""
    rho = [*RATED, "method.rho=1", "sim.clients_per_round=all"]
    _, env, fedrec = audited([*rho, "method=fedrec"], rounds=3)
    _, _, fedrecpp = audited([*rho, "method=fedrecpp", "method.denoisers=2"], rounds=3)
    plain, denoised = fedrec.score(env.train), fedrecpp.score(env.train)
    assert 0.9 < denoised["audit_rating_coverage"] < 1.0  # the denoisers' own rows reach the server only summed
    assert denoised["audit_rating_mae"] > 1e-2 and plain["audit_rating_mae"] > 1e-2
