/* SPDX-License-Identifier: MIT */
/* The checks test_quant_simd.c (x86) and test_quant_neon.c (aarch64) share: random blocks of
 * every quantized type (random, extreme-scale, all-zero, max-magnitude and all-high-bit
 * blocks), activations over the whole int8 range, vec_dot against the scalar reference with a
 * tolerance from the terms' magnitude, vec_dot_a and vec_dotn(2..8) bit for bit against
 * vec_dot, and from_f32 bit-identical to the reference. */
#include "quant_check.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pl/engine_quant.h"
#include "pl/engine_types.h"
#include "pl/pl_util.h"
#include "quant_blocks.h"

/* ---- Tolerances ---- */

/* vec_dot: the integer parts are exact in every set, so SIMD and reference differ only in
 * the order (and grouping) of at most ~8 * 32 float additions: bound the difference by
 * this fraction of sum_i |w_i| |x_i| (scale and min parts of w counted separately, as they
 * can cancel). 2^-24 * 256 lanes would be 1.5e-5 in the very worst case; 1e-5 has margin
 * over what a summation of <= 272 terms can produce with the grouping used. */
#define VEC_DOT_REL_TOL 1e-5
/* Absolute slack for results made of subnormal products (scale products below 2^-126). */
#define VEC_DOT_ABS_TOL 1e-37
/* from_f32 must be bit-identical to the reference: no tolerance. */

/* 19 blocks: the kernels that take 8 blocks at a time run one or two groups plus every
 * tail length (1..7) and the 2-block and odd-block paths behind them. */
#define MAX_BLOCKS 19
#define N_TRIALS 24

/* ---- Deterministic random numbers (xorshift64*) ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd64(void) {
    return pl_xorshift64s(&rng_state);
}

static uint32_t rnd_below(uint32_t n) {
    return (uint32_t)(rnd64() % n);
}

/* Uniform in [-1, 1). */
static float rnd_unit(void) {
    return (float)((double)(rnd64() >> 11) * 0x1p-52 - 1.0);
}

static void rnd_bytes(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd64();
}

/* ---- Block geometry and scale fields ---- */

#define NONE SIZE_MAX

const struct qc_type qc_types[] = {
    {PL_GGML_TYPE_F32, "F32", 1, 4, NONE, NONE, 0, 0},
    {PL_GGML_TYPE_F16, "F16", 1, 2, NONE, NONE, 0, 0},
    {PL_GGML_TYPE_BF16, "BF16", 1, 2, NONE, NONE, 0, 0},
    {PL_GGML_TYPE_Q4_0, "Q4_0", 32, sizeof(struct pl_block_q4_0), offsetof(struct pl_block_q4_0, d),
     NONE, 0, 0},
    {PL_GGML_TYPE_Q4_1, "Q4_1", 32, sizeof(struct pl_block_q4_1), offsetof(struct pl_block_q4_1, d),
     offsetof(struct pl_block_q4_1, m), 0, 0},
    {PL_GGML_TYPE_Q5_0, "Q5_0", 32, sizeof(struct pl_block_q5_0), offsetof(struct pl_block_q5_0, d),
     NONE, offsetof(struct pl_block_q5_0, qh), 4},
    {PL_GGML_TYPE_Q5_1, "Q5_1", 32, sizeof(struct pl_block_q5_1), offsetof(struct pl_block_q5_1, d),
     offsetof(struct pl_block_q5_1, m), offsetof(struct pl_block_q5_1, qh), 4},
    {PL_GGML_TYPE_Q8_0, "Q8_0", 32, sizeof(struct pl_block_q8_0), offsetof(struct pl_block_q8_0, d),
     NONE, 0, 0},
    {PL_GGML_TYPE_Q2_K, "Q2_K", 256, sizeof(struct pl_block_q2_K),
     offsetof(struct pl_block_q2_K, d), offsetof(struct pl_block_q2_K, dmin), 0, 0},
    {PL_GGML_TYPE_Q3_K, "Q3_K", 256, sizeof(struct pl_block_q3_K),
     offsetof(struct pl_block_q3_K, d), NONE, offsetof(struct pl_block_q3_K, hmask), 32},
    {PL_GGML_TYPE_Q4_K, "Q4_K", 256, sizeof(struct pl_block_q4_K),
     offsetof(struct pl_block_q4_K, d), offsetof(struct pl_block_q4_K, dmin), 0, 0},
    {PL_GGML_TYPE_Q5_K, "Q5_K", 256, sizeof(struct pl_block_q5_K),
     offsetof(struct pl_block_q5_K, d), offsetof(struct pl_block_q5_K, dmin),
     offsetof(struct pl_block_q5_K, qh), 32},
    {PL_GGML_TYPE_Q6_K, "Q6_K", 256, sizeof(struct pl_block_q6_K),
     offsetof(struct pl_block_q6_K, d), NONE, 0, 0},
};
const size_t qc_n_types = sizeof(qc_types) / sizeof(qc_types[0]);

