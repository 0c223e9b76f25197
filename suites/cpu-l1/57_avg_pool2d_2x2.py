import torch
import torch.nn as nn


class Model(nn.Module):
    """y = AvgPool2d(2)(x)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(2)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    x = torch.randn(16, 64, 96, 96)
    return [x]


def get_init_inputs():
    return []
