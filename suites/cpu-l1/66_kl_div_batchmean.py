import torch
import torch.nn as nn


class Model(nn.Module):
    """loss = kl_div(log q, p, reduction='batchmean')."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, q, p):
        return torch.nn.functional.kl_div(torch.log(q), p, reduction='batchmean')


def get_inputs():
    q = torch.rand(2048, 4096).softmax(-1)
    p = torch.rand(2048, 4096).softmax(-1)
    return [q, p]


def get_init_inputs():
    return []
