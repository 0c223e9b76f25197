import torch
import torch.nn as nn


class Model(nn.Module):
    """y = ConvTranspose2d(128 -> 128, (3, 5), stride 2, padding (1, 2), output_padding 1, groups 4)(x): 2x up."""

    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.conv = nn.ConvTranspose2d(in_channels, out_channels, (3, 5), stride=2, padding=(1, 2),
                                       output_padding=1, groups=groups)

    def forward(self, x):
        return self.conv(x)


batch_size = 16
in_channels = 128
out_channels = 128
groups = 4
height = 192
width = 192


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, groups]
