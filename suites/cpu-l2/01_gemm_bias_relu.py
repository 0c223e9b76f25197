import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(nn.Linear(in, out)(x)): a GEMM, its bias over columns, an activation."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))


batch_size = 1024
in_features = 1024
out_features = 1024


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
