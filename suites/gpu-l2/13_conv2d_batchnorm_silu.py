import torch
import torch.nn as nn


class Model(nn.Module):
    """y = silu(BatchNorm2d(Conv2d(16 -> 64, 3x3, no bias)(x))), training mode: batch statistics per channel."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        return torch.nn.functional.silu(self.bn(self.conv(x)))


batch_size = 128
in_channels = 16
out_channels = 64
height = 128
width = 128
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
