"""Batch norm in inference mode: y = (x - running_mean[c]) / sqrt(running_var[c] + eps) * weight[c] + bias[c].

The running statistics are buffers (random, fixed at construction); F.batch_norm with
training=False, so the result does not depend on the batch statistics.
Shapes: x float32[batch_size, channels, height, width] -> y of the same shape; weight, bias,
running_mean, running_var float32[channels].
Constants: batch_size, channels, height, width (defaults 32 x 64 x 112 x 112 = 25.7M
elements, 103 MB; tests use 2 x 3 x 5 x 7).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
channels = 64
height = 112
width = 112


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.eps = 1e-5
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))
        self.register_buffer("running_mean", 0.1 * torch.randn(channels))
        self.register_buffer("running_var", 0.5 + torch.rand(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias,
            training=False, eps=self.eps,
        )


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
