import torch
import torch.nn as nn


class Model(nn.Module):
    """y = MaxPool2d(kernel 3, stride 2, padding 1, dilation 2)(x)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=2)

    def forward(self, x):
        return self.pool(x)


batch_size = 32
channels = 64
height = 512
width = 512


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return []
