import torch
import torch.nn as nn


class Model(nn.Module):
    """y = Conv1d(16 -> 32, k 5, stride 2, dilation 2, padding 4)(x)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(16, 32, 5, stride=2, dilation=2, padding=4)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    x = torch.randn(16, 16, 4096)
    return [x]


def get_init_inputs():
    return []
