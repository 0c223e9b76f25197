import torch
import torch.nn as nn


class Model(nn.Module):
    """y = Conv2d(128 -> 256, 3x3, padding 1, groups 8)(x), with bias: a grouped convolution."""

    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1, groups=groups)

    def forward(self, x):
        return self.conv(x)


batch_size = 16
in_channels = 128
out_channels = 256
groups = 8
height = 256
width = 256


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, groups]
