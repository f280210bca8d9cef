/* SPDX-License-Identifier: MIT */
/* Causal attention over the paged KV cache (see attn.h): the work split, the kernel choice
 * and the scalar kernel. Numerics follow llama.cpp where one pass allows: scores q.k scaled
 * after the dot product; with an F16 cache the query is rounded to f16 before the dot
 * products and the probabilities before the product with V (as ggml's mul_mat does), except
 * that the rounded values are the unnormalised exp(s - running max), the division by the
 * sum coming once at the end. Sums of the exponentials are kept per lane of a block (16
 * partial sums, added in double at the end), which is also how the vector kernels keep them. */
#include "attn.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "pl/engine_model.h"
#include "pl/engine_quant.h"
#include "pl/pl_util.h"

#define BT PL_KV_BLOCK_TOKENS

/* f16 -> f32 for every half value: the scalar kernel reads the cache element by element,
 * where a call per element would dominate (as ggml's ggml_table_f32_f16). Filled once by
 * pl_attn_init(), read-only afterwards. */
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

/* ---- Kernel choice ---- */

#ifdef PL_ATTN_HAVE_AVX512
#include <cpuid.h>

static bool have_avx512, have_avx2;

/* CPUID.1:ECX.F16C, asked directly: clang before 15 rejects "f16c" in
 * __builtin_cpu_supports(), which broke the clang (fuzz) builds. */
static bool cpu_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif
static pthread_once_t choose_once = PTHREAD_ONCE_INIT;

static void choose(void) {
#ifdef PL_ATTN_HAVE_AVX512
    __builtin_cpu_init();
    have_avx512 = pl_quant_env_allows("avx512") && __builtin_cpu_supports("avx512f") && cpu_f16c();
    have_avx2 = pl_quant_env_allows("avx2") && __builtin_cpu_supports("avx2") &&
                __builtin_cpu_supports("fma") && cpu_f16c();
#endif
}

int pl_attn_init(struct pl_attn *a, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                 uint32_t n_ctx, uint32_t n_threads, uint32_t kv_type, bool allow_simd) {
    memset(a, 0, sizeof(*a));
    if (!n_head || !n_head_kv || n_head % n_head_kv || !head_dim || head_dim > (1u << 16) ||
        !n_ctx || !n_threads || (kv_type != PL_KV_F16 && kv_type != PL_KV_F32))
        return -EINVAL;
    a->n_head = n_head;
    a->n_head_kv = n_head_kv;
    a->head_dim = head_dim;
    a->n_ctx = n_ctx;
    a->n_threads = n_threads;
    a->kv_type = kv_type;
    a->kq_scale = 1.0f / sqrtf((float)head_dim);
    (void)pthread_once(&fp16_table_once, fp16_table_fill);
    (void)pthread_once(&choose_once, choose);
    a->item = pl_attn_item_scalar;
#ifdef PL_ATTN_HAVE_AVX512
    if (allow_simd && head_dim % 16 == 0 && (have_avx512 || have_avx2)) {
        a->item = have_avx512 ? pl_attn_item_avx512 : pl_attn_item_avx2;
        a->simd = true;
    }
#else
    (void)allow_simd;
#endif

    /* The scratch layout of attn.h, each part 64-byte aligned. */
    const size_t g = n_head / n_head_kv, hd = head_dim;
    size_t off = 0;
#define PART(field, floats)                                                                        \
    do {                                                                                           \
        a->field = off;                                                                            \
        off += PL_ALIGN_UP((size_t)(floats) * sizeof(float), (size_t)64);                          \
    } while (0)
    PART(off_q, g * hd);
    PART(off_k, BT * hd);
    PART(off_v, BT * hd);
    PART(off_p, g * BT);
    PART(off_l, g * BT);
    PART(off_m, g);
    PART(off_a, g);
    PART(off_o, g * hd);
#undef PART
    a->scratch_stride = off;
    void *p = NULL;
    if ((size_t)n_threads > SIZE_MAX / off || posix_memalign(&p, 64, n_threads * off) != 0)
        return -ENOMEM;
    a->scratch = p;
    return 0;
}

