import torch
import torch.nn as nn


class Model(nn.Module):
    """y = MaxPool1d(4, stride 2)(x)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool1d(4, stride=2)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    x = torch.randn(64, 64, 4096)
    return [x]


def get_init_inputs():
    return []
