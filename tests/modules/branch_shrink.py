# A module torch.export refuses (the branch depends on the data: the sign of the input's
# mean), so no graph of it exists and no part of it lowers: a module task of the first
# kind, its kernel written by the model alone. KernelBench format.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.rand(n) + 0.5)

    def forward(self, x):
        if x.mean() > 0:
            return F.softshrink(x * self.scale, 0.25)
        return F.softshrink(-x * self.scale, 0.25)


def get_inputs():
    return [torch.randn(6, 16)]


def get_init_inputs():
    return [16]
