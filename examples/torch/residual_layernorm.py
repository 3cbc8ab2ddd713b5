"""Residual add then layer norm: y = LayerNorm(x + residual) over the last dim.

Shapes: x, residual float32[batch_size, hidden] -> y float32[batch_size, hidden];
weight, bias float32[hidden].
Constants: batch_size, hidden (defaults 4096 x 4096: two 64 MB inputs; tests use 8 x 64).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4096
hidden = 4096


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x + residual, (x.shape[-1],), self.weight, self.bias, eps=1e-5)


def get_inputs():
    return [torch.randn(batch_size, hidden), torch.randn(batch_size, hidden)]


def get_init_inputs():
    return [hidden]
