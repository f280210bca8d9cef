/* SPDX-License-Identifier: MIT */
/* picolm-bench mkmodel: write a valid LLaMA GGUF of a given shape with seeded random
 * weights, quantized by the engine's own quantizers, and the tokenizer copied from another
 * GGUF. Used to benchmark the engine on realistic sizes (TinyLlama 1.1B, Llama 2 7B) without
 * shipping real weights. Tensors are generated and written one row at a time, so memory
 * stays at a few rows whatever the model size. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "gguf_writer.h"
#include "pl/engine_gguf.h"
#include "pl/engine_quant.h"
#include "pl/engine_types.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

struct shape {
    uint32_t n_embd, n_layer, n_head, n_head_kv, n_ff;
};

/* A quantization recipe: the base type of the matrices, and the llama.cpp-style overrides
 * of the "_M" mixes. */
struct recipe {
    const char *name;
    uint32_t base;      /* enum pl_ggml_type of most matrices */
    uint32_t output;    /* output.weight */
    uint32_t more_bits; /* attn_v and ffn_down on the layers use_more_bits() picks; = base
                           when the recipe has no such rule */
    uint32_t file_type; /* general.file_type (llama_ftype) */
};

static const struct recipe mixes[] = {
    {"Q4_K_M", PL_GGML_TYPE_Q4_K, PL_GGML_TYPE_Q6_K, PL_GGML_TYPE_Q6_K, 15},
    {"Q5_K_M", PL_GGML_TYPE_Q5_K, PL_GGML_TYPE_Q6_K, PL_GGML_TYPE_Q6_K, 17},
};

/* llama_ftype of a single-type model; 0 when the type has no ftype of its own. */
static uint32_t ftype_of(uint32_t t) {
    switch (t) {
    case PL_GGML_TYPE_F32:
        return 0;
    case PL_GGML_TYPE_F16:
        return 1;
    case PL_GGML_TYPE_Q4_0:
        return 2;
    case PL_GGML_TYPE_Q4_1:
        return 3;
    case PL_GGML_TYPE_Q8_0:
        return 7;
    case PL_GGML_TYPE_Q5_0:
        return 8;
    case PL_GGML_TYPE_Q5_1:
        return 9;
    case PL_GGML_TYPE_Q2_K:
        return 10;
    case PL_GGML_TYPE_Q3_K:
        return 11;
    case PL_GGML_TYPE_Q4_K:
        return 14;
    case PL_GGML_TYPE_Q5_K:
        return 16;
    case PL_GGML_TYPE_Q6_K:
        return 18;
    case PL_GGML_TYPE_BF16:
        return 32;
    default:
        return 0;
    }
}

/* --type: a mix name, or the name of any weight type that has a quantizer. As llama.cpp,
 * quantized single-type models keep output.weight at Q6_K (Q8_0 stays Q8_0). */
static int parse_recipe(const char *s, struct recipe *ret) {
    for (size_t i = 0; i < PL_ARRAY_SIZE(mixes); i++)
        if (!strcmp(s, mixes[i].name)) {
            *ret = mixes[i];
            return 0;
        }
    for (uint32_t t = 0; t < _PL_GGML_TYPE_MAX; t++) {
        const struct pl_type_info *ti = pl_type_info(t);
        const struct pl_quant_kernels *k = pl_quant_kernels(t);
        if (!ti || !ti->name || strcmp(ti->name, s) != 0)
            continue;
        if (!k || !k->from_f32 || !k->vec_dot || t == PL_GGML_TYPE_Q8_1 || t == PL_GGML_TYPE_Q8_K)
            return -PL_ERR_UNSUPPORTED;
        bool plain = t == PL_GGML_TYPE_F32 || t == PL_GGML_TYPE_F16 || t == PL_GGML_TYPE_BF16 ||
                     t == PL_GGML_TYPE_Q8_0;
        *ret = (struct recipe){ti->name, t, plain ? t : PL_GGML_TYPE_Q6_K, t, ftype_of(t)};
        return 0;
    }
    return -EINVAL;
}

