import torch
import torch.nn as nn


class Model(nn.Module):
    """y = nn.Linear(in, out)(x) = x @ W.t() + b."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.fc(x)


batch_size = 2048
in_features = 1024
out_features = 1024


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
