/* SPDX-License-Identifier: MIT */
/* Unit tests for engine/src/quant.c and quant_ref.c, block by block against the format
 * definition: hand-built blocks whose values are written out literally; a second,
 * independent decoder (per element, from byte offsets, below) cross-checks random blocks,
 * quantizer output and real model tensors; dot products against double-precision dots of
 * the decoded operands; quantize round trips; fp16/bf16 conversions exhaustively against a
 * ldexp-based reference. The model part needs PICOLM_TEST_DATA (else: exit 77 at the end). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl/engine_gguf.h"
#include "pl/engine_quant.h"
#include "pl/engine_types.h"
#include "pl/pl_util.h"

/* ---- Tolerances ---- */

/* Dequantization is a couple of float multiplies per element. */
#define DEQUANT_REL_TOL 1e-6
/* vec_dot: float accumulation over <= 16 blocks, relative to sum_i |w_i| |x_i| (with
 * |w_i| counting scale and min parts separately, as cancellation can hide them). */
#define VEC_DOT_REL_TOL 2e-6
#define VEC_DOT_ABS_TOL 1e-9
/* Activation quantization error per element, in units of the block's max |x| / 127:
 * round to nearest (0.5) plus, for the fp16 scale of Q8_0/Q8_1, 127 * 2^-11 (0.062). */
#define Q8_0_ACT_ERR 0.5625
#define Q8_K_ACT_ERR 0.5001
/* Round trip on N(0, 1) data: RMSE / RMS(x) (these are 1.2x the largest value observed
 * with this seed; the per-block bounds below are the analytic ones). */
struct rt_bound {
    uint32_t type;
    double rel_rmse;
};
static const struct rt_bound RT_BOUNDS[] = {
    {PL_GGML_TYPE_F32, 0.0},     {PL_GGML_TYPE_F16, 2.6e-4},  {PL_GGML_TYPE_BF16, 2.1e-3},
    {PL_GGML_TYPE_Q8_0, 6.6e-3}, {PL_GGML_TYPE_Q8_1, 6.6e-3}, {PL_GGML_TYPE_Q8_K, 9e-3},
    {PL_GGML_TYPE_Q5_0, 0.052},  {PL_GGML_TYPE_Q5_1, 0.046},  {PL_GGML_TYPE_Q4_0, 0.105},
    {PL_GGML_TYPE_Q4_1, 0.096},  {PL_GGML_TYPE_Q6_K, 0.022},  {PL_GGML_TYPE_Q5_K, 0.044},
    {PL_GGML_TYPE_Q4_K, 0.089},  {PL_GGML_TYPE_Q3_K, 0.185},  {PL_GGML_TYPE_Q2_K, 0.36},
};

/* ---- Small helpers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_next(void) {
    return pl_xorshift64s(&rng_state);
}

static double rng_uniform(void) { /* [0, 1) */
    return (double)(rng_next() >> 11) * 0x1p-53;
}

static double rng_gauss(void) {
    double u = rng_uniform() + 0x1p-60, v = rng_uniform();
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

static uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

static void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static float rdf32(const uint8_t *p) {
    uint32_t u = rd32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void wrf32(uint8_t *p, float f) {
    memcpy(p, &f, 4); /* little-endian host: the tests run where the engine runs */
}

/* IEEE half by definition: (-1)^s * 2^(e-15) * 1.m, subnormal 2^-14 * 0.m. */
static double half_ref(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, -24);
    else
        v = ldexp(1024.0 + m, e - 25);
    return s ? -v : v;
}

static double bf16_ref(uint16_t h) {
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v;
    if (e == 255)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, -133);
    else
        v = ldexp(128.0 + m, e - 134);
    return s ? -v : v;
}

/* A random finite half in [2^-11, 2^-1) * random sign: sane block scales. */
static uint16_t rand_scale16(void) {
    uint16_t e = (uint16_t)(4 + rng_next() % 10); /* exponent field 4..13 */
    uint16_t h = (uint16_t)((e << 10) | (rng_next() & 0x3FF));
    return (uint16_t)(h | ((rng_next() & 1) << 15));
}

/* ---- The format, written down independently of engine/src ---- */

struct layout {
    uint32_t type;
    int blck_elems, blck_bytes;
};
static const struct layout LAYOUTS[] = {
    {PL_GGML_TYPE_F32, 1, 4},      {PL_GGML_TYPE_F16, 1, 2},      {PL_GGML_TYPE_BF16, 1, 2},
    {PL_GGML_TYPE_Q4_0, 32, 18},   {PL_GGML_TYPE_Q4_1, 32, 20},   {PL_GGML_TYPE_Q5_0, 32, 22},
    {PL_GGML_TYPE_Q5_1, 32, 24},   {PL_GGML_TYPE_Q8_0, 32, 34},   {PL_GGML_TYPE_Q8_1, 32, 36},
    {PL_GGML_TYPE_Q2_K, 256, 84},  {PL_GGML_TYPE_Q3_K, 256, 110}, {PL_GGML_TYPE_Q4_K, 256, 144},
    {PL_GGML_TYPE_Q5_K, 256, 176}, {PL_GGML_TYPE_Q6_K, 256, 210}, {PL_GGML_TYPE_Q8_K, 256, 292},
};

static const struct layout *layout_of(uint32_t t) {
    for (size_t i = 0; i < sizeof(LAYOUTS) / sizeof(LAYOUTS[0]); i++)
        if (LAYOUTS[i].type == t)
            return &LAYOUTS[i];
    return NULL;
}

/* Element value = scaled + offset (offset: the min part of Q4_1/Q5_1/Q2_K/Q4_K/Q5_K). */
struct elem {
    double scaled, offset;
};

