/* Bias add then ReLU on a matrix, out = max(A + bias, 0) with one bias per column.
 *
 * Written for cudaperf.  The epilogue of a fully connected layer, out of place, single
 * precision: elementwise with a vector broadcast down the columns.  init_array() fills
 * A and bias with values of both signs (random data in [0, 1) would never clip).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define BATCH 4096
#define FEATURES 4096

static void init_array(int batch, int features, float A[batch][features], float bias[features])
{
    for (int j = 0; j < features; j++)
        bias[j] = (float)(j % 11) / 11.0f - 0.5f;
    for (int i = 0; i < batch; i++)
        for (int j = 0; j < features; j++)
            A[i][j] = (float)((i + 7 * j) % 53) / 53.0f - 0.5f;
}

void bias_relu(int batch, int features, const float A[batch][features], const float bias[features],
               float out[batch][features])
{
    for (int i = 0; i < batch; i++)
        for (int j = 0; j < features; j++)
            out[i][j] = fmaxf(A[i][j] + bias[j], 0.0f);
}

int main(void)
{
    float (*A)[FEATURES] = malloc(sizeof(float[BATCH][FEATURES]));
    float *bias = malloc(sizeof(float) * FEATURES);
    float (*out)[FEATURES] = malloc(sizeof(float[BATCH][FEATURES]));
    if (!A || !bias || !out)
        return 1;
    init_array(BATCH, FEATURES, A, bias);
    bias_relu(BATCH, FEATURES, (const float (*)[FEATURES])A, bias, out);
    printf("out[0][0] = %f, out[BATCH-1][FEATURES-1] = %f\n", out[0][0], out[BATCH - 1][FEATURES - 1]);
    free(A); free(bias); free(out);
    return 0;
}
