/* SPDX-License-Identifier: MIT */
/* Tests of the LLaMA model loader (engine/src/model.c): hparams and tensors of every shared
 * model (each one also runs its prompt 0 against llama.cpp's logits), and clean refusals of
 * broken files made by editing bytes of a copy of stories260K in memory: wrong
 * architecture, bad hparams, missing or mis-shaped tensors, unusable types, truncation.
 * Needs $PICOLM_TEST_DATA/models (exit 77 when missing). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "matmul.h"
#include "model_impl.h"
#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/engine_tokenizer.h"
#include "pl/engine_types.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

static char g_dir[4096];
static uint8_t *g_img; /* stories260K.gguf */
static size_t g_img_len;

static void *slurp(const char *path, size_t *ret_len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = (len + 65536 + 1) * 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        size_t got = fread(buf + len, 1, 65536, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[len] = 0;
    *ret_len = len;
    return buf;
}

/* ---- Every shared model loads and reproduces llama.cpp's logits for prompt 0 ---- */

struct model_case {
    const char *name;
    uint32_t n_vocab;
    bool tied;
    double tol; /* max |ours - llama.cpp| / row max |logit| */
};

/* Tolerances: F32/F16 files agree to float rounding; quantized files differ by about 2% of
 * the row max in any implementation that is not bit-for-bit llama.cpp (models README). */
#define TOL_FLOAT 2e-3
#define TOL_QUANT 4e-2

static const struct model_case k_models[] = {
    {"stories260K", 512, false, TOL_FLOAT},
    {"stories260K-F16", 512, false, TOL_FLOAT},
    {"tiny-llama-spm-Q4_K_M", 32000, false, TOL_QUANT},
    {"tiny-llama-spm-Q5_K_M", 32000, false, TOL_QUANT},
    {"tiny-llama-spm-Q3_K_M", 32000, false, TOL_QUANT},
    {"tiny-llama-spm-Q2_K", 32000, false, TOL_QUANT},
    {"tiny-llama-spm-tied-Q8_0", 32000, true, TOL_QUANT},
    {"tiny-llama-gpt2-Q4_0", 50257, false, TOL_QUANT},
};

static uint32_t json_numbers(const char **at, const char *key, double *out, uint32_t cap) {
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\": [", key);
    const char *p = strstr(*at, pat);
    assert_non_null(p);
    p += strlen(pat);
    uint32_t n = 0;
    while (*p && *p != ']') {
        char *end;
        double v = strtod(p, &end);
        if (end == p) {
            p++;
            continue;
        }
        assert_true(n < cap);
        out[n++] = v;
        p = end;
    }
    *at = p;
    return n;
}

static void run_model_case(const struct model_case *mc) {
    char path[4200];
    size_t json_len, bin_len;
    char err[512];
    struct pl_model *m = NULL;
    struct pl_model_opts mo = {.n_threads = 2};

    snprintf(path, sizeof(path), "%s/%s.gguf", g_dir, mc->name);
    int r = pl_model_load(path, &mo, &m, err, sizeof(err));
    if (r == -ENOENT) {
        print_message("%s: missing, skipped\n", mc->name);
        return;
    }
    if (r < 0)
        fail_msg("%s: %d %s", mc->name, r, err);
    const struct pl_model_hparams *hp = pl_model_hparams(m);
    assert_string_equal(hp->arch, "llama");
    assert_int_equal(hp->n_vocab, mc->n_vocab);
    assert_int_equal(hp->tied_output, mc->tied);
    assert_false(hp->has_qkv_bias);
    assert_true(hp->n_params > 0 && hp->weight_bytes > 0);
    assert_int_equal(pl_tokenizer_n_vocab(pl_model_tokenizer(m)), mc->n_vocab);

    snprintf(path, sizeof(path), "%s/%s.ref.json", g_dir, mc->name);
    char *json = slurp(path, &json_len);
    snprintf(path, sizeof(path), "%s/%s.logits.bin", g_dir, mc->name);
    float *bin = slurp(path, &bin_len);
    assert_non_null(json);
    assert_non_null(bin);
    assert_true(bin_len >= (size_t)3 * hp->n_vocab * sizeof(float));

    double ids[512], lpos[3];
    const char *at = strstr(json, "\"prompts\"");
    assert_non_null(at);
    uint32_t n = json_numbers(&at, "token_ids", ids, 512);
    assert_int_equal(json_numbers(&at, "logit_positions", lpos, 3), 3);

    struct pl_ctx_opts co = {.n_ctx = 512, .n_batch = 64, .kv_type = PL_KV_F32};
    struct pl_ctx *c = NULL;
    assert_int_equal(pl_ctx_new(m, &co, &c), 0);
    int32_t tok[512], pos[512], seq[512];
    bool lg[512];
    for (uint32_t i = 0; i < n; i++) {
        tok[i] = (int32_t)ids[i], pos[i] = (int32_t)i, seq[i] = 0;
        lg[i] = i == (uint32_t)lpos[0] || i == (uint32_t)lpos[1] || i == (uint32_t)lpos[2];
    }
    const uint32_t nv = hp->n_vocab;
    float *out = calloc((size_t)3 * nv, sizeof(float));
    assert_non_null(out);
    uint32_t k = 0;
    for (uint32_t i0 = 0; i0 < n; i0 += 64) {
        uint32_t cnt = n - i0 < 64 ? n - i0 : 64, wanted = 0;
        for (uint32_t i = 0; i < cnt; i++)
            wanted += lg[i0 + i];
        struct pl_batch b = {
            .n = cnt, .token = tok + i0, .pos = pos + i0, .seq = seq + i0, .logits = lg + i0};
        assert_int_equal(pl_ctx_decode(c, &b, out + (size_t)k * nv), 0);
        k += wanted;
    }
    assert_int_equal(k, 3);

    double worst = 0, worst_abs = 0;
    for (uint32_t s = 0; s < 3; s++) {
        const float *got = out + (size_t)s * nv, *want = bin + (size_t)s * nv;
        double md = 0, mx = 0;
        for (uint32_t i = 0; i < nv; i++) {
            assert_true(isfinite(got[i]));
            md = fmax(md, fabs((double)got[i] - want[i]));
            mx = fmax(mx, fabs((double)want[i]));
        }
        worst = fmax(worst, md / mx);
        worst_abs = fmax(worst_abs, md);
    }
    print_message("%-26s max abs diff %-10.4g rel (of row max |logit|) %.3g\n", mc->name, worst_abs,
                  worst);
    assert_true(worst < mc->tol);

    free(out);
    free(json);
    free(bin);
    pl_ctx_free(c);
    pl_model_free(m);
}

