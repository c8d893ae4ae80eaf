"""NCF's full-ranking scorer (blocked tower, split first layer) against the per-pair scorer."""

import pytest
import torch

from fedrun.backbone import ncf
from fedrun.backbone.config import NCFConfig
from fedrun.backbone.ncf import NCF


@pytest.mark.parametrize("variant", ["gmf", "mlp", "neumf"])
@pytest.mark.parametrize("layers", [[8], [8, 4], [16, 8, 4]])
@pytest.mark.parametrize("block_pairs", [ncf.CPU_BLOCK_PAIRS, 30, 1])
def test_score_full_equals_pairwise_score(variant, layers, block_pairs, monkeypatch):
    monkeypatch.setattr(ncf, "CPU_BLOCK_PAIRS", block_pairs)  # 30 pairs: blocks of 2 users, the last one short
    backbone = NCF(NCFConfig(dim=6, variant=variant, layers=layers))
    gen = torch.Generator().manual_seed(0)
    net = {name: tensor + 0.1 * torch.randn(tensor.shape, generator=gen)  # non-zero biases
           for name, tensor in backbone.init_net(gen).items()}
    user = torch.randn(7, backbone.user_width, generator=gen, dtype=torch.float64)
    item = torch.randn(13, backbone.item_width, generator=gen, dtype=torch.float64)
    net = {name: tensor.double() for name, tensor in net.items()}
    full = backbone.score_full(user, item, net)  # [U, I]
    pairwise = backbone.score(user, item.expand(user.shape[0], -1, -1), net)  # [U, I]
    torch.testing.assert_close(full, pairwise, rtol=1e-12, atol=1e-12)
