void scale(int n, int m, double s, const double *in, double *out)
{
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++)
      out[i * m + j] = s * in[i * m + j];
}
