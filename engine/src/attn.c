/* SPDX-License-Identifier: MIT */
/* Causal attention over the paged KV cache (see attn.h), with llama.cpp's numerics: scores
 * q.k scaled after the dot product, softmax, then the probabilities times V; with an F16
 * cache the query and the probabilities are rounded to f16 first, as ggml's mul_mat does. */
#include "attn.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "matmul.h"
#include "pl/engine_model.h"
#include "pl/engine_quant.h"
#include "pl/pl_util.h"

/* f16 -> f32 for every half value: the cache is read element by element in the attention
 * loops, where a call per element would dominate (as ggml's ggml_table_f32_f16). Filled once
 * by pl_attn_init(), read-only afterwards. */
static float fp16_table[1u << 16];
static pthread_once_t fp16_table_once = PTHREAD_ONCE_INIT;

static void fp16_table_fill(void) {
    for (uint32_t i = 0; i < (1u << 16); i++)
        fp16_table[i] = pl_fp16_to_f32((uint16_t)i);
}

/* The f32 value of the f16 nearest to f (ties to even), for 0 <= f <= 1 (probabilities):
 * what pl_fp16_to_f32(pl_f32_to_fp16(f)) gives, without the calls. */
static inline float round_to_f16(float f) {
    if (f < 6.103515625e-05f) /* below 2^-14: f16 subnormals, quantum 2^-24 */
        return rintf(f * 16777216.0f) * (1.0f / 16777216.0f);
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    u += 0x0FFFu + ((u >> 13) & 1u); /* round the 13 dropped mantissa bits to even */
    u &= ~0x1FFFu;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static void split(uint32_t n, uint32_t ith, uint32_t nth, uint32_t *ret_lo, uint32_t *ret_hi) {
    *ret_lo = (uint32_t)((uint64_t)n * ith / nth);
    *ret_hi = (uint32_t)((uint64_t)n * (ith + 1) / nth);
}

int pl_attn_init(struct pl_attn *a, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                 uint32_t n_ctx, uint32_t n_threads, uint32_t kv_type, bool allow_simd) {
    memset(a, 0, sizeof(*a));
    if (!n_head || !n_head_kv || n_head % n_head_kv || !head_dim || !n_ctx || !n_threads ||
        (kv_type != PL_KV_F16 && kv_type != PL_KV_F32))
        return -EINVAL;
    a->n_head = n_head;
    a->n_head_kv = n_head_kv;
    a->head_dim = head_dim;
    a->n_ctx = n_ctx;
    a->n_threads = n_threads;
    a->kv_type = kv_type;
    a->kq_scale = 1.0f / sqrtf((float)head_dim);
    (void)pthread_once(&fp16_table_once, fp16_table_fill);
    if (allow_simd && head_dim % 16 == 0)
        a->simd = pl_mm_attn_kernels();
    /* Per thread: scores [n_ctx], then the query head rounded to the cache type [head_dim]. */
    a->scratch_stride =
        PL_ALIGN_UP(((size_t)n_ctx + head_dim) * sizeof(float), (size_t)64);
    void *p = NULL;
    if ((size_t)n_threads > SIZE_MAX / a->scratch_stride ||
        posix_memalign(&p, 64, (size_t)n_threads * a->scratch_stride) != 0)
        return -ENOMEM;
    a->scratch = p;
    return 0;
}

void pl_attn_done(struct pl_attn *a) {
    free(a->scratch);
    a->scratch = NULL;
}

/* Attention of query head h of batch entry t over positions [0, pos] of its sequence. */
static void attend(const struct pl_attn *a, const struct pl_kv *kv, uint32_t il, uint32_t seq,
                   uint32_t n_kv, const float *qh, float *o, uint32_t h, uint32_t ith) {
    const uint32_t hd = a->head_dim;
    const uint32_t kvh = h / (a->n_head / a->n_head_kv);
    const size_t head_off = (size_t)kvh * hd * (kv->type == PL_KV_F16 ? 2 : 4);
    float *scores = (float *)(void *)(a->scratch + (size_t)ith * a->scratch_stride);
    const bool f16 = kv->type == PL_KV_F16;
    const float *qx = qh;

    /* As ggml's mul_mat: with an F16 cache the query is rounded to f16 first. */
    if (f16) {
        float *qr = scores + a->n_ctx;
        for (uint32_t d = 0; d < hd; d++)
            qr[d] = fp16_table[pl_f32_to_fp16(qh[d])];
        qx = qr;
    }

    /* Scores, scaled after the dot product (ggml_soft_max_ext with scale). */
    float max = -INFINITY;
    const struct pl_mm_attn_kernels *ak = f16 ? a->simd : NULL;
    for (uint32_t b0 = 0, bi = 0; b0 < n_kv; b0 += PL_KV_BLOCK_TOKENS, bi++) {
        const uint8_t *kb = pl_kv_k_block(kv, il, seq, bi) + head_off;
        uint32_t n = PL_MIN(PL_KV_BLOCK_TOKENS, n_kv - b0);
        if (ak) {
            ak->kq(kb, kv->row_bytes, n, qx, hd, scores + b0);
            for (uint32_t s = 0; s < n; s++) {
                float sc = scores[b0 + s] * a->kq_scale;
                scores[b0 + s] = sc;
                max = sc > max ? sc : max;
            }
            continue;
        }
        for (uint32_t s = 0; s < n; s++) {
            const void *kr = kb + (size_t)s * kv->row_bytes;
            float acc = 0.0f;
            if (f16) {
                const uint16_t *k16 = kr;
                for (uint32_t d = 0; d < hd; d++)
                    acc += fp16_table[k16[d]] * qx[d];
            } else {
                const float *k32 = kr;
                for (uint32_t d = 0; d < hd; d++)
                    acc += k32[d] * qx[d];
            }
            float sc = acc * a->kq_scale;
            scores[b0 + s] = sc;
            max = sc > max ? sc : max;
        }
    }
    /* Softmax: exp(x - max) in float, sum in double, one multiply by 1/sum (as
     * ggml_vec_soft_max_f32 + ggml_vec_scale_f32). */
    double sum = 0.0;
    for (uint32_t p = 0; p < n_kv; p++) {
        float e = expf(scores[p] - max);
        scores[p] = e;
        sum += (double)e;
    }
    const float inv = (float)(1.0 / sum);

    memset(o, 0, hd * sizeof(float));
    for (uint32_t b0 = 0, bi = 0; b0 < n_kv; b0 += PL_KV_BLOCK_TOKENS, bi++) {
        const uint8_t *vb = pl_kv_v_block(kv, il, seq, bi) + head_off;
        uint32_t n = PL_MIN(PL_KV_BLOCK_TOKENS, n_kv - b0);
        if (ak) {
            /* The probabilities rounded to f16 in place (each is read once). */
            for (uint32_t s = 0; s < n; s++)
                scores[b0 + s] = round_to_f16(scores[b0 + s] * inv);
            ak->pv(vb, kv->row_bytes, n, scores + b0, hd, o);
            continue;
        }
        for (uint32_t s = 0; s < n; s++) {
            const void *vr = vb + (size_t)s * kv->row_bytes;
            float p = scores[b0 + s] * inv;
            if (f16) {
                /* ggml rounds the probabilities to the cache type for the KQ*V product. */
                p = round_to_f16(p);
                const uint16_t *v16 = vr;
                for (uint32_t d = 0; d < hd; d++)
                    o[d] += p * fp16_table[v16[d]];
            } else {
                const float *v32 = vr;
                for (uint32_t d = 0; d < hd; d++)
                    o[d] += p * v32[d];
            }
        }
    }
}

void pl_attn_run(const struct pl_attn *a, const struct pl_kv *kv, uint32_t il, uint32_t n_tok,
                 const int32_t *pos, const int32_t *seq, const float *q, float *out,
                 uint32_t ith, uint32_t nth) {
    const size_t q_dim = (size_t)a->n_head * a->head_dim;
    uint32_t lo, hi;
    /* One (entry, head) pair per work item. */
    split(n_tok * a->n_head, ith, nth, &lo, &hi);
    for (uint32_t it = lo; it < hi; it++) {
        uint32_t t = it / a->n_head, h = it % a->n_head;
        size_t off = (size_t)t * q_dim + (size_t)h * a->head_dim;
        attend(a, kv, il, (uint32_t)seq[t], (uint32_t)pos[t] + 1, q + off, out + off, h, ith);
    }
}
