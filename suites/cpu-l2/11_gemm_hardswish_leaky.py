import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """y = leaky_relu(hardswish(Linear(x)) - shift, 0.1): a GEMM, two activations and a
    subtraction of a per-column shift."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.shift = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x):
        return F.leaky_relu(F.hardswish(self.fc(x)) - self.shift, 0.1)


batch_size = 2048
in_features = 512
out_features = 512


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
