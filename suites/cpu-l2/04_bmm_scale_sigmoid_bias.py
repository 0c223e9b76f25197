import torch
import torch.nn as nn


class Model(nn.Module):
    """y = sigmoid(bmm(a, b) * 0.25 + bias): a batched product, a per-row bias [rows, 1]
    broadcast over the batch and the columns, a sigmoid."""

    def __init__(self, rows: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(rows, 1))

    def forward(self, a, b):
        return torch.sigmoid(torch.bmm(a, b) * 0.25 + self.bias)


batch = 16
rows = 256
inner = 192
cols = 320


def get_inputs():
    return [torch.randn(batch, rows, inner), torch.randn(batch, inner, cols)]


def get_init_inputs():
    return [rows]
