import torch
import torch.nn as nn


class Model(nn.Module):
    """y[0, j] = min_i x[i, j], keepdim: amin over the first dim."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.amin(x, dim=0, keepdim=True)


batch_size = 8192
dim = 4096


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
