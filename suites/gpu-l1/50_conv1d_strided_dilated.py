import torch
import torch.nn as nn


class Model(nn.Module):
    """y = Conv1d(64 -> 128, kernel 5, stride 2, padding 6, dilation 3)(x), with bias."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, 5, stride=2, padding=6, dilation=3)

    def forward(self, x):
        return self.conv(x)


batch_size = 32
in_channels = 64
out_channels = 128
length = 131072


def get_inputs():
    x = torch.randn(batch_size, in_channels, length)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
