"""Clean candidate, KernelBench format (load_inline), for examples/torch/swish_bias.py."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

__global__ void swish_bias_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                  float* __restrict__ y, long n, long dim) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        int half = dim / 2;  // a variable named half is not the half type
        (void)half;
        y[i] = v / (1.0f + expf(-v)) + bias[i % dim];
    }
}

torch::Tensor swish_bias_cuda(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be a contiguous CUDA tensor");
    auto y = torch::empty_like(x);
    long n = x.numel();
    long dim = x.size(1);
    int threads = 256;
    int blocks = (int)((n + threads - 1) / threads);
    swish_bias_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), n, dim);
    return y;
}
"""

cpp_source = "torch::Tensor swish_bias_cuda(torch::Tensor x, torch::Tensor bias);"

swish_bias = load_inline(
    name="swish_bias",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["swish_bias_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))
        self.ext = swish_bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        assert cols == self.bias.numel(), "bias size"
        return self.ext.swish_bias_cuda(x, self.bias)
