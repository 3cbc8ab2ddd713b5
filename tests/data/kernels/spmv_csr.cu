// CSR SpMV, one thread per row: the x[col[j]] gather is data-dependent, and the loop
// bounds depend on the row (divergent trip counts).
__global__ void spmv_csr(const int* __restrict__ rowptr, const int* __restrict__ col,
                         const double* __restrict__ val, const double* __restrict__ x,
                         double* __restrict__ y, int nrows)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < nrows) {
        double sum = 0.0;
        for (int j = rowptr[row]; j < rowptr[row + 1]; ++j)
            sum += val[j] * x[col[j]];
        y[row] = sum;
    }
}
