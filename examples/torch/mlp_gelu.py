"""A small MLP: y = Linear2(GELU(Linear1(x))) (exact GELU, both layers with bias).

Shapes: x float32[batch_size, in_features] -> y float32[batch_size, out_features];
Linear1 weight float32[hidden, in_features], Linear2 weight float32[out_features, hidden].
Constants: batch_size, in_features, hidden, out_features (defaults 1024, 1024, 4096, 1024:
17.2 GFLOP; tests use 4, 16, 32, 8).
"""

import torch
import torch.nn as nn

batch_size = 1024
in_features = 1024
hidden = 4096
out_features = 1024


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden, out_features]
