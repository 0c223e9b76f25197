import torch
import torch.nn as nn


class Model(nn.Module):
    """y = mean over channels of MaxPool2d(2)(ConvTranspose2d(128 -> 32, 4x4, stride 2, padding 1)(x)): upsample, pool, reduce."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        return torch.mean(self.pool(self.up(x)), dim=1, keepdim=True)


batch_size = 64
in_channels = 128
out_channels = 32
height = 64
width = 64
kernel_size = 4
stride = 2
padding = 1


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]
