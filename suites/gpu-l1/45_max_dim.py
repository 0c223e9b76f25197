import torch
import torch.nn as nn


class Model(nn.Module):
    """y = torch.max(x, dim=1) values: the middle dim of a 3-D tensor reduced."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.max(x, dim=1)[0]


batch_size = 32
dim1 = 4096
dim2 = 4096


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return []
