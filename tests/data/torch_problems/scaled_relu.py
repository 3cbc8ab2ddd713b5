"""y = relu(x) * scale, float32 (KernelBench format; tests of the PyTorch evaluation).

The scale keeps outputs small (|y| < 0.06), so an fp16 computation stays inside the float32
tolerance (atol 1e-4) and only the lower_precision guard can tell it apart.
"""

import torch
import torch.nn as nn

batch_size = 64
dim = 16384


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [0.01]
