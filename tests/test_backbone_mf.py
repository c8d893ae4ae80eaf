"""MF's inner products: the written-out backward gives autograd's einsum gradients bit for bit, contiguous."""

from __future__ import annotations

import pytest
import torch

from fedrun.backbone.mf import _InnerProducts


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("B, L, d", [(32, 46, 32), (256, 3, 32), (1, 1, 8), (7, 1000, 64), (1000, 2, 16)])
def test_the_inner_products_backward_is_the_einsum_backward_bit_for_bit(B, L, d, dtype):
    generator = torch.Generator().manual_seed(B * L + d)
    user, item = torch.randn(B, d, generator=generator, dtype=dtype), torch.randn(B, L, d, generator=generator,
                                                                                  dtype=dtype)
    weight = torch.randn(B, L, generator=generator, dtype=dtype)
    grads = []
    for score in (lambda u, q: torch.einsum("bd,bld->bl", u, q), _InnerProducts.apply):
        u, q = user.clone().requires_grad_(), item.clone().requires_grad_()
        rows = q * 1  # a non-leaf, as the row gather's output is: its gradient arrives as autograd hands it over
        captured = []
        rows.register_hook(captured.append)
        forward = score(u, rows)
        (forward * weight).sum().backward()
        grads.append((forward.detach(), u.grad, captured[0]))
    (f_ref, u_ref, q_ref), (f_new, u_new, q_new) = grads
    assert torch.equal(f_ref, f_new) and torch.equal(u_ref, u_new) and torch.equal(q_ref, q_new)
    assert q_new.is_contiguous()  # the row gather adds it into the table without a copy


def test_the_inner_products_have_a_second_derivative():
    user = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    item = torch.randn(4, 5, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(_InnerProducts.apply, (user, item))
