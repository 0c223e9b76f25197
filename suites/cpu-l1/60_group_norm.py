import torch
import torch.nn as nn


class Model(nn.Module):
    """y = GroupNorm(8 groups, 64 channels)(x)."""

    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(8, 64)

    def forward(self, x):
        return self.gn(x)


def get_inputs():
    x = torch.randn(16, 64, 64, 64)
    return [x]


def get_init_inputs():
    return []