static int parse_shape(const char *s, struct shape *ret) {
    if (!strcmp(s, "tinyllama-1.1b")) {
        *ret = (struct shape){2048, 22, 32, 4, 5632};
        return 0;
    }
    if (!strcmp(s, "llama2-7b")) {
        *ret = (struct shape){4096, 32, 32, 32, 11008};
        return 0;
    }
    unsigned a, b, c, d, e;
    char tail;
    if (sscanf(s, "%u,%u,%u,%u,%u%c", &a, &b, &c, &d, &e, &tail) != 5)
        return -EINVAL;
    if (!a || !b || !c || !d || !e || a % c || c % d || a > (1u << 16) || b > 1024 ||
        e > (1u << 20))
        return -EINVAL;
    *ret = (struct shape){a, b, c, d, e};
    return 0;
}

/* llama.cpp's use_more_bits(): the first and last eighth of the layers and every third in
 * between get the larger type in the _M mixes. */
static bool use_more_bits(uint32_t i, uint32_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i >= n / 8 && (i - n / 8) % 3 == 2);
}

/* ---- Seeded normal numbers: xoshiro256** seeded by splitmix64, Box-Muller ---- */

struct rng {
    uint64_t s[4];
    bool have_spare;
    float spare;
};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(struct rng *r) {
    uint64_t res = rotl(r->s[1] * 5, 7) * 9, t = r->s[1] << 17;
    r->s[2] ^= r->s[0];
    r->s[3] ^= r->s[1];
    r->s[1] ^= r->s[2];
    r->s[0] ^= r->s[3];
    r->s[2] ^= t;
    r->s[3] = rotl(r->s[3], 45);
    return res;
}

/* Each tensor gets its own stream from (seed, name), so a tensor's values do not depend on
 * which tensors come before it. */
static void rng_seed(struct rng *r, uint64_t seed, const char *name) {
    uint64_t x = seed;
    for (const char *p = name; *p; p++)
        x = (x ^ (uint8_t)*p) * 0x100000001B3ull;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
    r->have_spare = false;
    r->spare = 0.0f;
}

