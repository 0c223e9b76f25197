import torch
import torch.nn as nn


class Model(nn.Module):
    """y = swish(bmm(a, b) * scale): a batched product of two inputs, a scale, x * sigmoid(x)."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        h = torch.bmm(a, b) * self.scale
        return h * torch.sigmoid(h)


batch = 128
rows = 512
inner = 512
cols = 512
scale = 0.0625


def get_inputs():
    return [torch.randn(batch, rows, inner), torch.randn(batch, inner, cols)]


def get_init_inputs():
    return [scale]
