"""Whether ``torch.compile`` helps W1's arithmetic on this machine (issue #67 asked to consider it): NeuMF's score
and BCE loss over one round's examples (256 clients' ~34 k positives, 4 negatives each), forward and backward,
eager against compiled (inductor), same inputs, one thread.

    OMP_NUM_THREADS=1 python scripts/bench/compile_ncf.py [--examples 34000] [--repeats 3]

Prints the compile time, whether the gradients are bit-identical (and their largest difference), and the best of
5 steps per repetition for each, interleaved.
"""

from __future__ import annotations

import argparse
import time

import torch

from fedrun.backbone.config import NCFConfig
from fedrun.backbone.ncf import NCF


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=34000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    backbone = NCF(NCFConfig())  # W1's NeuMF: GMF 32, tower 64-32-16
    generator = torch.Generator().manual_seed(0)
    net = backbone.init_net(generator)
    user = torch.randn(args.examples, backbone.user_width, generator=generator) * 0.1  # [N, w]
    items = torch.randn(args.examples, 5, backbone.item_width, generator=generator) * 0.1  # [N, 1 + 4, w]
    label = torch.zeros(args.examples, 5)
    label[:, 0] = 1.0

    def loss(user_rows, item_rows, weights):
        scores = backbone.score(user_rows, item_rows, weights)  # [N, 5]
        return torch.nn.functional.binary_cross_entropy_with_logits(scores, label, reduction="none").mean(1).sum()

    compiled = torch.compile(loss)

    def gradients(forward):
        leaves = [user.clone().requires_grad_(), items.clone().requires_grad_()]
        weights = {name: value.clone().requires_grad_() for name, value in net.items()}
        return torch.autograd.grad(forward(*leaves, weights), [*leaves, *weights.values()])

    started = time.perf_counter()
    eager_grads, compiled_grads = gradients(loss), gradients(compiled)
    print(f"first compiled step (compiling): {time.perf_counter() - started:.1f} s")
    identical = all(torch.equal(a, b) for a, b in zip(eager_grads, compiled_grads))
    largest = max(float((a - b).abs().max()) for a, b in zip(eager_grads, compiled_grads))
    print(f"gradients bit-identical: {identical} (largest difference {largest:.1e})")
    for repeat in range(args.repeats):
        for name, forward in (("eager", loss), ("compiled", compiled)):
            best = float("inf")
            for _ in range(5):
                started = time.perf_counter()
                gradients(forward)
                best = min(best, time.perf_counter() - started)
            print(f"repeat {repeat}: {name} {best * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
