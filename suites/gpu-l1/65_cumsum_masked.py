import torch
import torch.nn as nn


class Model(nn.Module):
    """y = cumsum(x * mask, dim=1): a running sum of the elements a bool mask keeps."""

    def __init__(self):
        super().__init__()

    def forward(self, x, mask):
        return torch.cumsum(x * mask, dim=1)


batch_size = 16384
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim)
    mask = torch.rand(batch_size, dim) < 0.5
    return [x, mask]


def get_init_inputs():
    return []
