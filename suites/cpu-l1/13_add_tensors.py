import torch
import torch.nn as nn


class Model(nn.Module):
    """z = x + y for two tensors of the same shape."""

    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return x + y


batch_size = 2048
dim = 4096


def get_inputs():
    x = torch.randn(batch_size, dim)
    y = torch.randn(batch_size, dim)
    return [x, y]


def get_init_inputs():
    return []
