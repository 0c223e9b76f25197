import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B with A [M, K] and B [K, N], none of M, K, N a power of two."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


M = 5003
K = 3001
N = 6007


def get_inputs():
    a = torch.randn(M, K)
    b = torch.randn(K, N)
    return [a, b]


def get_init_inputs():
    return []