static void put16(uint8_t *p, uint16_t v) {
    memcpy(p, &v, sizeof(v));
}

/* ---- Weight and activation generators ---- */

enum mode {
    MODE_RANDOM,     /* random quant bytes, ordinary scales */
    MODE_EXTREME,    /* random quant bytes, scales at the fp16 extremes (and 0, -0) */
    MODE_ZERO,       /* every byte zero */
    MODE_MAX_QUANTS, /* every quant byte 0xFF (or int8 -128/127), ordinary scales */
    MODE_HIGH_BITS,  /* random quants, every high bit set */
    _MODE_MAX,
};

static const char *const mode_names[] = {"random", "extreme", "zero", "max-quants", "high-bits"};

static uint16_t rnd_fp16_scale(enum mode m) {
    static const float extremes[] = {65504.f, -65504.f, 0x1p-24f, -0x1p-24f, 0x1p-14f,
                                     0.f,     -0.f,     1024.f,   -3.5e-3f};
    if (m == MODE_EXTREME)
        return pl_f32_to_fp16(extremes[rnd_below(sizeof(extremes) / sizeof(extremes[0]))]);
    /* |d| in [2^-12, 2^2), either sign */
    return pl_f32_to_fp16(ldexpf(1.f + 0.5f * rnd_unit(), (int)rnd_below(14) - 12));
}

/* A finite float of the given magnitude class (for F32/F16/BF16 elements). */
static float rnd_float(enum mode m) {
    switch (m) {
    case MODE_ZERO:
        return 0.f;
    case MODE_EXTREME: /* subnormal to large, products stay finite */
        return ldexpf(rnd_unit(), (int)rnd_below(70) - 60);
    case MODE_MAX_QUANTS:
        return rnd_below(2) ? 65504.f : -65504.f;
    case MODE_RANDOM:
    case MODE_HIGH_BITS:
    case _MODE_MAX:
        break;
    }
    return 4.f * rnd_unit();
}

static void gen_weights(const struct qc_type *ti, enum mode m, uint8_t *w, int nb) {
    for (int i = 0; i < nb; i++) {
        uint8_t *b = w + (size_t)i * ti->size;
        if (ti->block == 1) {
            float f = rnd_float(m);
            if (ti->type == PL_GGML_TYPE_F32)
                memcpy(b, &f, 4);
            else if (ti->type == PL_GGML_TYPE_F16)
                put16(b, pl_f32_to_fp16(f));
            else
                put16(b, pl_f32_to_bf16(f));
            continue;
        }
        if (m == MODE_ZERO) {
            memset(b, 0, ti->size);
            continue;
        }
        if (m == MODE_MAX_QUANTS) {
            if (ti->type == PL_GGML_TYPE_Q8_0)
                for (size_t j = 0; j < ti->size; j++)
                    b[j] = rnd_below(2) ? 0x80 : 0x7F;
            else
                memset(b, 0xFF, ti->size);
        } else {
            rnd_bytes(b, ti->size);
        }
        if (m == MODE_HIGH_BITS && ti->hi_len)
            memset(b + ti->hi_off, 0xFF, ti->hi_len);
        put16(b + ti->d_off, rnd_fp16_scale(m));
        if (ti->min_off != NONE)
            put16(b + ti->min_off, rnd_fp16_scale(m));
    }
}

