/* SPDX-License-Identifier: MIT */
/* Fidelity against llama.cpp: for every NAME.ref.json in $PICOLM_TEST_DATA/models (found by
 * listing the folder, so new models are picked up), load NAME's GGUF and check, with the
 * KV cache in F16 (the default) and in F32:
 *   - tokenization (add_special=true) equals the reference `token_ids`;
 *   - the logits at the 3 `logit_positions` match the .logits.bin rows: max |diff| <= 0.2%
 *     of the row's max |logit| for float files (every 2-D weight F32/F16/BF16), <= 3% and
 *     cosine >= 0.999 for quantized files;
 *   - the 32-token greedy continuation (each chosen token fed back, EOS not special) equals
 *     the reference up to the first step whose recorded margin top1 - top2 is below the
 *     tolerance (the same fraction) times the SCALE, here the max |logit| of the reference
 *     row at the prompt's last position (one scale per prompt: the margins of later steps
 *     are of the same magnitude and the row is what the .bin gives us); the chosen token's
 *     logit must match the recorded top1_logit within the same tolerance up to that step.
 *     stories260K* files (real weights, tiny logits, small margins) must match all 32.
 *     With the F16 cache the reference is `greedy_kv_f16` (llama.cpp's own F16-cache run).
 * Plus: stories260K.gguf from BOS alone, 256 greedy tokens, starts like llama2.c's story. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fidelity_ref.h"
#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/engine_quant.h"
#include "pl/engine_sampler.h"
#include "pl/engine_tokenizer.h"
#include "pl/engine_types.h"
#include "pl/pl_err.h"

/* Tolerances, as fractions of the row's max |logit|. */
#define TOL_FLOAT 0.002
#define TOL_QUANT 0.03
#define MIN_COSINE_QUANT 0.999
#define N_GREEDY 32
#define STORY_TOKENS 256
#define STORY_PREFIX                                                                               \
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "      \
    "park."

struct fcase {
    char name[160]; /* test name */
    char ref_path[8192];
    char dir[4096];
    uint32_t kv_type;
};

static const char *data_dir(void) {
    const char *d = getenv("PICOLM_TEST_DATA");
    return d && d[0] ? d : NULL;
}

/* Every 2-D (or higher) tensor F32/F16/BF16: a float file. */
static bool is_float_model(const struct pl_model *m) {
    const struct pl_gguf *g = pl_model_gguf(m);
    for (uint64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (t->n_dims < 2)
            continue;
        if (t->type != PL_GGML_TYPE_F32 && t->type != PL_GGML_TYPE_F16 &&
            t->type != PL_GGML_TYPE_BF16)
            return false;
    }
    return true;
}

static float row_max_abs(const float *r, uint32_t n) {
    float m = 0.0f;
    for (uint32_t i = 0; i < n; i++)
        m = fabsf(r[i]) > m ? fabsf(r[i]) : m;
    return m;
}

static int32_t argmax(const float *r, uint32_t n) {
    int32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (r[i] > r[best])
            best = (int32_t)i;
    return best;
}

/* Evaluate tokens[0..n) at positions 0..n-1 of sequence 0, with logits for every position
 * in want (rows to out, in position order). */
static int eval_prompt(struct pl_ctx *ctx, const int32_t *tokens, size_t n, const bool *want,
                       uint32_t n_batch, uint32_t n_vocab, float *out) {
    int32_t *pos = calloc(n_batch, sizeof(int32_t)), *seq = calloc(n_batch, sizeof(int32_t));
    int r = -ENOMEM;
    if (!pos || !seq)
        goto out;
    size_t rows = 0;
    for (size_t start = 0; start < n; start += n_batch) {
        uint32_t m = (uint32_t)(n - start < n_batch ? n - start : n_batch);
        size_t want_here = 0;
        for (uint32_t i = 0; i < m; i++) {
            pos[i] = (int32_t)(start + i);
            want_here += want[start + i];
        }
        struct pl_batch b = {
            .n = m, .token = tokens + start, .pos = pos, .seq = seq, .logits = want + start};
        r = pl_ctx_decode(ctx, &b, out + rows * n_vocab);
        if (r < 0)
            goto out;
        rows += want_here;
    }
    r = 0;
out:
    free(pos);
    free(seq);
    return r;
}

