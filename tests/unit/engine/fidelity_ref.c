/* SPDX-License-Identifier: MIT */
/* Reader for NAME.ref.json + NAME.logits.bin (see fidelity_ref.h), on top of the test JSON
 * reader. Checks every count and index before the tests use them. */
#include "fidelity_ref.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "json.h"

__attribute__((format(printf, 3, 4))) static int bad(char *err, size_t err_len, const char *fmt,
                                                     ...) {
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static bool get_num(const struct pl_json *o, const char *key, double *ret) {
    const struct pl_json *v = pl_json_get(o, key);
    if (!v || v->type != PL_JSON_NUMBER)
        return false;
    *ret = v->number;
    return true;
}

static bool is_int_in(double v, double lo, double hi) {
    return v == floor(v) && v >= lo && v <= hi;
}

/* An array of n ids (or of any length when n == 0, stored in *ret_n). */
static int get_ids(const struct pl_json *o, const char *key, int32_t *out, size_t n, char *err,
                   size_t err_len) {
    const struct pl_json *a = pl_json_get(o, key);
    if (!a || a->type != PL_JSON_ARRAY || a->n != n)
        return bad(err, err_len, "'%s': expected an array of %zu numbers", key, n);
    for (size_t i = 0; i < n; i++) {
        const struct pl_json *v = pl_json_at(a, i);
        if (!v || v->type != PL_JSON_NUMBER || !is_int_in(v->number, -1, INT32_MAX))
            return bad(err, err_len, "'%s'[%zu]: expected a token id", key, i);
        out[i] = (int32_t)v->number;
    }
    return 0;
}

static int get_floats(const struct pl_json *o, const char *key, float *out, size_t n, char *err,
                      size_t err_len) {
    const struct pl_json *a = pl_json_get(o, key);
    if (!a || a->type != PL_JSON_ARRAY || a->n != n)
        return bad(err, err_len, "'%s': expected an array of %zu numbers", key, n);
    for (size_t i = 0; i < n; i++) {
        const struct pl_json *v = pl_json_at(a, i);
        if (!v || v->type != PL_JSON_NUMBER)
            return bad(err, err_len, "'%s'[%zu]: expected a number", key, i);
        out[i] = (float)v->number;
    }
    return 0;
}

static int get_greedy(const struct pl_json *g, struct fidelity_greedy *out, char *err,
                      size_t err_len) {
    if (!g || g->type != PL_JSON_OBJECT)
        return bad(err, err_len, "greedy: expected an object");
    int r = get_ids(g, "token_ids", out->token_ids, FIDELITY_N_GREEDY, err, err_len);
    if (r == 0)
        r = get_floats(g, "top1_logit", out->top1, FIDELITY_N_GREEDY, err, err_len);
    if (r == 0)
        r = get_floats(g, "top2_logit", out->top2, FIDELITY_N_GREEDY, err, err_len);
    return r;
}

static int load_prompt(const struct pl_json *jp, uint32_t n_vocab, struct fidelity_prompt *p,
                       char *err, size_t err_len) {
    const struct pl_json *text = pl_json_get(jp, "text");
    if (!text || text->type != PL_JSON_STRING || strlen(text->str) != text->str_len)
        return bad(err, err_len, "text: expected a string without NUL");
    p->text = strdup(text->str);
    const struct pl_json *ids = pl_json_get(jp, "token_ids");
    if (!p->text || !ids || ids->type != PL_JSON_ARRAY || ids->n == 0)
        return bad(err, err_len, "token_ids: expected a non-empty array");
    p->n_tokens = ids->n;
    p->token_ids = calloc(p->n_tokens, sizeof(int32_t));
    if (!p->token_ids)
        return -ENOMEM;
    int r = get_ids(jp, "token_ids", p->token_ids, p->n_tokens, err, err_len);
    if (r < 0)
        return r;
    for (size_t i = 0; i < p->n_tokens; i++)
        if (p->token_ids[i] < 0 || (uint32_t)p->token_ids[i] >= n_vocab)
            return bad(err, err_len, "token_ids[%zu] = %d out of range", i, p->token_ids[i]);
    int32_t pos[3];
    r = get_ids(jp, "logit_positions", pos, 3, err, err_len);
    if (r < 0)
        return r;
    for (int s = 0; s < 3; s++) {
        if (pos[s] < 0 || (size_t)pos[s] >= p->n_tokens || (s > 0 && pos[s] < pos[s - 1]))
            return bad(err, err_len, "logit_positions: not sorted positions of the prompt");
        p->logit_positions[s] = (uint32_t)pos[s];
    }
    if (p->logit_positions[2] != p->n_tokens - 1)
        return bad(err, err_len, "logit_positions: the last one is not the last token");
    r = get_greedy(pl_json_get(jp, "greedy"), &p->greedy, err, err_len);
    if (r < 0)
        return r;
    const struct pl_json *g16 = pl_json_get(jp, "greedy_kv_f16");
    if (g16) {
        r = get_greedy(g16, &p->greedy_f16, err, err_len);
        if (r < 0)
            return r;
        p->has_greedy_f16 = true;
    }
    return 0;
}

static int load_logits(const char *ref_path, const char *name, struct fidelity_ref *ref, char *err,
                       size_t err_len) {
    if (strchr(name, '/') || name[0] == '\0' || name[0] == '.')
        return bad(err, err_len, "logits_file '%s': expected a plain file name", name);
    char path[8192];
    const char *slash = strrchr(ref_path, '/');
    int dir_len = slash ? (int)(slash - ref_path) : 1;
    (void)snprintf(path, sizeof(path), "%.*s/%s", dir_len, slash ? ref_path : ".", name);
    FILE *f = fopen(path, "rbe");
    if (!f)
        return bad(err, err_len, "%s: %s", path, strerror(errno));
    size_t n = ref->n_prompts * 3 * (size_t)ref->n_vocab;
    struct stat st;
    int r = 0;
    if (fstat(fileno(f), &st) < 0 || (uint64_t)st.st_size != n * sizeof(float)) {
        r = bad(err, err_len, "%s: expected %zu bytes", path, n * sizeof(float));
        goto out;
    }
    ref->logits = malloc(n * sizeof(float));
    if (!ref->logits) {
        r = -ENOMEM;
        goto out;
    }
    /* Little-endian float32, as this (little-endian only) project stores floats. */
    if (fread(ref->logits, sizeof(float), n, f) != n)
        r = bad(err, err_len, "%s: short read", path);
out:
    fclose(f);
    return r;
}

int fidelity_ref_load(const char *ref_path, struct fidelity_ref *ret, char *err, size_t err_len) {
    struct pl_json *j = NULL;
    struct fidelity_ref ref = {0};
    double v;
    int r = pl_json_load_file(ref_path, &j, err, err_len);
    if (r < 0)
        return r;
    const struct pl_json *mf = pl_json_get(j, "model_file");
    const struct pl_json *lf = pl_json_get(j, "logits_file");
    const struct pl_json *ab = pl_json_get(j, "adds_bos");
    const struct pl_json *prompts = pl_json_get(j, "prompts");
    if (!mf || mf->type != PL_JSON_STRING || mf->str_len >= sizeof(ref.model_file) ||
        strchr(mf->str, '/')) {
        r = bad(err, err_len, "model_file: expected a file name");
        goto fail;
    }
    memcpy(ref.model_file, mf->str, mf->str_len + 1);
    if (!get_num(j, "n_vocab", &v) || !is_int_in(v, 1, 1 << 24)) {
        r = bad(err, err_len, "n_vocab: expected a count");
        goto fail;
    }
    ref.n_vocab = (uint32_t)v;
    ref.bos = ref.eos = -1;
    if (get_num(j, "bos_token_id", &v) && is_int_in(v, -1, ref.n_vocab - 1))
        ref.bos = (int32_t)v;
    if (get_num(j, "eos_token_id", &v) && is_int_in(v, -1, ref.n_vocab - 1))
        ref.eos = (int32_t)v;
    if (!ab || ab->type != PL_JSON_BOOL || !lf || lf->type != PL_JSON_STRING || !prompts ||
        prompts->type != PL_JSON_ARRAY || prompts->n == 0 || prompts->n > 1024) {
        r = bad(err, err_len, "adds_bos / logits_file / prompts missing or malformed");
        goto fail;
    }
    ref.adds_bos = ab->boolean;
    ref.n_prompts = prompts->n;
    ref.prompts = calloc(ref.n_prompts, sizeof(*ref.prompts));
    if (!ref.prompts) {
        r = -ENOMEM;
        goto fail;
    }
    for (size_t p = 0; p < ref.n_prompts; p++) {
        char sub[400];
        r = load_prompt(pl_json_at(prompts, p), ref.n_vocab, &ref.prompts[p], sub, sizeof(sub));
        if (r < 0) {
            (void)snprintf(err, err_len, "%s: prompts[%zu]: %s", ref_path, p, sub);
            goto fail;
        }
    }
    r = load_logits(ref_path, lf->str, &ref, err, err_len);
    if (r < 0)
        goto fail;
    pl_json_free(j);
    *ret = ref;
    return 0;
fail:
    pl_json_free(j);
    fidelity_ref_free(&ref);
    return r;
}

void fidelity_ref_free(struct fidelity_ref *r) {
    if (!r)
        return;
    for (size_t p = 0; r->prompts && p < r->n_prompts; p++) {
        free(r->prompts[p].text);
        free(r->prompts[p].token_ids);
    }
    free(r->prompts);
    free(r->logits);
    memset(r, 0, sizeof(*r));
}
