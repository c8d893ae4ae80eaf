"""The kernel floor's round (``fedrun.testing.kernel_floor``, the benchmarks' baseline) computes the round it
stands for: one SGD step of each client's mean BPR loss, by autograd, where every item row is touched once."""

import torch

from fedrun.data.client_store import ClientStore
from fedrun.data.interactions import Interactions
from fedrun.testing import kernel_floor


def test_the_floor_round_is_the_gradient_step_of_the_clients_mean_bpr_loss():
    torch.manual_seed(0)
    user, item = torch.randn(5, 4), torch.randn(12, 4)
    clients = torch.tensor([3, 1])
    owner = torch.tensor([0, 0, 1])  # client 3 has two pairs, client 1 one
    positive, negative = torch.tensor([0, 1, 2]), torch.tensor([6, 7, 8])  # every row once: count 1
    u, v = user.clone().requires_grad_(True), item.clone().requires_grad_(True)
    x = (u[clients][owner] * (v[positive] - v[negative])).sum(1)
    loss = -torch.nn.functional.logsigmoid(x)
    per_client = torch.zeros(2).index_add(0, owner, loss) / torch.tensor([2.0, 1.0])
    per_client.sum().backward()
    expected_user, expected_item = user - 0.5 * u.grad, item - 0.1 * v.grad
    kernel_floor.mf_bpr_round(user, item, clients, owner, positive, negative, lr=0.1, user_lr=0.5)
    torch.testing.assert_close(user, expected_user)
    torch.testing.assert_close(item, expected_item)


def test_draw_pairs_takes_every_training_item_of_distinct_clients():
    data = Interactions(torch.tensor([0, 0, 1, 2, 2, 2]).numpy(), torch.tensor([1, 2, 3, 4, 5, 6]).numpy(), 3, 8,
                        None, None)
    store = ClientStore.from_interactions(data)
    clients, owner, positive, negative = kernel_floor.draw_pairs(store, torch.arange(3), 2, 8,
                                                                 torch.Generator().manual_seed(1))
    assert clients.unique().numel() == 2 and positive.numel() == negative.numel() == owner.numel()
    items_of = {0: [1, 2], 1: [3], 2: [4, 5, 6]}
    assert sorted(positive.tolist()) == sorted(i for c in clients.tolist() for i in items_of[c])
    assert ((negative >= 0) & (negative < 8)).all()


def test_the_neumf_floor_step_is_the_sgd_step_of_fedruns_neumf_with_bce():
    from fedrun.backbone.config import NCFConfig
    from fedrun.backbone.ncf import NCF

    backbone = NCF(NCFConfig(dim=4, layers=[8, 6, 3]))
    generator = torch.Generator().manual_seed(0)
    net = {name: value + 0.1 for name, value in backbone.init_net(generator).items()}  # nonzero biases
    user, item = torch.randn(5, 8, generator=generator), torch.randn(9, 8, generator=generator)
    group_user = torch.tensor([3, 1])  # user 3 has two examples, user 1 three
    example_group, example_item = torch.tensor([0, 0, 1, 1, 1]), torch.tensor([2, 5, 2, 7, 0])
    label, weight = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0]), torch.tensor([0.5, 0.5, 1 / 3, 1 / 3, 1 / 3])
    u, v = user.clone().requires_grad_(True), item.clone().requires_grad_(True)
    params = {name: value.clone().requires_grad_(True) for name, value in net.items()}
    scores = backbone.score(u[group_user[example_group]], v[example_item].unsqueeze(1), params).squeeze(1)  # [5]
    loss = torch.nn.functional.binary_cross_entropy_with_logits(scores, label, reduction="none") @ weight
    loss.backward()
    kernel_floor.neumf_bce_step(user, item, net, group_user, example_group, example_item, label, weight, gmf_dim=4,
                                lr=0.1)
    torch.testing.assert_close(user, u.detach() - 0.1 * u.grad)
    torch.testing.assert_close(item, v.detach() - 0.1 * v.grad)
    for name, value in net.items():
        torch.testing.assert_close(value, params[name].detach() - 0.1 * params[name].grad)
        assert not value.requires_grad


def test_with_negatives_follows_each_positive_with_its_own_in_its_group():
    group, items, label = kernel_floor.with_negatives(torch.tensor([4, 7]), torch.tensor([1, 2]), 3, 50,
                                                      torch.Generator().manual_seed(0))
    assert group.tolist() == [4] * 4 + [7] * 4
    assert items[[0, 4]].tolist() == [1, 2] and label.tolist() == [1.0, 0, 0, 0, 1.0, 0, 0, 0]
