// Histogram with one global atomic per element inside a grid-stride loop.
__global__ void histogram_global(const int* __restrict__ data, int* __restrict__ bins, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&bins[data[i] & 255], 1);
}

// Same histogram, privatised in shared memory: global atomics only once per bin per block.
__global__ void histogram_shared(const int* __restrict__ data, int* __restrict__ bins, int n)
{
    __shared__ int local[256];
    local[threadIdx.x] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[data[i] & 255], 1);
    __syncthreads();
    atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
}

int main()
{
    const int n = 1 << 24;
    int *data, *bins;
    cudaMalloc(&data, n * sizeof(int));
    cudaMalloc(&bins, 256 * sizeof(int));
    histogram_global<<<1056, 256>>>(data, bins, n);
    histogram_shared<<<1056, 256>>>(data, bins, n);
    cudaDeviceSynchronize();
    return 0;
}