void pl_attn_done(struct pl_attn *a) {
    free(a->scratch);
    a->scratch = NULL;
}

/* ---- The scalar kernel ---- */

/* Rows n of a block of V (rows row_bytes apart, starting at src) as f32, hd apart, into dst. */
static void block_to_f32(const uint8_t *src, size_t row_bytes, uint32_t n, uint32_t hd, bool f16,
                         float *dst) {
    for (uint32_t s = 0; s < n; s++) {
        const void *r = src + (size_t)s * row_bytes;
        float *d = dst + (size_t)s * hd;
        if (f16) {
            const uint16_t *r16 = r;
            for (uint32_t i = 0; i < hd; i++)
                d[i] = fp16_table[r16[i]];
        } else {
            memcpy(d, r, hd * sizeof(float));
        }
    }
}

/* Slots n of a head's K in a block (dimension-major at src: element i of slot s at
 * i * BT + s, kv.h) as f32 rows hd apart in dst. */
static void k_block_to_f32(const uint8_t *src, uint32_t n, uint32_t hd, bool f16, float *dst) {
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t i = 0; i < hd; i++) {
            const size_t e = (size_t)i * BT + s;
            if (f16) {
                uint16_t h;
                memcpy(&h, src + 2 * e, sizeof(h));
                dst[(size_t)s * hd + i] = fp16_table[h];
            } else {
                memcpy(&dst[(size_t)s * hd + i], src + 4 * e, sizeof(float));
            }
        }
}

void pl_attn_item_scalar(const struct pl_attn *a, const struct pl_attn_item *it) {
    const struct pl_kv *kv = it->kv;
    const uint32_t hd = a->head_dim, nq = it->n_q;
    const bool f16 = kv->type == PL_KV_F16;
    float *qb = (float *)(void *)(it->scratch + a->off_q);
    float *kb = (float *)(void *)(it->scratch + a->off_k);
    float *vb = (float *)(void *)(it->scratch + a->off_v);
    float *lb = (float *)(void *)(it->scratch + a->off_l);
    float *mb = (float *)(void *)(it->scratch + a->off_m);
    /* The outputs are summed here, beside the K/V copies, and written to it->out once at the
     * end: summed in place, a row of it->out a multiple of 4 KiB away from kb/vb (how the
     * context's buffers fall decides) made every load of the sum wait for the store before
     * it (the CPU matches loads to earlier stores by the address's low 12 bits): attention
     * ran 60% slower for some context sizes. */
    float *ob = (float *)(void *)(it->scratch + a->off_o);
    const float *q = it->q;

    /* As ggml's mul_mat: with an F16 cache the query is rounded to f16 first. */
    if (f16) {
        for (size_t i = 0; i < (size_t)nq * hd; i++)
            qb[i] = fp16_table[pl_f32_to_fp16(it->q[i])];
        q = qb;
    }
    for (uint32_t h = 0; h < nq; h++) {
        mb[h] = -INFINITY;
        for (uint32_t s = 0; s < BT; s++)
            lb[h * BT + s] = 0.0f;
    }
    memset(ob, 0, (size_t)nq * hd * sizeof(float));

    for (uint32_t b0 = 0, bi = 0; b0 < it->n_kv; b0 += BT, bi++) {
        const uint32_t n = PL_MIN(BT, it->n_kv - b0);
        /* Each K and V row of the block is read once for all the group's heads. */
        k_block_to_f32(pl_kv_k_block(kv, it->il, it->seq, bi) + it->k_off, n, hd, f16, kb);
        block_to_f32(pl_kv_v_block(kv, it->il, it->seq, bi) + it->head_off, kv->row_bytes, n, hd,
                     f16, vb);
        for (uint32_t h = 0; h < nq; h++) {
            const float *qh = q + (size_t)h * hd;
            float *o = ob + (size_t)h * hd, *l = lb + h * BT;
            float sc[BT], p[BT];
            float bmax = -INFINITY;
            for (uint32_t s = 0; s < n; s++) {
                const float *k = kb + (size_t)s * hd;
                float acc = 0.0f;
                for (uint32_t d = 0; d < hd; d++)
                    acc += k[d] * qh[d];
                sc[s] = acc * a->kq_scale; /* scaled after the dot product, as ggml */
                bmax = sc[s] > bmax ? sc[s] : bmax;
            }
            /* A new maximum rescales what was summed so far. */
            if (bmax > mb[h]) {
                const float alpha = expf(mb[h] - bmax); /* 0 on the first block */
                for (uint32_t s = 0; s < BT; s++)
                    l[s] *= alpha;
                for (uint32_t d = 0; d < hd; d++)
                    o[d] *= alpha;
                mb[h] = bmax;
            }
            for (uint32_t s = 0; s < n; s++) {
                const float e = expf(sc[s] - mb[h]);
                l[s] += e;
                /* ggml rounds the probabilities to the cache type for the product with V. */
                p[s] = f16 ? round_to_f16(e) : e;
            }
            for (uint32_t s = 0; s < n; s++) {
                const float *v = vb + (size_t)s * hd;
                for (uint32_t d = 0; d < hd; d++)
                    o[d] += p[s] * v[d];
            }
        }
    }

    for (uint32_t h = 0; h < nq; h++) {
        double sum = 0.0;
        for (uint32_t s = 0; s < BT; s++)
            sum += (double)lb[h * BT + s];
        const float inv = (float)(1.0 / sum);
        const float *o = ob + (size_t)h * hd;
        float *out = it->out + (size_t)h * hd;
        for (uint32_t d = 0; d < hd; d++)
            out[d] = o[d] * inv;
    }
}

