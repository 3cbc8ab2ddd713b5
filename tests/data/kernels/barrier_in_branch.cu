// A __syncthreads() inside a branch taken by only half of the block: undefined behaviour
// (deadlock on older GPUs).  The fixed version keeps the barrier outside the branch.
__global__ void barrier_in_branch(float* __restrict__ out, const float* __restrict__ in)
{
    __shared__ float buf[256];
    int t = threadIdx.x;
    buf[t] = in[blockIdx.x * 256 + t];
    if (t < 128) {
        buf[t] += buf[t + 128];
        __syncthreads();
    }
    out[blockIdx.x * 256 + t] = buf[t];
}

__global__ void barrier_outside(float* __restrict__ out, const float* __restrict__ in)
{
    __shared__ float buf[256];
    int t = threadIdx.x;
    buf[t] = in[blockIdx.x * 256 + t];
    __syncthreads();
    if (t < 128)
        buf[t] += buf[t + 128];
    __syncthreads();
    out[blockIdx.x * 256 + t] = buf[t];
}

int main()
{
    float *in, *out;
    cudaMalloc(&in, 1024 * 256 * sizeof(float));
    cudaMalloc(&out, 1024 * 256 * sizeof(float));
    barrier_in_branch<<<1024, 256>>>(out, in);
    barrier_outside<<<1024, 256>>>(out, in);
    cudaDeviceSynchronize();
    return 0;
}
