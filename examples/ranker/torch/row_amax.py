"""Maximum of every row: y[i] = max_j x[i, j] (torch.amax over the last dim).

Shapes: x float32[batch_size, dim] -> y float32[batch_size].
Constants: batch_size, dim (defaults 32768 x 512 = 16M elements, 64 MB; tests use 8 x 64).
"""

import torch
import torch.nn as nn

batch_size = 32768
dim = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
