"""Elementwise chain: y = x * sigmoid(x) + bias (SiLU plus a per-column bias).

Shapes: x float32[batch_size, dim], bias float32[dim] (a parameter) -> y float32[batch_size, dim].
Constants: batch_size, dim (defaults 8192 x 4096 = 32M elements, 128 MB: larger than the
H200's 60 MB L2, so the kernel is timed from DRAM; tests use 8 x 64).
"""

import torch
import torch.nn as nn

batch_size = 8192
dim = 4096


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x) + self.bias


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