/* 6-bit scale/min of sub-block j of a Q4_K/Q5_K block, 12 bytes at s. */
static void k4_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 0x3F;
        *mn = s[4 + j] & 0x3F;
    } else {
        *sc = (s[4 + j] & 0x0F) | ((s[j - 4] >> 6) << 4);
        *mn = (s[4 + j] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Element i of one block of type t at b, from the byte offsets of the format. */
static struct elem decode(uint32_t t, const uint8_t *b, int i) {
    struct elem e = {0, 0};
    int nib, q, sc, mn;
    switch (t) {
    case PL_GGML_TYPE_F32:
        e.scaled = rdf32(b);
        break;
    case PL_GGML_TYPE_F16:
        e.scaled = half_ref(rd16(b));
        break;
    case PL_GGML_TYPE_BF16:
        e.scaled = bf16_ref(rd16(b));
        break;
    case PL_GGML_TYPE_Q4_0: /* d@0 qs@2 */
        nib = i < 16 ? (b[2 + i] & 15) : (b[2 + i - 16] >> 4);
        e.scaled = half_ref(rd16(b)) * (nib - 8);
        break;
    case PL_GGML_TYPE_Q4_1: /* d@0 m@2 qs@4 */
        nib = i < 16 ? (b[4 + i] & 15) : (b[4 + i - 16] >> 4);
        e.scaled = half_ref(rd16(b)) * nib;
        e.offset = half_ref(rd16(b + 2));
        break;
    case PL_GGML_TYPE_Q5_0: /* d@0 qh@2 qs@6 */
        nib = i < 16 ? (b[6 + i] & 15) : (b[6 + i - 16] >> 4);
        q = nib | (int)(((rd32(b + 2) >> i) & 1) << 4);
        e.scaled = half_ref(rd16(b)) * (q - 16);
        break;
    case PL_GGML_TYPE_Q5_1: /* d@0 m@2 qh@4 qs@8 */
        nib = i < 16 ? (b[8 + i] & 15) : (b[8 + i - 16] >> 4);
        q = nib | (int)(((rd32(b + 4) >> i) & 1) << 4);
        e.scaled = half_ref(rd16(b)) * q;
        e.offset = half_ref(rd16(b + 2));
        break;
    case PL_GGML_TYPE_Q8_0: /* d@0 qs@2 */
        e.scaled = half_ref(rd16(b)) * (int8_t)b[2 + i];
        break;
    case PL_GGML_TYPE_Q8_1: /* d@0 s@2 qs@4 */
        e.scaled = half_ref(rd16(b)) * (int8_t)b[4 + i];
        break;
    case PL_GGML_TYPE_Q2_K: /* scales@0 qs@16 d@80 dmin@82 */
        q = (b[16 + (i / 128) * 32 + i % 32] >> (2 * ((i % 128) / 32))) & 3;
        sc = b[i / 16] & 15;
        mn = b[i / 16] >> 4;
        e.scaled = half_ref(rd16(b + 80)) * sc * q;
        e.offset = -half_ref(rd16(b + 82)) * mn;
        break;
    case PL_GGML_TYPE_Q3_K: { /* hmask@0 qs@32 scales@96 d@108 */
        int j = i / 16;
        q = (b[32 + (i / 128) * 32 + i % 32] >> (2 * ((i % 128) / 32))) & 3;
        if (!((b[i % 32] >> (i / 32)) & 1))
            q -= 4;
        sc = (j < 8 ? (b[96 + j] & 15) : (b[96 + j - 8] >> 4)) |
             (((b[96 + 8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
        e.scaled = half_ref(rd16(b + 108)) * (sc - 32) * q;
        break;
    }
    case PL_GGML_TYPE_Q4_K:   /* d@0 dmin@2 scales@4 qs@16 */
    case PL_GGML_TYPE_Q5_K: { /* d@0 dmin@2 scales@4 qh@16 qs@48 */
        int qs_off = t == PL_GGML_TYPE_Q4_K ? 16 : 48;
        uint8_t byte = b[qs_off + (i / 64) * 32 + i % 32];
        q = (i / 32) % 2 ? byte >> 4 : byte & 15;
        if (t == PL_GGML_TYPE_Q5_K)
            q |= ((b[16 + i % 32] >> (i / 32)) & 1) << 4;
        k4_scale_min(b + 4, i / 32, &sc, &mn);
        e.scaled = half_ref(rd16(b)) * sc * q;
        e.offset = -half_ref(rd16(b + 2)) * mn;
        break;
    }
    case PL_GGML_TYPE_Q6_K: { /* ql@0 qh@128 scales@192 d@208 */
        int h = i / 128, s = (i % 128) / 32, l = i % 32;
        uint8_t lo = b[64 * h + 32 * (s % 2) + l];
        q = (s < 2 ? lo & 15 : lo >> 4) | (((b[128 + 32 * h + l] >> (2 * s)) & 3) << 4);
        e.scaled = half_ref(rd16(b + 208)) * (int8_t)b[192 + i / 16] * (q - 32);
        break;
    }
    case PL_GGML_TYPE_Q8_K: /* d(f32)@0 qs@4 bsums@260 */
        e.scaled = (double)rdf32(b) * (int8_t)b[4 + i];
        break;
    default:
        fail_msg("no decoder for type %u", t);
    }
    return e;
}

/* Decodes n elements of a row of type t. */
static void decode_row(uint32_t t, const uint8_t *row, int64_t n, double *out, double *mag) {
    const struct layout *L = layout_of(t);
    assert_non_null(L);
    for (int64_t i = 0; i < n; i++) {
        struct elem e =
            decode(t, row + (i / L->blck_elems) * L->blck_bytes, (int)(i % L->blck_elems));
        out[i] = e.scaled + e.offset;
        if (mag)
            mag[i] = fabs(e.scaled) + fabs(e.offset);
    }
}

static size_t row_bytes(uint32_t t, int64_t n) {
    const struct layout *L = layout_of(t);
    assert_non_null(L);
    return (size_t)(n / L->blck_elems) * (size_t)L->blck_bytes;
}

/* Random valid blocks: random bytes, scale fields replaced by sane halves (Q8_K: float). */
static void random_blocks(uint32_t t, uint8_t *buf, int64_t n) {
    const struct layout *L = layout_of(t);
    size_t len = row_bytes(t, n);
    for (size_t k = 0; k < len; k++)
        buf[k] = (uint8_t)rng_next();
    for (int64_t blk = 0; blk < n / L->blck_elems; blk++) {
        uint8_t *b = buf + blk * L->blck_bytes;
        switch (t) {
        case PL_GGML_TYPE_F16:
            wr16(b, rand_scale16());
            break;
        case PL_GGML_TYPE_BF16: /* a sane bf16: exponent near 127 */
            wr16(b, (uint16_t)(((120 + rng_next() % 10) << 7) | (rng_next() & 0x807F)));
            break;
        case PL_GGML_TYPE_F32:
            wrf32(b, (float)rng_gauss());
            break;
        case PL_GGML_TYPE_Q4_0:
        case PL_GGML_TYPE_Q5_0:
        case PL_GGML_TYPE_Q8_0:
            wr16(b, rand_scale16());
            break;
        case PL_GGML_TYPE_Q4_1:
        case PL_GGML_TYPE_Q5_1:
        case PL_GGML_TYPE_Q4_K:
        case PL_GGML_TYPE_Q5_K:
            wr16(b, rand_scale16());
            wr16(b + 2, rand_scale16());
            break;
        case PL_GGML_TYPE_Q2_K:
            wr16(b + 80, rand_scale16());
            wr16(b + 82, rand_scale16());
            break;
        case PL_GGML_TYPE_Q3_K:
            wr16(b + 108, rand_scale16());
            break;
        case PL_GGML_TYPE_Q6_K:
            wr16(b + 208, rand_scale16());
            break;
        default:
            fail_msg("no random blocks for type %u", t);
        }
    }
}

static void assert_close(double got, double want, double tol, const char *what, int64_t i) {
    if (!(fabs(got - want) <= tol))
        fail_msg("%s[%lld]: got %.9g, want %.9g (tol %.3g)", what, (long long)i, got, want, tol);
}

/* ---- Geometry ---- */

static void test_block_sizes_match_format_and_type_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(LAYOUTS) / sizeof(LAYOUTS[0]); i++) {
        const struct pl_type_info *ti = pl_type_info(LAYOUTS[i].type);
        assert_non_null(ti);
        assert_int_equal(ti->blck_elems, LAYOUTS[i].blck_elems);
        assert_int_equal(ti->blck_bytes, LAYOUTS[i].blck_bytes);
    }
}

/* ---- Dispatch ---- */

static void test_dispatch_table_covers_compute_types(void **state) {
    (void)state;
    static const struct {
        uint32_t type, vdt;
    } want[] = {
        {PL_GGML_TYPE_F32, PL_GGML_TYPE_F32},   {PL_GGML_TYPE_F16, PL_GGML_TYPE_F16},
        {PL_GGML_TYPE_BF16, PL_GGML_TYPE_BF16}, {PL_GGML_TYPE_Q4_0, PL_GGML_TYPE_Q8_0},
        {PL_GGML_TYPE_Q4_1, PL_GGML_TYPE_Q8_1}, {PL_GGML_TYPE_Q5_0, PL_GGML_TYPE_Q8_0},
        {PL_GGML_TYPE_Q5_1, PL_GGML_TYPE_Q8_1}, {PL_GGML_TYPE_Q8_0, PL_GGML_TYPE_Q8_0},
        {PL_GGML_TYPE_Q2_K, PL_GGML_TYPE_Q8_K}, {PL_GGML_TYPE_Q3_K, PL_GGML_TYPE_Q8_K},
        {PL_GGML_TYPE_Q4_K, PL_GGML_TYPE_Q8_K}, {PL_GGML_TYPE_Q5_K, PL_GGML_TYPE_Q8_K},
        {PL_GGML_TYPE_Q6_K, PL_GGML_TYPE_Q8_K},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct pl_quant_kernels *k = pl_quant_kernels(want[i].type);
        const struct pl_quant_kernels *r = pl_quant_kernels_ref(want[i].type);
        assert_non_null(k);
        assert_non_null(r);
        assert_non_null(k->to_f32);
        assert_non_null(k->from_f32);
        assert_non_null(k->vec_dot);
        assert_non_null(r->to_f32);
        assert_non_null(r->from_f32);
        assert_non_null(r->vec_dot);
        assert_int_equal(k->vec_dot_type, want[i].vdt);
        assert_int_equal(r->vec_dot_type, want[i].vdt);
        /* the activation type can be produced */
        assert_non_null(pl_quant_kernels(want[i].vdt));
        assert_non_null(pl_quant_kernels(want[i].vdt)->from_f32);
        assert_true(pl_type_info(want[i].type)->compute);
    }
    /* every type the type table marks as computable has kernels */
    for (uint32_t t = 0; t < _PL_GGML_TYPE_MAX; t++) {
        const struct pl_type_info *ti = pl_type_info(t);
        if (ti && ti->compute) {
            assert_non_null(pl_quant_kernels(t));
            assert_non_null(pl_quant_kernels(t)->vec_dot);
        }
    }
    assert_non_null(pl_quant_kernels(PL_GGML_TYPE_Q8_K));
    assert_null(pl_quant_kernels(PL_GGML_TYPE_Q8_K)->vec_dot);
    assert_null(pl_quant_kernels(PL_GGML_TYPE_IQ2_XXS));
    assert_null(pl_quant_kernels(4)); /* a retired id */
    assert_null(pl_quant_kernels(_PL_GGML_TYPE_MAX));
    assert_null(pl_quant_kernels(UINT32_MAX));
    assert_null(pl_quant_kernels_ref(UINT32_MAX));
    assert_non_null(pl_quant_isa());
    assert_true(strlen(pl_quant_isa()) > 0);
}

/* Waits for child pid; it must have exited with status 0. */
static void expect_child_ok(pid_t pid) {
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* In a child (the dispatch table is built once per process): PICOLM_FORCE_SCALAR=1 selects
 * the references everywhere. Must run before anything initialises the table here. */
static void test_force_scalar_selects_references(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int bad = 0;
        setenv("PICOLM_FORCE_SCALAR", "1", 1);
        bad |= strcmp(pl_quant_isa(), "scalar") != 0;
        for (uint32_t t = 0; t < _PL_GGML_TYPE_MAX; t++) {
            const struct pl_quant_kernels *k = pl_quant_kernels(t), *r = pl_quant_kernels_ref(t);
            if (!k != !r)
                bad = 1;
            else if (k && (k->to_f32 != r->to_f32 || k->from_f32 != r->from_f32 ||
                           k->vec_dot != r->vec_dot || k->vec_dot_type != r->vec_dot_type))
                bad = 1;
        }
        _exit(bad);
    }
    expect_child_ok(pid);
}

/* ---- weight-stream prefetch setting ---- */

static void test_prefetch_parse(void **state) {
    (void)state;
    const struct pl_quant_prefetch base = {PL_QUANT_PF_T0, 2048, 4096, 2, "x", 8192};
    static const struct {
        const char *s;
        int hint;
        uint32_t bytes, decode_bytes, streams, page_ahead;
    } ok[] = {
        {"t0", PL_QUANT_PF_T0, 2048, 4096, 2, 8192},
        {"nta", PL_QUANT_PF_NTA, 2048, 4096, 2, 8192},
        {"nta:1024", PL_QUANT_PF_NTA, 1024, 4096, 2, 8192},
        {"t0:256:65536", PL_QUANT_PF_T0, 256, 65536, 2, 8192},
        {"nta:4096:8192", PL_QUANT_PF_NTA, 4096, 8192, 2, 8192},
        {"t0:1024:2048:1", PL_QUANT_PF_T0, 1024, 2048, 1, 8192},
        {"nta:256:256:3", PL_QUANT_PF_NTA, 256, 256, 3, 8192},
        {"t0:2048:2048:4", PL_QUANT_PF_T0, 2048, 2048, 4, 8192},
        {"nta:4096:8192:1:0", PL_QUANT_PF_NTA, 4096, 8192, 1, 0},
        {"nta:4096:8192:1:24576", PL_QUANT_PF_NTA, 4096, 8192, 1, 24576},
        {"t0:2048:2048:2:256", PL_QUANT_PF_T0, 2048, 2048, 2, 256},
        {"t0:2048:2048:2:262144", PL_QUANT_PF_T0, 2048, 2048, 2, 262144},
        {"none", PL_QUANT_PF_NONE, 2048, 4096, 2, 8192},
        {"none:1024:2048:1:16384", PL_QUANT_PF_NONE, 1024, 2048, 1, 16384},
        {"none:4096:8192:1:0", PL_QUANT_PF_NONE, 4096, 8192, 1, 0},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct pl_quant_prefetch c = base;
        assert_int_equal(pl_quant_prefetch_parse(ok[i].s, &c), 0);
        assert_int_equal(c.hint, ok[i].hint);
        assert_int_equal(c.bytes, ok[i].bytes);
        assert_int_equal(c.decode_bytes, ok[i].decode_bytes);
        assert_int_equal(c.streams, ok[i].streams);
        assert_int_equal(c.page_ahead, ok[i].page_ahead);
        assert_ptr_equal(c.source, base.source);
    }
    static const char *const bad[] = {"",
                                      "t1",
                                      "T0",
                                      "nta ",
                                      "t0:",
                                      "t0:192",
                                      "t0:65600",
                                      "t0:1000",
                                      "t0:1024:",
                                      "t0:1:2:3",
                                      "nta2048",
                                      "t0:99999999999",
                                      "t0:-64",
                                      "t0:1024:x",
                                      "nta:4096:0",
                                      "t0:0x400",
                                      "t0:1024:2048:",
                                      "t0:1024:2048:0",
                                      "t0:1024:2048:5",
                                      "t0:1024:2048:12",
                                      "t0:1024:2048:2:",
                                      "t0:1024:2048:x",
                                      "t0:1024:2048:-1",
                                      "t0:1024:3",
                                      "t0:1024:2048:2:",
                                      "t0:1024:2048:2:128",
                                      "t0:1024:2048:2:1000",
                                      "t0:1024:2048:2:262208",
                                      "t0:1024:2048:2:1048576",
                                      "t0:1024:2048:2:-64",
                                      "t0:1024:2048:2:x",
                                      "t0:1024:2048:2:4096:",
                                      "non",
                                      "nonex",
                                      "none:",
                                      "none:100",
                                      "NONE"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct pl_quant_prefetch c = base;
        assert_int_equal(pl_quant_prefetch_parse(bad[i], &c), -EINVAL);
        assert_memory_equal(&c, &base, sizeof(c)); /* unchanged */
    }
    assert_int_equal(pl_quant_prefetch_parse(NULL, &(struct pl_quant_prefetch){0}), -EINVAL);
    assert_int_equal(pl_quant_prefetch_parse("t0", NULL), -EINVAL);
}

/* In a child (the setting is decided once per process): the setting pl_quant_prefetch()
 * reports with PICOLM_PREFETCH=env (NULL: unset). 0 when it matches want (source compared
 * by name), else 1. */
static void check_prefetch_child(const char *env, const struct pl_quant_prefetch *want) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (env)
            setenv("PICOLM_PREFETCH", env, 1);
        else
            unsetenv("PICOLM_PREFETCH");
        const struct pl_quant_prefetch *p = pl_quant_prefetch();
        const int same = p && p == pl_quant_prefetch() && p->hint == want->hint &&
                         p->bytes == want->bytes && p->decode_bytes == want->decode_bytes &&
                         p->streams == want->streams && p->page_ahead == want->page_ahead &&
                         !strcmp(p->source, want->source);
        if (!same && p)
            fprintf(stderr,
                    "PICOLM_PREFETCH=%s: hint %d, %u / %u B, %u streams, page touch %u B, "
                    "source %s\n",
                    env ? env : "(unset)", p->hint, p->bytes, p->decode_bytes, p->streams,
                    p->page_ahead, p->source);
        _exit(same ? 0 : 1);
    }
    expect_child_ok(pid);
}

/* The CPU's choice without PICOLM_PREFETCH; the variable overrides it on x86 (an invalid
 * value keeps the choice and says so); elsewhere the fixed NEON setting ignores it. Must run
 * before anything here decides the setting (children fork from this process). */
static void test_prefetch_setting_and_env(void **state) {
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork(); /* the CPU's own choice, read in a child */
    assert_true(pid >= 0);
    if (pid == 0) {
        unsetenv("PICOLM_PREFETCH");
        const struct pl_quant_prefetch *p = pl_quant_prefetch();
        ssize_t w = write(fds[1], p, sizeof(*p));
        _exit(w == (ssize_t)sizeof(*p) ? 0 : 1);
    }
    struct pl_quant_prefetch cpu;
    assert_int_equal(read(fds[0], &cpu, sizeof(cpu)), (ssize_t)sizeof(cpu));
    expect_child_ok(pid);
    (void)close(fds[0]);
    (void)close(fds[1]);
    /* cpu.source points to static storage: a forked child's address is valid here too */
    assert_true(cpu.hint == PL_QUANT_PF_T0 || cpu.hint == PL_QUANT_PF_NTA ||
                cpu.hint == PL_QUANT_PF_NONE);
    assert_true(cpu.bytes >= 256 && cpu.bytes <= 65536 && cpu.bytes % 64 == 0);
    assert_true(cpu.decode_bytes >= 256 && cpu.decode_bytes <= 65536 && cpu.decode_bytes % 64 == 0);
    assert_true(cpu.streams >= 1 && cpu.streams <= PL_QUANT_STREAMS_MAX);
    assert_true(cpu.page_ahead == 0 ||
                (cpu.page_ahead >= 256 && cpu.page_ahead <= 262144 && cpu.page_ahead % 64 == 0));
    check_prefetch_child(NULL, &cpu);
#if defined(__x86_64__) || defined(__i386__)
    assert_true(!strcmp(cpu.source, "amd") || !strcmp(cpu.source, "amd-zen4") ||
                !strcmp(cpu.source, "intel"));
    /* the hint each source stands for (quant_x86.c) */
    assert_int_equal(cpu.hint, !strcmp(cpu.source, "amd")        ? PL_QUANT_PF_NTA
                               : !strcmp(cpu.source, "amd-zen4") ? PL_QUANT_PF_NONE
                                                                 : PL_QUANT_PF_T0);
    check_prefetch_child(
        "none:1024:2048:1:8192",
        &(struct pl_quant_prefetch){PL_QUANT_PF_NONE, 1024, 2048, 1, "PICOLM_PREFETCH", 8192});
    check_prefetch_child("nta:512:1024",
                         &(struct pl_quant_prefetch){PL_QUANT_PF_NTA, 512, 1024, cpu.streams,
                                                     "PICOLM_PREFETCH", cpu.page_ahead});
    check_prefetch_child("t0:3072", &(struct pl_quant_prefetch){PL_QUANT_PF_T0, 3072,
                                                                cpu.decode_bytes, cpu.streams,
                                                                "PICOLM_PREFETCH", cpu.page_ahead});
    check_prefetch_child("t0:1024:2048:3",
                         &(struct pl_quant_prefetch){PL_QUANT_PF_T0, 1024, 2048, 3,
                                                     "PICOLM_PREFETCH", cpu.page_ahead});
    check_prefetch_child(
        "nta:1024:2048:1:0",
        &(struct pl_quant_prefetch){PL_QUANT_PF_NTA, 1024, 2048, 1, "PICOLM_PREFETCH", 0});
    check_prefetch_child(
        "t0:1024:2048:2:16384",
        &(struct pl_quant_prefetch){PL_QUANT_PF_T0, 1024, 2048, 2, "PICOLM_PREFETCH", 16384});
    struct pl_quant_prefetch kept = cpu;
    kept.source = "PICOLM_PREFETCH invalid";
    check_prefetch_child("t0:100", &kept);
#else
    assert_string_equal(cpu.source, "fixed");
    check_prefetch_child("nta:512:1024", &cpu);
#endif
}

/* ---- fp16 / bf16 ---- */

static void test_fp16_to_f32_all_values_match_definition(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        double want = half_ref((uint16_t)h);
        float got = pl_fp16_to_f32((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(got));
        } else {
            assert_true((double)got == want);
            assert_int_equal(signbit(got) != 0, (h >> 15) != 0);
        }
    }
}

static void test_f32_to_fp16_rounds_to_nearest_even(void **state) {
    (void)state;
    /* explicit edge cases */
    assert_int_equal(pl_f32_to_fp16(0.0f), 0x0000);
    assert_int_equal(pl_f32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(pl_f32_to_fp16(1.0f), 0x3C00);
    assert_int_equal(pl_f32_to_fp16(-2.0f), 0xC000);
    assert_int_equal(pl_f32_to_fp16(65504.0f), 0x7BFF);
    assert_int_equal(pl_f32_to_fp16(65519.996f), 0x7BFF);
    assert_int_equal(pl_f32_to_fp16(65520.0f), 0x7C00); /* tie, rounds to even = Inf */
    assert_int_equal(pl_f32_to_fp16(1e10f), 0x7C00);
    assert_int_equal(pl_f32_to_fp16(-INFINITY), 0xFC00);
    assert_int_equal(pl_f32_to_fp16(0x1p-14f), 0x0400); /* smallest normal */
    assert_int_equal(pl_f32_to_fp16(0x1p-24f), 0x0001); /* smallest subnormal */
    assert_int_equal(pl_f32_to_fp16(0x1p-25f), 0x0000); /* tie to even: 0 */
    assert_int_equal(pl_f32_to_fp16(0x1.000002p-25f), 0x0001);
    assert_int_equal(pl_f32_to_fp16(0x1.8p-24f), 0x0002); /* 1.5 units: tie to even 2 */
    assert_int_equal(pl_f32_to_fp16(-0x1p-30f), 0x8000);
    assert_int_equal(pl_f32_to_fp16(0x1p-149f), 0x0000);           /* float subnormal */
    assert_int_equal(pl_f32_to_fp16(1.0f + 0x1p-11f), 0x3C00);     /* tie: even */
    assert_int_equal(pl_f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3C02); /* tie: even */
    assert_int_equal(pl_f32_to_fp16(0x1.ffcp-15f), 0x0400); /* subnormal rounding up to normal */
    uint16_t hn = pl_f32_to_fp16(NAN);
    assert_true((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF) != 0);
    assert_true(isnan(pl_fp16_to_f32(pl_f32_to_fp16(-NAN))));

    /* exhaustive: every finite half round-trips, every midpoint goes to the even
     * neighbour, and a float just off the midpoint goes to the nearer one */
    for (uint32_t h = 0; h < 0x7C00; h++) {
        float v = pl_fp16_to_f32((uint16_t)h);
        assert_int_equal(pl_f32_to_fp16(v), h);
        assert_int_equal(pl_f32_to_fp16(-v), h | 0x8000);
        if (h == 0x7BFF)
            continue;
        double mid = (half_ref((uint16_t)h) + half_ref((uint16_t)(h + 1))) / 2;
        float fm = (float)mid;
        assert_true((double)fm == mid); /* 12 significant bits: exact */
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        assert_int_equal(pl_f32_to_fp16(fm), even);
        assert_int_equal(pl_f32_to_fp16(nextafterf(fm, 0.f)), h);
        assert_int_equal(pl_f32_to_fp16(nextafterf(fm, INFINITY)), h + 1);
    }
}

static void test_bf16_conversions(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        double want = bf16_ref((uint16_t)h);
        float got = pl_bf16_to_f32((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(got));
            assert_true(isnan(pl_bf16_to_f32(pl_f32_to_bf16(got))));
            continue;
        }
        assert_true((double)got == want);
        assert_int_equal(pl_f32_to_bf16(got), h);
        if ((h & 0x7FFF) >= 0x7F7F)
            continue;
        /* midpoint to the next magnitude: 9 significant bits, exact in float */
        double mid = (want + bf16_ref((uint16_t)(h + 1))) / 2;
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        assert_int_equal(pl_f32_to_bf16((float)mid), even);
        assert_int_equal(pl_f32_to_bf16(nextafterf((float)mid, 0.f)), h);
        assert_int_equal(pl_f32_to_bf16(nextafterf((float)mid, (float)(2 * mid))), h + 1);
    }
    assert_int_equal(pl_f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(pl_f32_to_bf16(FLT_MAX), 0x7F80); /* rounds past the largest bf16 */
    assert_int_equal(pl_f32_to_bf16(-INFINITY), 0xFF80);
    uint16_t n = pl_f32_to_bf16(NAN);
    assert_true((n & 0x7F80) == 0x7F80 && (n & 0x7F) != 0);
}

/* ---- Hand-built blocks: bytes and expected values written out ---- */

struct expect {
    int i;
    float v;
};

static void check_block(uint32_t t, const uint8_t *bytes, const struct expect *ex, size_t n_ex,
                        float default_v) {
    const struct layout *L = layout_of(t);
    float out[256];
    double dec[256];
    pl_quant_kernels_ref(t)->to_f32(bytes, out, L->blck_elems);
    /* the independent decoder agrees on every element ... */
    decode_row(t, bytes, L->blck_elems, dec, NULL);
    for (int i = 0; i < L->blck_elems; i++)
        assert_close(out[i], dec[i], DEQUANT_REL_TOL * fabs(dec[i]), "decoder", i);
    /* ... and both give the literal values */
    for (int i = 0; i < L->blck_elems; i++) {
        float want = default_v;
        for (size_t k = 0; k < n_ex; k++)
            if (ex[k].i == i)
                want = ex[k].v;
        assert_close(out[i], want, 0.0, pl_type_info(t)->name, i);
    }
    /* the dispatched kernel decodes the same */
    float out2[256];
    pl_quant_kernels(t)->to_f32(bytes, out2, L->blck_elems);
    assert_memory_equal(out, out2, sizeof(float) * (size_t)L->blck_elems);
}

static void test_q4_0_block(void **state) {
    (void)state;
    uint8_t b[18];
    memset(b, 0x88, sizeof(b)); /* nibble 8 = 0 */
    wr16(b, 0x4000);            /* d = 2 */
    b[2 + 0] = 0x9F;            /* x0 = (15-8)*2, x16 = (9-8)*2 */
    b[2 + 15] = 0x0F;           /* x15 = 14, x31 = (0-8)*2 */
    b[2 + 3] = 0x80;            /* x3 = -16, x19 = 0 */
    const struct expect ex[] = {{0, 14}, {16, 2}, {15, 14}, {31, -16}, {3, -16}};
    check_block(PL_GGML_TYPE_Q4_0, b, ex, 5, 0.f);
}

static void test_q4_1_block(void **state) {
    (void)state;
    uint8_t b[20] = {0};
    wr16(b, 0x3800);     /* d = 0.5 */
    wr16(b + 2, 0xBC00); /* m = -1 */
    b[4 + 0] = 0x21;     /* x0 = 1*0.5-1, x16 = 2*0.5-1 */
    b[4 + 5] = 0xF0;     /* x5 = -1, x21 = 15*0.5-1 */
    const struct expect ex[] = {{0, -0.5f}, {16, 0.f}, {5, -1.f}, {21, 6.5f}};
    check_block(PL_GGML_TYPE_Q4_1, b, ex, 4, -1.f);
}

static void test_q5_0_block(void **state) {
    (void)state;
    uint8_t b[22] = {0};
    wr16(b, 0x3C00);  /* d = 1 */
    b[2] = 0x01;      /* qh bit 0 */
    b[4] = 0x01;      /* qh bit 16 */
    b[5] = 0x80;      /* qh bit 31 */
    b[6 + 0] = 0x3A;  /* x0 = (10|16)-16 = 10, x16 = (3|16)-16 = 3 */
    b[6 + 15] = 0x70; /* x15 = 0-16, x31 = (7|16)-16 = 7 */
    const struct expect ex[] = {{0, 10}, {16, 3}, {15, -16}, {31, 7}};
    check_block(PL_GGML_TYPE_Q5_0, b, ex, 4, -16.f);
}

static void test_q5_1_block(void **state) {
    (void)state;
    uint8_t b[24] = {0};
    wr16(b, 0x3400);     /* d = 0.25 */
    wr16(b + 2, 0x4000); /* m = 2 */
    b[4 + 3] = 0x80;     /* qh bit 31 */
    b[4 + 1] = 0x02;     /* qh bit 9 */
    b[8 + 15] = 0xF1;    /* x15 = 1*0.25+2, x31 = 31*0.25+2 */
    b[8 + 9] = 0x0E;     /* x9 = (14|16)*0.25+2 = 9.5, x25 = 2 */
    const struct expect ex[] = {{15, 2.25f}, {31, 9.75f}, {9, 9.5f}};
    check_block(PL_GGML_TYPE_Q5_1, b, ex, 3, 2.f);
}

static void test_q8_0_block(void **state) {
    (void)state;
    uint8_t b[34] = {0};
    wr16(b, 0x3800); /* d = 0.5 */
    b[2 + 0] = 0x80; /* -128 */
    b[2 + 31] = 127;
    b[2 + 1] = 0xFF; /* -1 */
    const struct expect ex[] = {{0, -64.f}, {31, 63.5f}, {1, -0.5f}};
    check_block(PL_GGML_TYPE_Q8_0, b, ex, 3, 0.f);
}

static void test_q2_K_block(void **state) {
    (void)state;
    uint8_t b[84] = {0};
    /* scales: low nibble scale, high nibble min */
    b[0] = 0x21;          /* sub 0: scale 1, min 2 */
    b[2] = 0x02;          /* sub 2: scale 2 */
    b[4] = 0x13;          /* sub 4: scale 3, min 1 */
    b[5] = 0x50;          /* sub 5: min 5 */
    b[6] = 0x1F;          /* sub 6: scale 15, min 1 */
    b[9] = 0x42;          /* sub 9: scale 2, min 4 */
    b[16 + 0] = 0xE4;     /* qs[0]: x0 = 0, x32 = 1, x64 = 2, x96 = 3 */
    b[16 + 48] = 0x03;    /* qs[48]: x144 = 3 (second half, l = 16) */
    wr16(b + 80, 0x3C00); /* d = 1 */
    wr16(b + 82, 0x3800); /* dmin = 0.5 */
    /* every element with q = 0 is -dmin * min of its sub-block */
    struct expect ex[256];
    for (int i = 0; i < 256; i++) {
        int sub = i / 16;
        int mn = sub == 0 ? 2 : sub == 4 ? 1 : sub == 5 ? 5 : sub == 6 ? 1 : sub == 9 ? 4 : 0;
        ex[i] = (struct expect){i, -0.5f * (float)mn};
    }
    ex[32].v = 2.f;   /* sub 2: 2 * 1 */
    ex[64].v = 5.5f;  /* sub 4: 3 * 2 - 0.5 * 1 */
    ex[96].v = 44.5f; /* sub 6: 15 * 3 - 0.5 * 1 */
    ex[144].v = 4.f;  /* sub 9: 2 * 3 - 0.5 * 4 */
    assert_true(ex[0].v == -1.f && ex[80].v == -2.5f);
    check_block(PL_GGML_TYPE_Q2_K, b, ex, 256, 0.f);
}

static void test_q3_K_block(void **state) {
    (void)state;
    uint8_t b[110] = {0};
    /* 6-bit scales (stored value, offset 32): sub 0 = 33, sub 9 = 30, sub 15 = 63, rest 0 */
    b[96 + 0] = 0x01;  /* sub 0 low 4 bits */
    b[96 + 1] = 0xE0;  /* sub 9 low 4 bits (high nibble of byte 1) */
    b[96 + 7] = 0xF0;  /* sub 15 low 4 bits */
    b[96 + 8] = 0x02;  /* sub 0 high 2 bits (bits 0..1 of byte 8) */
    b[96 + 9] = 0x10;  /* sub 9 high 2 bits (bits 4..5 of byte 9) */
    b[96 + 11] = 0xC0; /* sub 15 high 2 bits (bits 6..7 of byte 11) */
    wr16(b + 108, 0x3C00);
    b[32 + 0] = 0x03; /* x0: low bits 3 */
    b[0] = 0x01;      /* x0: hmask bit 0 set -> q = 3 */
    /* x1: low bits 0, hmask clear -> q = -4 */
    b[32 + 54] = 0x02; /* x150 (h1 s0 l22): low bits 2 */
    b[22] = 0x10;      /* x150: hmask bit 4 -> q = 2 */
    b[32 + 55] = 0x01; /* x151: q = 1 - 4 = -3 */
    b[32 + 63] = 0xC0; /* x255 (h1 s3 l31): low bits 3 */
    b[31] = 0x80;      /* x255: hmask bit 7 -> q = 3 */
    struct expect ex[256];
    /* defaults: every element is q = -4 (no hmask) at its sub-block's scale */
    for (int i = 0; i < 256; i++) {
        int sub = i / 16;
        int s = sub == 0 ? 1 : sub == 9 ? -2 : sub == 15 ? 31 : -32;
        ex[i] = (struct expect){i, (float)(s * -4)};
    }
    ex[0].v = 3.f;                  /* 1 * 3 */
    ex[150].v = -4.f;               /* -2 * 2 */
    ex[151].v = 6.f;                /* -2 * -3 */
    ex[255].v = 93.f;               /* 31 * 3 */
    assert_true(ex[63].v == 128.f); /* sub 3: -32 * -4 */
    check_block(PL_GGML_TYPE_Q3_K, b, ex, 256, 0.f);
}

/* Q4_K and Q5_K share the scale layout: sub 0 scale 10 min 3, sub 5 scale 45 min 50. */
static void k4_scales(uint8_t *b) {
    wr16(b, 0x3C00);     /* d = 1 */
    wr16(b + 2, 0x3800); /* dmin = 0.5 */
    b[4 + 0] = 10;       /* sub 0 scale */
    b[4 + 4] = 3;        /* sub 0 min */
    b[4 + 9] = 0x2D;     /* sub 5: scale low 4 = 13, min low 4 = 2 */
    b[4 + 1] = 0x80;     /* sub 5 scale high 2 bits (2) in bits 6..7 of byte 1 */
    b[4 + 5] = 0xC0;     /* sub 5 min high 2 bits (3) in bits 6..7 of byte 5 */
}

static void test_q4_K_block(void **state) {
    (void)state;
    uint8_t b[144] = {0};
    k4_scales(b);
    b[16 + 0] = 0x7F;  /* x0 = 15 (sub 0), x32 = 7 (sub 1: scale 0) */
    b[16 + 74] = 0x90; /* group 2, l 10: x138 = 0 (sub 4), x170 = 9 (sub 5) */
    struct expect ex[256];
    for (int i = 0; i < 256; i++)
        ex[i] = (struct expect){i, i < 32 ? -1.5f : (i >= 160 && i < 192) ? -25.f : 0.f};
    ex[0].v = 148.5f;  /* 10*15 - 0.5*3 */
    ex[170].v = 380.f; /* 45*9 - 0.5*50 */
    check_block(PL_GGML_TYPE_Q4_K, b, ex, 256, 0.f);
}

static void test_q5_K_block(void **state) {
    (void)state;
    uint8_t b[176] = {0};
    k4_scales(b);
    b[16 + 0] = 0x01;  /* qh[0] bit 0: x0 +16 */
    b[16 + 10] = 0x20; /* qh[10] bit 5: x170 +16 */
    b[16 + 11] = 0x20; /* qh[11] bit 5: x171 +16 */
    b[48 + 0] = 0x7F;
    b[48 + 74] = 0x90;
    struct expect ex[256];
    for (int i = 0; i < 256; i++)
        ex[i] = (struct expect){i, i < 32 ? -1.5f : (i >= 160 && i < 192) ? -25.f : 0.f};
    ex[0].v = 308.5f;   /* 10*31 - 1.5 */
    ex[170].v = 1100.f; /* 45*25 - 25 */
    ex[171].v = 695.f;  /* 45*16 - 25 */
    check_block(PL_GGML_TYPE_Q5_K, b, ex, 256, 0.f);
}

static void test_q6_K_block(void **state) {
    (void)state;
    uint8_t b[210] = {0};
    b[192 + 0] = 2;
    b[192 + 1] = 0xFD; /* -3 */
    b[192 + 4] = 1;
    b[192 + 12] = 127;
    b[192 + 15] = 0x80;    /* -128 */
    wr16(b + 208, 0x3800); /* d = 0.5 */
    b[0] = 0x5A;           /* x0 low 4 = 10, x64 low 4 = 5 */
    b[128 + 0] = 0x06;     /* qh[0]: x0 high 2 = 2, x32 high 2 = 1 */
    b[72] = 0xF0;          /* x200 (h1 s2 l8): low 4 = 15 */
    b[128 + 40] = 0x30;    /* x200 high 2 = 3 */
    struct expect ex[256];
    for (int i = 0; i < 256; i++) { /* q = -32 everywhere else */
        int sc = (int8_t)b[192 + i / 16];
        ex[i] = (struct expect){i, 0.5f * (float)sc * -32.f};
    }
    ex[0].v = 10.f;      /* 0.5 * 2 * (42-32) */
    ex[64].v = -13.5f;   /* 0.5 * 1 * (5-32) */
    ex[200].v = 1968.5f; /* 0.5 * 127 * (63-32) */
    assert_true(ex[16].v == 48.f && ex[255].v == 2048.f);
    check_block(PL_GGML_TYPE_Q6_K, b, ex, 256, 0.f);
}

static void test_q8_K_block(void **state) {
    (void)state;
    uint8_t b[292] = {0};
    wrf32(b, 0.25f);
    b[4 + 0] = 0x81; /* -127 */
    b[4 + 255] = 4;
    const struct expect ex[] = {{0, -31.75f}, {255, 1.f}};
    check_block(PL_GGML_TYPE_Q8_K, b, ex, 2, 0.f);
}

static void test_float_rows(void **state) {
    (void)state;
    uint8_t h[4] = {0x00, 0x3C, 0x01, 0x80};  /* 1.0, -2^-24 */
    uint8_t bf[4] = {0x80, 0x3F, 0x40, 0xC0}; /* 1.0, -3.0 */
    float out[2];
    pl_quant_kernels_ref(PL_GGML_TYPE_F16)->to_f32(h, out, 2);
    assert_true(out[0] == 1.f && out[1] == -0x1p-24f);
    pl_quant_kernels_ref(PL_GGML_TYPE_BF16)->to_f32(bf, out, 2);
    assert_true(out[0] == 1.f && out[1] == -3.f);
}

/* ---- Random blocks: to_f32 against the independent decoder ---- */

static const uint32_t WEIGHT_TYPES[] = {
    PL_GGML_TYPE_F32,  PL_GGML_TYPE_F16,  PL_GGML_TYPE_BF16, PL_GGML_TYPE_Q4_0, PL_GGML_TYPE_Q4_1,
    PL_GGML_TYPE_Q5_0, PL_GGML_TYPE_Q5_1, PL_GGML_TYPE_Q8_0, PL_GGML_TYPE_Q2_K, PL_GGML_TYPE_Q3_K,
    PL_GGML_TYPE_Q4_K, PL_GGML_TYPE_Q5_K, PL_GGML_TYPE_Q6_K,
};
#define N_WEIGHT_TYPES (sizeof(WEIGHT_TYPES) / sizeof(WEIGHT_TYPES[0]))
#define TEST_N 4096 /* elements per test row: 16 super-blocks */

static void test_random_blocks_decode_as_format(void **state) {
    (void)state;
    static uint8_t buf[TEST_N * 4];
    static float out[TEST_N];
    static double want[TEST_N];
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        uint32_t t = WEIGHT_TYPES[k];
        for (int rep = 0; rep < 4; rep++) {
            random_blocks(t, buf, TEST_N);
            decode_row(t, buf, TEST_N, want, NULL);
            pl_quant_kernels_ref(t)->to_f32(buf, out, TEST_N);
            for (int i = 0; i < TEST_N; i++)
                assert_close(out[i], want[i], DEQUANT_REL_TOL * fabs(want[i]),
                             pl_type_info(t)->name, i);
            pl_quant_kernels(t)->to_f32(buf, out, TEST_N);
            for (int i = 0; i < TEST_N; i++)
                assert_close(out[i], want[i], DEQUANT_REL_TOL * fabs(want[i]),
                             pl_type_info(t)->name, i);
        }
    }
}

/* ---- vec_dot against a double dot of the decoded operands ---- */

/* Random activations of type vdt (valid blocks: Q8_1's s and Q8_K's bsums consistent). */
static void random_activations(uint32_t vdt, uint8_t *buf, int64_t n) {
    const struct layout *L = layout_of(vdt);
    if (vdt == PL_GGML_TYPE_F32 || vdt == PL_GGML_TYPE_F16 || vdt == PL_GGML_TYPE_BF16) {
        random_blocks(vdt, buf, n);
        return;
    }
    for (int64_t blk = 0; blk < n / L->blck_elems; blk++) {
        uint8_t *b = buf + blk * L->blck_bytes;
        int qs_off = vdt == PL_GGML_TYPE_Q8_0 ? 2 : 4;
        int sum = 0;
        for (int i = 0; i < L->blck_elems; i++) {
            int8_t q = (int8_t)((int)(rng_next() % 255) - 127);
            b[qs_off + i] = (uint8_t)q;
            sum += q;
        }
        if (vdt == PL_GGML_TYPE_Q8_K) {
            wrf32(b, (float)(rng_uniform() * 0.02 + 1e-4));
            for (int j = 0; j < 16; j++) {
                int s = 0;
                for (int l = 0; l < 16; l++)
                    s += (int8_t)b[4 + 16 * j + l];
                wr16(b + 260 + 2 * j, (uint16_t)(int16_t)s);
            }
        } else {
            uint16_t d = rand_scale16();
            wr16(b, d);
            if (vdt == PL_GGML_TYPE_Q8_1) /* s = d * sum, rounded to half */
                wr16(b + 2, pl_f32_to_fp16((float)(half_ref(d) * sum)));
        }
    }
}

/* The dot product as the format defines it, in double; *ret_mag = sum |w||x| bound. For
 * Q8_1 activations the block's s field stands for d * sum(qs), as in ggml. */
static double dot_ref(uint32_t wt, const uint8_t *w, uint32_t vdt, const uint8_t *x, int64_t n,
                      double *ret_mag) {
    static double dw[TEST_N], mw[TEST_N], dx[TEST_N];
    double sum = 0, mag = 0;
    assert_true(n <= TEST_N);
    decode_row(wt, w, n, dw, mw);
    decode_row(vdt, x, n, dx, NULL);
    for (int64_t i = 0; i < n; i++) {
        sum += dw[i] * dx[i];
        mag += mw[i] * fabs(dx[i]);
    }
    if (vdt == PL_GGML_TYPE_Q8_1) {
        const struct layout *LW = layout_of(wt);
        for (int64_t blk = 0; blk < n / 32; blk++) {
            const uint8_t *xb = x + blk * 36;
            double m = decode(wt, w + blk * LW->blck_bytes, 0).offset;
            double exact = 0;
            for (int i = 0; i < 32; i++)
                exact += dx[blk * 32 + i];
            sum += m * (half_ref(rd16(xb + 2)) - exact);
            mag += fabs(m) * fabs(half_ref(rd16(xb + 2)));
        }
    }
    *ret_mag = mag;
    return sum;
}

static void check_vec_dot(const struct pl_quant_kernels *k, uint32_t t) {
    static uint8_t w[TEST_N * 4], x[TEST_N * 4 + 64];
    for (int rep = 0; rep < 8; rep++) {
        int64_t n = rep % 2 ? TEST_N : 256 * (1 + rep); /* several lengths */
        double mag;
        random_blocks(t, w, n);
        random_activations(k->vec_dot_type, x, n);
        double want = dot_ref(t, w, k->vec_dot_type, x, n, &mag);
        double got = k->vec_dot(n, w, x);
        assert_close(got, want, VEC_DOT_REL_TOL * mag + VEC_DOT_ABS_TOL, pl_type_info(t)->name, n);
    }
}

static void test_vec_dot_matches_double_dot_of_decoded(void **state) {
    (void)state;
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        check_vec_dot(pl_quant_kernels_ref(WEIGHT_TYPES[k]), WEIGHT_TYPES[k]);
        check_vec_dot(pl_quant_kernels(WEIGHT_TYPES[k]), WEIGHT_TYPES[k]);
    }
}

