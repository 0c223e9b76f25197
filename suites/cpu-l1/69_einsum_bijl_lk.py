import torch
import torch.nn as nn


class Model(nn.Module):
    """y = einsum('bijl,lk->bijk', a, b): a 4-D tensor times a matrix."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b):
        return torch.einsum('bijl,lk->bijk', a, b)


def get_inputs():
    a = torch.randn(8, 64, 64, 128)
    b = torch.randn(128, 256)
    return [a, b]


def get_init_inputs():
    return []
