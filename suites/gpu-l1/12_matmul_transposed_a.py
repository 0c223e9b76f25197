import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A.T @ B with A stored [K, M] (the transpose read through .T)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a.T, b)


M = 6144
K = 4096
N = 8192


def get_inputs():
    a = torch.randn(K, M)
    b = torch.randn(K, N)
    return [a, b]


def get_init_inputs():
    return []
