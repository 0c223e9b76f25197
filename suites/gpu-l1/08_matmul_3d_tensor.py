import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for a 3-D tensor A [b, m, k] and a matrix B [k, n] (torch.matmul broadcasts B)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


b_dim = 16
m = 2048
k = 4096
n = 1024


def get_inputs():
    a = torch.randn(b_dim, m, k)
    b = torch.randn(k, n)
    return [a, b]


def get_init_inputs():
    return []
