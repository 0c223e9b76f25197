import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(Conv2d(3 -> 64, 5x5, padding 2)(x) + bias): an RGB-input convolution, an extra per-channel bias, ReLU."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)

    def forward(self, x):
        return torch.relu(self.conv(x) + self.bias)


batch_size = 64
in_channels = 3
out_channels = 64
height = 256
width = 256
kernel_size = 5


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
