import torch
import torch.nn as nn


class Model(nn.Module):
    """loss = cross_entropy(logits, targets) with class indices, mean over the batch."""

    def __init__(self):
        super().__init__()
        pass

    def forward(self, x, t):
        return torch.nn.functional.cross_entropy(x, t)


def get_inputs():
    x = torch.randn(4096, 1000)
    t = torch.randint(0, 1000, (4096,))
    return [x, t]


def get_init_inputs():
    return []