/* Saturated operands: the integer sums must not overflow (Q6_K scale -128, q -32, x -127). */
static void test_vec_dot_extreme_blocks(void **state) {
    (void)state;
    static uint8_t w[210 * 4], x[292 * 4];
    memset(w, 0, sizeof(w));
    for (int blk = 0; blk < 4; blk++) {
        memset(w + blk * 210 + 192, 0x80, 16); /* scales -128 */
        wr16(w + blk * 210 + 208, 0x3C00);
        uint8_t *xb = x + blk * 292;
        wrf32(xb, 1.f);
        memset(xb + 4, 0x81, 256); /* -127 */
        for (int j = 0; j < 16; j++)
            wr16(xb + 260 + 2 * j, (uint16_t)(int16_t)(-127 * 16));
    }
    /* every product: (-128 * -32) * -127 */
    double want = 4.0 * 256 * (-128.0 * -32.0) * -127.0;
    float got = pl_quant_kernels_ref(PL_GGML_TYPE_Q6_K)->vec_dot(1024, w, x);
    assert_close(got, want, 1e-6 * fabs(want), "q6_K extreme", 0);
    got = pl_quant_kernels(PL_GGML_TYPE_Q6_K)->vec_dot(1024, w, x);
    assert_close(got, want, 1e-6 * fabs(want), "q6_K extreme (dispatched)", 0);
}

