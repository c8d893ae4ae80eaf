"""Training workloads: W0–W3 (FedAvg MF / NCF: the vectorized round against the per-client loop and a
centralized epoch), W6 (FedCL's FedSGD fast path), W10 (W0 with malicious clients), W11 (LightGCN over ego
graphs), W13 (PerFedRec++'s rounds)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import (
    COMMON,
    GOWALLA,
    MF,
    ML1M_8020,
    NCF,
    TINY_DATA,
    Workload,
    build_and_run,
    build_method,
    check_loop_agrees,
    loop_round,
    memory_note,
    peak_gpu_gb,
    reset_peak_rss,
    time_rounds,
    without_workloads,
    write_table,
)

from fedrun.app.compose import compose
from fedrun.testing import kernel_floor
from fedrun.testing.measure import machine, peak_rss_gb, sync

TRAIN = {
    "w0": Workload("w0", "FedAvg-MF (BPR, dim 32, 1 neg., 1 local SGD step), ml-1m split80-20",
                   ML1M_8020, MF, 256),
    "w1": Workload("w1", "FedAvg-NCF (4 neg., 1 local epoch), ml-1m split80-20", ML1M_8020, NCF, 256),
    "w2": Workload("w2", "FedAvg-MF (BPR, dim 32, 1 neg.), gowalla", GOWALLA, MF, 1024),
    "w3": Workload("w3", "FedAvg-NCF (4 neg., 5 local epochs, Adam), ml-1m split80-20", ML1M_8020,
                   NCF + ["sim.local_epochs=5", "method.optimizer.name=adam", "method.optimizer.lr=0.001"], 256,
                   central=["method.optimizer.name=adam", "method.optimizer.lr=0.001"]),
}


FLOORED = ("w0", "w2")  # MF with BPR, one local SGD step: the rounds with this kernel floor (W1: NeuMF's, below)


def time_kernel_floor(env, clients: int, rounds: int, dim: int = 32) -> tuple[float, float]:
    """(s / round of the bare arithmetic on pre-drawn pairs, s / round with the drawing) of ``rounds`` rounds of
    ``clients`` clients (``fedrun.testing.kernel_floor``), measured in this process beside fedrun's round."""
    generator = torch.Generator().manual_seed(0)
    user = torch.randn(env.n_users, dim, generator=generator).to(env.device) * 0.1
    item = torch.randn(env.n_items, dim, generator=generator).to(env.device) * 0.1
    eligible = env.clients_with_data()  # [users with training data] (on the CPU, as the store)
    drawn = [kernel_floor.draw_pairs(env.train, eligible, clients, env.n_items, generator) for _ in range(rounds + 1)]
    drawn = [tuple(t.to(env.device) for t in round_) for round_ in drawn]
    kernel_floor.mf_bpr_round(user, item, *drawn[0], lr=10.0, user_lr=10.0)  # warm-up
    sync(env.device)
    started = time.perf_counter()
    for round_ in drawn[1:]:
        kernel_floor.mf_bpr_round(user, item, *round_, lr=10.0, user_lr=10.0)
    sync(env.device)
    arithmetic = (time.perf_counter() - started) / rounds
    started = time.perf_counter()
    for _ in range(rounds):
        round_ = kernel_floor.draw_pairs(env.train, eligible, clients, env.n_items, generator)
        kernel_floor.mf_bpr_round(user, item, *(t.to(env.device) for t in round_), lr=10.0, user_lr=10.0)
    sync(env.device)
    return arithmetic, (time.perf_counter() - started) / rounds


