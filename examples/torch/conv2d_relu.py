"""2-D convolution (3x3, stride 1, padding 1, with bias) followed by ReLU.

Shapes: x float32[batch_size, in_channels, height, width] -> y float32[batch_size,
out_channels, height, width]; weight float32[out_channels, in_channels, 3, 3], bias
float32[out_channels] (parameters of nn.Conv2d).
Constants: batch_size, in_channels, out_channels, height, width (defaults 8 x 64 -> 64 x
56 x 56, 14.8 GFLOP; tests use 2 x 3 -> 4 x 10 x 12); kernel_size = 3 is not changed by the
alternative shapes.
"""

import torch
import torch.nn as nn

batch_size = 8
in_channels = 64
out_channels = 64
height = 56
width = 56
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
