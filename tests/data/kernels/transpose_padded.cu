// Tiled transpose with a padded tile [32][33]: coalesced and bank-conflict free.
#define TILE 32
#define ROWS 8

__global__ void transpose_padded(float* __restrict__ out, const float* __restrict__ in, int n)
{
    __shared__ float tile[TILE][TILE + 1];
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS)
        tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS)
        out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}

int main()
{
    const int n = 4096;
    float *in, *out;
    cudaMalloc(&in, n * n * sizeof(float));
    cudaMalloc(&out, n * n * sizeof(float));
    dim3 block(TILE, ROWS);
    dim3 grid(n / TILE, n / TILE);
    transpose_padded<<<grid, block>>>(out, in, n);
    cudaDeviceSynchronize();
    return 0;
}
