"""Log-sum-exp of every row: y[i] = log(sum_j exp(x[i, j])) (torch.logsumexp, stable form).

Shapes: x float32[batch_size, dim] -> y float32[batch_size].
Constants: batch_size, dim (defaults 4096 x 4096 = 16M elements, 64 MB; tests use 8 x 64).
"""

import torch
import torch.nn as nn

batch_size = 4096
dim = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