/* ---- Quantizers ---- */

/* fill_gauss(): elements from here on are plain N(0, 1) */
#define GAUSS_FROM 1280

static void fill_gauss(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)rng_gauss();
    /* a few awkward blocks: zeros, a constant, one outlier, all positive, tiny values */
    for (int i = 0; i < 256; i++) {
        x[i] = 0.f;
        x[256 + i] = 0.75f;
        x[768 + i] = fabsf(x[768 + i]) + 1.f;
        x[1024 + i] *= 1e-6f;
    }
    x[512 + 7] = 40.f;
}

static const struct rt_bound *rt_bound(uint32_t t) {
    for (size_t i = 0; i < sizeof(RT_BOUNDS) / sizeof(RT_BOUNDS[0]); i++)
        if (RT_BOUNDS[i].type == t)
            return &RT_BOUNDS[i];
    return NULL;
}

static void check_round_trip(const struct pl_quant_kernels *k, uint32_t t) {
    static float x[TEST_N], y[TEST_N];
    static double dec[TEST_N];
    static uint8_t q[TEST_N * 4];
    const struct rt_bound *bound = rt_bound(t);
    assert_non_null(bound);
    for (int rep = 0; rep < 3; rep++) {
        fill_gauss(x, TEST_N);
        memset(q, 0xA5, sizeof(q));
        k->from_f32(x, q, TEST_N);
        k->to_f32(q, y, TEST_N);
        /* the quantizer writes the format: the independent decoder agrees */
        decode_row(t, q, TEST_N, dec, NULL);
        double se = 0, sx = 0;
        for (int i = 0; i < TEST_N; i++) {
            assert_true(isfinite(y[i]));
            assert_close(y[i], dec[i], DEQUANT_REL_TOL * fabs(dec[i]), "encoded", i);
            if (i < GAUSS_FROM)
                continue;
            se += (double)(y[i] - x[i]) * (y[i] - x[i]);
            sx += (double)x[i] * x[i];
        }
        for (int i = 0; i < 256; i++) /* the zero block stays exactly zero */
            assert_true(y[i] == 0.f);
        double rel = sqrt(se / sx);
        if (getenv("PL_TEST_VERBOSE"))
            fprintf(stderr, "%s round trip: rel RMSE %.5g\n", pl_type_info(t)->name, rel);
        if (!(rel <= bound->rel_rmse))
            fail_msg("%s round trip: rel RMSE %.5g > %.5g", pl_type_info(t)->name, rel,
                     bound->rel_rmse);
        /* the constant block and the outlier come back close */
        assert_close(y[256 + 5], 0.75, 0.75 * 0.1, "constant", 0);
        assert_close(y[512 + 7], 40.0, 40.0 * 0.07, "outlier", 0);
    }
}

