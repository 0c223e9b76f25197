import torch
import torch.nn as nn


class Model(nn.Module):
    """y = LayerNorm((C, H, W))(x): each sample normalized over all of its features, elementwise affine."""

    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x):
        return self.ln(x)


batch_size = 16
features = 64
dim1 = 512
dim2 = 512


def get_inputs():
    x = torch.randn(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [(features, dim1, dim2)]
