import torch
import torch.nn as nn


class Model(nn.Module):
    """y = torch.min(x, dim=2) values: the last dim of a 3-D tensor reduced."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.min(x, dim=2)[0]


batch_size = 32
dim1 = 4096
dim2 = 4096


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return []
