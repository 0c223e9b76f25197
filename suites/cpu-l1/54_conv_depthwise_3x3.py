import torch
import torch.nn as nn


class Model(nn.Module):
    """y = a depthwise 3x3 convolution (groups = channels), stride 1, padding 1."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 64, 3, padding=1, groups=64)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    x = torch.randn(8, 64, 64, 64)
    return [x]


def get_init_inputs():
    return []
