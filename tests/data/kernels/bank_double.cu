// Column reads of double tiles: [32][32] double -> 2 words per element, stride 64 words:
// 16-way conflict in each half-warp phase; [32][33] double is conflict-free.
__global__ void col_double_conflict(double* __restrict__ out, const double* __restrict__ in)
{
    __shared__ double t[32][32];
    t[threadIdx.y][threadIdx.x] = in[threadIdx.y * 32 + threadIdx.x];
    __syncthreads();
    out[threadIdx.y * 32 + threadIdx.x] = t[threadIdx.x][threadIdx.y];
}

__global__ void col_double_padded(double* __restrict__ out, const double* __restrict__ in)
{
    __shared__ double t[32][33];
    t[threadIdx.y][threadIdx.x] = in[threadIdx.y * 32 + threadIdx.x];
    __syncthreads();
    out[threadIdx.y * 32 + threadIdx.x] = t[threadIdx.x][threadIdx.y];
}

int main()
{
    double *in, *out;
    cudaMalloc(&in, 32 * 32 * sizeof(double));
    cudaMalloc(&out, 32 * 32 * sizeof(double));
    dim3 block(32, 32);
    col_double_conflict<<<1, block>>>(out, in);
    col_double_padded<<<1, block>>>(out, in);
    return 0;
}
