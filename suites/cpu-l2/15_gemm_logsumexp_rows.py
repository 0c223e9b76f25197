import torch
import torch.nn as nn


class Model(nn.Module):
    """y = logsumexp(Linear(x) / temperature, dim=1, keepdim=True): a GEMM, a scaling, a row log-sum-exp."""

    def __init__(self, in_features: int, out_features: int, temperature: float):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.temperature = temperature

    def forward(self, x):
        return torch.logsumexp(self.fc(x) / self.temperature, dim=1, keepdim=True)


batch_size = 1024
in_features = 512
out_features = 1024
temperature = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, temperature]
