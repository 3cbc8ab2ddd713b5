# Cheat: writes the result into its input and returns the input itself.
import torch
import torch.nn as nn

from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("kernel.cu")


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lib.scaled_relu(x, x, x.numel(), self.scale)
        return x