static void test_model_every_shared_model_loads_and_runs(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(k_models) / sizeof(k_models[0]); i++)
        run_model_case(&k_models[i]);
}

/* ---- Broken files, made by editing a copy of stories260K ---- */

/* Offset of the value of metadata key `key` (just after its u32 type), or fail. The key is
 * matched with its u64 length prefix so "head_count" does not find "head_count_kv". */
static size_t kv_value_off(const uint8_t *img, size_t len, const char *key) {
    size_t kl = strlen(key);
    for (size_t i = 8; i + kl + 4 <= len; i++) {
        uint64_t l;
        if (memcmp(img + i, key, kl) != 0)
            continue;
        memcpy(&l, img + i - 8, 8);
        if (l == kl)
            return i + kl + 4;
    }
    fail_msg("key %s not found", key);
    return 0;
}

/* Offset of tensor info `name` (the name's first byte). */
static size_t tensor_info_off(const uint8_t *img, size_t len, const char *name) {
    size_t kl = strlen(name);
    for (size_t i = 8; i + kl <= len; i++) {
        uint64_t l;
        if (memcmp(img + i, name, kl) != 0)
            continue;
        memcpy(&l, img + i - 8, 8);
        if (l == kl)
            return i;
    }
    fail_msg("tensor %s not found", name);
    return 0;
}

static uint8_t *copy_img(void) {
    uint8_t *c = malloc(g_img_len);
    assert_non_null(c);
    memcpy(c, g_img, g_img_len);
    return c;
}

/* Load img and expect error want with err containing needle. */
static void expect_fail(const uint8_t *img, size_t len, int want, const char *needle) {
    struct pl_model *m = (struct pl_model *)&m;
    char err[512] = "";
    int r = pl_model_load_mem(img, len, NULL, &m, err, sizeof(err));
    if (r != want || (needle && !strstr(err, needle)))
        fail_msg("want %d '%s', got %d '%s'", want, needle ? needle : "", r, err);
    assert_ptr_equal(m, (struct pl_model *)&m); /* *ret untouched */
}

static void set_u32(uint8_t *img, const char *key, uint32_t v) {
    memcpy(img + kv_value_off(img, g_img_len, key), &v, 4);
}

static void test_model_loads_pristine_image(void **state) {
    (void)state;
    struct pl_model *m = NULL;
    char err[256];
    assert_int_equal(pl_model_load_mem(g_img, g_img_len, NULL, &m, err, sizeof(err)), 0);
    const struct pl_model_hparams *hp = pl_model_hparams(m);
    assert_int_equal(hp->n_embd, 64);
    assert_int_equal(hp->n_layer, 5);
    assert_int_equal(hp->n_head, 8);
    assert_int_equal(hp->n_head_kv, 4);
    assert_int_equal(hp->head_dim, 8);
    assert_int_equal(hp->n_rot, 8);
    assert_int_equal(hp->n_ff, 172);
    assert_int_equal(hp->n_ctx_train, 2048);
    assert_true(hp->rope_freq_base == 10000.0f);
    assert_true(hp->rope_freq_scale == 1.0f);
    assert_true(fabsf(hp->rms_eps - 1e-5f) < 1e-9f);
    assert_false(hp->tied_output);
    assert_non_null(pl_model_gguf(m));
    pl_model_free(m);
    pl_model_free(NULL);
}

static void test_model_rejects_other_architecture(void **state) {
    (void)state;
    uint8_t *img = copy_img();
    size_t off = kv_value_off(img, g_img_len, "general.architecture");
    memcpy(img + off + 8, "gemma", 5); /* same length as "llama" */
    expect_fail(img, g_img_len, -PL_ERR_UNSUPPORTED, "architecture 'gemma'");
    free(img);
}

