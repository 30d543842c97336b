/* gs_math.c: exp and tanh of FORMAT.md section 7, op for op (see gs_math.h for why). Constants
 * are C99 hex floats, so no decimal conversion can round differently from the numpy twin
 * (gptstack/quant/fmath.py, which holds the same values). */
#include "gs_internal.h"

#define GS_EXP_MIN (-0x1.5cp+6f)    /* -87: from here on e^x >= 1.6e-38 is a normal float */
#define GS_LOG2E 0x1.715476p+0f     /* log2(e) */
#define GS_LN2_HI 0x1.63p-1f        /* 0.693359375: 9 significant bits, so n * HI is exact */
#define GS_LN2_LO (-0x1.bd0106p-13f) /* ln 2 - GS_LN2_HI */
#define GS_TANH_SPLIT 0x1.4p-1f     /* 0.625: below it 1 - 2e/(1+e) would cancel */

/* Cephes expf (e^r ~ 1 + r + r^2 P(r), |r| <= 0.35) and tanhf (a + a z P(z), z = a^2)
 * coefficients, highest power first. */
static const float exp_p[6] = {0x1.a0d2cep-13f, 0x1.6e879cp-10f, 0x1.11121p-7f,
                               0x1.555382p-5f, 0x1.555554p-3f, 0x1p-1f};
static const float tanh_p[5] = {-0x1.75e1d4p-8f, 0x1.52269cp-6f, -0x1.b83c5ap-5f,
                                0x1.110726p-3f, -0x1.555532p-2f};

float gs_exp(float x)
{
    union {
        uint32_t u;
        float f;
    } scale;
    float n, r, z, p;
    int i;
    if (x != x) return x;              /* NaN */
    if (x < GS_EXP_MIN) return 0.0f;   /* also -inf */
    if (x > 0.0f) x = 0.0f;            /* never for the engine's arguments (a - max, -2|u|) */
    n = rintf(x * GS_LOG2E);           /* an integer in [-126, 0] */
    r = (x - n * GS_LN2_HI) - n * GS_LN2_LO; /* x - n ln 2, the first subtraction exact */
    z = r * r;
    p = exp_p[0] * r + exp_p[1];
    for (i = 2; i < 6; i++) p = p * r + exp_p[i];
    p = (p * z + r) + 1.0f;
    /* 2^n as bits (biased exponent n + 127): exact, and no ldexpf (libm) needed; p * 2^n is
     * exact because the cut keeps the result normal. */
    scale.u = (uint32_t)((int32_t)n + 127) << 23;
    return p * scale.f;
}

float gs_tanh(float u)
{
    union {
        uint32_t u;
        float f;
    } a, t, sign;
    sign.f = u;
    a.f = u;
    a.u &= 0x7FFFFFFFu; /* |u|: the sign bit cleared */
    if (a.f >= GS_TANH_SPLIT) { /* false for NaN: the polynomial passes it on */
        const float e = gs_exp(-2.0f * a.f);
        t.f = 1.0f - (2.0f * e) / (1.0f + e);
    } else {
        const float z = a.f * a.f;
        float p = tanh_p[0] * z + tanh_p[1];
        int i;
        for (i = 2; i < 5; i++) p = p * z + tanh_p[i];
        t.f = ((p * z) * a.f) + a.f;
    }
    /* copysign(t, u) without libm: tanh(|u|) takes u's sign bit (so tanh(-0) = -0) */
    t.u = (t.u & 0x7FFFFFFFu) | (sign.u & 0x80000000u);
    return t.f;
}
