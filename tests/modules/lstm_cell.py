# A level-3-like module: an LSTM cell stepped over a sequence (torch.nn.LSTMCell, which
# kforge does not lower), the last hidden state through a linear head.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n_in, n_hidden, n_out):
        super().__init__()
        self.cell = nn.LSTMCell(n_in, n_hidden)
        self.head = nn.Linear(n_hidden, n_out)
        self.n_hidden = n_hidden

    def forward(self, x):
        h = torch.zeros(x.shape[0], self.n_hidden)
        c = torch.zeros(x.shape[0], self.n_hidden)
        for t in range(x.shape[1]):
            h, c = self.cell(x[:, t], (h, c))
        return self.head(h)


def get_inputs():
    return [torch.rand(4, 5, 8)]


def get_init_inputs():
    return [8, 16, 4]
