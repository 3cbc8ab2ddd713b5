#define M 300
void stencil(int n, int m, int tsteps, double A[n][m], double B[n][m], const double w[(M)])
{
  for (int t = 0; t < tsteps; t++)
    for (int i = 1; i < n - 1; i++)
      for (int j = 1; j < m - 1; j++)
        B[i][j] = w[0] * (A[i-1][j] + A[i+1][j] + A[i][j-1] + A[i][j+1]);
}

int main(void)
{
  int n = 1000;
  int m = n * 2;
  int steps = 10;
  steps = steps + 10;
  stencil(n, m, steps, 0, 0, 0);
  return 0;
}
