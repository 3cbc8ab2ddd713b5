/* No #pragma scop: two functions with loops, but one is the init helper. */
#define LEN 300

void init_data(int n, float *x, float *y)
{
  for (int i = 0; i < n; i++) {
    x[i] = (float) i;
    y[i] = 1.0f;
  }
}

void accumulate(int n, float x[n], float y[n])
{
  for (int i = 0; i < n; i++)
    y[i] += x[i] * x[i];
}

int main(void)
{
  static float x[LEN], y[LEN];
  init_data(LEN, x, y);
  accumulate(LEN, x, y);
  return 0;
}
