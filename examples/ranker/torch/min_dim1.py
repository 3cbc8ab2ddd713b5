"""Minimum over the middle dim of a 3-D tensor: y[b, k] = min_j x[b, j, k] (values only).

torch.min(x, dim=1) returns (values, indices); only the values are used.
Shapes: x float32[batch_size, dim1, dim2] -> y float32[batch_size, dim2] (a strided reduction).
Constants: batch_size, dim1, dim2 (defaults 32 x 512 x 1024 = 16M elements, 64 MB; tests
use 2 x 16 x 32).
"""

import torch
import torch.nn as nn

batch_size = 32
dim1 = 512
dim2 = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.min(x, dim=1)[0]


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []
