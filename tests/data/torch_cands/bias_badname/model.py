import torch
import torch.nn as nn

from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("../bias_ok/kernel.cu")


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.b = nn.Parameter(torch.empty(dim))  # Model calls it "bias"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.bias_relu(x, self.b, y, x.numel() // x.shape[-1], x.shape[-1])
        return y