/* Activations in type vt for n elements; quants over the whole int8 range (-128 too, which
 * our quantizers never produce but the kernels must still get right). */
static void gen_acts(uint32_t vt, enum mode m, uint8_t *x, int64_t n) {
    switch (vt) {
    case PL_GGML_TYPE_F32:
        for (int64_t i = 0; i < n; i++) {
            float f = rnd_float(m == MODE_ZERO ? MODE_RANDOM : m);
            memcpy(x + 4 * i, &f, 4);
        }
        return;
    case PL_GGML_TYPE_F16:
    case PL_GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            float f = rnd_float(m == MODE_ZERO ? MODE_RANDOM : m);
            put16(x + 2 * i, vt == PL_GGML_TYPE_F16 ? pl_f32_to_fp16(f) : pl_f32_to_bf16(f));
        }
        return;
    case PL_GGML_TYPE_Q8_0:
    case PL_GGML_TYPE_Q8_1: {
        size_t bs =
            vt == PL_GGML_TYPE_Q8_0 ? sizeof(struct pl_block_q8_0) : sizeof(struct pl_block_q8_1);
        for (int64_t i = 0; i < n / 32; i++) {
            uint8_t *b = x + (size_t)i * bs;
            int8_t *qs = (int8_t *)(b + bs - 32);
            int sum = 0;
            if (m == MODE_MAX_QUANTS)
                for (int j = 0; j < 32; j++)
                    qs[j] = rnd_below(2) ? -128 : 127;
            else
                rnd_bytes((uint8_t *)qs, 32);
            for (int j = 0; j < 32; j++)
                sum += qs[j];
            uint16_t d = rnd_fp16_scale(m == MODE_ZERO ? MODE_RANDOM : m);
            /* Q8_1: keep s = d * sum finite (a quantizer cannot produce an infinite s) */
            if (vt == PL_GGML_TYPE_Q8_1 && fabsf(pl_fp16_to_f32(d) * (float)sum) >= 65504.f)
                d = pl_f32_to_fp16(65504.f / 4096.f);
            put16(b, d);
            if (vt == PL_GGML_TYPE_Q8_1)
                put16(b + 2, pl_f32_to_fp16(pl_fp16_to_f32(d) * (float)sum));
        }
        return;
    }
    case PL_GGML_TYPE_Q8_K: {
        struct pl_block_q8_K *b = (struct pl_block_q8_K *)(void *)x;
        for (int64_t i = 0; i < n / PL_QK_K; i++) {
            if (m == MODE_MAX_QUANTS)
                for (int j = 0; j < PL_QK_K; j++)
                    b[i].qs[j] = rnd_below(2) ? -128 : 127;
            else
                rnd_bytes((uint8_t *)b[i].qs, PL_QK_K);
            for (int j = 0; j < PL_QK_K / 16; j++) {
                int s = 0;
                for (int l = 0; l < 16; l++)
                    s += b[i].qs[16 * j + l];
                b[i].bsums[j] = (int16_t)s;
            }
            b[i].d = m == MODE_EXTREME ? ldexpf(rnd_unit(), (int)rnd_below(80) - 70)
                                       : ldexpf(rnd_unit(), -7);
        }
        return;
    }
    default:
        fail_msg("no activation generator for type %u", vt);
    }
}

/* ---- Magnitude for the tolerance: sum_i (|scale part| + |min part|) * |x_i| ---- */

