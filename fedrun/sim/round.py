"""The federated round, written once (DESIGN.md, "Data flow of one run").

Round t, in the order of the numbered comments of ``FederatedRound.train_round``:
  1. sample the round's clients (a function of the seed and t only);
  2. download: the clients receive the public model view (counted in bytes down), and the
     method's declared exchange runs (FedCL: embeddings up, semi-hard negatives down);
  3. the client program's step, vectorized per bucket of clients → uploads, new private rows
     (written back on the client side), losses;
  4. the privacy transform of each bucket's uploads, on the client side;
  5. the client program's protocol phase, if it has one (FedRec++'s relay to denoisers);
  6. the attack's clients craft their uploads from the same model view and join the benign ones;
  7. guards: declared fields only, finite values;
  8. aggregation: ``defense.aggregate`` — or, for a method whose server rule is a sum, the
     defense's exact sum through the method's reducer (FedMF: a Paillier sum) — the one path;
  9. the server program's step on the aggregate (``method.server``, built without client data);
 10. accounting: bytes each way, per-round metrics (returned, not stashed).
When exact, steps 3–8 collapse into the method's fast path (the FedSGD pass: one backward, no
per-client copies), which aggregates with the defense's linear weights.

The server side (steps 8–9) receives ``Uploads`` / ``Aggregate`` and the senders' ids only.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from fedrun.attack.base import Attack
from fedrun.audit.base import Auditor
from fedrun.audit.none import NoAudit
from fedrun.core.seeding import generator
from fedrun.defense.base import Defense
from fedrun.defense.diagnostics import target_uploads
from fedrun.kernels.config import SimConfig
from fedrun.kernels.guards import LEARNING_RATE, check_finite, check_upload_fields, check_upload_values, check_uploads
from fedrun.kernels.sampling import ClientSampler
from fedrun.method.base import RoundStats
from fedrun.method.federated import ClientResult, FederatedMethod
from fedrun.privacy.base import Privacy
from fedrun.sim.distributed import SINGLE, World, check_shardable
from fedrun.types import Aggregate, RoundContext, Uploads

ATTACK_STEP = "Lower attack.lr (the step of a malicious upload; null: the method's client lr)."
PRIVACY_NOISE = ("Raise privacy.epsilon (or lower privacy.scale): the mechanism's noise has left the model's "
                 "scale.")


class FederatedRound:
    """Drives a federated method's rounds with the run's privacy mechanism, attack and defense; ``sim``: the
    round's own settings (clients per round, sampling, the seed), handed in by the run, not read back
    through the method."""

    def __init__(self, method: FederatedMethod, privacy: Privacy, attack: Attack, defense: Defense, sim: SimConfig,
                 world: World = SINGLE):
        self.method, self.privacy, self.attack, self.defense = method, privacy, attack, defense
        self.world = world  # the run's processes: each steps its share of the buckets (fedrun.sim.distributed)
        self.seed = sim.seed  # the privacy transforms' stream is keyed by it and the round
        clients = method.round_clients()
        self.sampler = ClientSampler(clients, sim.round_size(clients.numel()), sim.seed, sim.sampling == "independent")
        if world.sharded:
            check_shardable(method, world, self.sampler.per_round)
        defense.check_participants(self.sampler.per_round)
        self.exact_sum = method.needs(method.config).exact_sum is not None
        self.uses_fast_path = (method.fast_path_exact() and not privacy.transforms_uploads and not attack.active
                               and defense.linear and not world.sharded)  # the pass is not dealt out by bucket
        self.watched: torch.Tensor | None = None  # [T] the attack's target items, whose uploads each round counts
        self.audit: Auditor = NoAudit(None)  # an honest-but-curious server's view of the benign uploads (``audit``)
        # ε each client has spent on its noised item rows (basic composition: every row is a separate ε-LDP release
        # of the same client's data, so a round costs rows × ε and the rounds add up)
        self.rows_epsilon = (torch.zeros(int(clients.max()) + 1 if clients.numel() else 0, dtype=torch.float64)
                             if "item_rows" in privacy.targets and privacy.transforms_uploads else None)
        if self.rows_epsilon is not None:
            method.ledgers["epsilon_item_rows"] = self.rows_epsilon  # in the checkpoint
        # what scales the aggregate, named when it diverges: the clients' lr, and the attack's and the noise's if any
        self.aggregate_cause = " ".join([LEARNING_RATE] + [ATTACK_STEP] * attack.active
                                        + [PRIVACY_NOISE] * privacy.transforms_uploads)

    def audit_uploads(self, auditor: Auditor) -> None:
        """Hand ``auditor`` the benign uploads of every round as the server receives them (step 7); the round then
        takes the general path, since the FedSGD pass builds no uploads to see."""
        self.audit, self.uses_fast_path = auditor, False

    def watch_targets(self, targets: torch.Tensor) -> None:
        """Count each round's uploads of ``targets`` [T] (benign and malicious) beside the round's metrics."""
        self.watched = targets

    def rounds_per_epoch(self) -> int:
        return self.sampler.rounds_per_epoch

    def describe(self) -> dict:
        ranks = {"ranks": self.world.size} if self.world.sharded else {}
        return {"fedsgd_fast_path": self.uses_fast_path, **ranks} if self.method.has_fedsgd_path else ranks

    def train_round(self, round_index: int) -> RoundStats:
        method = self.method
        # 1. sample clients
        users = method.round_users(self.sampler, round_index)  # [B]
        per_epoch = self.rounds_per_epoch()
        ctx = RoundContext(round_index, round_index // per_epoch, int(users.numel()),
                           last_of_epoch=(round_index + 1) % per_epoch == 0)
        # 2. download the model view; the method's exchange before local training
        exchange = method.exchange(users, round_index, self.privacy)
        if exchange.shared is not None and self.audit.active:
            self.audit.observe_shared(exchange.shared, method.server_view(ctx), ctx)  # what the server received
        fast = method.fast_round(users, round_index, exchange.sent, self.defense) if self.uses_fast_path else None
        extra = dict(exchange.metrics)
        if fast is not None:  # steps 3–8 as one pass
            check_finite(method.client.private.user[users], f"the client step ({type(method).__name__})", round_index)
            aggregate, losses, rows, benign = fast.aggregate, fast.losses, fast.rows_per_client, None
            fetched = 0.0  # the FedSGD pass runs for user contexts that fetch nothing (ids, sequences)
        else:
            problems = method.client.problems(users, round_index, exchange.sent)
            results = self.client_steps(problems, ctx)  # 3–4
            losses = torch.cat([r.loss for r in results])
            rows = torch.cat([p.item_mask.sum(1) for p in problems])
            fetched = float(torch.cat([p.context_bytes_down() for p in problems]).mean())  # a graph's neighbours
            senders = torch.cat([p.batch.users for p in problems])  # [B] in upload order (by bucket)
            benign = Uploads.concat([r.uploads for r in results])
            extra.update(method.client.metrics({k: [r.stats[k] for r in results] for k in results[0].stats}))
            # 5. the client program's protocol phase
            uploads, protocol_metrics = method.client.protocol(benign, results, ctx)
            extra.update(protocol_metrics)
            # 6. the attack's clients join
            crafted = self.attack.craft(method.server.public, ctx)  # the model view the round downloads
            if crafted is not None:
                check_upload_values(crafted, f"the attack's uploads ({type(self.attack).__name__})", round_index,
                                    ATTACK_STEP)
            if self.watched is not None:
                extra.update(target_uploads(uploads, crafted, self.watched.to(uploads.row_item.device)))
            if crafted is not None:
                uploads = Uploads.concat([uploads, crafted.to(uploads.row_delta.device)])
            # 7. guards
            check_uploads(uploads, method.upload_schema(), round_index, f"the client step ({type(method).__name__})")
            extra.update(method.observe_uploads(benign, senders, ctx))
            extra.update(self.account_epsilon(benign, senders))
            if self.audit.active:  # what the server received of the benign clients
                self.audit.observe(benign, senders, method.server_view(ctx), ctx)
            # 8. the one aggregation path
            aggregate = self.aggregate(uploads, senders, ctx)
        check_finite(aggregate.item_delta, f"the aggregate (defense={type(self.defense).__name__})", round_index,
                     self.aggregate_cause)
        # 9. the server program's step
        extra.update(method.server.step(aggregate, ctx))
        method.server.steps += 1
        # 10. accounting
        traffic = method.traffic(rows, benign)
        extra.update(traffic.metrics)
        return RoundStats(float(losses.mean()), ctx.n_clients, traffic.up + exchange.bytes_up,
                          traffic.down + exchange.bytes_down + fetched, extra)

    def account_epsilon(self, benign: Uploads, senders: torch.Tensor) -> dict[str, float]:
        """The privacy budget the round's clients spent on their noised item rows, composed over their rounds
        (basic composition): the largest this round and the largest over the run so far."""
        if self.rows_epsilon is None or benign.row_delta.shape[0] == 0:
            return {}
        epsilon = self.privacy.epsilon_per_upload(benign.row_delta.shape[1])
        if epsilon is None:
            return {}
        rows = torch.bincount(benign.row_client, minlength=benign.n_clients).to(torch.float64).cpu()  # [B]
        spent = rows * epsilon
        self.rows_epsilon.index_add_(0, senders.cpu(), spent)
        return {"epsilon_item_rows_round_max": float(spent.max()), "epsilon_item_rows_spent_max":
                float(self.rows_epsilon.max()), "epsilon_per_item_row": float(epsilon)}

    def client_steps(self, problems: list, ctx: RoundContext) -> list[ClientResult]:
        """Steps 3–4 per bucket: the vectorized client step (each rank steps the buckets dealt to it, then every
        rank has every bucket's result), its new private rows written back on the client side, then the
        privacy transform of what leaves the bucket's clients."""
        client = self.method.client
        device = self.method.server.public.item.device
        gen = generator(self.seed, "privacy", ctx.round, device)
        component = f"the client step ({type(self.method).__name__})"
        schema = self.method.upload_schema()
        owners = self.world.owners([problem.item_mask.numel() for problem in problems])
        mine = {b: client.step(problem) for b, problem in enumerate(problems) if owners[b] == self.world.rank}
        results = []
        for problem, result in zip(problems, self.world.gather_results(mine, len(problems), device)):
            check_finite(result.user, component, ctx.round)
            check_upload_fields(result.uploads, schema, component)  # before the round joins the buckets' uploads
            client.write_back(problem.batch.users, result)
            privatized = self.privacy.apply(result.uploads, gen)
            if self.privacy.transforms_uploads:
                check_upload_values(privatized, f"the privacy mechanism ({type(self.privacy).__name__})", ctx.round,
                                    PRIVACY_NOISE)
            results.append(replace(result, uploads=privatized))
        return results

    def aggregate(self, uploads: Uploads, senders: torch.Tensor, ctx: RoundContext) -> Aggregate:
        """Step 8: every server-side sum goes through the defense (the server program's own aggregation, if
        it has one, as well)."""
        own = self.method.server.aggregate(uploads, senders, self.defense, ctx)
        if own is not None:
            return own
        if self.exact_sum:
            return self.defense.exact_sum(uploads, self.method.reducer())
        return self.defense.aggregate(uploads, ctx)
