// float4 copy: 16 bytes per thread, 16 sectors per warp request (ideal for 512 bytes).
__global__ void copy_float4(float4* __restrict__ out, const float4* __restrict__ in, int n4)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4)
        out[i] = in[i];
}

// Same through reinterpret_cast of float pointers.
__global__ void copy_cast(float* __restrict__ out, const float* __restrict__ in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (4 * i + 3 < n)
        reinterpret_cast<float4*>(out)[i] = reinterpret_cast<const float4*>(in)[i];
}
