"""Sum of squares of every row: y[i] = sum_j x[i, j]^2 (long rows).

Shapes: x float32[batch_size, dim] -> y float32[batch_size].
Constants: batch_size, dim (defaults 2048 x 16384 = 32M elements, 128 MB: few long rows;
tests use 8 x 64).
"""

import torch
import torch.nn as nn

batch_size = 2048
dim = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x * x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
