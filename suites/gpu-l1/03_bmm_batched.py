import torch
import torch.nn as nn


class Model(nn.Module):
    """C[i] = A[i] @ B[i] for a batch of matrices (torch.bmm)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


batch = 128
m = 512
k = 1024
n = 768


def get_inputs():
    a = torch.randn(batch, m, k)
    b = torch.randn(batch, k, n)
    return [a, b]


def get_init_inputs():
    return []
