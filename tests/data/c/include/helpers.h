#ifndef CUDAPERF_TEST_HELPERS_H
#define CUDAPERF_TEST_HELPERS_H
#define SQUARE(v) ((v) * (v))
/* A definition in a header: never a candidate (it is not in the user's file). */
static inline double helper_value(int i)
{
  double v = 0.0;
  for (int k = 0; k < 3; k++) v += i % 7;
  return v;
}
#endif