def time_neumf_floor(env, clients: int, rounds: int, batch_size: int = 1024,
                     negatives: int = 4) -> tuple[float, float]:
    """W1's floors (``fedrun.testing.kernel_floor.neumf_bce_step``) at the run's own NeuMF shapes (``env.backbone``):
    (s / round of a round of ``clients`` clients, every positive with ``negatives`` negatives, each client's mean;
    s / epoch of the centralized epoch over every training pair in batches of ``batch_size`` positives with theirs,
    the batch mean), on examples drawn beforehand, on the run's device."""
    generator, device, backbone = torch.Generator().manual_seed(0), env.device, env.backbone
    user = (torch.randn(env.n_users, backbone.user_width, generator=generator) * 0.1).to(device)
    item = (torch.randn(env.n_items, backbone.item_width, generator=generator) * 0.1).to(device)
    net = {name: value.to(device) for name, value in backbone.init_net(generator).items()}
    eligible = env.clients_with_data()
    steps = []
    for _ in range(rounds + 1):
        picked, owner, positive, _ = kernel_floor.draw_pairs(env.train, eligible, clients, env.n_items, generator)
        owner, items, label = kernel_floor.with_negatives(owner, positive, negatives, env.n_items, generator)
        weight = 1.0 / torch.bincount(owner, minlength=picked.numel()).clamp_min(1).to(torch.float32)[owner]
        steps.append(tuple(t.to(device) for t in (picked, owner, items, label, weight)))  # a group per client
    pair_user, _, pair_item, _ = env.train.flat(eligible)  # every training pair: owner index, item
    pair_user = eligible[pair_user]
    order = torch.randperm(pair_item.numel(), generator=generator)
    batches = []
    for rows in torch.split(order, batch_size):  # a group per positive: it and its negatives share the user
        group, items, label = kernel_floor.with_negatives(torch.arange(rows.numel()), pair_item[rows], negatives,
                                                          env.n_items, generator)
        weight = torch.full(label.shape, 1.0 / label.numel())
        batches.append(tuple(t.to(device) for t in (pair_user[rows], group, items, label, weight)))

    def timed(examples: list, lr: float) -> float:
        sync(device)
        started = time.perf_counter()
        for example in examples:
            kernel_floor.neumf_bce_step(user, item, net, *example, gmf_dim=backbone.gmf_dim, lr=lr)
        sync(device)
        return time.perf_counter() - started

    timed(steps[:1], 0.01)  # warm-up
    return timed(steps[1:], 0.01) / rounds, timed(batches, 0.05)


def bench_train(work: Workload, args, out: Path) -> str:
    data = TINY_DATA if args.tiny else work.data
    clients = min(work.clients, 64) if args.tiny else work.clients
    overrides = data + COMMON + work.overrides + [f"sim.clients_per_round={clients}", f"sim.device={args.device}"]
    reset_peak_rss()
    fedrun, env = build_method(overrides)
    t_fedrun = time_rounds(fedrun, args.rounds)
    rss_fedrun, memory = peak_rss_gb(), memory_note(env.device)
    paths = [("fedrun (FedSGD fast path)" if fedrun.uses_fast_path else "fedrun (general)", t_fedrun)]
    general = fedrun
    if fedrun.uses_fast_path:
        general, _ = build_method(overrides + ["sim.fast_path=off"])
        paths.append(("general (copies)", time_rounds(general, args.rounds)))
    max_diff = check_loop_agrees(general, env, args.rounds + 2)
    t_loop = sum(loop_round(general, env, args.rounds + 3 + r)[0] for r in range(args.loop_rounds)) / args.loop_rounds
    paths.append(("loop (deepcopy)", t_loop))
    federated_only = ("method.loss_reduction=", "sim.local_epochs=")  # FedAvg's settings that central refuses
    central, _ = build_method([o for o in overrides if not o.startswith(federated_only)]
                              + ["method=central", "method.optimizer.name=sgd", "method.optimizer.lr=0.05",
                                 "method.batch_size=1024", *work.central])
    sync(env.device)
    started = time.perf_counter()
    central.train_round(0)
    sync(env.device)
    t_central = time.perf_counter() - started
    per_epoch = fedrun.rounds_per_epoch()
    floor, central_floor = None, None
    if work.name == "w1":  # NeuMF's arithmetic, the same for both epochs (issue #67)
        floor, central_floor = time_neumf_floor(env, clients, args.rounds)
        paths.append(("kernel floor (arithmetic)", floor))
    elif work.name in FLOORED:  # the round's bare arithmetic, and with its sampling, in this process (issue #67)
        floor, floor_sampled = time_kernel_floor(env, clients, args.rounds)
        paths += [("kernel floor (arithmetic)", floor), ("kernel floor + sampling", floor_sampled)]
    rows = [[name, f"{s:.4f}", f"{clients / s:,.0f}", f"{t_loop / s:.1f}×", f"{s * per_epoch:.2f}",
             f"{s * per_epoch / t_central:.2f}×", f"{s / floor:.1f}×" if floor else ""] for name, s in paths]
    rows.append(["central epoch", "", "", "", f"{t_central:.2f}", "1.00×",
                 f"{t_central / central_floor:.1f}× its own" if central_floor else ""])
    if central_floor:
        rows.append(["kernel floor of the central epoch", "", "", "", f"{central_floor:.2f}",
                     f"{central_floor / t_central:.2f}×", "1.0× its own"])
    header = [f"{work.name.upper()} path", "s / round", "client updates / s", "vs loop", "s / epoch",
              "epoch vs central", "× kernel floor"]
    caption = (f"{work.name.upper()} {work.title}{' [tiny synthetic]' if args.tiny else ''}: {clients} clients/round, "
               f"{per_epoch} rounds/epoch; {machine(args.device)}; "
               f"peak RSS of the fedrun path {rss_fedrun:.2f} GB{memory}; "
               f"loop vs general path after one round from one state: max |Δ item| = {max_diff:.1e}")
    return write_table(out, work.name, header, rows, caption)


