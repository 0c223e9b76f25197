import torch
import torch.nn as nn


class Model(nn.Module):
    """y = ConvTranspose1d(128 -> 64, kernel 5, stride 2, padding 2, output_padding 1, dilation 2)(x)."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, 5, stride=2, padding=2, output_padding=1,
                                       dilation=2)

    def forward(self, x):
        return self.conv(x)


batch_size = 32
in_channels = 128
out_channels = 64
length = 65536


def get_inputs():
    x = torch.randn(batch_size, in_channels, length)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
