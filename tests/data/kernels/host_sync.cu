// Two dependent kernels per time step with a needless host synchronisation in between.
__global__ void step_a(float* __restrict__ u, const float* __restrict__ v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) u[i] = 0.5f * (u[i] + v[i]);
}

__global__ void step_b(float* __restrict__ v, const float* __restrict__ u, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = v[i] - 0.1f * u[i];
}

extern "C" int run_steps(float* u, float* v, int n, int steps)
{
    for (int t = 0; t < steps; ++t) {
        step_a<<<(n + 255) / 256, 256>>>(u, v, n);
        cudaDeviceSynchronize();
        step_b<<<(n + 255) / 256, 256>>>(v, u, n);
    }
    cudaDeviceSynchronize();
    return 0;
}
