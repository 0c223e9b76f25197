import torch
import torch.nn as nn


class Model(nn.Module):
    """y = clamp(Linear(x) * scale, lo, hi): a GEMM with a scaling and a clamp after it."""

    def __init__(self, in_features: int, out_features: int, scale: float, lo: float, hi: float):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.scale = scale
        self.lo = lo
        self.hi = hi

    def forward(self, x):
        y = self.fc(x) * self.scale
        return torch.clamp(y, min=self.lo, max=self.hi)


batch_size = 512
in_features = 768
out_features = 2048


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, 1.5, -0.75, 0.75]
