import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B with a short reduction (K = 64): tall-skinny A [M, K] times wide B [K, N]."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


M = 16384
N = 16384
K = 64


def get_inputs():
    a = torch.randn(M, K)
    b = torch.randn(K, N)
    return [a, b]


def get_init_inputs():
    return []
