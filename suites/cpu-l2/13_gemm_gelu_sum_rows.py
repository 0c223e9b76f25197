import torch
import torch.nn as nn


class Model(nn.Module):
    """y = sum(gelu(Linear(x)), dim=1, keepdim=True): a GEMM, an activation, a row sum."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc(x))
        return h.sum(dim=1, keepdim=True)


batch_size = 1024
in_features = 768
out_features = 1024


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