static void test_model_rejects_bad_hparams(void **state) {
    (void)state;
    static const struct {
        const char *key;
        uint32_t v;
        int err;
        const char *needle;
    } cases[] = {
        {"llama.embedding_length", 0, -PL_ERR_FORMAT, "embedding_length = 0"},
        {"llama.embedding_length", 60, -PL_ERR_FORMAT, "not a multiple of head_count"},
        {"llama.embedding_length", 1u << 20, -PL_ERR_FORMAT, "out of range"},
        {"llama.block_count", 0, -PL_ERR_FORMAT, "block_count"},
        {"llama.block_count", 6, -PL_ERR_FORMAT, "missing tensor 'blk.5.attn_norm.weight'"},
        {"llama.attention.head_count", 0, -PL_ERR_FORMAT, "head_count"},
        {"llama.attention.head_count_kv", 3, -PL_ERR_FORMAT, "not a multiple of head_count_kv"},
        {"llama.attention.head_count_kv", 9, -PL_ERR_FORMAT, "head_count_kv"},
        {"llama.attention.head_count_kv", 8, -PL_ERR_FORMAT, "blk.0.attn_k.weight"},
        {"llama.feed_forward_length", 171, -PL_ERR_FORMAT, "blk.0.ffn_gate.weight"},
        {"llama.context_length", 0, -PL_ERR_FORMAT, "context_length"},
        {"llama.rope.dimension_count", 7, -PL_ERR_FORMAT, "rope.dimension_count"},
        {"llama.rope.dimension_count", 16, -PL_ERR_FORMAT, "rope.dimension_count"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t *img = copy_img();
        set_u32(img, cases[i].key, cases[i].v);
        expect_fail(img, g_img_len, cases[i].err, cases[i].needle);
        free(img);
    }
}

static void test_model_rejects_bad_float_hparams(void **state) {
    (void)state;
    uint8_t *img = copy_img();
    float nan = NAN, neg = -1.0f;
    size_t off = kv_value_off(img, g_img_len, "llama.attention.layer_norm_rms_epsilon");
    memcpy(img + off, &nan, 4);
    expect_fail(img, g_img_len, -PL_ERR_FORMAT, "not finite");
    memcpy(img + off, &neg, 4);
    expect_fail(img, g_img_len, -PL_ERR_FORMAT, "layer_norm_rms_epsilon");
    free(img);
}

static void test_model_rejects_missing_and_misshaped_tensors(void **state) {
    (void)state;
    uint8_t *img = copy_img();
    size_t off = tensor_info_off(img, g_img_len, "blk.3.attn_q.weight");
    img[off + 6] = 'Q'; /* blk.3.attn_Q.weight */
    expect_fail(img, g_img_len, -PL_ERR_FORMAT, "missing tensor 'blk.3.attn_q.weight'");
    free(img);

    /* ffn_gate [64, 172] written as [172, 64]: same bytes, wrong shape. */
    img = copy_img();
    off =
        tensor_info_off(img, g_img_len, "blk.2.ffn_gate.weight") + strlen("blk.2.ffn_gate.weight");
    uint32_t n_dims;
    uint64_t ne[2];
    memcpy(&n_dims, img + off, 4);
    assert_int_equal(n_dims, 2);
    memcpy(ne, img + off + 4, 16);
    assert_true(ne[0] == 64 && ne[1] == 172);
    uint64_t swapped[2] = {ne[1], ne[0]};
    memcpy(img + off + 4, swapped, 16);
    expect_fail(img, g_img_len, -PL_ERR_FORMAT, "'blk.2.ffn_gate.weight' has shape [172, 64");
    free(img);

    /* A norm weight typed I32 (same size as F32): no kernels for it. */
    img = copy_img();
    off =
        tensor_info_off(img, g_img_len, "blk.1.ffn_norm.weight") + strlen("blk.1.ffn_norm.weight");
    memcpy(&n_dims, img + off, 4);
    uint32_t i32 = PL_GGML_TYPE_I32;
    memcpy(img + off + 4 + 8 * n_dims, &i32, 4);
    expect_fail(img, g_img_len, -PL_ERR_UNSUPPORTED, "'blk.1.ffn_norm.weight' has type I32");
    free(img);
}

/* Without output.weight the embedding matrix is the output projection; in stories260K the
 * two are equal, so the logits must not change. */
static void test_model_ties_output_to_embeddings(void **state) {
    (void)state;
    uint8_t *img = copy_img();
    size_t off = tensor_info_off(img, g_img_len, "output.weight");
    img[off] = 'X'; /* Xutput.weight: ignored */
    struct pl_model *a = NULL, *b = NULL;
    char err[256];
    assert_int_equal(pl_model_load_mem(g_img, g_img_len, NULL, &a, err, sizeof(err)), 0);
    assert_int_equal(pl_model_load_mem(img, g_img_len, NULL, &b, err, sizeof(err)), 0);
    assert_false(pl_model_hparams(a)->tied_output);
    assert_true(pl_model_hparams(b)->tied_output);

    struct pl_ctx *ca = NULL, *cb = NULL;
    struct pl_ctx_opts co = {.n_ctx = 16};
    assert_int_equal(pl_ctx_new(a, &co, &ca), 0);
    assert_int_equal(pl_ctx_new(b, &co, &cb), 0);
    float la[512], lb[512];
    for (int32_t p = 0; p < 4; p++) {
        int32_t tok = 1 + 37 * p, seq = 0;
        struct pl_batch bt = {.n = 1, .token = &tok, .pos = &p, .seq = &seq};
        assert_int_equal(pl_ctx_decode(ca, &bt, la), 0);
        assert_int_equal(pl_ctx_decode(cb, &bt, lb), 0);
        assert_memory_equal(la, lb, sizeof(la));
    }
    pl_ctx_free(ca);
    pl_ctx_free(cb);
    pl_model_free(a);
    pl_model_free(b);
    free(img);
}

/* Every truncation fails cleanly (and never crashes, also under ASan). */
static void test_model_rejects_truncated_files(void **state) {
    (void)state;
    for (size_t cut = 0; cut < g_img_len; cut += cut < 4096 ? 97 : g_img_len / 37) {
        struct pl_model *m = NULL;
        char err[256];
        int r = pl_model_load_mem(g_img, cut, NULL, &m, err, sizeof(err));
        if (r == 0)
            fail_msg("truncated at %zu of %zu bytes: loaded", cut, g_img_len);
        assert_true(r == -PL_ERR_FORMAT || r == -EINVAL);
        assert_true(err[0] != '\0');
    }
}

static void test_model_rejects_bad_arguments(void **state) {
    (void)state;
    struct pl_model *m = NULL;
    char err[256];
    struct pl_model_opts o = {.n_threads = 100000};
    assert_int_equal(pl_model_load(NULL, NULL, &m, err, sizeof(err)), -EINVAL);
    assert_int_equal(pl_model_load_mem(g_img, g_img_len, &o, &m, err, sizeof(err)), -EINVAL);
    assert_int_equal(pl_model_load("/nonexistent/x.gguf", NULL, &m, NULL, 0), -ENOENT);
}

/* ---- Weight placement (model_relocate.c) ---- */

/* Logits of the last of 6 fixed tokens, greedy-free: the whole forward pass reads every
 * weight, so any weight moved wrongly changes them. */
static void six_token_logits(struct pl_model *m, float *out) {
    struct pl_ctx_opts co = {.n_ctx = 64, .n_batch = 8, .kv_type = PL_KV_F32};
    struct pl_ctx *c = NULL;
    assert_int_equal(pl_ctx_new(m, &co, &c), 0);
    int32_t tok[6] = {1, 365, 1041, 263, 931, 29892}, pos[6], seq[6] = {0};
    bool lg[6] = {false, false, false, false, false, true};
    for (int i = 0; i < 6; i++)
        pos[i] = i, tok[i] %= (int32_t)pl_model_hparams(m)->n_vocab;
    struct pl_batch b = {.n = 6, .token = tok, .pos = pos, .seq = seq, .logits = lg};
    assert_int_equal(pl_ctx_decode(c, &b, out), 0);
    pl_ctx_free(c);
}

/* Logits of a 12-token prompt (tiled products) and of two single-token steps after it
 * (decode vectors): out[3][n_vocab]. */
static void prompt_and_steps_logits(struct pl_model *m, float *out) {
    const uint32_t nv = pl_model_hparams(m)->n_vocab;
    struct pl_ctx_opts co = {.n_ctx = 64, .n_batch = 16};
    struct pl_ctx *c = NULL;
    assert_int_equal(pl_ctx_new(m, &co, &c), 0);
    int32_t tok[12], pos[12], seq[12] = {0};
    bool lg[12] = {false};
    for (int i = 0; i < 12; i++)
        tok[i] = (int32_t)((1u + 7919u * (unsigned)i) % nv), pos[i] = i;
    lg[11] = true;
    struct pl_batch b = {.n = 12, .token = tok, .pos = pos, .seq = seq, .logits = lg};
    assert_int_equal(pl_ctx_decode(c, &b, out), 0);
    for (int k = 1; k <= 2; k++) {
        int32_t t = (int32_t)((13u * (unsigned)k) % nv), p = 11 + k, s0 = 0;
        bool l = true;
        struct pl_batch one = {.n = 1, .token = &t, .pos = &p, .seq = &s0, .logits = &l};
        assert_int_equal(pl_ctx_decode(c, &one, out + (size_t)k * nv), 0);
    }
    pl_ctx_free(c);
}

/* 1 if w's tiled kernel on this CPU has a layout of its own (w is repacked at placing). */
static uint32_t packs(const struct pl_weight *w) {
    const struct pl_mm_tile_kernel *k = pl_mm_tile_kernel(w->type, w->n_cols);
    return k && k->packed;
}

/* w's bytes into *total, and into *on too where its data starts a multiple of 64 bytes from
 * `from`. */
static void count_line_aligned(const struct pl_weight *w, const void *from, uint64_t *on,
                               uint64_t *total) {
    if (!w->data)
        return;
    const uint64_t b = (uint64_t)w->n_rows * w->row_bytes;
    *total += b;
    *on += ((uintptr_t)w->data - (uintptr_t)from) % 64 ? 0 : b;
}

/* Bytes of m's streamed matrices (the output and the layers') whose data starts a multiple
 * of 64 bytes from `from` (NULL: on a 64-byte boundary); all of them into *ret_total. */
static uint64_t line_aligned_bytes(const struct pl_model *m, const void *from,
                                   uint64_t *ret_total) {
    uint64_t on = 0, total = 0;
    count_line_aligned(&m->output, from, &on, &total);
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const struct pl_weight *ws[PL_LAYER_N_MATS] = {PL_LAYER_MATS(&m->layers[l])};
        for (size_t j = 0; j < PL_LAYER_N_MATS; j++)
            count_line_aligned(ws[j], from, &on, &total);
    }
    *ret_total = total;
    return on;
}

