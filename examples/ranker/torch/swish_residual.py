"""Swish plus a residual: y = x * sigmoid(x) + residual (two full-size inputs).

Shapes: x, residual float32[batch_size, seq_len, hidden] -> y of the same shape.
Constants: batch_size, seq_len, hidden (defaults 16 x 1024 x 1024: two 64 MB inputs; tests
use 2 x 4 x 16).
"""

import torch
import torch.nn as nn

batch_size = 16
seq_len = 1024
hidden = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x) + residual


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden), torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return []
