import torch
import torch.nn as nn


class Model(nn.Module):
    """y = Conv2d(32 -> 64, 3x3, padding 1)(x): a standard convolution with bias."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(32, 64, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    x = torch.randn(8, 32, 48, 48)
    return [x]


def get_init_inputs():
    return []
