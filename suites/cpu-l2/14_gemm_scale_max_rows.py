import torch
import torch.nn as nn


class Model(nn.Module):
    """y = amax(Linear(x) * scale, dim=1): a GEMM, a scaling, a row max (no keepdim)."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return torch.amax(self.fc(x) * self.scale, dim=1)


batch_size = 512
in_features = 1024
out_features = 1536
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
