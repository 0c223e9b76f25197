import torch
import torch.nn as nn


class Model(nn.Module):
    """y = argmax(x, dim=1) (int64): the middle dim of a 3-D tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.argmax(x, dim=1)


batch_size = 32
dim1 = 4096
dim2 = 4096


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return []