W6_FEDCL = ["method=fedcl", "privacy=ldp", "backbone=fedcl/ncf", "dataset.min_item_count=5", "dataset.split.valid=true",
            "eval=full", "sim.clients_per_round=16", "track=none", "sim.progress=false"]


def bench_w6(args, out: Path) -> str:
    """FedCL-NCF rounds (exchange, clustering every 100 rounds amortised, local step, server Adam):
    the fast path and the general path from the same seed, and how far apart their models end."""
    data = TINY_DATA if args.tiny else ["dataset=ml-1m"]
    overrides = data + W6_FEDCL + [f"sim.device={args.device}"]
    paths = []
    for name, extra in [("fedrun (FedSGD fast path)", []), ("general (copies)", ["sim.fast_path=off"])]:
        method, env = build_method(overrides + extra)
        paths.append((name, time_rounds(method, args.rounds), method))
    (_, t_fast, fast), (_, t_general, general) = paths
    max_diff = float((fast.method.public.item - general.method.public.item).abs().max())
    per_epoch = fast.rounds_per_epoch()
    header = ["W6 path", "s / round", "vs general", "s / epoch", "20 epochs (h)"]
    rows = [[name, f"{s:.4f}", f"{t_general / s:.1f}×", f"{s * per_epoch:.1f}", f"{s * per_epoch * 20 / 3600:.2f}"]
            for name, s, _ in paths]
    caption = (f"W6 FedCL-NCF, Table 3 settings{' [tiny synthetic]' if args.tiny else ', ml-1m'}: 16 clients/round, "
               f"{per_epoch} rounds/epoch, {args.rounds} timed rounds after 2 warm-up; {machine(args.device)}; "
               f"after {args.rounds + 2} rounds from one seed: max |Δ item| fast vs general = {max_diff:.1e}")
    return write_table(out, "w6", header, rows, caption)


EVERY_ROUND = "attack.participation=every_round"  # the cost of a round the attackers join (all of them, every round)
W10_CASES = [("no attack", []),
             ("A-hum 0.1%", ["attack=a_hum", "attack.fraction=0.001", "attack.lr=0.01", EVERY_ROUND]),
             ("A-hum 5%", ["attack=a_hum", "attack.fraction=0.05", "attack.lr=0.01", EVERY_ROUND]),
             ("FedRecAttack 5%", ["attack=fedrecattack", EVERY_ROUND])]
TINY_FRACTION = "attack.fraction=0.004"  # the tiny data's 300 users: 0.1 % is no malicious client, this is one


