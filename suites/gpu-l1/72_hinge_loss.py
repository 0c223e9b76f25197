import torch
import torch.nn as nn


class Model(nn.Module):
    """loss = mean(clamp(1 - pred * label, min=0)) with one +-1 label per row (a [batch, 1] column)."""

    def __init__(self):
        super().__init__()

    def forward(self, pred, label):
        return torch.mean(torch.clamp(1 - pred * label, min=0))


batch_size = 32768
dim = 16384


def get_inputs():
    pred = torch.randn(batch_size, dim)
    label = torch.randint(0, 2, (batch_size, 1)).float() * 2 - 1
    return [pred, label]


def get_init_inputs():
    return []
