"""Mean over the middle dim of a 3-D tensor: y[b, k] = mean_j x[b, j, k] (a strided reduction).

Shapes: x float32[batch_size, dim1, dim2] -> y float32[batch_size, dim2].
Constants: batch_size, dim1, dim2 (defaults 64 x 1024 x 1024 = 64M elements, 256 MB; tests
use 2 x 16 x 32); reduce_dim = 1 is passed to the constructor and is not a shape.
"""

import torch
import torch.nn as nn

batch_size = 64
dim1 = 1024
dim2 = 1024
reduce_dim = 1


class Model(nn.Module):
    def __init__(self, reduce_dim: int):
        super().__init__()
        self.reduce_dim = reduce_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=self.reduce_dim)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