/* Placed weights are repacked for this CPU's tiled kernels where they have a layout of their
 * own (Q4_0, Q8_0 with AVX-512; Q6_K with GFNI and VBMI too, and Q4_K on AMD's CPUs or with
 * PICOLM_REPACK=all, not under AMX): the logits stay bit-identical to the file's weights, for
 * a prompt and for decode steps, with separate and with tied output weights. */
static void test_model_packed_weights_keep_logits(void **state) {
    (void)state;
    static const char *const names[] = {
        "tiny-llama-gpt2-Q4_0.gguf", "tiny-llama-spm-tied-Q8_0.gguf", "tiny-llama-spm-Q4_K_M.gguf"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char path[4200], err[256];
        snprintf(path, sizeof(path), "%s/%s", g_dir, names[i]);
        struct pl_model *file = NULL, *placed = NULL;
        assert_int_equal(pl_model_load(path, NULL, &file, err, sizeof(err)), 0);
        assert_int_equal(pl_model_load(path, NULL, &placed, err, sizeof(err)), 0);
        struct pl_weights_info wi;
        assert_int_equal(pl_model_place_weights(placed, PL_WEIGHTS_THP, &wi), 0);
        assert_non_null(wi.base);
        /* every layer matrix (rows of 256 or 512 elements) of a type with a layout of its
         * own, and a separate output of such a type; never the token embeddings, tied output
         * or not */
        uint32_t n_mat = placed->hp.tied_output ? 0 : packs(&placed->output);
        for (uint32_t l = 0; l < placed->hp.n_layer; l++) {
            const struct pl_weight *ws[PL_LAYER_N_MATS] = {PL_LAYER_MATS(&placed->layers[l])};
            for (size_t j = 0; j < PL_LAYER_N_MATS; j++) {
                n_mat += packs(ws[j]);
                assert_true(ws[j]->packed == (packs(ws[j]) == 1));
            }
        }
        assert_int_equal(wi.packed, n_mat);
        assert_false(placed->tok_embd.packed);
        /* The copy's shift puts at least half the matrix bytes on 64-byte boundaries, and no
         * fewer than the file's offsets did. */
        uint64_t total, file_total;
        const uint64_t on = line_aligned_bytes(placed, NULL, &total);
        const uint8_t *sec = (const uint8_t *)pl_gguf_base(pl_model_gguf(file)) +
                             pl_gguf_data_offset(pl_model_gguf(file));
        /* the same by the offsets in the file */
        const uint64_t sec_on = line_aligned_bytes(file, sec, &file_total);
        assert_int_equal(total, file_total);
        assert_true(2 * on >= total);
        assert_true(on >= sec_on);
        if (wi.packed)
            assert_non_null(strstr(wi.reason, "repacked"));
        const uint32_t nv = pl_model_hparams(file)->n_vocab;
        float *want = calloc(3 * (size_t)nv, sizeof(float));
        float *got = calloc(3 * (size_t)nv, sizeof(float));
        assert_non_null(want);
        assert_non_null(got);
        prompt_and_steps_logits(file, want);
        prompt_and_steps_logits(placed, got);
        assert_memory_equal(got, want, 3 * (size_t)nv * sizeof(float));
        if (placed->layers[0].wq.packed && placed->layers[1].w_up.packed) {
            /* Packed and unpacked matrices in one group that shares its activations (Q, K,
             * V) and in the FFN's fused gate/up pair: each product still runs its own
             * weight's kernel (as with a matrix left unpacked for want of memory). */
            placed->layers[0].wk = file->layers[0].wk;
            placed->layers[1].w_up = file->layers[1].w_up;
            assert_false(placed->layers[0].wk.packed);
            assert_true(placed->layers[0].wq.packed);
            prompt_and_steps_logits(placed, got);
            assert_memory_equal(got, want, 3 * (size_t)nv * sizeof(float));
        }
        free(want);
        free(got);
        pl_model_free(file);
        pl_model_free(placed);
    }
}

