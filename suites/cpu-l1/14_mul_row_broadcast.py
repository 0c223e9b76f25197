import torch
import torch.nn as nn


class Model(nn.Module):
    """z = x * w, a [dim] scale broadcast over the rows of x."""

    def __init__(self):
        super().__init__()

    def forward(self, x, w):
        return x * w


batch_size = 2048
dim = 4096


def get_inputs():
    x = torch.randn(batch_size, dim)
    w = torch.randn(dim)
    return [x, w]


def get_init_inputs():
    return []
