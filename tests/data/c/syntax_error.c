void broken(int n, double *x)
{
  for (int i = 0; i < n; i++) {
    x[i] = x[i] * ;
  }
}
