"""GELU (exact, erf form): y = 0.5 * x * (1 + erf(x / sqrt(2))).

Shapes: x float32[batch_size, dim] -> y float32[batch_size, dim].
Constants: batch_size, dim (defaults 8192 x 4096 = 32M elements, 128 MB; tests use 8 x 64).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
dim = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
