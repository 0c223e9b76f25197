import torch
import torch.nn as nn


class Model(nn.Module):
    """z = x ** y elementwise, positive base, tensor exponent."""

    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return torch.pow(x, y)


batch_size = 2048
dim = 4096


def get_inputs():
    x = torch.rand(batch_size, dim) + 0.5  # positive base
    y = torch.randn(batch_size, dim)
    return [x, y]


def get_init_inputs():
    return []