static int decode_one(struct pl_ctx *ctx, int32_t tok, int32_t pos, float *out) {
    int32_t seq = 0;
    bool want = true;
    struct pl_batch b = {.n = 1, .token = &tok, .pos = &pos, .seq = &seq, .logits = &want};
    return pl_ctx_decode(ctx, &b, out);
}

static const char *kv_name(uint32_t kv) {
    return kv == PL_KV_F32 ? "f32" : "f16";
}

/* ---- one model, one KV type ---- */

static void test_model(void **state) {
    const struct fcase *fc = *state;
    struct fidelity_ref ref;
    char err[512] = "";
    char path[8192];
    int fails = 0;
    assert_int_equal(fidelity_ref_load(fc->ref_path, &ref, err, sizeof(err)), 0);

    (void)snprintf(path, sizeof(path), "%s/%s", fc->dir, ref.model_file);
    struct pl_model *m = NULL;
    struct pl_model_opts mo = {.n_threads = 1};
    int r = pl_model_load(path, &mo, &m, err, sizeof(err));
    if (r < 0)
        fail_msg("%s: load failed: %s (%s)", path, err, pl_strerror(r));
    const struct pl_model_hparams *hp = pl_model_hparams(m);
    const struct pl_tokenizer *tok = pl_model_tokenizer(m);
    uint32_t n_vocab = hp->n_vocab;
    assert_int_equal(n_vocab, ref.n_vocab);
    assert_int_equal(pl_tokenizer_bos(tok), ref.bos);
    assert_int_equal(pl_tokenizer_eos(tok), ref.eos);
    assert_int_equal(pl_tokenizer_adds_bos(tok), ref.adds_bos);

    bool is_float = is_float_model(m);
    bool all_greedy = strncmp(ref.model_file, "stories260K", 11) == 0;
    double tol = is_float ? TOL_FLOAT : TOL_QUANT;

    struct pl_ctx_opts co = {.n_ctx = 2048, .n_seq = 1, .n_batch = 512, .kv_type = fc->kv_type};
    struct pl_ctx *ctx = NULL;
    r = pl_ctx_new(m, &co, &ctx);
    if (r < 0)
        fail_msg("%s: pl_ctx_new failed: %s", path, pl_strerror(r));

    struct pl_sampler_params sp;
    pl_sampler_params_default(&sp);
    sp.temp = 0.0f;
    sp.penalty_last_n = 0;
    struct pl_sampler *smp = NULL;
    assert_int_equal(pl_sampler_new(&sp, n_vocab, &smp), 0);

    float *rows = malloc((size_t)4 * n_vocab * sizeof(float));
    float *logits = malloc((size_t)n_vocab * sizeof(float));
    float *work = malloc((size_t)n_vocab * sizeof(float));
    assert_true(rows && logits && work);
    double worst_rel = 0.0, worst_cos = 1.0;
    size_t n_greedy_checked = 0, n_greedy_total = 0;

    for (size_t p = 0; p < ref.n_prompts; p++) {
        const struct fidelity_prompt *rp = &ref.prompts[p];
        /* Tokenization. */
        size_t cap = strlen(rp->text) + 8, n = 0;
        int32_t *ids = malloc(cap * sizeof(int32_t));
        assert_non_null(ids);
        r = pl_tokenizer_encode(tok, rp->text, strlen(rp->text), true, false, ids, cap, &n);
        assert_int_equal(r, 0);
        bool tok_ok = n == rp->n_tokens && memcmp(ids, rp->token_ids, n * sizeof(int32_t)) == 0;
        if (!tok_ok) {
            size_t k = 0;
            while (k < n && k < rp->n_tokens && ids[k] == rp->token_ids[k])
                k++;
            print_error("%s prompt %zu: tokens differ at index %zu (got %zu tokens, want %zu)\n",
                        ref.model_file, p, k, n, rp->n_tokens);
            fails++;
            free(ids);
            continue;
        }
        free(ids);

        /* Prompt logits at the 3 positions (and the last one, which is among them). */
        bool *want = calloc(rp->n_tokens, sizeof(bool));
        assert_non_null(want);
        for (int s = 0; s < 3; s++)
            want[rp->logit_positions[s]] = true;
        size_t n_rows = 0;
        for (size_t i = 0; i < rp->n_tokens; i++)
            n_rows += want[i];
        pl_ctx_seq_clear(ctx, 0);
        r = eval_prompt(ctx, rp->token_ids, rp->n_tokens, want, 512, n_vocab, rows);
        free(want);
        if (r < 0)
            fail_msg("%s prompt %zu: decode failed: %s", ref.model_file, p, pl_strerror(r));
        for (int s = 0; s < 3; s++) {
            /* Rows come in position order, one per distinct requested position. */
            size_t row = 0;
            for (int t = 0; t < 3; t++) {
                bool dup = t > 0 && rp->logit_positions[t] == rp->logit_positions[t - 1];
                if (!dup && rp->logit_positions[t] < rp->logit_positions[s])
                    row++;
            }
            const float *got = rows + row * n_vocab;
            const float *want_row = ref.logits + ((size_t)p * 3 + (size_t)s) * n_vocab;
            double scale = row_max_abs(want_row, n_vocab), max_diff = 0.0;
            double dot = 0.0, ng = 0.0, nw = 0.0;
            uint32_t at = 0;
            for (uint32_t i = 0; i < n_vocab; i++) {
                double d = fabs((double)got[i] - (double)want_row[i]);
                if (!(d <= max_diff)) { /* NaN counts as the worst */
                    max_diff = isnan(d) ? INFINITY : d;
                    at = i;
                }
                dot += (double)got[i] * want_row[i];
                ng += (double)got[i] * got[i];
                nw += (double)want_row[i] * want_row[i];
            }
            double rel = max_diff / scale, cosine = dot / sqrt(ng * nw);
            worst_rel = rel > worst_rel ? rel : worst_rel;
            worst_cos = cosine < worst_cos ? cosine : worst_cos;
            if (!(rel <= tol) || (!is_float && !(cosine >= MIN_COSINE_QUANT))) {
                print_error("%s kv %s prompt %zu pos %u: max |diff| %.6g at token %u (got %.6g, "
                            "want %.6g) = %.4f%% of max |logit| %.4g (limit %.2f%%), cosine "
                            "%.7f\n",
                            ref.model_file, kv_name(fc->kv_type), p, rp->logit_positions[s],
                            max_diff, at, (double)got[at], (double)want_row[at], rel * 100.0, scale,
                            tol * 100.0, cosine);
                fails++;
            }
        }

        /* Greedy continuation from the last prompt row. */
        const struct fidelity_greedy *g = fc->kv_type == PL_KV_F16 && ref.prompts[p].has_greedy_f16
                                              ? &rp->greedy_f16
                                              : &rp->greedy;
        const float *last_ref = ref.logits + ((size_t)p * 3 + 2) * n_vocab;
        double scale = row_max_abs(last_ref, n_vocab);
        double margin_floor = tol * scale;
        /* The last requested row is the prompt's last position. */
        memcpy(logits, rows + (n_rows - 1) * n_vocab, (size_t)n_vocab * sizeof(float));
        size_t limit = all_greedy ? N_GREEDY : 0;
        if (!all_greedy) {
            while (limit < N_GREEDY && g->top1[limit] - g->top2[limit] >= margin_floor)
                limit++;
        }
        n_greedy_checked += limit;
        n_greedy_total += N_GREEDY;
        pl_sampler_reset(smp);
        for (size_t k = 0; k < N_GREEDY; k++) {
            memcpy(work, logits, (size_t)n_vocab * sizeof(float));
            int32_t t = pl_sampler_sample(smp, work);
            assert_int_equal(t, argmax(logits, n_vocab));
            if (k < limit) {
                if (t != g->token_ids[k]) {
                    print_error("%s kv %s prompt %zu: greedy step %zu chose %d (logit %.5g), "
                                "llama.cpp %d (top1 %.5g, top2 %.5g; margin floor %.4g)\n",
                                ref.model_file, kv_name(fc->kv_type), p, k, t, (double)logits[t],
                                g->token_ids[k], (double)g->top1[k], (double)g->top2[k],
                                margin_floor);
                    fails++;
                    break;
                }
                double d = fabs((double)logits[t] - (double)g->top1[k]);
                if (!(d <= tol * scale)) {
                    print_error("%s kv %s prompt %zu: greedy step %zu top1 logit %.6g, "
                                "llama.cpp %.6g (limit %.4g)\n",
                                ref.model_file, kv_name(fc->kv_type), p, k, (double)logits[t],
                                (double)g->top1[k], tol * scale);
                    fails++;
                    break;
                }
            }
            if (k + 1 == N_GREEDY)
                break;
            r = decode_one(ctx, t, (int32_t)(rp->n_tokens + k), logits);
            if (r < 0)
                fail_msg("%s prompt %zu: decode at %zu failed: %s", ref.model_file, p,
                         rp->n_tokens + k, pl_strerror(r));
        }
    }
    print_message("[ fidelity ] %-34s kv %s %s: max |diff| / max |logit| = %.5f%% (limit "
                  "%.1f%%), min cosine %.7f, greedy tokens compared %zu/%zu\n",
                  ref.model_file, kv_name(fc->kv_type), is_float ? "float" : "quant",
                  worst_rel * 100.0, tol * 100.0, worst_cos, n_greedy_checked, n_greedy_total);

    free(rows);
    free(logits);
    free(work);
    pl_sampler_free(smp);
    pl_ctx_free(ctx);
    pl_model_free(m);
    fidelity_ref_free(&ref);
    if (fails)
        fail_msg("%s: %d check(s) failed", fc->name, fails);
}

