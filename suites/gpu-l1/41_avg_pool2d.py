import torch
import torch.nn as nn


class Model(nn.Module):
    """y = AvgPool2d(kernel 4, stride 2, padding 1)(x)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=4, stride=2, padding=1)

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
