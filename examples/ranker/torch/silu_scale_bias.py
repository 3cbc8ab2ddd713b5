"""SiLU, scale, bias: y = silu(x) * scale + bias (scale a float, bias per column).

Shapes: x float32[batch_size, dim], bias float32[dim] (a parameter) -> y float32[batch_size, dim].
Constants: batch_size, dim (defaults 16384 x 2048 = 32M elements, 128 MB; tests use 8 x 64);
scale = 1.7 is a float (not a shape constant).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16384
dim = 2048
scale = 1.7


class Model(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x) * self.scale + self.bias


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, scale]
