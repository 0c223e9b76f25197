import torch
import torch.nn as nn


class Model(nn.Module):
    """y = a depthwise Conv2d (groups = channels = 128, kernel (5, 3), padding (2, 1))(x), with bias."""

    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, (5, 3), padding=(2, 1), groups=channels)

    def forward(self, x):
        return self.conv(x)


batch_size = 32
channels = 128
height = 256
width = 256


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels]
