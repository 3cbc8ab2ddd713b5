"""Matmul with a bias + ReLU epilogue: y = relu(x @ weight + bias).

Shapes: x float32[m, k], weight float32[k, n], bias float32[n] (parameters) -> y float32[m, n].
Constants: m, k, n (defaults 2048 x 2048 x 2048, 17.2 GFLOP; tests use 16 x 32 x 24).
fp32 throughout: no TF32 (PyTorch's default for fp32 matmul is full precision).
"""

import torch
import torch.nn as nn

m = 2048
k = 2048
n = 2048


class Model(nn.Module):
    def __init__(self, k: int, n: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k, n) / k**0.5)
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.matmul(x, self.weight) + self.bias)


def get_inputs():
    return [torch.randn(m, k)]


def get_init_inputs():
    return [k, n]
