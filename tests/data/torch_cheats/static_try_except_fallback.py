"""Cheat: the custom kernel is wrapped in try/except with a PyTorch fallback."""

import torch
import torch.nn as nn

from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("kernel.cu")


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        try:
            lib.gelu(x, y, x.numel())
        except Exception:
            y = torch.nn.functional.gelu(x)
        return y
