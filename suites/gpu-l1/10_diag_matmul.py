import torch
import torch.nn as nn


class Model(nn.Module):
    """C = diag(d) @ B: a vector made a diagonal matrix, times a matrix (each row of B scaled)."""

    def __init__(self):
        super().__init__()

    def forward(self, d, b):
        return torch.diag(d) @ b


N = 4096
M = 16384


def get_inputs():
    d = torch.randn(N)
    b = torch.randn(N, M)
    return [d, b]


def get_init_inputs():
    return []