def w10_case(args, case: int) -> tuple[float, float, int]:
    """(s / round, peak GB, malicious clients) of one W10 case."""
    from fedrun.app.plan import build_run

    data = TINY_DATA if args.tiny else ML1M_8020
    clients = 64 if args.tiny else 256
    case_overrides = W10_CASES[case][1]
    if args.tiny:
        case_overrides = [TINY_FRACTION if o == "attack.fraction=0.001" else o for o in case_overrides]
    overrides = data + COMMON + MF + [f"sim.clients_per_round={clients}", "sim.fast_path=off",
                                      f"sim.device={args.device}", *case_overrides]
    built = build_run(compose(overrides))
    reset_peak_rss()
    seconds = time_rounds(built.trainer, args.rounds)
    gpu = peak_gpu_gb(built.env.device)
    return seconds, peak_rss_gb() if gpu is None else gpu, getattr(built.plan.attack, "n_clients", 0)


def bench_w10(args, out: Path) -> str:
    """W0's round on the general path (an attack turns the FedSGD shortcut off) without and with A-hum
    clients (10 synthetic users each, 30 mining steps), each in its own process for its peak RSS."""
    if args.case is not None:
        print(json.dumps(w10_case(args, args.case)))
        return ""
    rows, base = [], None
    for case, (name, _) in enumerate(W10_CASES):
        if args.tiny:  # a smoke test: in this process (its peak RSS is not the case's own)
            seconds, rss, malicious = w10_case(args, case)
        else:
            command = [sys.executable, str(Path(__file__).with_name("bench.py")), *without_workloads(sys.argv[1:]),
                       "--workloads", "w10",
                       "--case", str(case)]
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise SystemExit(f"W10 case {name} failed:\n{result.stderr[-3000:]}")
            seconds, rss, malicious = json.loads(result.stdout.strip().splitlines()[-1])
        base = base or seconds
        rows.append([name, str(malicious), f"{seconds:.4f}", f"{seconds / base:.2f}×", f"{rss:.2f}"])
    caption = (f"W10 W0's round with malicious clients{' [tiny synthetic]' if args.tiny else ''} (general path, "
               f"{args.rounds} timed rounds after 2 warm-up; A-hum: 10 synthetic users and 30 mining steps per "
               f"malicious client, attack.lr 0.01: at W0's client lr of 10 the mined users diverge; FedRecAttack: "
               f"1% known interactions, one epoch of fitting per round, every client joins every round); "
               f"{machine(args.device)}")
    return write_table(out, "w10", ["W10 case", "malicious clients", "s / round", "vs no attack", "peak RSS GB"],
                       rows, caption)


W11_LIGHTGCN = ["method=fedavg", "backbone=lightgcn", "backbone.dim=64", "backbone.layers=2",
                "method.optimizer.name=sgd", "method.optimizer.lr=100", "method.optimizer.user_lr=null",
                "method.loss_reduction=mean", "track=none", "sim.progress=false"]


def bench_w11(args, out: Path) -> str:
    """A federated LightGCN round (the round's clients refresh, expand their ego graphs, train, upload)
    bucketed as runs do, against the same round one client per bucket — a per-client loop over the same
    code, which must give the same item table — and against one centralized LightGCN epoch, per interaction."""
    data = TINY_DATA if args.tiny else GOWALLA
    clients = 64 if args.tiny else 256
    base = data + W11_LIGHTGCN + [f"sim.clients_per_round={clients}", f"sim.device={args.device}"]
    reset_peak_rss()
    fedrun, env = build_method(base)
    t_fedrun = time_rounds(fedrun, args.rounds)
    rss, memory = peak_rss_gb(), memory_note(env.device)
    loop, _ = build_method(base + [f"sim.buckets={clients}", "sim.min_bucket_clients=1"])
    t_loop = time_rounds(loop, args.loop_rounds)
    max_diff = float((loop.method.public.item - build_and_run(base, args.loop_rounds + 2)).abs().max())
    interactions = float(env.train.sizes(fedrun.sampler.users(0)).sum())
    central, _ = build_method(data + ["method=central", "backbone=lightgcn", "backbone.dim=64", "backbone.layers=2",
                                      "method.batch_size=2048", "track=none", "sim.progress=false",
                                      f"sim.device={args.device}"])
    sync(env.device)
    started = time.perf_counter()
    central.train_round(0)
    sync(env.device)
    t_central = time.perf_counter() - started
    per_central = t_central / env.train.items.numel()
    rows = [[name, f"{s:.3f}", f"{s / interactions * 1e6:.1f}", f"{t_loop / s:.1f}×",
             f"{s / interactions / per_central:.1f}×"]
            for name, s in [("fedrun (bucketed)", t_fedrun), ("per-client loop (one per bucket)", t_loop)]]
    rows.append(["central epoch (batch 2,048)", f"{t_central:.2f}", f"{per_central * 1e6:.1f}", "", "1.0×"])
    tiny = " [tiny synthetic]" if args.tiny else ""
    caption = (f"W11 FedAvg-LightGCN over ego graphs (K = 2, dim 64, all neighbours){tiny}: {clients} clients/round "
               f"({interactions:,.0f} interactions); {machine(args.device)}; "
               f"peak RSS of the fedrun path {rss:.2f} GB{memory}; loop vs bucketed after the same rounds: "
               f"max |Δ item| = {max_diff:.1e}")
    header = ["W11 path", "s / round", "µs / interaction", "vs loop", "per interaction vs central"]
    return write_table(out, "w11", header, rows, caption)


