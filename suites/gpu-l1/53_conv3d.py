import torch
import torch.nn as nn


class Model(nn.Module):
    """y = Conv3d(32 -> 64, 3x3x3, padding 1, no bias)(x) on a [N, C, D, H, W] volume."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, 3, padding=1, bias=False)

    def forward(self, x):
        return self.conv(x)


batch_size = 8
in_channels = 32
out_channels = 64
depth = 64
height = 64
width = 128


def get_inputs():
    x = torch.randn(batch_size, in_channels, depth, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
