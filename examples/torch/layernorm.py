"""Layer norm over the last dim with a learned affine (nn.LayerNorm, eps 1e-5).

Shapes: x float32[batch_size, hidden] -> y float32[batch_size, hidden];
weight, bias float32[hidden] (parameters, random so that the affine matters).
Constants: batch_size, hidden (defaults 4096 x 4096 = 16M elements, 64 MB; tests use 8 x 64).
"""

import torch
import torch.nn as nn

batch_size = 4096
hidden = 4096


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.norm.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, hidden)]


def get_init_inputs():
    return [hidden]