/* A file whose tensors all lie 32 bytes past a 64-byte boundary of its data section (the
 * Q4_K_M file with each tensor moved there, as a writer that aligns to GGUF's default 32 bytes
 * leaves a file whose tensor sizes are odd multiples of 32): the placed copy starts 32 bytes
 * into its mapping, so every matrix lies on a line again, and the logits stay the file's. */
static void test_model_place_weights_realigns(void **state) {
    (void)state;
    char path[4200], err[256];
    snprintf(path, sizeof(path), "%s/tiny-llama-spm-Q4_K_M.gguf", g_dir);
    struct pl_model *file = NULL, *moved = NULL;
    assert_int_equal(pl_model_load(path, NULL, &file, err, sizeof(err)), 0);
    size_t len = 0;
    uint8_t *img = slurp(path, &len);
    assert_non_null(img);
    const struct pl_gguf *g = pl_model_gguf(file);
    const size_t data_off = (size_t)pl_gguf_data_offset(g);
    const uint64_t n_t = pl_gguf_n_tensors(g);
    const size_t cap = len + 64 * (size_t)n_t + 64;
    uint8_t *img2 = NULL;
    assert_int_equal(posix_memalign((void **)&img2, 64, cap), 0);
    memset(img2, 0, cap);
    memcpy(img2, img, data_off);
    uint64_t end = 0; /* of the new data section */
    for (uint64_t i = 0; i < n_t; i++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        const uint64_t o = PL_ALIGN_UP(end, 64) + 32;
        assert_true(data_off + o + t->n_bytes <= cap);
        memcpy(img2 + data_off + o, img + t->offset, t->n_bytes);
        end = o + t->n_bytes;
        /* the tensor's info: name (u64 length, bytes), n_dims (u32), dims (u64 each), type
         * (u32), offset (u64, from the data section) */
        const uint64_t nl = strlen(t->name);
        uint8_t key[8 + PL_GGUF_MAX_NAME_LEN];
        memcpy(key, &nl, 8);
        memcpy(key + 8, t->name, nl);
        const uint8_t *at = memmem(img2, data_off, key, 8 + nl);
        assert_non_null(at);
        uint8_t *op = img2 + (at - img2) + 8 + nl + 4 + 8 * (size_t)t->n_dims + 4;
        uint64_t was;
        memcpy(&was, op, 8);
        assert_int_equal(was + data_off, t->offset);
        memcpy(op, &o, 8);
    }
    assert_int_equal(pl_model_load_mem(img2, data_off + end, NULL, &moved, err, sizeof(err)), 0);
    const uint8_t *sec = img2 + data_off;
    uint64_t total, total_file;
    assert_int_equal(line_aligned_bytes(moved, sec, &total), 0); /* all of them off a line */
    (void)line_aligned_bytes(file, NULL, &total_file);
    assert_int_equal(total, total_file);
    struct pl_weights_info wi;
    assert_int_equal(pl_model_place_weights(moved, PL_WEIGHTS_THP, &wi), 0);
    assert_non_null(wi.base);
    assert_int_equal(wi.shift, 32);
    uint64_t total_placed;
    assert_int_equal(line_aligned_bytes(moved, NULL, &total_placed), total);
    assert_int_equal(total_placed, total);
    const uint32_t nv = pl_model_hparams(file)->n_vocab;
    float *want = calloc(3 * (size_t)nv, sizeof(float));
    float *got = calloc(3 * (size_t)nv, sizeof(float));
    assert_non_null(want);
    assert_non_null(got);
    prompt_and_steps_logits(file, want);
    prompt_and_steps_logits(moved, got);
    assert_memory_equal(got, want, 3 * (size_t)nv * sizeof(float));
    free(want);
    free(got);
    pl_model_free(moved);
    pl_model_free(file);
    free(img2);
    free(img);
}

/* Resident bytes of the mapping that contains addr, from /proc/self/smaps. */
static uint64_t mapping_rss(const void *addr) {
    FILE *f = fopen("/proc/self/smaps", "re");
    assert_non_null(f);
    char line[512];
    bool in = false;
    uint64_t rss = 0;
    unsigned long long kb;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
            continue;
        }
        if (in && sscanf(line, "Rss: %llu kB", &kb) == 1)
            rss = kb << 10;
    }
    fclose(f);
    return rss;
}