/* ---- stories260K from BOS: llama2.c's story ---- */

static void test_story_from_bos(void **state) {
    const struct fcase *fc = *state;
    char path[8192], err[512] = "";
    (void)snprintf(path, sizeof(path), "%s/stories260K.gguf", fc->dir);
    struct pl_model *m = NULL;
    struct pl_model_opts mo = {.n_threads = 1};
    int r = pl_model_load(path, &mo, &m, err, sizeof(err));
    if (r < 0)
        fail_msg("%s: load failed: %s (%s)", path, err, pl_strerror(r));
    const struct pl_tokenizer *tok = pl_model_tokenizer(m);
    uint32_t n_vocab = pl_model_hparams(m)->n_vocab;
    struct pl_ctx_opts co = {.n_ctx = 512, .n_seq = 1, .n_batch = 64, .kv_type = fc->kv_type};
    struct pl_ctx *ctx = NULL;
    assert_int_equal(pl_ctx_new(m, &co, &ctx), 0);
    float *logits = malloc(n_vocab * sizeof(float));
    char *text = malloc(STORY_TOKENS * 64 + 1);
    assert_true(logits && text);
    /* The reference's continuation of the empty prompt (BOS alone), when present. */
    struct fidelity_ref ref;
    char ref_path[8192];
    const int32_t *want32 = NULL;
    (void)snprintf(ref_path, sizeof(ref_path), "%s/stories260K.ref.json", fc->dir);
    bool have_ref = fidelity_ref_load(ref_path, &ref, err, sizeof(err)) == 0;
    for (size_t p = 0; have_ref && p < ref.n_prompts; p++) {
        if (ref.prompts[p].text[0] == '\0') {
            const struct fidelity_prompt *rp = &ref.prompts[p];
            want32 = fc->kv_type == PL_KV_F16 && rp->has_greedy_f16 ? rp->greedy_f16.token_ids
                                                                    : rp->greedy.token_ids;
        }
    }
    size_t len = 0;
    int32_t t = pl_tokenizer_bos(tok);
    assert_true(t >= 0);
    for (int k = 0; k < STORY_TOKENS; k++) {
        assert_int_equal(decode_one(ctx, t, k, logits), 0);
        t = argmax(logits, n_vocab);
        if (want32 && k < FIDELITY_N_GREEDY && t != want32[k])
            fail_msg("kv %s: step %d chose %d, llama.cpp %d", kv_name(fc->kv_type), k, t,
                     want32[k]);
        int n = pl_tokenizer_piece(tok, t, text + len, 64);
        assert_true(n >= 0);
        /* llama2.c drops the leading space of the piece that follows BOS. */
        if (k == 0 && n > 0 && text[len] == ' ') {
            memmove(text + len, text + len + 1, (size_t)n - 1);
            n--;
        }
        len += (size_t)n;
    }
    text[len] = '\0';
    if (strncmp(text, STORY_PREFIX, strlen(STORY_PREFIX)) != 0)
        fail_msg("kv %s: the story starts '%.200s'", kv_name(fc->kv_type), text);
    print_message("[ fidelity ] stories260K from BOS, kv %s, %d tokens (first 32 %s): "
                  "%.100s...\n",
                  kv_name(fc->kv_type), STORY_TOKENS,
                  want32 ? "equal to llama.cpp's" : "not checked: no reference", text);
    if (have_ref)
        fidelity_ref_free(&ref);
    free(logits);
    free(text);
    pl_ctx_free(ctx);
    pl_model_free(m);
}

