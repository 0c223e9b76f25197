import torch
import torch.nn as nn


class Model(nn.Module):
    """y[i] = sum_j x[i, j]: sum over the last dim."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=-1)


batch_size = 8192
dim = 8192


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
