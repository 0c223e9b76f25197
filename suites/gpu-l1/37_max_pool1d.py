import torch
import torch.nn as nn


class Model(nn.Module):
    """y = MaxPool1d(kernel 8, stride 2, padding 4, dilation 2)(x)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size=8, stride=2, padding=4, dilation=2)

    def forward(self, x):
        return self.pool(x)


batch_size = 48
channels = 128
length = 65536


def get_inputs():
    x = torch.randn(batch_size, channels, length)
    return [x]


def get_init_inputs():
    return []
