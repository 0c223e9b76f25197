import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A * s for a matrix A and a Python float s (torch.export bakes s into the graph)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, s):
        return a * s


M = 16384
N = 16384


def get_inputs():
    a = torch.randn(M, N)
    s = 2.5
    return [a, s]


def get_init_inputs():
    return []