static double magnitude(const struct qc_type *ti, const uint8_t *w, const uint8_t *x, int64_t n,
                        uint8_t *scratch) {
    const struct pl_quant_kernels *kw = pl_quant_kernels_ref(ti->type);
    const struct pl_quant_kernels *kx = pl_quant_kernels_ref(kw->vec_dot_type);
    float *fx = malloc((size_t)n * sizeof(float)), *fa = malloc((size_t)n * sizeof(float));
    float *fb = malloc((size_t)n * sizeof(float));
    double mag = 0.0;
    int64_t nb = n / ti->block;
    assert_non_null(fx);
    assert_non_null(fa);
    assert_non_null(fb);
    kx->to_f32(x, fx, n);
    memcpy(scratch, w, (size_t)nb * ti->size);
    if (ti->min_off != NONE)
        for (int64_t i = 0; i < nb; i++)
            put16(scratch + (size_t)i * ti->size + ti->min_off, 0);
    kw->to_f32(scratch, fa, n);
    memset(fb, 0, (size_t)n * sizeof(float));
    if (ti->min_off != NONE) {
        memcpy(scratch, w, (size_t)nb * ti->size);
        for (int64_t i = 0; i < nb; i++)
            put16(scratch + (size_t)i * ti->size + ti->d_off, 0);
        kw->to_f32(scratch, fb, n);
    }
    for (int64_t i = 0; i < n; i++)
        mag += (fabs((double)fa[i]) + fabs((double)fb[i])) * fabs((double)fx[i]);
    free(fx);
    free(fa);
    free(fb);
    return mag;
}

/* ---- vec_dot against the reference ---- */

/* Buffers at an odd multiple of 2 bytes from a 64-byte boundary: the kernels may assume
 * only the documented 2-byte (4 for F32/Q8_K) alignment. */
#define SLACK 64

int qc_n_dotn_checked;
int qc_n_dota_checked;

