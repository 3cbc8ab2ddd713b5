"""L2 normalisation of every row: y = x / max(||x||_2, eps) (F.normalize, p = 2, dim = 1).

Shapes: x float32[batch_size, dim] -> y float32[batch_size, dim].
Constants: batch_size, dim (defaults 8192 x 2048 = 16M elements, 64 MB; tests use 8 x 64).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
dim = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, p=2.0, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