static void test_model_place_weights_keeps_results(void **state) {
    (void)state;
    char path[4200];
    snprintf(path, sizeof(path), "%s/stories260K.gguf", g_dir);
    struct pl_model *ref = NULL;
    char err[256];
    assert_int_equal(pl_model_load(path, NULL, &ref, err, sizeof(err)), 0);
    const uint32_t nv = pl_model_hparams(ref)->n_vocab;
    float *want = calloc(nv, sizeof(float)), *got = calloc(nv, sizeof(float));
    assert_non_null(want);
    assert_non_null(got);
    six_token_logits(ref, want);

    static const enum pl_weights_mode modes[] = {PL_WEIGHTS_FILE, PL_WEIGHTS_THP, PL_WEIGHTS_AUTO};
    for (size_t k = 0; k < 2 * sizeof(modes) / sizeof(modes[0]); k++) {
        const bool from_file = k % 2 == 0;
        const enum pl_weights_mode mode = modes[k / 2];
        struct pl_model *m = NULL;
        struct pl_weights_info wi;
        if (from_file)
            assert_int_equal(pl_model_load(path, NULL, &m, err, sizeof(err)), 0);
        else
            assert_int_equal(pl_model_load_mem(g_img, g_img_len, NULL, &m, err, sizeof(err)), 0);
        const struct pl_gguf *g = pl_model_gguf(m);
        assert_true(pl_gguf_is_mapped(g) == from_file);
        const uint8_t *sec = (const uint8_t *)pl_gguf_base(g) + pl_gguf_data_offset(g);
        memset(&wi, 0xa5, sizeof(wi));
        assert_int_equal(pl_model_place_weights(m, mode, &wi), 0);
        assert_int_equal(wi.weight_bytes, pl_model_relocate_bytes(m));
        assert_true(wi.weight_bytes > 0);
        assert_true(strlen(wi.reason) > 0 && strlen(wi.reason) < sizeof(wi.reason));
        if (mode == PL_WEIGHTS_FILE) {
            assert_string_equal(wi.backing, "file");
            assert_null(wi.base);
            assert_int_equal(wi.bytes, 0);
        } else {
            /* This test may not get huge pages, but anonymous memory it always gets. */
            assert_true(!strcmp(wi.backing, "hugetlb") || !strcmp(wi.backing, "thp") ||
                        !strcmp(wi.backing, "anonymous"));
            if (mode == PL_WEIGHTS_THP)
                assert_string_not_equal(wi.backing, "hugetlb");
            assert_non_null(wi.base);
            assert_int_equal((uintptr_t)wi.base % (2u << 20), 0);
            assert_int_equal(wi.bytes % (2u << 20), 0);
            assert_true(wi.bytes >= wi.weight_bytes);
            if (from_file) /* the copied file pages left this process (before we reread) */
                assert_in_range(mapping_rss(sec), 0, pl_gguf_data_offset(g) + 2 * 4096);
            assert_in_range(wi.shift, 0, 63);
            assert_int_equal(wi.shift % pl_gguf_alignment(g), 0);
            assert_true(wi.bytes >= wi.weight_bytes + wi.shift);
            assert_memory_equal((const uint8_t *)wi.base + wi.shift, sec, wi.weight_bytes);
        }
        /* Once only; bad arguments. */
        assert_int_equal(pl_model_place_weights(m, PL_WEIGHTS_THP, &wi),
                         mode == PL_WEIGHTS_FILE ? 0 : -EINVAL);
        six_token_logits(m, got);
        assert_memory_equal(got, want, (size_t)nv * sizeof(float));
        pl_model_free(m);
    }
    struct pl_weights_info wi;
    assert_int_equal(pl_model_place_weights(NULL, PL_WEIGHTS_AUTO, &wi), -EINVAL);
    assert_int_equal(pl_model_place_weights(ref, PL_WEIGHTS_AUTO, NULL), -EINVAL);
    assert_int_equal(pl_model_place_weights(ref, (enum pl_weights_mode)7, &wi), -EINVAL);
    assert_false(pl_gguf_is_mapped(NULL));
    enum pl_weights_mode wm;
    assert_int_equal(pl_weights_mode_parse("auto", &wm), 0);
    assert_int_equal(wm, PL_WEIGHTS_AUTO);
    assert_int_equal(pl_weights_mode_parse("thp", &wm), 0);
    assert_int_equal(wm, PL_WEIGHTS_THP);
    assert_int_equal(pl_weights_mode_parse("file", &wm), 0);
    assert_int_equal(wm, PL_WEIGHTS_FILE);
    assert_int_equal(pl_weights_mode_parse("huge", &wm), -EINVAL);
    assert_int_equal(pl_weights_mode_parse("", &wm), -EINVAL);
    assert_int_equal(pl_weights_mode_parse(NULL, &wm), -EINVAL);
    free(want);
    free(got);
    pl_model_free(ref);
}

/* ---- A prompt's logits do not depend on how it is split (engine_model.h) ---- */

/* Feed tok[0, n) to a fresh sequence in calls of the given sizes (0-terminated); the last
 * entry's logits into out. */
static void feed_split(struct pl_ctx *c, const int32_t *tok, uint32_t n, const uint32_t *sizes,
                       float *out) {
    int32_t pos[128], seq[128] = {0};
    pl_ctx_seq_clear(c, 0);
    uint32_t at = 0;
    for (const uint32_t *z = sizes; *z; z++) {
        for (uint32_t k = 0; k < *z; k++)
            pos[k] = (int32_t)(at + k);
        struct pl_batch b = {.n = *z, .token = tok + at, .pos = pos, .seq = seq, .logits = NULL};
        assert_int_equal(pl_ctx_decode(c, &b, out), 0);
        at += *z;
    }
    assert_int_equal(at, n);
}

