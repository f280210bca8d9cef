/* SPDX-License-Identifier: MIT */
/* Kernel dispatch: one table indexed by ggml type, filled once from the scalar references
 * and then patched by the ISA backend (quant_arch.h) unless PICOLM_FORCE_SCALAR is set;
 * plus the public half/bfloat16 conversions. Called by the model loader and forward pass. */
#include "pl/engine_quant.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "pl/engine_types.h"
#include "quant_arch.h"
#include "quant_blocks.h"
#include "quant_ref.h"

/* Written only inside init_once(); read-only afterwards (pthread_once orders the writes
 * before every reader that went through pl_quant_init()). */
static struct pl_quant_kernels active[_PL_GGML_TYPE_MAX];
static const char *active_isa = "scalar";
static pthread_once_t init_control = PTHREAD_ONCE_INIT;

/* PICOLM_FORCE_SCALAR: set and neither empty nor "0". */
static bool force_scalar(void) {
    const char *v = getenv("PICOLM_FORCE_SCALAR");
    return v && v[0] != '\0' && strcmp(v, "0") != 0;
}

bool pl_quant_env_allows(const char *isa) {
    /* Each PICOLM_ISA value and the sets it allows (a chain: the wider set includes the
     * narrower one of its family). */
    static const struct {
        const char *env, *sets[4];
    } caps[] = {
        {"avx2", {"avx2", NULL, NULL, NULL}},
        {"avxvnni", {"avx2", "avxvnni", NULL, NULL}},
        {"avx512", {"avx2", "avxvnni", "avx512", NULL}},
        {"amx", {"avx2", "avxvnni", "avx512", "amx"}},
        {"neon", {"neon", NULL, NULL, NULL}},
        {"neon-dotprod", {"neon", "neon-dotprod", NULL, NULL}},
    };
    if (!isa)
        return false;
    if (!strcmp(isa, "scalar"))
        return true;
    if (force_scalar())
        return false;
    const char *v = getenv("PICOLM_ISA");
    if (!v || !v[0] || !strcmp(v, "best"))
        return true;
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
        if (!strcmp(v, caps[i].env))
            for (size_t k = 0; k < 4; k++)
                if (caps[i].sets[k] && !strcmp(isa, caps[i].sets[k]))
                    return true;
    return false;
}

static void init_once(void) {
    memcpy(active, pl_quant_ref_table, sizeof(active));
    if (force_scalar())
        return;
#ifdef PL_QUANT_HAVE_ARCH /* the backend asks pl_quant_env_allows() for each set */
    {
        const char *isa = pl_quant_arch_init(active);
        if (isa)
            active_isa = isa;
    }
#endif
}

void pl_quant_init(void) {
    (void)pthread_once(&init_control, init_once);
}

static bool has_kernels(const struct pl_quant_kernels *k) {
    return k->to_f32 || k->from_f32 || k->vec_dot;
}

const struct pl_quant_kernels *pl_quant_kernels(uint32_t t) {
    if (t >= _PL_GGML_TYPE_MAX)
        return NULL;
    pl_quant_init();
    return has_kernels(&active[t]) ? &active[t] : NULL;
}

const struct pl_quant_kernels *pl_quant_kernels_ref(uint32_t t) {
    if (t >= _PL_GGML_TYPE_MAX || !has_kernels(&pl_quant_ref_table[t]))
        return NULL;
    return &pl_quant_ref_table[t];
}

const char *pl_quant_isa(void) {
    pl_quant_init();
    return active_isa;
}

/* ---- Weight-stream prefetch ---- */

/* One distance: decimal, lo..hi (or 0 when zero_ok), a multiple of 64 (whole cache lines).
 * *end: past it. */
static int parse_pf_dist(const char *s, const char **end, uint32_t lo, uint32_t hi, bool zero_ok,
                         uint32_t *out) {
    uint32_t v = 0;
    const char *p = s;
    while (*p >= '0' && *p <= '9' && p - s < 7)
        v = v * 10u + (uint32_t)(*p++ - '0');
    if (p == s || (*p >= '0' && *p <= '9') || v % 64 != 0 ||
        ((v < lo || v > hi) && !(zero_ok && v == 0)))
        return -EINVAL;
    *end = p;
    *out = v;
    return 0;
}

int pl_quant_prefetch_parse(const char *s, struct pl_quant_prefetch *out) {
    struct pl_quant_prefetch c;
    const char *p;
    if (!s || !out)
        return -EINVAL;
    c = *out;
    if (!strncmp(s, "t0", 2)) {
        c.hint = PL_QUANT_PF_T0;
        p = s + 2;
    } else if (!strncmp(s, "nta", 3)) {
        c.hint = PL_QUANT_PF_NTA;
        p = s + 3;
    } else if (!strncmp(s, "none", 4)) {
        c.hint = PL_QUANT_PF_NONE;
        p = s + 4;
    } else {
        return -EINVAL;
    }
    if (*p == ':' && parse_pf_dist(p + 1, &p, 256, 65536, false, &c.bytes) != 0)
        return -EINVAL;
    if (*p == ':' && parse_pf_dist(p + 1, &p, 256, 65536, false, &c.decode_bytes) != 0)
        return -EINVAL;
    if (*p == ':') {
        if (p[1] < '1' || p[1] > '0' + (int)PL_QUANT_STREAMS_MAX)
            return -EINVAL;
        c.streams = (uint32_t)(p[1] - '0');
        p += 2;
    }
    if (*p == ':' && parse_pf_dist(p + 1, &p, 256, 262144, true, &c.page_ahead) != 0)
        return -EINVAL;
    if (*p != '\0')
        return -EINVAL;
    *out = c;
    return 0;
}

#if !(defined(PL_QUANT_HAVE_ARCH) && (defined(__x86_64__) || defined(__i386__)))
/* Elsewhere the setting is fixed: the NEON kernels' non-temporal prefetch (PICOLM_PREFETCH
 * is not read). */
const struct pl_quant_prefetch *pl_quant_prefetch(void) {
    static const struct pl_quant_prefetch neon = {
        PL_QUANT_PF_NTA, PL_QUANT_PREFETCH_BYTES, PL_QUANT_PREFETCH_BYTES, 1, "fixed", 0};
    return &neon;
}
#endif

void pl_quant_q8_K_align(const void *restrict src, void *restrict dst, int64_t n) {
    const struct pl_block_q8_K *a = src;
    struct pl_block_q8_Ka *b = dst;
    for (int64_t i = 0; i < n / PL_QK_K; i++) {
        b[i].d = a[i].d;
        memcpy(b[i].qs, a[i].qs, sizeof(b[i].qs));
        memcpy(b[i].bsums, a[i].bsums, sizeof(b[i].bsums));
    }
}

/* ---- Half and bfloat16 ---- */

float pl_fp16_to_f32(uint16_t h) {
    return pl_fp16_to_f32_inline(h);
}

uint16_t pl_f32_to_fp16(float f) {
    return pl_f32_to_fp16_inline(f);
}

float pl_bf16_to_f32(uint16_t h) {
    return pl_bf16_to_f32_inline(h);
}

uint16_t pl_f32_to_bf16(float f) {
    return pl_f32_to_bf16_inline(f);
}
