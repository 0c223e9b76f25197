import torch
import torch.nn as nn


class Model(nn.Module):
    """y = A @ x: a wide matrix [M, K] times a column vector [K, 1]."""

    def __init__(self):
        super().__init__()

    def forward(self, a, x):
        return torch.matmul(a, x)


M = 8192
K = 65536


def get_inputs():
    a = torch.randn(M, K)
    x = torch.randn(K, 1)
    return [a, x]


def get_init_inputs():
    return []
