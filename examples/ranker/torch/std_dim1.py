"""Standard deviation over the middle dim of a 3-D tensor (unbiased, keepdim): a strided
two-level reduction.

Shapes: x float32[batch_size, dim1, dim2] -> y float32[batch_size, 1, dim2].
Constants: batch_size, dim1, dim2 (defaults 16 x 1024 x 1024 = 16M elements, 64 MB; tests
use 2 x 16 x 32).
"""

import torch
import torch.nn as nn

batch_size = 16
dim1 = 1024
dim2 = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.std(x, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []
