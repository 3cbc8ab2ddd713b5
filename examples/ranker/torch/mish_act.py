"""Mish activation: y = x * tanh(softplus(x)) (F.mish), transcendental-heavy elementwise.

Shapes: x float32[batch_size, channels, length] -> y of the same shape.
Constants: batch_size, channels, length (defaults 32 x 256 x 2048 = 16M elements, 64 MB;
tests use 2 x 4 x 16).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
channels = 256
length = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.mish(x)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return []
