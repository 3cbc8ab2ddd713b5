"""Per-column affine then clamp: y = clamp(x * scale + shift, -1, 1) (a hardtanh after an affine).

Shapes: x float32[batch_size, dim], scale, shift float32[dim] (parameters) -> y float32[batch_size, dim].
Constants: batch_size, dim (defaults 4096 x 4096 = 16M elements, 64 MB; tests use 8 x 64).
"""

import torch
import torch.nn as nn

batch_size = 4096
dim = 4096


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(dim))
        self.shift = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x * self.scale + self.shift, min=-1.0, max=1.0)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
