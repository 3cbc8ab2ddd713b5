// Block tree reduction in shared memory, then one atomicAdd per block.  The last five
// steps (s < 32) leave most lanes of the active warp idle.
__global__ void reduce_shared(const float* __restrict__ in, float* __restrict__ out, int n)
{
    __shared__ float sdata[256];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = (i < n) ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s)
            sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        atomicAdd(out, sdata[0]);
}

int main()
{
    const int n = 1 << 22;
    float *in, *out;
    cudaMalloc(&in, n * sizeof(float));
    cudaMalloc(&out, sizeof(float));
    reduce_shared<<<n / 256, 256>>>(in, out, n);
    cudaDeviceSynchronize();
    return 0;
}
