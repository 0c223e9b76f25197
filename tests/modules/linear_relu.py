# A module every op of which kforge lowers (a linear layer, a ReLU): kforge import makes it a
# graph task, the sample of that kind for the llm agent (python/tests/test_kind_sample_llm.py).
# KernelBench format.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [8, 6]
