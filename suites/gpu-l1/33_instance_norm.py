import torch
import torch.nn as nn


class Model(nn.Module):
    """y = InstanceNorm2d(C)(x): each (sample, channel) plane normalized over H x W."""

    def __init__(self, num_features):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(num_features)

    def forward(self, x):
        return self.inorm(x)


batch_size = 32
features = 64
dim1 = 384
dim2 = 384


def get_inputs():
    x = torch.randn(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [features]
