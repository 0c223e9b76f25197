import torch
import torch.nn as nn


class Model(nn.Module):
    """C[b] = A[b] @ B[b] over a batch of 128 (torch.bmm)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


batch_size = 128
m = 256
k = 256
n = 256


def get_inputs():
    a = torch.randn(batch_size, m, k)
    b = torch.randn(batch_size, k, n)
    return [a, b]


def get_init_inputs():
    return []
