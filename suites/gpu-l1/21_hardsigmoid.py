import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = hardsigmoid(x) = clamp(x / 6 + 0.5, 0, 1), elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.hardsigmoid(x)


batch_size = 8192
dim = 32768


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
