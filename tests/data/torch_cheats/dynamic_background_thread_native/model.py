# Cheat (load_inline): the extension starts a detached C++ std::thread that launches the
# kernel 2 ms after forward returned (the fast format's launchers cannot: its host-code
# check refuses std::thread before linking).  No Python thread: rejected by
# background_thread's OS-thread check (a thread started during forward, still alive when
# it returns), which starts at the candidate's second call: this cheat's first call is
# honest, so the test does not depend on whether the first deferred write lands in time.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <chrono>
#include <thread>

__global__ void scaled_relu_kernel(const float *__restrict__ x, float *__restrict__ y,
                                   int64_t n, float scale)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = fmaxf(x[i], 0.0f) * scale;
}

torch::Tensor scaled_relu_later(torch::Tensor x, double scale)
{
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "x must be a contiguous float32 CUDA tensor");
    auto y = torch::empty_like(x);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    int device = x.get_device();
    int64_t n = x.numel();
    static int calls = 0;
    if (calls++ == 0) {  // the first call honest (the OS-thread check starts at the second)
        if (n > 0)
            scaled_relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(
                x.data_ptr<float>(), y.data_ptr<float>(), n, (float)scale);
        return y;
    }
    std::thread([x, y, stream, device, scale, n]() {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        cudaSetDevice(device);
        if (n > 0)
            scaled_relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(
                x.data_ptr<float>(), y.data_ptr<float>(), n, (float)scale);
    }).detach();
    return y;
}
"""

ext = load_inline(
    name="deferred_scaled_relu_ext",
    cpp_sources="torch::Tensor scaled_relu_later(torch::Tensor x, double scale);",
    cuda_sources=cuda_source,
    functions=["scaled_relu_later"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.scaled_relu_later(x.contiguous(), self.scale)
