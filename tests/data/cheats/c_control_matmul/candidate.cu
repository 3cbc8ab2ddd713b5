// Control: an honest candidate for examples/matmul.c (C = alpha * A * B + beta * C), in
// double, in the reference's order of operations.
#include <cuda_runtime.h>

__global__ void gemm_k(int ni, int nj, int nk, double alpha, double beta, double* C,
                       const double* A, const double* B) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= ni || j >= nj) return;
  double c = C[(size_t)i * nj + j] * beta;
  for (int k = 0; k < nk; k++) c += alpha * A[(size_t)i * nk + k] * B[(size_t)k * nj + j];
  C[(size_t)i * nj + j] = c;
}

extern "C" int kernel_gemm_cuda(int ni, int nj, int nk, double alpha, double beta, double* C,
                                const double* A, const double* B) {
  if (ni <= 0 || nj <= 0) return 0;
  dim3 block(16, 16), grid((nj + 15) / 16, (ni + 15) / 16);
  gemm_k<<<grid, block>>>(ni, nj, nk, alpha, beta, C, A, B);
  return (int)cudaGetLastError();
}
