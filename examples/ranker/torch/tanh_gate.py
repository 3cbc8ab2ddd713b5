"""Gated activation of two inputs: y = tanh(a) * sigmoid(b) (the WaveNet / LSTM-cell gate).

Shapes: a, b float32[batch_size, dim] -> y float32[batch_size, dim].
Constants: batch_size, dim (defaults 8192 x 2048: two 64 MB inputs; tests use 8 x 64).
"""

import torch
import torch.nn as nn

batch_size = 8192
dim = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.tanh(a) * torch.sigmoid(b)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
