import torch
import torch.nn as nn


class Model(nn.Module):
    """y = MaxPool2d(2)(tanh(Conv2d(16 -> 64, 3x3)(x)) * scale + bias): a convolution, tanh, a scale, a per-channel bias, a pool."""

    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.pool = nn.MaxPool2d(2)
        self.scale = scale

    def forward(self, x):
        return self.pool(torch.tanh(self.conv(x)) * self.scale + self.bias)


batch_size = 64
in_channels = 16
out_channels = 64
height = 256
width = 256
kernel_size = 3
scale = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale]