static void test_quantize_round_trip(void **state) {
    (void)state;
    static const uint32_t types[] = {
        PL_GGML_TYPE_F32,  PL_GGML_TYPE_F16,  PL_GGML_TYPE_BF16, PL_GGML_TYPE_Q8_0,
        PL_GGML_TYPE_Q8_1, PL_GGML_TYPE_Q8_K, PL_GGML_TYPE_Q4_0, PL_GGML_TYPE_Q4_1,
        PL_GGML_TYPE_Q5_0, PL_GGML_TYPE_Q5_1, PL_GGML_TYPE_Q2_K, PL_GGML_TYPE_Q3_K,
        PL_GGML_TYPE_Q4_K, PL_GGML_TYPE_Q5_K, PL_GGML_TYPE_Q6_K,
    };
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        check_round_trip(pl_quant_kernels_ref(types[k]), types[k]);
        check_round_trip(pl_quant_kernels(types[k]), types[k]);
    }
}

/* Per-element error bounds that follow from the simple quantizers' definitions. */
static void test_quantize_error_bounds_per_block(void **state) {
    (void)state;
    static float x[TEST_N], y[TEST_N];
    static uint8_t q[TEST_N * 2];
    static const struct {
        uint32_t type;
        int elems;
        double levels; /* max error <= factor * (block range / levels) */
        double factor;
        int affine; /* range = max - min, else max |x| */
    } cases[] = {
        {PL_GGML_TYPE_Q8_0, 32, 127, Q8_0_ACT_ERR, 0},
        {PL_GGML_TYPE_Q8_1, 32, 127, Q8_0_ACT_ERR, 0},
        {PL_GGML_TYPE_Q8_K, 256, 127, Q8_K_ACT_ERR, 0},
        /* symmetric nibble types: the extreme maps to -8 (-16), so the opposite side
         * clamps at +7 (+15) levels: up to a full step there */
        {PL_GGML_TYPE_Q4_0, 32, 8, 1.01, 0},
        {PL_GGML_TYPE_Q5_0, 32, 16, 1.02, 0},
        /* affine: half a step plus the fp16 rounding of d (and of m, below) */
        {PL_GGML_TYPE_Q4_1, 32, 15, 0.52, 1},
        {PL_GGML_TYPE_Q5_1, 32, 31, 0.54, 1},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const struct pl_quant_kernels *k = pl_quant_kernels_ref(cases[c].type);
        fill_gauss(x, TEST_N);
        k->from_f32(x, q, TEST_N);
        k->to_f32(q, y, TEST_N);
        for (int b0 = 0; b0 < TEST_N; b0 += cases[c].elems) {
            float mn = x[b0], mx = x[b0], amax = 0;
            for (int i = b0; i < b0 + cases[c].elems; i++) {
                mn = fminf(mn, x[i]);
                mx = fmaxf(mx, x[i]);
                amax = fmaxf(amax, fabsf(x[i]));
            }
            double range = cases[c].affine ? (double)mx - mn : amax;
            /* + the fp16 rounding of m, and of a scale too small for fp16 (half its
             * smallest subnormal step, times the largest level) */
            double tol = cases[c].factor * range / cases[c].levels +
                         0x1p-11 * fabs(mn) * cases[c].affine +
                         (cases[c].type != PL_GGML_TYPE_Q8_K ? 2 * cases[c].levels * 0x1p-25 : 0);
            for (int i = b0; i < b0 + cases[c].elems; i++)
                assert_close(y[i], x[i], tol + 1e-30, pl_type_info(cases[c].type)->name, i);
        }
    }
}

