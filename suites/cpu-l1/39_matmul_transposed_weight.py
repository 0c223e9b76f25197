import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x @ w.t(): a [out, in] weight used transposed."""

    def __init__(self):
        super().__init__()

    def forward(self, x, w):
        return torch.matmul(x, w.t())


batch_size = 1024
in_features = 2048
out_features = 1024


def get_inputs():
    x = torch.randn(batch_size, in_features)
    w = torch.randn(out_features, in_features)
    return [x, w]


def get_init_inputs():
    return []
