import torch
import torch.nn as nn

from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("kernel.cu")


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        # Same name and shape as Model's parameter: the evaluator copies Model's values in.
        self.bias = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.bias_relu(x, self.bias, y, x.numel() // x.shape[-1], x.shape[-1])
        return y
