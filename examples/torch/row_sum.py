"""Row sum reduction: y[i] = sum_j x[i, j].

Shapes: x float32[batch_size, dim] -> y float32[batch_size].
Constants: batch_size, dim (defaults 4096 x 8192 = 32M elements, 128 MB; tests use 8 x 64).
"""

import torch
import torch.nn as nn

batch_size = 4096
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