/* Uniform in (0, 1]. */
static double rng_unit(struct rng *r) {
    return ((rng_next(r) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

static float rng_normal(struct rng *r) {
    if (r->have_spare) {
        r->have_spare = false;
        return r->spare;
    }
    double u = rng_unit(r), v = rng_unit(r);
    double rad = sqrt(-2.0 * log(u)), th = 6.283185307179586 * v;
    r->spare = (float)(rad * sin(th));
    r->have_spare = true;
    return (float)(rad * cos(th));
}

/* ---- Tensors ---- */

enum fill { FILL_NORMAL, FILL_NORM_WEIGHT };

struct tensor_spec {
    char name[64];
    uint32_t type;
    uint64_t n_cols, n_rows; /* ne0, ne1 (n_rows 1 for vectors) */
    uint32_t n_dims;
    enum fill fill;
};

struct model_plan {
    struct tensor_spec *t;
    size_t n;
};

static void plan_add(struct model_plan *p, const char *name, uint32_t type, uint64_t n_cols,
                     uint64_t n_rows, uint32_t n_dims, enum fill fill) {
    struct tensor_spec *t = &p->t[p->n++];
    (void)snprintf(t->name, sizeof(t->name), "%s", name);
    t->type = type;
    t->n_cols = n_cols;
    t->n_rows = n_rows;
    t->n_dims = n_dims;
    t->fill = fill;
}

static int make_plan(const struct shape *s, uint32_t n_vocab, const struct recipe *rc,
                     struct model_plan *p) {
    const uint64_t hd = s->n_embd / s->n_head, kv_dim = hd * s->n_head_kv;
    char name[64];

    p->t = calloc(3 + 9 * (size_t)s->n_layer, sizeof(*p->t));
    if (!p->t)
        return -ENOMEM;
    p->n = 0;
    plan_add(p, "token_embd.weight", rc->base, s->n_embd, n_vocab, 2, FILL_NORMAL);
    plan_add(p, "output_norm.weight", PL_GGML_TYPE_F32, s->n_embd, 1, 1, FILL_NORM_WEIGHT);
    plan_add(p, "output.weight", rc->output, s->n_embd, n_vocab, 2, FILL_NORMAL);
    for (uint32_t i = 0; i < s->n_layer; i++) {
        uint32_t big = use_more_bits(i, s->n_layer) ? rc->more_bits : rc->base;
#define L(suffix) (snprintf(name, sizeof(name), "blk.%" PRIu32 ".%s", i, suffix), name)
        plan_add(p, L("attn_norm.weight"), PL_GGML_TYPE_F32, s->n_embd, 1, 1, FILL_NORM_WEIGHT);
        plan_add(p, L("attn_q.weight"), rc->base, s->n_embd, s->n_embd, 2, FILL_NORMAL);
        plan_add(p, L("attn_k.weight"), rc->base, s->n_embd, kv_dim, 2, FILL_NORMAL);
        plan_add(p, L("attn_v.weight"), big, s->n_embd, kv_dim, 2, FILL_NORMAL);
        plan_add(p, L("attn_output.weight"), rc->base, s->n_embd, s->n_embd, 2, FILL_NORMAL);
        plan_add(p, L("ffn_norm.weight"), PL_GGML_TYPE_F32, s->n_embd, 1, 1, FILL_NORM_WEIGHT);
        plan_add(p, L("ffn_gate.weight"), rc->base, s->n_embd, s->n_ff, 2, FILL_NORMAL);
        plan_add(p, L("ffn_down.weight"), big, s->n_ff, s->n_embd, 2, FILL_NORMAL);
        plan_add(p, L("ffn_up.weight"), rc->base, s->n_embd, s->n_ff, 2, FILL_NORMAL);
#undef L
    }
    /* Every matrix row must be whole blocks of its type. */
    for (size_t i = 0; i < p->n; i++) {
        const struct pl_type_info *ti = pl_type_info(p->t[i].type);
        if (p->t[i].n_cols % ti->blck_elems) {
            fprintf(stderr,
                    "mkmodel: %s has %" PRIu64 " columns, not a multiple of the %s block "
                    "size %" PRIu32 "\n",
                    p->t[i].name, p->t[i].n_cols, ti->name, ti->blck_elems);
            return -EINVAL;
        }
    }
    return 0;
}

/* Generate one tensor row by row: normals scaled by 1/sqrt(n_cols) (the fan-in), or norm
 * weights uniform in [0.5, 1.5]; quantize each row and stream it out. */
static int write_tensor(struct bench_gguf_writer *w, const struct tensor_spec *t, uint64_t seed,
                        float *row, uint8_t *qrow) {
    const struct pl_quant_kernels *k = pl_quant_kernels(t->type);
    uint64_t row_bytes;
    struct rng rng;
    int r = pl_type_row_bytes(t->type, t->n_cols, &row_bytes);
    if (r < 0)
        return r;
    rng_seed(&rng, seed, t->name);
    const float scale = 1.0f / sqrtf((float)t->n_cols);
    for (uint64_t i = 0; i < t->n_rows; i++) {
        for (uint64_t j = 0; j < t->n_cols; j++)
            row[j] = t->fill == FILL_NORMAL
                         ? rng_normal(&rng) * scale
                         : 0.5f + (float)((rng_next(&rng) >> 11) * (1.0 / 9007199254740992.0));
        const void *out = row;
        if (t->type != PL_GGML_TYPE_F32) {
            k->from_f32(row, qrow, (int64_t)t->n_cols);
            out = qrow;
        }
        if ((r = bench_gguf_writer_write(w, out, (size_t)row_bytes)) < 0)
            return r;
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: picolm-bench mkmodel --shape tinyllama-1.1b|llama2-7b|"
               "N_EMBD,N_LAYER,N_HEAD,N_HEAD_KV,N_FF\n"
               "                            --type Q4_K_M|Q5_K_M|Q4_0|Q8_0|F16|F32|<type>\n"
               "                            --vocab-from FILE.gguf --out FILE [--seed N] "
               "[--ctx N]\n"
               "Writes a LLaMA GGUF of that shape with seeded random weights quantized by the\n"
               "engine's quantizers and every tokenizer.* key copied from --vocab-from.\n");
}

int bench_mkmodel_main(int argc, char **argv) {
    const char *shape_s = NULL, *type_s = NULL, *vocab_s = NULL, *out_s = NULL;
    uint64_t seed = 1;
    uint32_t n_ctx = 2048;
    struct shape sh;
    struct recipe rc;
    struct pl_gguf *voc = NULL;
    struct bench_gguf_writer *w = NULL;
    struct model_plan plan = {0};
    struct pl_gguf_arr tokens;
    float *row = NULL;
    uint8_t *qrow = NULL;
    char err[512] = "";
    int r;

    for (int i = 1; i < argc; i += 2) { /* option, value */
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "mkmodel: option '%.64s' needs a value (or is unknown)\n", a);
            usage(stderr);
            return 2;
        }
        if (!strcmp(a, "--shape"))
            shape_s = v;
        else if (!strcmp(a, "--type"))
            type_s = v;
        else if (!strcmp(a, "--vocab-from"))
            vocab_s = v;
        else if (!strcmp(a, "--out"))
            out_s = v;
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--ctx")) {
            char *end;
            unsigned long x = strtoul(v, &end, 10);
            if (*end || x == 0 || x > (1ul << 24)) {
                fprintf(stderr, "mkmodel: bad --ctx '%.64s'\n", v);
                return 2;
            }
            n_ctx = (uint32_t)x;
        } else {
            fprintf(stderr, "mkmodel: unknown option '%.64s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!shape_s || !type_s || !vocab_s || !out_s) {
        usage(stderr);
        return 2;
    }
    if (parse_shape(shape_s, &sh) < 0) {
        fprintf(stderr,
                "mkmodel: bad --shape '%.64s' (N_HEAD must divide N_EMBD, N_HEAD_KV "
                "divide N_HEAD)\n",
                shape_s);
        return 2;
    }
    r = parse_recipe(type_s, &rc);
    if (r < 0) {
        fprintf(stderr, "mkmodel: %s --type '%.64s'\n",
                r == -EINVAL ? "unknown" : "no quantizer/dot product for", type_s);
        return 2;
    }

    r = pl_gguf_open(vocab_s, &voc, err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "mkmodel: %s: %s\n", vocab_s, err[0] ? err : pl_strerror(r));
        return 1;
    }
    r = pl_gguf_get_arr(voc, "tokenizer.ggml.tokens", PL_GGUF_TYPE_STRING, &tokens);
    if (r < 0 || tokens.n == 0 || tokens.n > (1u << 24)) {
        fprintf(stderr, "mkmodel: %s has no usable tokenizer.ggml.tokens\n", vocab_s);
        r = -PL_ERR_FORMAT;
        goto out;
    }
    const uint32_t n_vocab = (uint32_t)tokens.n;

    if ((r = make_plan(&sh, n_vocab, &rc, &plan)) < 0)
        goto out;
    if ((r = bench_gguf_writer_new(32, &w)) < 0)
        goto out;

    /* Hyperparameters, as llama.cpp's converter names them. */
    char name[128];
    (void)snprintf(name, sizeof(name), "random-%s-%s", shape_s, rc.name);
    const uint32_t head_dim = sh.n_embd / sh.n_head;
    if ((r = bench_gguf_writer_add_str(w, "general.architecture", "llama")) < 0 ||
        (r = bench_gguf_writer_add_str(w, "general.name", name)) < 0 ||
        (r = bench_gguf_writer_add_u32(w, "general.file_type", rc.file_type)) < 0 ||
        (r = bench_gguf_writer_add_u32(w, "llama.vocab_size", n_vocab)) < 0 ||
        (r = bench_gguf_writer_add_u32(w, "llama.context_length", n_ctx)) < 0 ||
        (r = bench_gguf_writer_add_u32(w, "llama.embedding_length", sh.n_embd)) < 0 ||
        (r = bench_gguf_writer_add_u32(w, "llama.block_count", sh.n_layer)) < 0 ||
        (r = bench_gguf_writer_add_u32(w, "llama.feed_forward_length", sh.n_ff)) < 0 ||
        (r = bench_gguf_writer_add_u32(w, "llama.rope.dimension_count", head_dim)) < 0 ||
        (r = bench_gguf_writer_add_u32(w, "llama.attention.head_count", sh.n_head)) < 0 ||
        (r = bench_gguf_writer_add_u32(w, "llama.attention.head_count_kv", sh.n_head_kv)) < 0 ||
        (r = bench_gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f)) < 0 ||
        (r = bench_gguf_writer_add_f32(w, "llama.rope.freq_base", 10000.0f)) < 0)
        goto out;
    /* The tokenizer: every tokenizer.* key, verbatim. */
    for (uint64_t i = 0; i < pl_gguf_n_kv(voc); i++) {
        const struct pl_gguf_kv *kv = pl_gguf_kv_at(voc, i);
        if (kv->key.len > 10 && !memcmp(kv->key.ptr, "tokenizer.", 10) &&
            (r = bench_gguf_writer_copy_kv(w, kv)) < 0) {
            fprintf(stderr, "mkmodel: copying '%.*s': %s\n", (int)PL_MIN(kv->key.len, 64u),
                    kv->key.ptr, pl_strerror(r));
            goto out;
        }
    }
    uint64_t max_cols = 0, max_row_bytes = 0, total = 0;
    for (size_t i = 0; i < plan.n; i++) {
        const struct tensor_spec *t = &plan.t[i];
        uint64_t ne[2] = {t->n_cols, t->n_rows}, rb;
        if ((r = bench_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne)) < 0 ||
            (r = pl_type_row_bytes(t->type, t->n_cols, &rb)) < 0)
            goto out;
        max_cols = PL_MAX(max_cols, t->n_cols);
        max_row_bytes = PL_MAX(max_row_bytes, rb);
        total += rb * t->n_rows;
    }
    row = malloc(max_cols * sizeof(float));
    qrow = malloc(max_row_bytes);
    if (!row || !qrow) {
        r = -ENOMEM;
        goto out;
    }
    if ((r = bench_gguf_writer_open(w, out_s)) < 0) {
        fprintf(stderr, "mkmodel: %s: %s\n", out_s, pl_strerror(r));
        goto out;
    }
    fprintf(stderr, "mkmodel: %s: %zu tensors, %.1f MiB of weights (%s), vocab %" PRIu32 "\n",
            out_s, plan.n, (double)total / (1 << 20), rc.name, n_vocab);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < plan.n; i++)
        if ((r = write_tensor(w, &plan.t[i], seed, row, qrow)) < 0) {
            fprintf(stderr, "mkmodel: writing %s: %s\n", plan.t[i].name, pl_strerror(r));
            goto out;
        }
    if ((r = bench_gguf_writer_close(w)) < 0) {
        fprintf(stderr, "mkmodel: closing %s: %s\n", out_s, pl_strerror(r));
        goto out;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "mkmodel: done in %.1f s\n",
            (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
out:
    free(row);
    free(qrow);
    free(plan.t);
    bench_gguf_writer_free(w);
    pl_gguf_close(voc);
    return r < 0 ? 1 : 0;
}
