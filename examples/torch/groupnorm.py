"""Group norm (nn.GroupNorm, eps 1e-5, learned affine): statistics per (sample, group).

Shapes: x float32[batch_size, channels, height, width] -> y of the same shape; weight, bias
float32[channels].  channels must be a multiple of num_groups.
Constants: batch_size, channels, height, width (defaults 32 x 64 x 112 x 112 = 25.7M
elements, 103 MB; tests use 2 x 8 x 6 x 5); num_groups = 8 is a constructor argument, not
changed by the alternative shapes (whose odd channel count would break the model: the
loader falls back to halved sizes).
"""

import torch
import torch.nn as nn

batch_size = 32
channels = 64
height = 112
width = 112
num_groups = 8


class Model(nn.Module):
    def __init__(self, num_groups: int, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(channels))
            self.norm.bias.copy_(0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [num_groups, channels]
