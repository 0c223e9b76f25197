import torch
import torch.nn as nn


class Model(nn.Module):
    """y = softmax(x * scale) over the last dim (attention-style scaling)."""

    def __init__(self, scale: float = 0.125):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.softmax(x * self.scale, dim=-1)


batch_size = 2048
dim = 4096
scale = 0.125


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [scale]