/* ---- The work split ---- */

void pl_attn_run(const struct pl_attn *a, const struct pl_kv *kv, uint32_t il, uint32_t n_tok,
                 const int32_t *pos, const int32_t *seq, const float *q, float *out, uint32_t ith,
                 uint32_t nth) {
    const uint32_t g = a->n_head / a->n_head_kv, hd = a->head_dim;
    const size_t q_dim = (size_t)a->n_head * hd;
    const size_t elem = kv->type == PL_KV_F16 ? 2 : 4;
    const uint64_t groups = (uint64_t)n_tok * a->n_head_kv;

    /* Work items are whole groups (entry, KV head) unless there are fewer than threads
     * (decode): then each group is cut into the fewest equal parts that give every thread
     * one, each part reading the group's K/V rows for its own heads. */
    uint32_t parts = 1;
    while (parts < g && groups * parts < nth) {
        parts++;
        while (g % parts)
            parts++;
    }
    const uint32_t nq = g / parts, per_tok = a->n_head_kv * parts;
    const uint64_t n_items = groups * parts;

    /* Items are dealt round robin: consecutive entries of a prefill batch attend to
     * growing prefixes, so contiguous ranges would load the last thread most. */
    struct pl_attn_item item = {
        .kv = kv, .il = il, .n_q = nq, .scratch = a->scratch + (size_t)ith * a->scratch_stride};
    for (uint64_t i = ith; i < n_items; i += nth) {
        const uint32_t t = (uint32_t)(i / per_tok), r = (uint32_t)(i % per_tok);
        const uint32_t kvh = r / parts, h0 = kvh * g + (r % parts) * nq;
        const size_t off = (size_t)t * q_dim + (size_t)h0 * hd;
        item.seq = (uint32_t)seq[t];
        item.n_kv = (uint32_t)pos[t] + 1;
        item.head_off = (size_t)kvh * hd * elem;
        item.k_off = item.head_off * PL_KV_BLOCK_TOKENS;
        item.q = q + off;
        item.out = out + off;
        a->item(a, &item);
    }
}
