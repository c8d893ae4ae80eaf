"""FedMF: real Paillier encryption end to end equals the plaintext computation (PartText and
FullText), the server's step sees ciphertexts only, traffic is counted in ciphertexts, and bad
settings are named."""

from __future__ import annotations

import numpy as np
import phe
import pytest
import torch

from fedrun.errors import ConfigError
from fedrun.kernels.rows import sum_by_key
from fedrun.privacy.paillier import EncryptedRows, PaillierKeys, ciphertext_bytes, server_sum
from fedrun.types import Uploads
from tests.conftest import make_method, round_of

FEDMF = ["method=fedmf", "backbone=pmf", "backbone.dim=4", "backbone.init_std=0.1", "dataset.ratings=true",
         "dataset.split.protocol=random_ratio", "dataset.split.valid=false", "method.key_length=256",
         "method.lr=0.02"]


@pytest.mark.parametrize("mode", ["part", "full"])
def test_paillier_rounds_equal_plaintext_rounds(mode):
    encrypted, _ = make_method(FEDMF + [f"method.mode={mode}", "method.encryption=paillier"])
    plain, _ = make_method(FEDMF + [f"method.mode={mode}"])
    assert torch.equal(encrypted.public.item, plain.public.item)
    for round_index in range(2):
        a, b = round_of(encrypted).train_round(round_index), round_of(plain).train_round(round_index)
        assert a.bytes_up == b.bytes_up and a.bytes_down == b.bytes_down
    assert not torch.equal(plain.public.item, make_method(FEDMF)[0].public.item)  # it trained
    torch.testing.assert_close(encrypted.public.item, plain.public.item, rtol=0, atol=1e-6)
    torch.testing.assert_close(encrypted.client.private.user, plain.client.private.user, rtol=0, atol=1e-6)


def test_server_sums_ciphertexts_it_cannot_read():
    keys = PaillierKeys(256)
    gen = torch.Generator().manual_seed(0)
    uploads = Uploads(3, torch.tensor([0, 0, 1, 2, 2]), torch.tensor([4, 7, 4, 7, 1]), torch.randn(5, 3, generator=gen))
    rows = keys.encrypt(uploads)
    assert isinstance(rows, EncryptedRows)
    assert all(isinstance(c, phe.EncryptedNumber) for c in rows.ciphertexts.ravel())
    plain_values = {round(float(v), 6) for v in uploads.row_delta.ravel()}
    assert not any(c.ciphertext(be_secure=False) in plain_values for c in rows.ciphertexts.ravel())
    sums = server_sum(rows)
    aggregate = keys.decrypt(sums)
    items, total, _ = sum_by_key(uploads.row_item, uploads.row_delta, torch.ones(5))
    assert torch.equal(aggregate.items, items)
    torch.testing.assert_close(aggregate.item_delta, total, rtol=0, atol=1e-6)
    assert keys.measured_ciphertext_bytes() in (ciphertext_bytes(256) - 1, ciphertext_bytes(256))


@pytest.mark.parametrize("mode", ["part", "full"])
def test_traffic_is_counted_in_ciphertexts(mode):
    method, env = make_method(FEDMF + [f"method.mode={mode}"])
    stats = round_of(method).train_round(0)
    users = round_of(method).sampler.users(0)
    d, cipher = 4, ciphertext_bytes(256)
    rated = float(env.train.sizes(users).double().mean())
    expected = rated * (d * cipher + 4) if mode == "part" else env.n_items * d * cipher
    assert stats.bytes_up == pytest.approx(expected)
    assert stats.bytes_down == env.n_items * d * cipher
    assert stats.extra["encryption_seconds_per_client"] > 0


@pytest.mark.parametrize("overrides,field", [
    (["+method.rho=1"], "method.rho"),
    (["method.mode=half"], "method.mode"),
    (["method.key_length=100"], "method.key_length"),
    (["backbone=mf"], "backbone"),
])
def test_bad_settings_are_named(overrides, field):
    with pytest.raises(ConfigError) as err:
        make_method(FEDMF + overrides)
    assert err.value.field == field


def test_encrypted_rows_hold_no_plaintext_field():
    fields = EncryptedRows.__dataclass_fields__
    assert set(fields) == {"item", "ciphertexts"}
    assert np.dtype(object) == PaillierKeys(128).encrypt(
        Uploads(1, torch.tensor([0]), torch.tensor([2]), torch.ones(1, 2))).ciphertexts.dtype
