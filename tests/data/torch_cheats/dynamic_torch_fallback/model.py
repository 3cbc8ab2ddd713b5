# Cheat: a custom kernel runs (into a scratch buffer), but the returned result comes from
# PyTorch ops.
import torch
import torch.nn as nn

from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("kernel.cu")


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scratch = torch.empty_like(x)
        lib.scaled_relu(x.contiguous(), scratch, x.numel(), self.scale)
        return torch.clamp_min(x, 0.0) * self.scale
