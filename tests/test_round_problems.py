"""A round's local problems built once for the round (issue #67): buckets sized by padding, the negatives of every
bucket in one rejection pass, every client's table in one de-duplication — each the same as its per-bucket
twin, the process heap kept between rounds, and plain SGD's step without the optimizer object."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrun.data.negatives import KeySet, sample_batch_negatives, sample_bucket_negatives
from fedrun.errors import ConfigError
from fedrun.kernels import rows as rows_module
from fedrun.kernels.batching import bucketize, local_problem, local_problems, padded_groups
from fedrun.kernels.config import ClientOptimizer, SimConfig
from fedrun.kernels.local import LocalResult, example_slots, plain_sgd_step
from fedrun.types import ClientBatch, Uploads, join_rows


def padded_ratio(sizes: torch.Tensor, group: torch.Tensor) -> float:
    return group.numel() * int(sizes[group].max()) / int(sizes[group].sum())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 400), min_size=1, max_size=40), st.sampled_from([1.0, 1.2, 1.3, 2.0]))
def test_auto_buckets_bound_padding_and_each_takes_every_client_it_can(sizes, padding):
    sizes = torch.tensor(sizes)
    groups = bucketize(sizes, "auto", max_slots=1 << 30, slots_per_row=1, padding=padding)
    assert torch.equal(torch.cat(groups), torch.argsort(sizes, stable=True))  # every client once, in size order
    assert all(padded_ratio(sizes, g) <= padding + 1e-12 for g in groups)
    for shorter, group in zip(groups, groups[1:]):  # the next shorter client would break the bound
        assert padded_ratio(sizes, torch.cat([shorter[-1:], group])) > padding


def test_auto_buckets_stay_few_when_rounds_grow():
    sizes = torch.cat([torch.full((2000,), 20), torch.full((2000,), 60), torch.full((96,), 900)])
    groups = padded_groups(torch.argsort(sizes, stable=True), torch.sort(sizes).values, 1.3)
    assert len(groups) == 3  # one per size, however many clients share it
    fixed = bucketize(sizes, 8, max_slots=1 << 30, slots_per_row=1)
    padded = sum(g.numel() * int(sizes[g].max()) for g in fixed) / int(sizes.sum())
    assert padded > 1.3  # the equal-count cut mixes sizes


def test_auto_buckets_still_respect_the_slot_budget():
    sizes = torch.full((10,), 50)
    groups = bucketize(sizes, "auto", max_slots=200, slots_per_row=2, padding=1.3)
    assert [g.numel() for g in groups] == [2] * 5


@pytest.mark.parametrize("value", [0, -1, "many", True, 2.5])
def test_a_bucket_count_that_is_neither_auto_nor_positive_is_refused(value):
    with pytest.raises(ConfigError, match="buckets"):
        SimConfig(buckets=value)


def test_padding_below_one_is_refused():
    with pytest.raises(ConfigError, match="padding"):
        SimConfig(padding=0.9)


def round_batches(seed: int = 0, n_items: int = 40) -> list[ClientBatch]:
    gen = torch.Generator().manual_seed(seed)
    out, user = [], 100
    for B, P in [(3, 2), (4, 5), (2, 9)]:
        mask = torch.arange(P).unsqueeze(0) < torch.randint(1, P + 1, (B, 1), generator=gen)
        pos = torch.stack([torch.randperm(n_items, generator=gen)[:P] for _ in range(B)])
        out.append(ClientBatch(torch.arange(user, user + B), torch.where(mask, pos, 0), mask, None))
        user += B
    return out


def test_one_negative_draw_for_the_round_gives_each_buckets_own_draw():
    batches = round_batches()
    together = sample_bucket_negatives([(b.users, b.pos, b.pos_mask) for b in batches], 3, 40, seed=7)
    for batch, negatives in zip(batches, together):
        assert torch.equal(negatives, sample_batch_negatives(batch.users, batch.pos, batch.pos_mask, 3, 40, 7))


def test_one_deduplication_for_the_round_gives_each_buckets_own_table():
    batches = round_batches(seed=3, n_items=12)  # few items: negatives repeat positives' neighbours and each other
    negatives = sample_bucket_negatives([(b.users, b.pos, b.pos_mask) for b in batches], 2, 12, seed=1)
    extras = [torch.randint(0, 12, (b.pos.shape[0], 3)) for b in batches]
    masks = [torch.rand(b.pos.shape[0], 3) < 0.7 for b in batches]
    for with_extra in (False, True):
        together = local_problems(batches, negatives, 12, extras if with_extra else None,
                                  masks if with_extra else None)
        for i, (batch, problem) in enumerate(zip(batches, together)):
            alone = local_problem(batch, negatives[i], 12, extras[i] if with_extra else None,
                                  masks[i] if with_extra else None)
            for field in ("items", "item_mask", "pos_slot", "neg_slot", "extra_slot"):
                left, right = getattr(problem, field), getattr(alone, field)
                assert (left is None and right is None) or torch.equal(left, right), field


def test_the_real_rows_kept_from_the_tables_are_the_masks_nonzero_in_its_order():
    batches = round_batches(seed=5, n_items=12)
    negatives = sample_bucket_negatives([(b.users, b.pos, b.pos_mask) for b in batches], 2, 12, seed=2)
    for problem in local_problems(batches, negatives, 12):
        assert problem.real is not None  # kept while the tables were built
        client, slot = problem.item_mask.nonzero(as_tuple=True)
        kept = problem.real_rows()
        assert torch.equal(kept[0], client) and torch.equal(kept[1], slot)
        assert torch.equal(kept[2], problem.items[client, slot])
        read_back = dataclasses.replace(problem, real=None).real_rows()  # a problem built elsewhere
        assert all(torch.equal(a, b) for a, b in zip(kept, read_back))


def test_the_examples_kept_are_the_positives_then_their_negatives():
    batches = round_batches(seed=6, n_items=12)
    negatives = sample_bucket_negatives([(b.users, b.pos, b.pos_mask) for b in batches], 2, 12, seed=4)
    extras = [torch.randint(0, 12, (b.pos.shape[0], 3)) for b in batches]
    for with_extra in (False, True):
        for problem in local_problems(batches, negatives, 12, extras if with_extra else None):
            joined = example_slots(dataclasses.replace(problem, examples=None))  # what a problem built elsewhere gets
            assert problem.examples is not None and torch.equal(example_slots(problem), joined)
            B = problem.pos_slot.shape[0]
            assert torch.equal(joined, torch.cat([problem.pos_slot, problem.neg_slot.reshape(B, -1)], 1))


def test_the_buckets_upload_rows_lie_in_one_buffer_and_join_without_a_copy():
    batches = round_batches(seed=8, n_items=12)
    negatives = sample_bucket_negatives([(b.users, b.pos, b.pos_mask) for b in batches], 2, 12, seed=3)
    table = torch.randn(12, 4, dtype=torch.float64)
    problems = local_problems(batches, negatives, 12, uploaded=table)
    assert local_problems(batches, negatives, 12)[0].upload_rows is None  # only where the client asks for it
    parts = []
    for b, problem in enumerate(problems):
        client, slot, items = problem.real_rows()
        assert problem.upload_rows is not None and problem.upload_rows.shape == (client.numel(), 4)
        assert problem.upload_rows.dtype == table.dtype
        problem.upload_rows.copy_(table[items] * (b + 1))  # what a client step writes there
        parts.append(Uploads(problem.batch.size, client, items, problem.upload_rows))
    joined = Uploads.concat(parts)
    assert joined.row_delta.data_ptr() == problems[0].upload_rows.data_ptr()  # the buffer itself
    assert joined.row_item.data_ptr() == problems[0].real_rows()[2].data_ptr()
    assert torch.equal(joined.row_delta, torch.cat([part.row_delta for part in parts]))
    assert torch.equal(joined.row_item, torch.cat([part.row_item for part in parts]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=6), st.booleans(), st.booleans())
def test_rows_join_as_torch_cat_does_and_share_memory_only_when_back_to_back(sizes, gap, reverse):
    buffer = torch.arange(float(4 * (sum(sizes) + len(sizes)))).view(-1, 4)
    parts, start = [], 0
    for size in sizes:
        parts.append(buffer[start:start + size])
        start += size + gap  # a gap of one row after each part, or none
    parts = parts[::-1] if reverse else parts
    joined = join_rows(parts)
    assert torch.equal(joined, torch.cat(parts))
    filled = [part for part in parts if part.shape[0]]
    back_to_back = all(b.data_ptr() == a.data_ptr() + a.shape[0] * 16 for a, b in zip(filled, filled[1:]))
    assert (bool(filled) and joined.data_ptr() == filled[0].data_ptr()) == (bool(filled) and back_to_back)


def test_a_row_delta_written_into_a_buffer_is_the_change_of_the_real_rows():
    item0 = torch.randn(3, 5, 4)
    item = item0 + torch.randn(3, 5, 4)
    mask = torch.rand(3, 5) < 0.6
    result = LocalResult(torch.zeros(3, 2), item, item0, mask, {}, torch.zeros(3))
    client, slot = mask.nonzero(as_tuple=True)
    out = torch.full((client.numel(), 4), float("nan"))
    written = result.row_delta(client, slot, out=out)
    assert written.data_ptr() == out.data_ptr()
    assert torch.equal(out, result.item_delta[client, slot])
    assert torch.equal(result.row_delta(client, slot), out)


def test_a_user_without_a_negative_to_draw_is_a_named_failure():
    everything = torch.arange(6).unsqueeze(0)  # one client holding all 6 items
    with pytest.raises(RuntimeError, match="did not converge"):
        sample_batch_negatives(torch.tensor([0]), everything, torch.ones_like(everything, dtype=torch.bool), 1, 6, 0)


def test_the_heap_is_kept_unless_released():
    code = "from fedrun.core.memory import keep_freed_memory as k; print(k(), k())"
    kept = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    released = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "FEDRUN_HEAP": "release"}).stdout.split()
    glibc = sys.platform.startswith("linux")
    assert kept == [str(glibc)] * 2 and released == ["False"] * 2


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(1e-3, 50.0), st.floats(1e-3, 50.0), st.integers(1, 3))
def test_the_plain_sgd_step_is_torchs_sgd_bit_for_bit(seed, lr, user_lr, steps):
    gen = torch.Generator().manual_seed(seed)
    start = [torch.randn(5, 7, 3, generator=gen), torch.randn(5, 4, generator=gen)]
    target = torch.randn(5, 7, 3, generator=gen)

    def run(step_with_torch: bool) -> list[torch.Tensor]:
        item, user = (t.clone().requires_grad_(True) for t in start)
        opt = ClientOptimizer(lr=lr, user_lr=user_lr).make([item], private=[user]) if step_with_torch else None
        for _ in range(steps):
            ((item * user.unsqueeze(1)[..., :1] - target) ** 2).sum().backward()
            if opt is None:
                plain_sgd_step([([item], lr), ([user], user_lr)])
            else:
                opt.step()
                opt.zero_grad(set_to_none=True)
        return [item.detach(), user.detach()]

    for ours, torchs in zip(run(False), run(True)):
        assert torch.equal(ours, torchs)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 60), st.integers(1, 400))
def test_a_flag_table_and_a_sorted_set_answer_alike(seed, count, high):
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randint(0, high, (count,), generator=gen)
    queries = torch.randint(0, high, (200,), generator=gen)
    flags, sorted_set = KeySet(keys, high), KeySet(keys)  # the table where it is cheap; a sort always without high
    assert (flags.flags is not None) == (high <= 64 * count) and sorted_set.sorted is not None
    assert torch.equal(flags(queries), sorted_set(queries))
    assert torch.equal(sorted_set(queries), torch.isin(queries, keys))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 300), st.integers(1, 50))
def test_per_key_sums_through_a_table_and_a_sort_are_the_same_bits(seed, count, high):
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randint(0, high, (count,), generator=gen)
    rows, weights = torch.randn(count, 5, generator=gen), torch.rand(count, generator=gen)
    table = rows_module.sum_by_key(keys, rows, weights)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rows_module, "KEY_TABLE_RATIO", 0)  # always sort
        sorted_ = rows_module.sum_by_key(keys, rows, weights)
    for left, right in zip(table, sorted_):
        assert torch.equal(left, right)


def test_a_run_keeps_its_heap():
    code = ("from tests.conftest import make_method; import fedrun.core.memory as memory; "
            "assert not memory._done; make_method(['method=fedavg']); print(memory._done)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.split()  # tests.conftest importable
    assert out[-1:] == [str(sys.platform.startswith("linux"))]
