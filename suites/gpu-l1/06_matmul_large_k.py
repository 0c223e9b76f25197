import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B with a small output (M = N = 512) and a very long reduction (K = 262144)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


M = 512
N = 512
K = 262144


def get_inputs():
    a = torch.randn(M, K)
    b = torch.randn(K, N)
    return [a, b]


def get_init_inputs():
    return []
