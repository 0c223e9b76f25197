import torch
import torch.nn as nn


class Model(nn.Module):
    """y = BatchNorm2d(C)(x) in training mode: normalized by the batch's per-channel statistics."""

    def __init__(self, num_features):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)

    def forward(self, x):
        return self.bn(x)


batch_size = 16
features = 64
dim1 = 512
dim2 = 512


def get_inputs():
    x = torch.randn(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [features]
