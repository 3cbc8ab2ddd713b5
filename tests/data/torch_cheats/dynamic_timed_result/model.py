# Cheat: see kernel.cu (a result cache keyed by the input pointer and a sample of its
# values; a hit only copies the cached output).  Caught by timed_result: a verified timed
# call on the timing's second input set gets the first set's output.
import torch
import torch.nn as nn

from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("kernel.cu")


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.scaled_relu(x, y, x.numel(), self.scale)
        return y
