"""y = relu(x + bias), bias a learned (random) parameter of shape [dim] (KernelBench format).

Its weights must be copied from Model into ModelNew: the tests check that a candidate
registering the same parameter name gets them, and that one with another name is refused.
"""

import torch
import torch.nn as nn

batch_size = 32
dim = 4096


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.bias)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
