import torch
import torch.nn as nn


class Model(nn.Module):
    """y = softmax(Linear(x) / temperature, dim=1): a classifier head."""

    def __init__(self, in_features: int, classes: int, temperature: float):
        super().__init__()
        self.fc = nn.Linear(in_features, classes)
        self.temperature = temperature

    def forward(self, x):
        return torch.softmax(self.fc(x) / self.temperature, dim=1)


batch_size = 1024
in_features = 512
classes = 1000


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, classes, 2.0]
