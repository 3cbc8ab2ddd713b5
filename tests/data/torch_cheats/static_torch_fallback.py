"""Cheat: a decoy kernel is launched, but torch.softmax computes the answer."""

import torch
import torch.nn as nn

from cudaperf_cli.torch_runtime import load_cuda

lib = load_cuda("kernel.cu")


class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.empty_like(x)
        lib.copy(x, scratch, x.numel())
        return torch.softmax(scratch, dim=-1)
