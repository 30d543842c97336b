/* gs_sample.c: the RNG and the sampler of FORMAT.md section 9, bit-identical to the numpy
 * reference: PCG32 (O'Neill's pcg32_random_r, XSH-RR), 24-bit uniforms, greedy or temperature +
 * top-k with candidates ordered by (logit descending, id ascending) and one draw per token. */
#include "gs_internal.h"

#define PCG_MULT 6364136223846793005ull
#define PCG_INC_SEED 0xDA3E39CB94B95BDBull /* the stream constant; inc = (it << 1) | 1 */

uint32_t gs_rng_next(gs_rng *rng)
{
    uint64_t old = rng->state;
    uint32_t x, r;
    rng->state = old * PCG_MULT + rng->inc;
    x = (uint32_t)(((old >> 18) ^ old) >> 27);
    r = (uint32_t)(old >> 59);
    return (x >> r) | (x << ((0u - r) & 31u));
}

void gs_rng_seed(gs_rng *rng, uint64_t seed)
{
    rng->state = 0;
    rng->inc = (PCG_INC_SEED << 1) | 1u;
    (void)gs_rng_next(rng);
    rng->state += seed;
    (void)gs_rng_next(rng);
}

float gs_rng_uniform(gs_rng *rng)
{
    /* 24 random bits scaled by 2^-24: exact in binary32, always < 1 */
    return (float)(gs_rng_next(rng) >> 8) * (1.0f / 16777216.0f);
}

/* a comes before b: larger logit, then smaller id. */
static int before(const float *logits, uint32_t a, uint32_t b)
{
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

/* Sift heap[i] down a heap whose root is the candidate that comes last. */
static void sift_down(uint32_t *heap, uint32_t n, uint32_t i, const float *logits)
{
    for (;;) {
        uint32_t child = 2u * i + 1u, last = i;
        if (child < n && before(logits, heap[last], heap[child])) last = child;
        if (child + 1u < n && before(logits, heap[last], heap[child + 1u])) last = child + 1u;
        if (last == i) return;
        {
            uint32_t t = heap[i];
            heap[i] = heap[last];
            heap[last] = t;
        }
        i = last;
    }
}

static void sift_up(uint32_t *heap, uint32_t i, const float *logits)
{
    while (i > 0) {
        uint32_t parent = (i - 1u) / 2u;
        if (!before(logits, heap[parent], heap[i])) return;
        {
            uint32_t t = heap[i];
            heap[i] = heap[parent];
            heap[parent] = t;
        }
        i = parent;
    }
}

/* The k ids of [0, n) that come first, in order, into out[0..k): a bounded heap whose root is
 * the worst kept id (O(n log k)), then heap-sort it in place. No memory but `out`. */
static void top_k(uint32_t *out, uint32_t k, uint32_t n, const float *logits)
{
    uint32_t id, size = 0;
    for (id = 0; id < n; id++) {
        if (size < k) {
            out[size] = id;
            sift_up(out, size, logits);
            size++;
        } else if (before(logits, id, out[0])) {
            out[0] = id;
            sift_down(out, size, 0, logits);
        }
    }
    while (size > 1) { /* move the worst to the end: best ends up first */
        uint32_t t = out[0];
        out[0] = out[size - 1u];
        out[size - 1u] = t;
        size--;
        sift_down(out, size, 0, logits);
    }
}

static uint32_t argmax(const float *logits, uint32_t n)
{
    uint32_t i, best = 0;
    for (i = 1; i < n; i++) {
        if (logits[i] > logits[best]) best = i; /* strict: the lowest id wins ties */
    }
    return best;
}

gs_status gs_sample(gs_model *model, const float *logits, float temperature, uint32_t top_k_in,
                    gs_rng *rng, uint32_t *token)
{
    const uint32_t Vt = model != NULL ? model->tokenizer.n_tokens : 0u;
    uint32_t *cand, k, j;
    float z_first, total = 0.0f, u, cum = 0.0f;
    if (model == NULL || logits == NULL || token == NULL) return GS_ERR_NULL;
    if (model->state.candidates == NULL) return GS_ERR_ARENA;
    if (!(temperature > 0.0f)) { /* <= 0 (and NaN): greedy, no draw */
        *token = argmax(logits, Vt);
        return GS_OK;
    }
    if (rng == NULL) return GS_ERR_NULL;
    k = (top_k_in > 0u && top_k_in < Vt) ? top_k_in : Vt;
    cand = model->state.candidates;
    top_k(cand, k, Vt, logits);
    /* e_j = exp(z_j - z_first) (gs_exp, FORMAT.md section 7), summed in candidate order;
     * recomputed (same operations, same floats) in the walk so that no float buffer of k is
     * needed. The sums start from 0.0f: 0 + e_0 == e_0 bit for bit, as gs_exp never returns -0. */
    z_first = logits[cand[0]] / temperature;
    for (j = 0; j < k; j++) total += gs_exp(logits[cand[j]] / temperature - z_first);
    u = gs_rng_uniform(rng) * total;
    for (j = 0; j < k; j++) {
        cum += gs_exp(logits[cand[j]] / temperature - z_first);
        if (u < cum) {
            *token = cand[j];
            return GS_OK;
        }
    }
    *token = cand[k - 1u];
    return GS_OK;
}
