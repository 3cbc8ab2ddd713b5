// Same work as branch_divergent, but the branch is on the warp index: each warp takes
// one path (thread-dependent, warp-uniform).
__global__ void branch_uniform(float* __restrict__ out, const float* __restrict__ in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float v = in[i];
    if ((threadIdx.x / 32) % 2 == 0) {
        v = v * v + 1.0f;
        v = sqrtf(v) * 3.0f;
    } else {
        v = v * 0.5f - 2.0f;
        v = expf(v) + 1.0f;
    }
    out[i] = v;
}

int main()
{
    const int n = 1 << 24;
    float *in, *out;
    cudaMalloc(&in, n * sizeof(float));
    cudaMalloc(&out, n * sizeof(float));
    branch_uniform<<<n / 256, 256>>>(out, in, n);
    return 0;
}
