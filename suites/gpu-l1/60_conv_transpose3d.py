import torch
import torch.nn as nn


class Model(nn.Module):
    """y = ConvTranspose3d(64 -> 32, 3x3x3, stride 2, padding 1, output_padding 1, groups 2, no bias)(x)."""

    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.conv = nn.ConvTranspose3d(in_channels, out_channels, 3, stride=2, padding=1, output_padding=1,
                                       groups=groups, bias=False)

    def forward(self, x):
        return self.conv(x)


batch_size = 8
in_channels = 64
out_channels = 32
groups = 2
depth = 32
height = 64
width = 64


def get_inputs():
    x = torch.randn(batch_size, in_channels, depth, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, groups]