W13_PERFEDRECPP = ["+experiment=perfedrecpp/table4", "row=perfedrecpp/perfedrecpp", "track=none", "sim.progress=false"]


W13_TINY = TINY_DATA + ["method=perfedrecpp", "backbone=lightgcn", "method.pretrain_rounds=1", "method.clusters=2",
                        "track=none", "sim.progress=false"]


def bench_w13(args, out: Path) -> str:
    """PerFedRec++ rounds at Table 4's setting (Yelp, LightGCN K = 2, dim 64, 256 clients; the pre-training
    rounds, then the personalised ones): the clients' ego graphs propagated as CSR products in edge order
    (``EdgeOperator``) vs the segment sums they replaced, same seeds; both must end at the same item table."""
    from fedrun.backbone.lightgcn import SegmentSums
    from fedrun.kernels import ego

    base = (W13_TINY if args.tiny else W13_PERFEDRECPP) + [f"sim.device={args.device}"]
    seconds, tables, products = {}, {}, ego.EgoGraphs.operator
    build_method(base)[0].train_round(0)  # warm-up: the process's one-time costs fall on neither path
    for name, baseline in [("segment sums (index_add, before)", True), ("CSR products in edge order", False)]:
        trainer, env = build_method(base)
        pretrain = trainer.method.config.pretrain_rounds
        phases = [("pre-training", range(pretrain)), ("personalised", range(pretrain, pretrain + args.loop_rounds))]
        if baseline:
            ego.EgoGraphs.operator = property(lambda graphs: SegmentSums(graphs.src, graphs.dst, graphs.weight))
        try:
            for phase, rounds in phases:
                sync(env.device)
                started = time.perf_counter()
                for r in rounds:
                    trainer.train_round(r)
                sync(env.device)
                seconds[name, phase] = (time.perf_counter() - started) / len(rounds)
        finally:
            ego.EgoGraphs.operator = products
        tables[name] = trainer.method.public.item.detach().cpu()
    baseline, ours = tables
    same = torch.equal(tables[baseline], tables[ours])
    max_diff = float((tables[baseline] - tables[ours]).abs().max())
    rows = [[name, phase, f"{s:.3f}", f"{seconds[baseline, phase] / s:.2f}×"] for (name, phase), s in seconds.items()]
    tiny = " [tiny synthetic]" if args.tiny else ""
    caption = (f"W13 PerFedRec++ rounds (LightGCN K = 2 over the clients' ego graphs){tiny}: {pretrain} pre-training "
               f"rounds, then {args.loop_rounds} personalised; {machine(args.device)}, {torch.get_num_threads()} "
               f"thread(s); item tables after the rounds: {'the same bits' if same else 'differ'} (max |Δ| = "
               f"{max_diff:.1e})")
    return write_table(out, "w13", ["W13 ego-graph propagation", "phase", "s / round", "speed-up"], rows, caption)