/* ---- discovery ---- */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(void) {
    const char *data = data_dir();
    if (!data) {
        fprintf(stderr, "PICOLM_TEST_DATA is not set: skipping\n");
        return 77;
    }
    char dir[4096];
    (void)snprintf(dir, sizeof(dir), "%s/models", data);
    /* Which kernel path this run checks (PICOLM_ISA / PICOLM_FORCE_SCALAR choose it). */
    fprintf(stderr, "kernels: %s\n", pl_quant_isa());
    /* A run for one x86 set (PICOLM_ISA=avx2|avxvnni|avx512) on a CPU without it would only
     * repeat a narrower set's run. */
    const char *isa_env = getenv("PICOLM_ISA");
    if (isa_env &&
        (!strcmp(isa_env, "avx2") || !strcmp(isa_env, "avxvnni") || !strcmp(isa_env, "avx512")) &&
        strcmp(isa_env, pl_quant_isa()) != 0) {
        fprintf(stderr, "PICOLM_ISA=%s: this CPU runs %s instead: skipping\n", isa_env,
                pl_quant_isa());
        return 77;
    }
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "%s: %s: skipping\n", dir, strerror(errno));
        return 77;
    }
    char **names = NULL;
    size_t n_names = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 9 && strcmp(e->d_name + len - 9, ".ref.json") == 0) {
            names = realloc(names, (n_names + 1) * sizeof(*names));
            assert_non_null(names);
            names[n_names++] = strdup(e->d_name);
        }
    }
    closedir(d);
    if (n_names == 0) {
        fprintf(stderr, "no *.ref.json in %s: skipping\n", dir);
        return 77;
    }
    qsort(names, n_names, sizeof(*names), cmp_str);

    char story_path[8192];
    (void)snprintf(story_path, sizeof(story_path), "%s/stories260K.gguf", dir);
    bool have_story = access(story_path, R_OK) == 0;
    size_t n_cases = n_names * 2 + (have_story ? 2 : 0);
    struct fcase *cases = calloc(n_cases, sizeof(*cases));
    struct CMUnitTest *tests = calloc(n_cases, sizeof(*tests));
    assert_true(cases && tests);
    size_t k = 0;
    for (size_t i = 0; i < n_names; i++) {
        for (int kv = 0; kv < 2; kv++) {
            struct fcase *c = &cases[k];
            uint32_t kvt = kv == 0 ? PL_KV_F16 : PL_KV_F32;
            (void)snprintf(c->name, sizeof(c->name), "%.*s kv %s", (int)(strlen(names[i]) - 9),
                           names[i], kv_name(kvt));
            (void)snprintf(c->ref_path, sizeof(c->ref_path), "%s/%s", dir, names[i]);
            (void)snprintf(c->dir, sizeof(c->dir), "%s", dir);
            c->kv_type = kvt;
            tests[k] = (struct CMUnitTest){c->name, test_model, NULL, NULL, c};
            k++;
        }
    }
    if (have_story) {
        for (int kv = 0; kv < 2; kv++) {
            struct fcase *c = &cases[k];
            c->kv_type = kv == 0 ? PL_KV_F16 : PL_KV_F32;
            (void)snprintf(c->name, sizeof(c->name), "stories260K story from BOS kv %s",
                           kv_name(c->kv_type));
            (void)snprintf(c->dir, sizeof(c->dir), "%s", dir);
            tests[k] = (struct CMUnitTest){c->name, test_story_from_bos, NULL, NULL, c};
            k++;
        }
    }
    int rc = _cmocka_run_group_tests("fidelity", tests, k, NULL, NULL);
    for (size_t i = 0; i < n_names; i++)
        free(names[i]);
    free(names);
    free(cases);
    free(tests);
    return rc;
}
