"""ReLU then scale: y = relu(x) * scale (scale a constructor argument).

Shapes: x float32[batch_size, dim] -> y float32[batch_size, dim].
Constants: batch_size, dim (defaults 8192 x 4096 = 32M elements, 128 MB; tests use 8 x 64);
scale = 0.5 is a float (not a shape constant).
"""

import torch
import torch.nn as nn

batch_size = 8192
dim = 4096
scale = 0.5


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [scale]
