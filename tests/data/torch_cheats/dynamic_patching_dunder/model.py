# Cheat: a zero output, and the tensor dunders a comparison reads its counts through
# (int(bad.sum()), float(diff.max())) replaced at import, so a mismatch count reads 0.
# Rejected by patching (torch.Tensor.__int__ shadows TensorBase's); with that guard off the
# comparison, which reads values through the C functions saved before the import, says wrong.
import torch
import torch.nn as nn

from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("kernel.cu")

torch.Tensor.__int__ = lambda self: 0
torch.Tensor.__index__ = lambda self: 0
torch.Tensor.__float__ = lambda self: 0.0


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        lib.zeros(y, y.numel())
        return y