static void test_q8_K_from_f32_fields(void **state) {
    (void)state;
    static float x[TEST_N];
    static uint8_t q[292 * 4];
    fill_gauss(x, TEST_N);
    x[300] = -9.f; /* block 1's extreme: maps to -127, so d = +9/127 */
    pl_quant_kernels_ref(PL_GGML_TYPE_Q8_K)->from_f32(x, q, 1024);
    for (int blk = 0; blk < 4; blk++) {
        const uint8_t *b = q + 292 * blk;
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += (int8_t)b[4 + 16 * j + l];
            assert_int_equal((int16_t)rd16(b + 260 + 2 * j), s);
        }
        for (int i = 0; i < 256; i++)
            assert_true((int8_t)b[4 + i] >= -127);
    }
    assert_true(rdf32(q) == 0.f); /* block 0 is all zero */
    assert_int_equal((int8_t)q[292 + 4 + 300 - 256], -127);
    assert_close(rdf32(q + 292), 9.0 / 127, 1e-7, "q8_K d", 1);
    assert_int_equal((int8_t)q[292 + 4 + 5], 11); /* 0.75 * 127 / 9 = 10.58 */
}

/* from_f32 of the activation type, then vec_dot, against a float dot of the weights'
 * decoded values and the unquantized activations: the difference is bounded by the
 * activation quantization error weighted by |w|. */
