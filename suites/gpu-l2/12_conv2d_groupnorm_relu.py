import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(GroupNorm(8, 64)(Conv2d(32 -> 64, 3x3)(x))): a convolution, a group norm with affine, ReLU."""

    def __init__(self, in_channels, out_channels, kernel_size, groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)))


batch_size = 64
in_channels = 32
out_channels = 64
height = 128
width = 128
kernel_size = 3
groups = 8


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, groups]
