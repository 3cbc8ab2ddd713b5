"""RMS norm over the last dim: y = x / sqrt(mean(x^2, -1) + eps) * weight.

Shapes: x float32[batch_size, hidden] -> y float32[batch_size, hidden]; weight float32[hidden].
Constants: batch_size, hidden (defaults 4096 x 4096 = 16M elements, 64 MB; tests use 8 x 64);
eps = 1e-6 is a float.
"""

import torch
import torch.nn as nn

batch_size = 4096
hidden = 4096
eps = 1e-6


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


def get_inputs():
    return [torch.randn(batch_size, hidden)]


def get_init_inputs():
    return [hidden, eps]
