import torch
import torch.nn as nn


class Model(nn.Module):
    """y = MaxPool3d(kernel 3, stride 2, padding 1, dilation 2)(x)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool3d(kernel_size=3, stride=2, padding=1, dilation=2)

    def forward(self, x):
        return self.pool(x)


batch_size = 8
channels = 32
depth = 128
height = 128
width = 128


def get_inputs():
    x = torch.randn(batch_size, channels, depth, height, width)
    return [x]


def get_init_inputs():
    return []
