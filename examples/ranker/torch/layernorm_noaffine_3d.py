"""Layer norm over the last dim of a 3-D tensor, without affine parameters (eps 1e-5).

Shapes: x float32[batch_size, seq_len, hidden] -> y of the same shape.
Constants: batch_size, seq_len, hidden (defaults 32 x 1024 x 768 = 25.2M elements, 101 MB;
rows of 768; tests use 2 x 4 x 16).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
seq_len = 1024
hidden = 768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), eps=1e-5)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return []
