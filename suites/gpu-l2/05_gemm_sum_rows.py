import torch
import torch.nn as nn


class Model(nn.Module):
    """y = sum(Linear(x), dim=1, keepdim=True): a GEMM reduced over each output row."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.sum(self.fc(x), dim=1, keepdim=True)


batch_size = 4096
in_features = 4096
out_features = 2048


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
