/* gs_kernels.c: the int8 arithmetic of FORMAT.md section 7, step by step in the order written
 * there, float32 only (no double, no fused multiply-add: build with -ffp-contract=off so that
 * `a * b + c` rounds twice, as numpy does). Float sums run in index order starting from the
 * first term, as section 7 pins them, so the numpy reference reproduces them bit for bit.
 *
 * gs_linear_rows is the hot spot (over 95% of the multiply-adds): int8 x int8 products summed
 * exactly in int32, so any summation order gives the same integer and the host may vectorize it
 * (-O3 -march=native in the `openmp` host variant) and split output rows over threads
 * (OpenMP), while the ESP32 runs the plain loop. */
#include "gs_internal.h"

/* Multiply-adds below which OpenMP's fork/join costs more than it saves (host only). */
#define GS_OMP_MIN_WORK (1L << 20)

/* int8 clamp of an already rounded value; NaN (only from a corrupt, CRC-consistent artifact)
 * becomes 0 so that the conversion stays defined. */
static int8_t clamp_i8(float r)
{
    if (r > 127.0f) return 127;
    if (r < -127.0f) return -127;
    if (r != r) return 0;
    return (int8_t)r;
}

float gs_quantize_vector(int8_t *q, const float *x, uint32_t n)
{
    float m = 0.0f, inv;
    uint32_t i;
    for (i = 0; i < n; i++) {
        float a = x[i] < 0.0f ? -x[i] : x[i];
        if (a > m) m = a;
    }
    if (m == 0.0f) {
        for (i = 0; i < n; i++) q[i] = 0;
        return 0.0f;
    }
    inv = 127.0f / m;
    for (i = 0; i < n; i++) q[i] = clamp_i8(rintf(x[i] * inv));
    return m / 127.0f;
}

/* Exact int8 dot product. |q| <= 127, |w| <= 128 and n <= 4C <= 131072 for any artifact under
 * 4 GiB (4C^2 weight bytes must fit), so the int32 sum cannot overflow. */
static int32_t dot_i8(const int8_t *q, const int8_t *w, uint32_t n)
{
    int32_t acc = 0;
    uint32_t k;
    for (k = 0; k < n; k++) acc += (int32_t)q[k] * (int32_t)w[k];
    return acc;
}

/* FORMAT.md 7 `linear` for n positions at once: y_p[r] = ((f32)acc_pr * s_p) * sW[r] (+ b_r),
 * acc_pr = q_p . W[r] in exact int32. The row loop is outside: each weight row (and its scale
 * and bias) is read from the artifact once and applied to every position, which is what makes
 * a batched re-encode stream the weights once instead of n times (PERFORMANCE.md). */
void gs_linear_rows(float *y, size_t y_stride, const int8_t *q, size_t q_stride,
                    const float *q_scale, uint32_t n, const gs_qmatrix *w, const uint8_t *bias)
{
    const uint32_t R = w->rows, K = w->cols;
    int32_t r; /* signed: the OpenMP 2.5 loop form older compilers accept */
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if ((uint64_t)R * K * n >= GS_OMP_MIN_WORK)
#endif
    for (r = 0; r < (int32_t)R; r++) {
        const int8_t *row = w->q + (size_t)r * K;
        const float sw = gs_f32_at(w->scale, (size_t)r);
        const float b = bias != NULL ? gs_f32_at(bias, (size_t)r) : 0.0f;
        uint32_t p;
        for (p = 0; p < n; p++) {
            float yr = ((float)dot_i8(q + p * q_stride, row, K) * q_scale[p]) * sw;
            if (bias != NULL) yr = yr + b;
            y[p * y_stride + (size_t)r] = yr;
        }
    }
}

void gs_layernorm(float *y, const float *x, const uint8_t *w, const uint8_t *b, uint32_t n,
                  float eps)
{
    float mean = x[0], var, d, rstd; /* n >= 1: C is at least 4 */
    uint32_t i;
    for (i = 1; i < n; i++) mean += x[i];
    mean = mean / (float)n;
    d = x[0] - mean;
    var = d * d;
    for (i = 1; i < n; i++) {
        d = x[i] - mean;
        var += d * d;
    }
    var = var / (float)n;
    rstd = 1.0f / sqrtf(var + eps);
    for (i = 0; i < n; i++) {
        float v = ((x[i] - mean) * rstd) * gs_f32_at(w, i);
        y[i] = b != NULL ? v + gs_f32_at(b, i) : v;
    }
}

/* GELU's tanh-form constants sqrt(2/pi) = 0.7978846 and 0.044715, as exact float32 hex. */
#define GS_GELU_A 0x1.988454p-1f
#define GS_GELU_B 0x1.6e4e26p-5f

void gs_gelu(float *x, uint32_t n)
{
    uint32_t i;
    for (i = 0; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + gs_tanh(GS_GELU_A * (v + GS_GELU_B * v * v * v)));
    }
}
