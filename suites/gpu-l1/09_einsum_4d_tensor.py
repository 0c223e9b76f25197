import torch
import torch.nn as nn


class Model(nn.Module):
    """C = einsum('bijl,lk->bijk', A, B): a 4-D tensor contracted with a matrix over its last dim."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.einsum('bijl,lk->bijk', a, b)


b_dim = 8
i_dim = 128
j_dim = 256
l_dim = 256
k_dim = 512


def get_inputs():
    a = torch.randn(b_dim, i_dim, j_dim, l_dim)
    b = torch.randn(l_dim, k_dim)
    return [a, b]


def get_init_inputs():
    return []
