import torch
import torch.nn as nn


class Model(nn.Module):
    """y = a 1x1 convolution (64 -> 128 channels): a matmul over the channels."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 128, 1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    x = torch.randn(8, 64, 48, 48)
    return [x]


def get_init_inputs():
    return []
