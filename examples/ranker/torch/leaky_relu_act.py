"""Leaky ReLU: y = x if x > 0 else negative_slope * x (negative_slope = 0.2).

Shapes: x float32[batch_size, dim] -> y float32[batch_size, dim].
Constants: batch_size, dim (defaults 8192 x 2048 = 16M elements, 64 MB; tests use 8 x 64);
negative_slope = 0.2 is a float (not a shape constant).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
dim = 2048
negative_slope = 0.2


class Model(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope=self.negative_slope)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [negative_slope]
