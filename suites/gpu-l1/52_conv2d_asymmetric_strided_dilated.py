import torch
import torch.nn as nn


class Model(nn.Module):
    """y = Conv2d(64 -> 128, kernel (5, 3), stride 2, padding (4, 2), dilation 2, no bias)(x), input 512x384."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, (5, 3), stride=2, padding=(4, 2), dilation=2,
                              bias=False)

    def forward(self, x):
        return self.conv(x)


batch_size = 16
in_channels = 64
out_channels = 128
height = 512
width = 384


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
