import torch
import torch.nn as nn


class Model(nn.Module):
    """y = clamp(Linear(x) * scale + shift, -1, 1): a GEMM, a scalar scale, a per-column shift, a clamp."""

    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.shift = nn.Parameter(torch.randn(out_features) * 0.1)
        self.scale = scale

    def forward(self, x):
        return torch.clamp(self.fc(x) * self.scale + self.shift, min=-1.0, max=1.0)


batch_size = 4096
in_features = 2048
out_features = 4096
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
