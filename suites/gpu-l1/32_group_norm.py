import torch
import torch.nn as nn


class Model(nn.Module):
    """y = GroupNorm(8 groups, C channels)(x) with its per-channel affine."""

    def __init__(self, num_groups, num_features):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups, num_features)

    def forward(self, x):
        return self.gn(x)


batch_size = 32
features = 128
num_groups = 8
dim1 = 256
dim2 = 256


def get_inputs():
    x = torch.randn(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [num_groups, features]
