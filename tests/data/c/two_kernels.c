// cudaperf: x[n] y[n]
void add(int n, double *x, const double *y)
{
  for (int i = 0; i < n; i++) x[i] += y[i];
}

// cudaperf: x[n] y[n]
void mul(int n, double *x, const double *y)
{
  int i = 0;
  while (i < n) { x[i] *= y[i]; i++; }
}

int main(void) { return 0; }
