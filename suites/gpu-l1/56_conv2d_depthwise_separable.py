import torch
import torch.nn as nn


class Model(nn.Module):
    """y = pointwise(depthwise(x)): a depthwise 3x3 Conv2d (padding 1), then a 1x1 Conv2d 64 -> 128; no bias."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.depthwise = nn.Conv2d(in_channels, in_channels, 3, padding=1, groups=in_channels, bias=False)
        self.pointwise = nn.Conv2d(in_channels, out_channels, 1, bias=False)

    def forward(self, x):
        return self.pointwise(self.depthwise(x))


batch_size = 16
in_channels = 64
out_channels = 128
height = 384
width = 384


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
