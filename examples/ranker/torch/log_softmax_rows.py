"""Row-wise log-softmax over the last dim: y = x - max(x) - log(sum(exp(x - max(x)))).

Shapes: x float32[batch_size, dim] -> y float32[batch_size, dim].
Constants: batch_size, dim (defaults 16384 x 1024 = 16M elements, 64 MB: short rows, where
one warp per row pays off; tests use 8 x 64).
"""

import torch
import torch.nn as nn

batch_size = 16384
dim = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