void qc_check_dot(const char *label, const struct pl_quant_kernels *k,
                  const struct pl_quant_kernels *twin, const struct qc_type *ti) {
    const struct pl_quant_kernels *ref = pl_quant_kernels_ref(ti->type);
    assert_non_null(ref);
    assert_non_null(k);
    assert_non_null(k->vec_dot);
    assert_int_equal(k->vec_dot_type, ref->vec_dot_type);
    const struct pl_type_info *tx = pl_type_info(ref->vec_dot_type);
    assert_non_null(tx);
    int max_n = ti->block == 1 ? MAX_BLOCKS * 37 : MAX_BLOCKS * ti->block;
    size_t wbytes = (size_t)max_n / (size_t)ti->block * ti->size;
    size_t xbytes = (size_t)max_n / tx->blck_elems * tx->blck_bytes;
    /* aligned_alloc wants a multiple of the alignment */
    uint8_t *wbuf = aligned_alloc(64, (wbytes + 2 * SLACK - 1) / SLACK * SLACK);
    uint8_t *xbuf = aligned_alloc(64, (xbytes + 2 * SLACK - 1) / SLACK * SLACK);
    /* the other tokens of vec_dotn: PL_QUANT_DOTN_MAX - 1 rows, xstride apart */
    const size_t xstride = (xbytes + 2 * SLACK - 1) / SLACK * SLACK;
    uint8_t *xnbuf = aligned_alloc(64, xstride * (PL_QUANT_DOTN_MAX - 1));
    uint8_t *scratch = malloc(wbytes);
    /* vec_dot_a's activations (K-quants: MAX_BLOCKS super-blocks), 64-byte aligned */
    uint8_t *xabuf = aligned_alloc(64, (size_t)MAX_BLOCKS * PL_QUANT_Q8_KA_BYTES);
    assert_non_null(xabuf);
    assert_non_null(wbuf);
    assert_non_null(xbuf);
    assert_non_null(xnbuf);
    assert_non_null(scratch);
    /* 4-byte offset keeps Q8_K's float aligned; 2 would do for the others */
    uint8_t *w = wbuf + 4 + (ti->type == PL_GGML_TYPE_F32 ? 0 : 2) * (ti->size % 4 != 0);
    uint8_t *x = xbuf + 4, *xn = xnbuf + 4;
    for (int nb = 1; nb <= MAX_BLOCKS; nb++) {
        for (int trial = 0; trial < N_TRIALS; trial++) {
            enum mode m = (enum mode)(trial % _MODE_MAX);
            /* float types: lengths 1..8 and longer odd lengths through every tail path */
            int64_t n = ti->block == 1 ? (trial < 8 ? nb : nb * 37 - trial % 5) : nb * ti->block;
            gen_weights(ti, m, w, (int)(n / ti->block));
            gen_acts(ref->vec_dot_type, m, x, n);
            float want = ref->vec_dot(n, w, x);
            float got = k->vec_dot(n, w, x);
            double mag = magnitude(ti, w, x, n, scratch);
            double tol = VEC_DOT_REL_TOL * mag + VEC_DOT_ABS_TOL;
            /* equal results pass outright (both may be the same infinity) */
            assert_false(isnan(want));
            if (got != want && !(fabs((double)got - (double)want) <= tol))
                fail_msg("%s %s: n %lld mode %s trial %d: simd %.9g ref %.9g (|diff| %.3g > "
                         "tol %.3g)",
                         label, ti->name, (long long)n, mode_names[m], trial, (double)got,
                         (double)want, fabs((double)got - (double)want), tol);
            if (m == MODE_ZERO && ti->block > 1)
                assert_true(got == 0.f);
            /* the AVX-VNNI set: the AVX2 kernels' integer sums by other instructions, so
             * their bits (not Q8_0's: AVX2 sums other elements per int32 lane there) */
            if (twin && memcmp(&got, &(float){twin->vec_dot(n, w, x)}, sizeof(float)) != 0)
                fail_msg("%s %s: n %lld mode %s trial %d: %.9g, twin %.9g", label, ti->name,
                         (long long)n, mode_names[m], trial, (double)got,
                         (double)twin->vec_dot(n, w, x));
            /* the aligned-activation form: bit-identical to vec_dot */
            if (k->vec_dot_a) {
                assert_int_equal(ref->vec_dot_type, PL_GGML_TYPE_Q8_K);
                pl_quant_q8_K_align(x, xabuf, n);
                float got_a = k->vec_dot_a(n, w, xabuf);
                if (memcmp(&got_a, &got, sizeof(float)) != 0)
                    fail_msg("%s %s: n %lld trial %d: vec_dot_a %.9g, vec_dot %.9g", label,
                             ti->name, (long long)n, trial, (double)got_a, (double)got);
                qc_n_dota_checked++;
            }
            /* 2 .. PL_QUANT_DOTN_MAX tokens at once: each bit-identical to its own vec_dot */
            if (k->vec_dotn) {
                const void *xs[PL_QUANT_DOTN_MAX];
                float want_n[PL_QUANT_DOTN_MAX];
                xs[0] = x;
                want_n[0] = got;
                for (uint32_t t = 1; t < PL_QUANT_DOTN_MAX; t++) {
                    uint8_t *xt = xn + (size_t)(t - 1) * xstride;
                    gen_acts(ref->vec_dot_type, (enum mode)((trial + t) % _MODE_MAX), xt, n);
                    xs[t] = xt;
                    want_n[t] = k->vec_dot(n, w, xt);
                }
                for (uint32_t nx = 2; nx <= PL_QUANT_DOTN_MAX; nx++) {
                    float many[PL_QUANT_DOTN_MAX];
                    for (uint32_t t = 0; t < PL_QUANT_DOTN_MAX; t++)
                        many[t] = NAN;
                    k->vec_dotn(n, w, xs, nx, many);
                    for (uint32_t t = 0; t < nx; t++)
                        if (memcmp(&many[t], &want_n[t], sizeof(float)) != 0)
                            fail_msg("%s %s: n %lld trial %d: vec_dotn(%u) token %u %.9g, "
                                     "vec_dot %.9g",
                                     label, ti->name, (long long)n, trial, nx, t, (double)many[t],
                                     (double)want_n[t]);
                    qc_n_dotn_checked++;
                }
            }
        }
    }
    /* n = 0: nothing to add */
    assert_true(k->vec_dot(0, w, x) == 0.f);
    free(wbuf);
    free(xbuf);
    free(xnbuf);
    free(scratch);
    free(xabuf);
}

