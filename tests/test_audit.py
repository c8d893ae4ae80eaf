"""The server audit (issue #65, attack 1): rated-set inference from upload ids. Its guesses against cases whose answer
is known, its AUC against a brute-force count, and the contract: it sees only what the server receives, reads the
truth only when it scores, and changes no training number."""

from __future__ import annotations

import pytest
import torch

from fedrun.audit.server import ServerAudit
from fedrun.data.client_store import ClientStore
from fedrun.errors import ConfigError
from fedrun.types import RoundContext, Uploads
from tests.conftest import compose_cfg, make_method, round_of
from tests.test_privacy_boundary import RATED, Poison, reachable

GENERAL = ["sim.fast_path=off"]


def audited(overrides: list[str], rounds: int = 4):
    method, env = make_method(overrides)
    auditor = ServerAudit(None)
    auditor.start(env.n_users, env.n_items, env.device)
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
    auditor = ServerAudit(None)
    auditor.start(n_users, n_items, torch.device("cpu"))
    gen = torch.Generator().manual_seed(3)
    for r in range(4):
        senders = torch.randperm(n_users, generator=gen)[:3]
        mask = torch.rand(3, n_items, generator=gen) < 0.4
        client, item = mask.nonzero(as_tuple=True)
        auditor.observe(Uploads(3, client, item, torch.zeros(item.numel(), 1)), senders, RoundContext(r, 0, 3))
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


def test_the_auditor_holds_no_client_data_and_observes_with_it_poisoned():
    method, env = make_method(GENERAL)
    auditor = ServerAudit(None)
    auditor.start(env.n_users, env.n_items, env.device)
    observe = auditor.observe

    def poisoned(*args):
        saved = (env.train, env.split, method.client.private)
        env.train, env.split, method.client.private = Poison("ClientStore"), Poison("Split"), Poison("PrivateParams")
        try:
            return observe(*args)
        finally:
            env.train, env.split, method.client.private = saved

    auditor.observe = poisoned  # type: ignore[method-assign]
    round_of(method).audit_uploads(auditor)
    for r in range(2):
        round_of(method).train_round(r)
    held = reachable(auditor)
    client_side = [env.train, env.train.items, env.split, method.client.private, method.client.private.user]
    assert not [c for c in client_side if any(c is obj for obj in held)]


def test_an_audit_of_a_centralized_method_is_refused_before_any_data_is_read():
    from fedrun.app.plan import plan

    with pytest.raises(ConfigError, match="audit='server' is not allowed: expected none for a centralized method"):
        plan(compose_cfg(["dataset=synthetic", "dataset.n_users=60", "dataset.n_items=80", "track=none",
                               "method=central", "audit=server"]))
