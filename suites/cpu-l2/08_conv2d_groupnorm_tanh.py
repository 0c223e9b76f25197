import torch
import torch.nn as nn


class Model(nn.Module):
    """y = tanh(GroupNorm(Conv2d(x))): a convolution, a group norm with affine, tanh."""

    def __init__(self, cin: int, cout: int, groups: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3)
        self.norm = nn.GroupNorm(groups, cout)

    def forward(self, x):
        return torch.tanh(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(8, 8, 66, 66)]


def get_init_inputs():
    return [8, 32, 8]