static void test_model_prompt_split_gives_same_logits(void **state) {
    (void)state;
    char path[4200];
    snprintf(path, sizeof(path), "%s/tiny-llama-spm-Q4_K_M.gguf", g_dir);
    struct pl_model *m = NULL;
    char err[256];
    if (pl_model_load(path, NULL, &m, err, sizeof(err)) != 0) {
        print_message("%s: %s: skipped\n", path, err);
        return;
    }
    const uint32_t nv = pl_model_hparams(m)->n_vocab;
    struct pl_ctx_opts co = {.n_ctx = 256, .n_batch = 128, .kv_type = PL_KV_F16};
    struct pl_ctx *c = NULL;
    assert_int_equal(pl_ctx_new(m, &co, &c), 0);
    int32_t tok[66];
    tok[0] = 1;
    for (int i = 1; i < 66; i++)
        tok[i] = (int32_t)(100 + (i * 7919) % 30000);
    float *want = calloc(nv, sizeof(float)), *got = calloc(nv, sizeof(float));
    assert_non_null(want);
    assert_non_null(got);
    /* One call (the engine's internal pieces of at most 64 must not leave a 2-entry tail),
     * then splits as a prefix cache (blocks of 16) or a scheduler (bounded chunks) make. */
    static const uint32_t whole[] = {66, 0};
    static const uint32_t splits[][6] = {
        {16, 16, 16, 18, 0}, {48, 18, 0}, {62, 4, 0}, {32, 30, 4, 0}};
    feed_split(c, tok, 66, whole, want);
    int bad = 0;
    for (size_t k = 0; k < sizeof(splits) / sizeof(splits[0]); k++) {
        feed_split(c, tok, 66, splits[k], got);
        if (memcmp(got, want, (size_t)nv * sizeof(float)) != 0) {
            double md = 0;
            for (uint32_t i = 0; i < nv; i++)
                md = fmax(md, fabs((double)got[i] - want[i]));
            print_message("split %zu: max diff %g\n", k, md);
            bad++;
        }
    }
    assert_int_equal(bad, 0);

    /* A step that decodes for several sessions: a session's logits are the same in a batch of
     * 5 (one half tile) and of 12 (a full tile), as they are for its prompt. */
    struct pl_ctx_opts co2 = {.n_ctx = 256, .n_seq = 12, .n_batch = 128, .kv_type = PL_KV_F16};
    struct pl_ctx *c5 = NULL, *c12 = NULL;
    assert_int_equal(pl_ctx_new(m, &co2, &c5), 0);
    assert_int_equal(pl_ctx_new(m, &co2, &c12), 0);
    feed_split(c5, tok, 66, whole, want);
    feed_split(c12, tok, 66, whole, got);
    int32_t st[12], sp[12], ss[12];
    bool sl[12];
    for (int i = 0; i < 12; i++) {
        st[i] = (int32_t)(200 + 37 * i);
        sp[i] = i == 0 ? 66 : 0;
        ss[i] = i;
        sl[i] = i == 0;
    }
    struct pl_batch b5 = {.n = 5, .token = st, .pos = sp, .seq = ss, .logits = sl};
    struct pl_batch b12 = {.n = 12, .token = st, .pos = sp, .seq = ss, .logits = sl};
    assert_int_equal(pl_ctx_decode(c5, &b5, want), 0);
    assert_int_equal(pl_ctx_decode(c12, &b12, got), 0);
    assert_memory_equal(got, want, (size_t)nv * sizeof(float));
    pl_ctx_free(c5);
    pl_ctx_free(c12);

    free(want);
    free(got);
    pl_ctx_free(c);
    pl_model_free(m);
}

/* Batch invariance on every quantized model (tiled kernels where the CPU has them: AMX or
 * AVX-512): session 0's next-token logits are bit-identical whether its step holds it alone
 * (decode kernels) or beside 1..11 other sessions' tokens (2-8: the multi-token decode
 * kernels, or AMX half tiles from 5; 12: a full tile), and a prompt fed with a 1- or 3-token
 * tail gives the logits of the prompt fed whole. A scheduler's batching must not change a
 * greedy answer. */
static void test_model_batch_invariance_every_quant(void **state) {
    (void)state;
    static const char *const names[] = {
        "tiny-llama-spm-Q4_K_M.gguf", "tiny-llama-spm-Q5_K_M.gguf",    "tiny-llama-spm-Q3_K_M.gguf",
        "tiny-llama-spm-Q2_K.gguf",   "tiny-llama-spm-tied-Q8_0.gguf", "tiny-llama-gpt2-Q4_0.gguf"};
    static const uint32_t sizes[] = {2, 3, 4, 5, 8, 12};
    int bad = 0;
    for (size_t f = 0; f < sizeof(names) / sizeof(names[0]); f++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", g_dir, names[f]);
        struct pl_model *m = NULL;
        char err[256];
        if (pl_model_load(path, NULL, &m, err, sizeof(err)) != 0)
            fail_msg("%s: %s", path, err);
        const uint32_t nv = pl_model_hparams(m)->n_vocab;
        float *want = calloc(nv, sizeof(float)), *got = calloc(nv, sizeof(float));
        assert_non_null(want);
        assert_non_null(got);
        int32_t tok[66];
        tok[0] = 1;
        for (int i = 1; i < 66; i++)
            tok[i] = (int32_t)(100 + (i * 7919) % 30000) % (int32_t)nv;
        struct pl_ctx_opts co = {.n_ctx = 128, .n_seq = 12, .n_batch = 128, .kv_type = PL_KV_F16};
        /* the prompt: whole, then with a 1- and a 3-token tail */
        static const uint32_t whole[] = {66, 0}, tail1[] = {65, 1, 0}, tail3[] = {63, 3, 0};
        const uint32_t *const prompts[] = {tail1, tail3};
        struct pl_ctx *c = NULL;
        assert_int_equal(pl_ctx_new(m, &co, &c), 0);
        feed_split(c, tok, 66, whole, want);
        pl_ctx_free(c);
        for (size_t k = 0; k < 2; k++) {
            assert_int_equal(pl_ctx_new(m, &co, &c), 0);
            feed_split(c, tok, 66, prompts[k], got);
            if (memcmp(got, want, (size_t)nv * sizeof(float)) != 0) {
                print_message("%s: prompt split %zu changes the logits\n", names[f], k);
                bad++;
            }
            pl_ctx_free(c);
        }
        /* the next step: session 0 alone, then beside other sessions' first tokens */
        int32_t st[12], sp[12], ss[12];
        bool sl[12];
        for (int i = 0; i < 12; i++) {
            st[i] = (int32_t)((200 + 37 * i) % (int32_t)nv);
            sp[i] = i == 0 ? 66 : 0;
            ss[i] = i;
            sl[i] = i == 0;
        }
        assert_int_equal(pl_ctx_new(m, &co, &c), 0);
        feed_split(c, tok, 66, whole, got);
        struct pl_batch b1 = {.n = 1, .token = st, .pos = sp, .seq = ss, .logits = sl};
        assert_int_equal(pl_ctx_decode(c, &b1, want), 0);
        pl_ctx_free(c);
        for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
            assert_int_equal(pl_ctx_new(m, &co, &c), 0);
            feed_split(c, tok, 66, whole, got);
            struct pl_batch b = {.n = sizes[z], .token = st, .pos = sp, .seq = ss, .logits = sl};
            assert_int_equal(pl_ctx_decode(c, &b, got), 0);
            if (memcmp(got, want, (size_t)nv * sizeof(float)) != 0) {
                double md = 0;
                for (uint32_t i = 0; i < nv; i++)
                    md = fmax(md, fabs((double)got[i] - want[i]));
                print_message("%s: a step of %u tokens changes session 0's logits (max %g)\n",
                              names[f], sizes[z], md);
                bad++;
            }
            pl_ctx_free(c);
        }
        free(want);
        free(got);
        pl_model_free(m);
    }
    assert_int_equal(bad, 0);
}

