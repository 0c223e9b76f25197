import torch
import torch.nn as nn


class Model(nn.Module):
    """y = Conv3d(8 -> 16, 3x3x3, padding 1, no bias)(x)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(8, 16, 3, padding=1, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    x = torch.randn(16, 8, 24, 32, 32)
    return [x]


def get_init_inputs():
    return []
