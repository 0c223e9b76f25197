import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(logsumexp(Linear(x) / T, dim=1)): a GEMM, a temperature, a row logsumexp, a ReLU."""

    def __init__(self, in_features, out_features, temperature):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.temperature = temperature

    def forward(self, x):
        return torch.relu(torch.logsumexp(self.fc(x) / self.temperature, dim=1, keepdim=True))


batch_size = 4096
in_features = 4096
out_features = 2048
temperature = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, temperature]
