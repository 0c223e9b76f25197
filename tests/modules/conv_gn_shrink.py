# A level-2-like module kforge cannot lower (softshrink has no op record): conv2d, group norm,
# softshrink. KernelBench format: class Model, get_inputs(), get_init_inputs().
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin, cout, k, groups):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k)
        self.gn = nn.GroupNorm(groups, cout)

    def forward(self, x):
        return F.softshrink(self.gn(self.conv(x)), 0.5)


def get_inputs():
    return [torch.randn(2, 3, 10, 10)]


def get_init_inputs():
    return [3, 8, 3, 4]
