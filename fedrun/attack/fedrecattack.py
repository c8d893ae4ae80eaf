"""FedRecAttack (Rong, Ye, Wang, He, Chen, ICDE 2022, "FedRecAttack: model poisoning attack to
federated recommendation"), as its authors' code runs it (``../shared/REFERENCE.md`` §2).

The attacker knows a share of the benign interactions (``known_fraction``, 1 %, drawn once with
``known_seed``). All malicious clients share one approximation of the benign users:

1. Fit (Eq. 5–6): whenever the downloaded item table has changed, one epoch of BPR,
   Σ −log σ(ŝ(u, i) − ŝ(u, j)) over the known pairs with one fresh negative j each (not a known
   item of u), in mini-batches of ``attack_batch_size`` users, Adam at ``attack_lr`` on the
   approximated user embeddings Û (drawn once, N(0, ``init_std``²)); items and shared weights frozen.
2. Poison (Eq. 7–9): for every approximated user u and target t that u is not known to hold, the
   item ranked ``top_k``-th by ŝ(u, ·) (known items and targets excluded; the next target takes the
   (``top_k``−1)-th, as the code pops its top-k list) is the item t must overtake:
   ℓ = Σ g(ŝ(u, j) − ŝ(u, t)) with g(x) = x for x ≥ 0 and eˣ − 1 below (still pushes once t leads).
   G = ∂ℓ/∂(item table) [I, d].
3. Upload: each malicious client uploads the rows of its own ``items_limit`` items — the targets plus
   items drawn once without replacement with probability ∝ ‖G_i + noise‖ — each row L2-clipped to
   ``grad_limit``, plus N(0, ``noise_var``) noise, as a client delta −lr × row (``lr`` null: the
   method's client lr). The clients of a round split G: in the code each subtracts what it sent
   from the shared G before the next one reads it, so the r-th client holding row i (in round
   order) sends G_i's direction with norm clamp(‖G_i‖ − r·grad_limit, 0, grad_limit). fedrun computes
   that closed form for all clients at once (no loop over clients); it leaves out the feedback of
   the earlier clients' noise into the later clients' rows (variance 1e-7 per coordinate).

Open points (config fields or stated here): the approximation scores with the method's backbone
(the code's MF dot product when ``backbone=mf``); with a backbone that has shared weights the
attacker uploads zero deltas for them (the code's model has none); every malicious client draws
its item set in the first round any of them joins, from that round's G (the code draws at each
client's own first round); a round whose model view equals the last one's goes on splitting what
the last round left of G, as the code's shared gradient does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedrun.attack.base import Attack, AttackSetup
from fedrun.attack.config import FedRecAttackConfig
from fedrun.backbone.base import PublicParams
from fedrun.core.seeding import generator
from fedrun.errors import ConfigError, check
from fedrun.types import RoundContext, Uploads

MASKED = -float(1 << 10)  # the code's score for excluded items
CHANGE_EPS = 1e-4  # the code refits only when Σ|Δ item table| ≥ this


class FedRecAttack(Attack):
    Config = FedRecAttackConfig
    needs = frozenset({"model_view", "known_interactions"})

    def setup(self, setup: AttackSetup) -> None:
        config, T = self.config, setup.targets.numel()
        if setup.known is None:  # the experiment hands it over because ``needs`` declares it
            raise ConfigError("attack", "fedrecattack", "known interactions (none were handed over)")
        check(T <= config.top_k, "attack.n_targets", T, f"at most top_k = {config.top_k} targets")
        check(T < config.items_limit <= setup.n_items, "attack.items_limit", config.items_limit,
              f"more than the {T} target(s) and at most the {setup.n_items} items")
        self.enlist(setup)
        self.backbone, self.known = setup.backbone, setup.known.to(setup.device)
        self.targets = setup.targets.to(setup.device)
        self.lr = config.lr if config.lr is not None else setup.client_lr
        draws = generator(setup.seed, "attack-users")
        self.users = (torch.randn(setup.n_users, setup.backbone.user_width, generator=draws)
                      * config.init_std).to(setup.device).requires_grad_(True)  # [U, du] Û
        self.optimizer = torch.optim.Adam([self.users], lr=config.attack_lr)
        self.fitted_on: torch.Tensor | None = None  # the item table Û was last fitted to
        self.gradient: torch.Tensor | None = None  # [I, di] what is left of G this round
        self.item_sets: torch.Tensor | None = None  # [M, L] each client's rows, drawn once
        self.refits = 0

    # ---- 1. fit the approximated users ----------------------------------------------------------

    def fit_users(self, item: torch.Tensor, net: dict[str, torch.Tensor]) -> float:
        """One epoch of BPR over the known pairs (Adam on Û only) → the epoch's mean loss per user."""
        known, n_users = self.known, self.users.shape[0]
        draws = generator(self.seed, "attack-fit", self.refits)
        order = torch.randperm(n_users, generator=draws).to(item.device)
        total = 0.0
        for start in range(0, n_users, self.config.attack_batch_size):  # the attacker's optimizer steps
            in_batch = torch.isin(known.user, order[start: start + self.config.attack_batch_size])
            user, pos = known.user[in_batch], known.item[in_batch]  # [N]
            neg = self.unknown_items(user, draws)  # [N]
            with torch.enable_grad():
                scores = self.backbone.score(self.users[user], item[torch.stack([pos, neg], 1)], net)  # [N, 2]
                loss = -F.logsigmoid(scores[:, 0] - scores[:, 1]).sum()
                self.optimizer.zero_grad()
                loss.backward()
            self.optimizer.step()  # also with an empty batch, as the code (Adam's momentum moves Û)
            total += float(loss.detach())
        return total / n_users

    def unknown_items(self, user: torch.Tensor, draws: torch.Generator) -> torch.Tensor:
        """[N] one uniform item per pair that the attacker does not know ``user`` to hold."""
        n_items = self.known.n_items
        item = torch.randint(n_items, user.shape, generator=draws).to(user.device)
        clash = self.known.contains(user, item)
        while bool(clash.any()):
            item[clash] = torch.randint(n_items, (int(clash.sum()),), generator=draws).to(user.device)
            clash = self.known.contains(user, item)
        return item

    # ---- 2. the poisoning gradient ------------------------------------------------------------

    def poison_gradient(self, item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        """G = ∂/∂(item table) Σ_{u, t ∉ known(u)} g(ŝ(u, j_ut) − ŝ(u, t)) → [I, di]."""
        users, known, targets = self.users.detach(), self.known, self.targets
        n_users, T, k = users.shape[0], targets.numel(), self.config.top_k
        with torch.no_grad():
            scores = self.backbone.score_full(users, item, net)  # [U, I]
            scores[known.user, known.item] = MASKED
            scores[:, targets] = MASKED
            top = scores.topk(k, dim=1).indices  # [U, k], best first
        user = torch.arange(n_users, device=item.device).repeat_interleave(T)  # [U·T]
        target = targets.repeat(n_users)  # [U·T]
        keep = ~known.contains(user, target)  # the pairs the code pushes
        popped = keep.view(n_users, T).cumsum(1).view(-1) - 1  # the code pops its top-k list once per pair
        user, target, popped = user[keep], target[keep], popped[keep]
        rival = top[user, k - 1 - popped]  # [N]
        table = item.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            pair = self.backbone.score(users[user], table[torch.stack([target, rival], 1)], net)  # [N, 2]
            gap = pair[:, 1] - pair[:, 0]
            loss = torch.where(gap >= 0, gap, torch.expm1(gap.clamp_max(0))).sum()
            (gradient,) = torch.autograd.grad(loss, table)
        return gradient

    # ---- 3. the malicious clients' uploads ----------------------------------------------------

    def choose_items(self, gradient: torch.Tensor) -> torch.Tensor:
        """[M, L] the targets, then items_limit − T items per client drawn without replacement ∝ ‖G_i + noise‖."""
        draws = generator(self.seed, "attack-item-sets")
        noisy = gradient.cpu() + torch.randn(gradient.shape, generator=draws) * self.config.noise_var ** 0.5
        weight = noisy.norm(dim=1)  # [I]
        weight[self.targets.cpu()] = 0
        others = torch.multinomial(weight.expand(self.n_clients, -1), self.config.items_limit - self.targets.numel(),
                                   replacement=False, generator=draws)  # [M, L − T]
        return torch.cat([self.targets.cpu().expand(self.n_clients, -1), others], 1).to(gradient.device)

    def split_among(self, sets: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """sets [M', L] in round order → their rows [M'·L, di]: the r-th holder of row i sends G_i's
        direction at norm clamp(‖G_i‖ − r·grad_limit, 0, grad_limit), plus noise; G keeps the rest."""
        gradient, limit = self.gradient, self.config.grad_limit
        flat = sets.reshape(-1)  # [M'·L]
        by_item = torch.argsort(flat, stable=True)  # holders of a row together, in round order
        _, holders = torch.unique_consecutive(flat[by_item], return_counts=True)
        first = torch.repeat_interleave(torch.cumsum(holders, 0) - holders, holders)
        rank = torch.empty_like(flat)
        rank[by_item] = torch.arange(flat.numel(), device=flat.device) - first  # [M'·L]
        norm = gradient[flat].norm(dim=1)  # [M'·L]
        sent = (norm - rank * limit).clamp(0, limit)
        rows = gradient[flat] * (sent / norm.clamp_min(1e-30)).unsqueeze(1)  # [M'·L, di]
        left = 1 - norm.new_zeros(gradient.shape[0]).index_add_(0, flat, sent)[flat] / norm.clamp_min(1e-30)
        self.gradient = gradient.index_copy(0, flat, gradient[flat] * left.clamp_min(0).unsqueeze(1))
        noise = torch.randn(rows.shape, generator=generator(self.seed, "attack-noise", ctx.round))
        return rows + noise.to(rows.device) * self.config.noise_var ** 0.5

    def craft(self, view: PublicParams, ctx: RoundContext) -> Uploads | None:
        clients = self.joining(ctx)
        if clients.numel() == 0:
            return None
        item = view.item.detach()
        net = {k: v.detach() for k, v in view.net.items()}
        if self.fitted_on is None or float((item - self.fitted_on).abs().sum()) >= CHANGE_EPS:
            self.fit_users(item, net)
            self.gradient, self.fitted_on, self.refits = self.poison_gradient(item, net), item.clone(), self.refits + 1
        if self.item_sets is None:
            self.item_sets = self.choose_items(self.gradient)
        sets = self.item_sets[clients]  # [M', L]
        M, L = sets.shape
        rows = self.split_among(sets, ctx)
        dense = {k: torch.zeros(M, *v.shape, dtype=v.dtype, device=v.device) for k, v in net.items()}
        client = torch.arange(M, device=item.device).repeat_interleave(L)
        return Uploads(M, client, sets.reshape(-1), -self.lr * rows, dense, torch.ones(M, device=item.device))
