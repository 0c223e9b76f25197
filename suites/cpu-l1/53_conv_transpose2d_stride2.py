import torch
import torch.nn as nn


class Model(nn.Module):
    """y = ConvTranspose2d(64 -> 32, 4x4, stride 2, padding 1)(x): an upsampling layer."""

    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    x = torch.randn(16, 64, 32, 32)
    return [x]


def get_init_inputs():
    return []