/* ---- from_f32 bit-identical to the reference ---- */

enum fmode {
    F_NORMAL,    /* N(0,1)-ish */
    F_TIES,      /* values landing exactly on .5 after scaling */
    F_HUGE_TINY, /* 1e38-ish next to subnormals */
    F_SPECIAL,   /* NaN, +-Inf, -0 sprinkled in */
    F_ZERO,      /* all zero */
    F_SAME,      /* every element equal (ties in the max search) */
    _F_MAX,
};

static void gen_floats(enum fmode m, float *x, int64_t n, int block) {
    for (int64_t i = 0; i < n; i++) {
        switch (m) {
        case F_NORMAL:
            x[i] = 3.f * rnd_unit();
            break;
        case F_TIES:
            /* block max 127 (or -127): scale 1, so k + 0.5 are exact ties */
            x[i] = (float)((int)rnd_below(254) - 127) + (rnd_below(2) ? 0.5f : 0.f);
            if (x[i] > 127.f)
                x[i] = 126.5f;
            break;
        case F_HUGE_TINY:
            x[i] = rnd_below(2) ? ldexpf(rnd_unit(), 127) : ldexpf(rnd_unit(), -130);
            break;
        case F_SPECIAL: {
            static const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, -0.f, 0x1p-149f};
            x[i] = rnd_below(4) == 0 ? sp[rnd_below(6)] : rnd_unit();
            break;
        }
        case F_ZERO:
            x[i] = rnd_below(2) ? 0.f : -0.f;
            break;
        case F_SAME:
            x[i] = -1.25f;
            break;
        case _F_MAX:
            break;
        }
    }
    if (m == F_TIES)
        for (int64_t i = 0; i < n; i += block)
            x[i + rnd_below((uint32_t)block)] = rnd_below(2) ? 127.f : -127.f;
}

const uint32_t qc_act_types[] = {PL_GGML_TYPE_Q8_0, PL_GGML_TYPE_Q8_1, PL_GGML_TYPE_Q8_K,
                                 PL_GGML_TYPE_F16, PL_GGML_TYPE_BF16};
const size_t qc_n_act_types = sizeof(qc_act_types) / sizeof(qc_act_types[0]);

void qc_check_from_f32(const char *label, const struct pl_quant_kernels *k, uint32_t t) {
    const struct pl_quant_kernels *ref = pl_quant_kernels_ref(t);
    const struct pl_type_info *tt = pl_type_info(t);
    assert_non_null(ref);
    assert_non_null(k);
    assert_non_null(tt);
    assert_non_null(k->from_f32);
    int block = (int)tt->blck_elems;
    int64_t max_n = block == 1 ? (int64_t)MAX_BLOCKS * 37 : (int64_t)MAX_BLOCKS * block;
    size_t bytes = (size_t)max_n / tt->blck_elems * tt->blck_bytes;
    float *src = malloc((size_t)max_n * sizeof(float));
    uint8_t *want = malloc(bytes), *got = malloc(bytes);
    assert_non_null(src);
    assert_non_null(want);
    assert_non_null(got);
    for (int nb = 1; nb <= MAX_BLOCKS; nb++) {
        for (int m = 0; m < _F_MAX; m++) {
            int64_t n = block == 1 ? nb * 37 - m : (int64_t)nb * block;
            gen_floats((enum fmode)m, src, n, block == 1 ? 1 : block);
            size_t len = (size_t)n / tt->blck_elems * tt->blck_bytes;
            memset(want, 0xA5, len);
            memset(got, 0x5A, len);
            ref->from_f32(src, want, n);
            k->from_f32(src, got, n);
            if (memcmp(want, got, len) != 0) {
                size_t at = 0;
                while (want[at] == got[at])
                    at++;
                fail_msg("%s from_f32 %s: n %lld mode %d: byte %zu differs (ref %02x simd %02x)",
                         label, tt->name, (long long)n, m, at, want[at], got[at]);
            }
        }
    }
    free(src);
    free(want);
    free(got);
}
