import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = hardswish(BatchNorm2d(Conv2d(x))): batch statistics (training mode) over a
    convolution's output, then an activation."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return F.hardswish(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(8, 16, 48, 48)]


def get_init_inputs():
    return [16, 32]