static void test_quantized_activations_dot_close_to_float_dot(void **state) {
    (void)state;
    static float x[TEST_N];
    static uint8_t w[TEST_N * 4], xq[TEST_N * 4];
    static double dw[TEST_N], mw[TEST_N];
    for (size_t k = 0; k < N_WEIGHT_TYPES; k++) {
        uint32_t t = WEIGHT_TYPES[k];
        for (int pass = 0; pass < 2; pass++) {
            const struct pl_quant_kernels *kern =
                pass ? pl_quant_kernels(t) : pl_quant_kernels_ref(t);
            uint32_t vdt = kern->vec_dot_type;
            const struct layout *LX = layout_of(vdt);
            random_blocks(t, w, TEST_N);
            for (int i = 0; i < TEST_N; i++)
                x[i] = (float)rng_gauss();
            pl_quant_kernels(vdt)->from_f32(x, xq, TEST_N);
            decode_row(t, w, TEST_N, dw, mw);
            double want = 0, bound = 0;
            for (int b0 = 0; b0 < TEST_N; b0 += LX->blck_elems) {
                float amax = 0;
                double sx = 0;
                for (int i = b0; i < b0 + LX->blck_elems; i++) {
                    amax = fmaxf(amax, fabsf(x[i]));
                    sx += x[i];
                }
                double e = vdt == PL_GGML_TYPE_Q8_K ? Q8_K_ACT_ERR * amax / 127
                           : vdt == PL_GGML_TYPE_Q8_0 || vdt == PL_GGML_TYPE_Q8_1
                               ? Q8_0_ACT_ERR * amax / 127
                           : vdt == PL_GGML_TYPE_F16  ? 0x1p-11 * amax
                           : vdt == PL_GGML_TYPE_BF16 ? 0x1p-8 * amax
                                                      : 0;
                for (int i = b0; i < b0 + LX->blck_elems; i++) {
                    want += dw[i] * x[i];
                    bound += fabs(dw[i]) * e + VEC_DOT_REL_TOL * mw[i] * fabs(x[i]);
                }
                if (vdt == PL_GGML_TYPE_Q8_1) /* s rounded to half */
                    bound += fabs(decode(t, w + (b0 / 32) * layout_of(t)->blck_bytes, 0).offset) *
                             (fabs(sx) + 32 * Q8_0_ACT_ERR * amax / 127) * 0x1p-11;
            }
            double got = kern->vec_dot(TEST_N, w, xq);
            assert_close(got, want, bound + VEC_DOT_ABS_TOL, pl_type_info(t)->name, pass);
        }
    }
}

/* ---- Real tensors from the shared models ---- */

static int data_missing;

static void check_model_tensors(const char *path) {
    char err[256] = "";
    struct pl_gguf *g = NULL;
    int r = pl_gguf_open(path, &g, err, sizeof(err));
    if (r < 0)
        fail_msg("%s: %d %s", path, r, err);
    static float out[65536];
    static double dec[65536];
    int n_checked = 0;
    for (uint64_t ti = 0; ti < pl_gguf_n_tensors(g); ti++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, ti);
        const struct pl_quant_kernels *k = pl_quant_kernels(t->type);
        assert_non_null(k);
        assert_non_null(k->to_f32);
        /* up to 64K elements (whole rows) of every tensor */
        int64_t n = (int64_t)t->n_elems;
        if (n > 65536)
            n = 65536 - 65536 % (int64_t)t->ne[0];
        k->to_f32(t->data, out, n);
        decode_row(t->type, t->data, n, dec, NULL);
        for (int64_t i = 0; i < n; i++) {
            assert_true(isfinite(out[i]));
            assert_close(out[i], dec[i], DEQUANT_REL_TOL * fabs(dec[i]), t->name, i);
        }
        n_checked++;
    }
    assert_true(n_checked > 0);
    pl_gguf_close(g);
}

