double dot(int n, const double x[n], const double y[n])
{
  double acc = 0;
  for (int i = 0; i < n; i++) acc += x[i] * y[i];
  return acc;
}