/* The thread count does not change a result: rows of every matrix product are handed out
 * to threads in chunks (own segment first, then the tails of the others', forward.c), and a
 * row's sum is computed the same way whoever computes it. 1, 2 and 3 threads (an odd split,
 * more threads than this machine may have cores) give bit-identical logits for a prompt
 * (tiled kernels) and for a 1- and a 5-token step; a row skipped or written twice would
 * show. The matrices here are large enough (>= 256 KiB) for the chunked hand-out. */
static void test_model_thread_count_keeps_logits(void **state) {
    (void)state;
    static const char *const names[] = {
        "tiny-llama-spm-Q4_K_M.gguf", "tiny-llama-spm-tied-Q8_0.gguf", "tiny-llama-gpt2-Q4_0.gguf"};
    static const uint32_t threads[] = {1, 2, 3};
    static const uint32_t whole[] = {66, 0};
    int bad = 0;
    for (size_t f = 0; f < sizeof(names) / sizeof(names[0]); f++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", g_dir, names[f]);
        float *ref = NULL;
        uint32_t nv = 0;
        for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
            struct pl_model_opts mo = {.n_threads = threads[t]};
            struct pl_model *m = NULL;
            char err[256];
            if (pl_model_load(path, &mo, &m, err, sizeof(err)) != 0)
                fail_msg("%s: %s", path, err);
            nv = pl_model_hparams(m)->n_vocab;
            /* [prompt's last][1-token step][5-token step x 5] */
            float *got = calloc((size_t)7 * nv, sizeof(float));
            assert_non_null(got);
            int32_t tok[66];
            tok[0] = 1;
            for (int i = 1; i < 66; i++)
                tok[i] = (int32_t)(100 + (i * 7919) % 30000) % (int32_t)nv;
            struct pl_ctx_opts co = {
                .n_ctx = 128, .n_seq = 6, .n_batch = 128, .kv_type = PL_KV_F16};
            struct pl_ctx *c = NULL;
            assert_int_equal(pl_ctx_new(m, &co, &c), 0);
            feed_split(c, tok, 66, whole, got);
            int32_t st[5], sp[5], ss[5];
            bool sl[5];
            for (int i = 0; i < 5; i++) {
                st[i] = (int32_t)((300 + 41 * i) % (int32_t)nv);
                sp[i] = i == 0 ? 67 : 0;
                ss[i] = i + 1;
                sl[i] = true;
            }
            int32_t p66 = 66, s0 = 0;
            bool l1 = true;
            struct pl_batch b1 = {.n = 1, .token = st, .pos = &p66, .seq = &s0, .logits = &l1};
            assert_int_equal(pl_ctx_decode(c, &b1, got + nv), 0);
            st[0] = 500;
            ss[0] = 0;
            struct pl_batch b5 = {.n = 5, .token = st, .pos = sp, .seq = ss, .logits = sl};
            assert_int_equal(pl_ctx_decode(c, &b5, got + (size_t)2 * nv), 0);
            pl_ctx_free(c);
            pl_model_free(m);
            if (!ref) {
                ref = got;
                continue;
            }
            for (uint32_t k = 0; k < 7; k++)
                if (memcmp(got + (size_t)k * nv, ref + (size_t)k * nv, nv * sizeof(float))) {
                    print_message("%s: %u threads change logits row %u\n", names[f], threads[t], k);
                    bad++;
                }
            free(got);
        }
        free(ref);
    }
    assert_int_equal(bad, 0);
}

int main(void) {
    const char *data = getenv("PICOLM_TEST_DATA");
    char path[4200];
    if (!data || !*data) {
        fprintf(stderr, "PICOLM_TEST_DATA not set: skipping\n");
        return 77;
    }
    snprintf(g_dir, sizeof(g_dir), "%s/models", data);
    snprintf(path, sizeof(path), "%s/stories260K.gguf", g_dir);
    g_img = slurp(path, &g_img_len);
    if (!g_img) {
        fprintf(stderr, "%s missing: skipping\n", path);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_loads_pristine_image),
        cmocka_unit_test(test_model_rejects_other_architecture),
        cmocka_unit_test(test_model_rejects_bad_hparams),
        cmocka_unit_test(test_model_rejects_bad_float_hparams),
        cmocka_unit_test(test_model_rejects_missing_and_misshaped_tensors),
        cmocka_unit_test(test_model_ties_output_to_embeddings),
        cmocka_unit_test(test_model_rejects_truncated_files),
        cmocka_unit_test(test_model_rejects_bad_arguments),
        cmocka_unit_test(test_model_every_shared_model_loads_and_runs),
        cmocka_unit_test(test_model_place_weights_keeps_results),
        cmocka_unit_test(test_model_prompt_split_gives_same_logits),
        cmocka_unit_test(test_model_batch_invariance_every_quant),
        cmocka_unit_test(test_model_thread_count_keeps_logits),
        cmocka_unit_test(test_model_packed_weights_keep_logits),
        cmocka_unit_test(test_model_place_weights_realigns),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    free(g_img);
    return r;
}
