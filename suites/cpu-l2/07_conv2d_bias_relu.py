import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(Conv2d(x) + bias): a 3x3 convolution, an extra per-channel bias, relu."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.bias = nn.Parameter(torch.randn(cout, 1, 1) * 0.1)

    def forward(self, x):
        return torch.relu(self.conv(x) + self.bias)


def get_inputs():
    return [torch.randn(8, 16, 64, 64)]


def get_init_inputs():
    return [16, 32]
