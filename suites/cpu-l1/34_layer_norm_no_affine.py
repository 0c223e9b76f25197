import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = layer_norm(x) over the last dim, no weight or bias."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), eps=1e-5)


batch_size = 2048
dim = 4096


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
