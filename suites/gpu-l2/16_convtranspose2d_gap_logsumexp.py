import torch
import torch.nn as nn


class Model(nn.Module):
    """y = 10 * logsumexp over channels of (mean over H, W of ConvTranspose2d(64 -> 64, 3x3, stride 2)(x) + bias)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)

    def forward(self, x):
        h = torch.mean(self.up(x), dim=(2, 3), keepdim=True) + self.bias
        return torch.logsumexp(h, dim=1, keepdim=True) * 10.0


batch_size = 128
in_channels = 64
out_channels = 64
height = 64
width = 64
kernel_size = 3
stride = 2


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride]