static void test_real_tensors_dequantize(void **state) {
    (void)state;
    const char *dir = getenv("PICOLM_TEST_DATA");
    char path[4096];
    static const char *files[] = {
        "tiny-llama-spm-Q4_K_M.gguf", "tiny-llama-spm-Q5_K_M.gguf",    "tiny-llama-spm-Q3_K_M.gguf",
        "tiny-llama-spm-Q2_K.gguf",   "tiny-llama-spm-tied-Q8_0.gguf", "tiny-llama-gpt2-Q4_0.gguf",
        "stories260K-F16.gguf",
    };
    snprintf(path, sizeof(path), "%s/models/%s", dir ? dir : "", files[0]);
    if (!dir || access(path, R_OK) != 0) {
        fprintf(stderr, "PICOLM_TEST_DATA not set or models missing: real-tensor test skipped\n");
        data_missing = 1;
        skip();
    }

    /* blk.0.attn_q.weight of the Q4_K_M model: a random-weight Gaussian-like tensor */
    char err[256] = "";
    struct pl_gguf *g = NULL;
    assert_int_equal(pl_gguf_open(path, &g, err, sizeof(err)), 0);
    const struct pl_gguf_tensor *t = pl_gguf_find_tensor(g, "blk.0.attn_q.weight");
    assert_non_null(t);
    assert_int_equal(t->type, PL_GGML_TYPE_Q4_K);
    int64_t n = (int64_t)t->n_elems;
    float *v = malloc((size_t)n * sizeof(float));
    assert_non_null(v);
    pl_quant_kernels(t->type)->to_f32(t->data, v, n);
    double s = 0, s2 = 0, amax = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(isfinite(v[i]));
        s += v[i];
        s2 += (double)v[i] * v[i];
        amax = fmax(amax, fabs(v[i]));
    }
    double mean = s / n, sd = sqrt(s2 / n - mean * mean);
    fprintf(stderr, "blk.0.attn_q.weight: n=%lld mean=%.3g sd=%.3g max|x|=%.3g\n", (long long)n,
            mean, sd, amax);
    assert_true(sd > 1e-4 && sd < 10.0);
    assert_true(fabs(mean) < 0.05 * sd);
    assert_true(amax < 12 * sd);
    /* not constant per row: each row has many distinct values */
    int distinct = 0;
    for (int i = 1; i < 256; i++)
        distinct += v[i] != v[0];
    assert_true(distinct > 200);
    free(v);
    pl_gguf_close(g);

    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        snprintf(path, sizeof(path), "%s/models/%s", dir, files[f]);
        check_model_tensors(path);
    }
}

/* llama-quantize wrote these files with ggml's reference quantizers (no imatrix), so our
 * quantizers must reproduce its bytes: F16 of the F32 stories260K tensors; and re-quantizing
 * the decoded Q8_0/Q4_0 tensors (whose extreme element sits exactly on +-127 / -8 steps)
 * gives the stored blocks back. */
static void requantize_matches_file(const char *path, uint32_t type) {
    char err[256] = "";
    struct pl_gguf *g = NULL;
    assert_int_equal(pl_gguf_open(path, &g, err, sizeof(err)), 0);
    const struct pl_quant_kernels *k = pl_quant_kernels_ref(type);
    int n_tensors = 0;
    for (uint64_t ti = 0; ti < pl_gguf_n_tensors(g); ti++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, ti);
        if (t->type != type)
            continue;
        int64_t n = (int64_t)t->n_elems;
        float *v = malloc((size_t)n * sizeof(float));
        uint8_t *q = malloc(row_bytes(type, n));
        assert_true(v && q);
        k->to_f32(t->data, v, n);
        k->from_f32(v, q, n);
        size_t len = row_bytes(type, n), diff = 0;
        for (size_t i = 0; i < len; i++)
            diff += q[i] != ((const uint8_t *)t->data)[i];
        if (diff)
            fail_msg("%s %s: %zu of %zu bytes differ after re-quantizing", path, t->name, diff,
                     len);
        free(v);
        free(q);
        n_tensors++;
    }
    assert_true(n_tensors > 0);
    pl_gguf_close(g);
}

static void test_quantizers_reproduce_llama_quantize(void **state) {
    (void)state;
    const char *dir = getenv("PICOLM_TEST_DATA");
    char p32[4096], p16[4096], err[256] = "";
    snprintf(p32, sizeof(p32), "%s/models/stories260K.gguf", dir ? dir : "");
    snprintf(p16, sizeof(p16), "%s/models/stories260K-F16.gguf", dir ? dir : "");
    if (!dir || access(p32, R_OK) != 0 || access(p16, R_OK) != 0) {
        data_missing = 1;
        skip();
    }
    struct pl_gguf *g32 = NULL, *g16 = NULL;
    assert_int_equal(pl_gguf_open(p32, &g32, err, sizeof(err)), 0);
    assert_int_equal(pl_gguf_open(p16, &g16, err, sizeof(err)), 0);
    int n_f16 = 0;
    for (uint64_t ti = 0; ti < pl_gguf_n_tensors(g16); ti++) {
        const struct pl_gguf_tensor *t16 = pl_gguf_tensor_at(g16, ti);
        if (t16->type != PL_GGML_TYPE_F16)
            continue;
        const struct pl_gguf_tensor *t32 = pl_gguf_find_tensor(g32, t16->name);
        assert_non_null(t32);
        assert_int_equal(t32->type, PL_GGML_TYPE_F32);
        assert_int_equal(t32->n_elems, t16->n_elems);
        uint16_t *h = malloc(t16->n_bytes);
        assert_non_null(h);
        pl_quant_kernels_ref(PL_GGML_TYPE_F16)->from_f32(t32->data, h, (int64_t)t16->n_elems);
        assert_memory_equal(h, t16->data, t16->n_bytes);
        free(h);
        n_f16++;
    }
    assert_true(n_f16 > 0);
    pl_gguf_close(g32);
    pl_gguf_close(g16);

    snprintf(p32, sizeof(p32), "%s/models/tiny-llama-spm-tied-Q8_0.gguf", dir);
    requantize_matches_file(p32, PL_GGML_TYPE_Q8_0);
    snprintf(p32, sizeof(p32), "%s/models/tiny-llama-gpt2-Q4_0.gguf", dir);
    requantize_matches_file(p32, PL_GGML_TYPE_Q4_0);
}

/* ---- Which kernel sets the environment allows (pl_quant_env_allows) ---- */

static void expect_allows(const char *force, const char *isa_env, const char *want_yes) {
    static const char *const sets[] = {"avx2", "avxvnni", "avx512", "neon", "neon-dotprod"};
    if (force)
        setenv("PICOLM_FORCE_SCALAR", force, 1);
    else
        unsetenv("PICOLM_FORCE_SCALAR");
    if (isa_env)
        setenv("PICOLM_ISA", isa_env, 1);
    else
        unsetenv("PICOLM_ISA");
    assert_true(pl_quant_env_allows("scalar"));
    assert_false(pl_quant_env_allows(NULL));
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
        /* want_yes: "|avx2|avx512|" style list of the sets that must be allowed. */
        char key[32];
        snprintf(key, sizeof(key), "|%s|", sets[i]);
        bool want = strstr(want_yes, key) != NULL;
        if (pl_quant_env_allows(sets[i]) != want)
            fail_msg("FORCE_SCALAR=%s ISA=%s: %s should be %s", force ? force : "(unset)",
                     isa_env ? isa_env : "(unset)", sets[i], want ? "allowed" : "refused");
    }
}

static void test_env_selects_kernel_sets(void **state) {
    (void)state;
    const char *all = "|avx2|avxvnni|avx512|neon|neon-dotprod|";
    expect_allows(NULL, NULL, all);
    expect_allows("0", "", all);
    expect_allows("", "best", all);
    expect_allows("1", NULL, "||");
    expect_allows("yes", "avx512", "||"); /* FORCE_SCALAR wins */
    expect_allows(NULL, "scalar", "||");
    expect_allows(NULL, "avx2", "|avx2|");
    expect_allows(NULL, "avxvnni", "|avx2|avxvnni|");
    expect_allows(NULL, "avx512", "|avx2|avxvnni|avx512|");
    expect_allows(NULL, "neon", "|neon|");
    expect_allows("0", "neon-dotprod", "|neon|neon-dotprod|");
    expect_allows(NULL, "avx-512", "||"); /* a typo tests nothing by accident */
    expect_allows(NULL, "AVX2", "||");
    unsetenv("PICOLM_ISA");
    unsetenv("PICOLM_FORCE_SCALAR");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        /* first: forks before this process builds its dispatch table */
        cmocka_unit_test(test_force_scalar_selects_references),
        cmocka_unit_test(test_prefetch_setting_and_env),
        cmocka_unit_test(test_prefetch_parse),
        cmocka_unit_test(test_block_sizes_match_format_and_type_table),
        cmocka_unit_test(test_dispatch_table_covers_compute_types),
        cmocka_unit_test(test_fp16_to_f32_all_values_match_definition),
        cmocka_unit_test(test_f32_to_fp16_rounds_to_nearest_even),
        cmocka_unit_test(test_bf16_conversions),
        cmocka_unit_test(test_q4_0_block),
        cmocka_unit_test(test_q4_1_block),
        cmocka_unit_test(test_q5_0_block),
        cmocka_unit_test(test_q5_1_block),
        cmocka_unit_test(test_q8_0_block),
        cmocka_unit_test(test_q2_K_block),
        cmocka_unit_test(test_q3_K_block),
        cmocka_unit_test(test_q4_K_block),
        cmocka_unit_test(test_q5_K_block),
        cmocka_unit_test(test_q6_K_block),
        cmocka_unit_test(test_q8_K_block),
        cmocka_unit_test(test_float_rows),
        cmocka_unit_test(test_random_blocks_decode_as_format),
        cmocka_unit_test(test_vec_dot_matches_double_dot_of_decoded),
        cmocka_unit_test(test_vec_dot_extreme_blocks),
        cmocka_unit_test(test_quantize_round_trip),
        cmocka_unit_test(test_quantize_error_bounds_per_block),
        cmocka_unit_test(test_q8_K_from_f32_fields),
        cmocka_unit_test(test_quantized_activations_dot_close_to_float_dot),
        cmocka_unit_test(test_real_tensors_dequantize),
        cmocka_unit_test(test_quantizers_reproduce_llama_quantize),
        cmocka_unit_test(test_env_selects_kernel_sets),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (failed == 0 && data_missing)
        return 77;
    return failed;
}
