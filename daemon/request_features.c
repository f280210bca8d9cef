/* SPDX-License-Identifier: MIT */
/* Per-request output features (see request_features.h): chat rendering and grammar
 * compilation on the event thread, mask / logprobs / stop matching on the inference
 * thread. Everything a request needs per token is allocated when the request is set up. */
#include "request_features.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl/engine_chat.h"
#include "pl/engine_gguf.h"
#include "pl/engine_grammar.h"
#include "pl/engine_model.h"
#include "pl/engine_tokenizer.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

struct pl_daemon_features {
    const struct pl_tokenizer *tok;
    struct pl_grammar_vocab *vocab;
    int family; /* detected chat family, 0 when none */
    char bos_text[64], eos_text[64];
};

/* ---- Per model ---- */

static void token_text(const struct pl_tokenizer *t, int32_t id, char *buf, size_t cap) {
    size_t len = 0;
    const char *s = id >= 0 ? pl_tokenizer_token_text(t, id, &len) : NULL;
    if (!s || len >= cap)
        len = 0;
    if (len)
        memcpy(buf, s, len);
    buf[len] = '\0';
}

int pl_daemon_features_new(const struct pl_model *m, struct pl_daemon_features **ret) {
    struct pl_daemon_features *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->tok = pl_model_tokenizer(m);
    int r = pl_grammar_vocab_new(f->tok, &f->vocab);
    if (r < 0) {
        free(f);
        return r;
    }
    struct pl_gguf_str src;
    if (pl_gguf_get_str(pl_model_gguf(m), "tokenizer.chat_template", &src) == 0) {
        int fam = pl_chat_template_detect(src.ptr, (size_t)src.len);
        f->family = fam > 0 ? fam : 0;
    }
    token_text(f->tok, pl_tokenizer_bos(f->tok), f->bos_text, sizeof(f->bos_text));
    token_text(f->tok, pl_tokenizer_eos(f->tok), f->eos_text, sizeof(f->eos_text));
    *ret = f;
    return 0;
}

void pl_daemon_features_free(struct pl_daemon_features *f) {
    if (!f)
        return;
    pl_grammar_vocab_free(f->vocab);
    free(f);
}

int pl_daemon_features_chat_family(const struct pl_daemon_features *f) {
    return f ? f->family : 0;
}

int pl_daemon_features_render_chat(const struct pl_daemon_features *f,
                                   const struct pl_daemon_chat_msg *msgs, size_t n,
                                   const char *tmpl, int32_t *out, size_t cap, size_t *ret_n,
                                   int *ret_family, char *err, size_t err_len) {
    struct pl_chat_msg *cm = NULL;
    char *text = NULL;
    size_t len = 0;
    int fam, r;

    if (n == 0 || n > PL_DAEMON_MAX_MSGS) {
        (void)snprintf(err, err_len, "messages: between 1 and %u messages", PL_DAEMON_MAX_MSGS);
        return -EINVAL;
    }
    if (tmpl && tmpl[0]) {
        fam = pl_chat_template_from_name(tmpl);
        if (fam < 0) {
            (void)snprintf(err, err_len,
                           "unknown chat template '%.32s' (llama2, llama3, chatml, qwen, "
                           "zephyr, mistral, phi3, gemma)",
                           tmpl);
            return -EINVAL;
        }
    } else if (f->family > 0) {
        fam = f->family;
    } else {
        (void)snprintf(err, err_len,
                       "the model has no chat template picolm recognises; "
                       "name one in the request's template field");
        return -PL_ERR_UNSUPPORTED;
    }
    cm = calloc(n, sizeof(*cm));
    if (!cm)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        size_t rl = msgs[i].role ? strlen(msgs[i].role) : 0;
        if (rl == 0 || rl > PL_DAEMON_MAX_ROLE) {
            (void)snprintf(err, err_len, "messages[%zu]: role must be 1..%u bytes", i,
                           PL_DAEMON_MAX_ROLE);
            r = -EINVAL;
            goto out;
        }
        cm[i] = (struct pl_chat_msg){.role = msgs[i].role,
                                     .role_len = rl,
                                     .content = msgs[i].content ? msgs[i].content : "",
                                     .content_len = msgs[i].content ? strlen(msgs[i].content) : 0};
    }
    r = pl_chat_render((enum pl_chat_family)fam, cm, n, true, f->bos_text, f->eos_text, NULL, 0,
                       &len);
    if (r < 0 && r != -ENOSPC) {
        (void)snprintf(err, err_len,
                       "messages do not fit the %s template (roles must be system/user/"
                       "assistant, alternating where the template wants it)",
                       pl_chat_template_name((enum pl_chat_family)fam));
        goto out;
    }
    text = malloc(len + 1);
    if (!text) {
        r = -ENOMEM;
        goto out;
    }
    r = pl_chat_render((enum pl_chat_family)fam, cm, n, true, f->bos_text, f->eos_text, text,
                       len + 1, &len);
    if (r < 0) {
        (void)snprintf(err, err_len, "cannot render the messages: %s", pl_strerror(r));
        goto out;
    }
    /* Special tokens in the rendered text (<|im_start|>, [INST] ...) are tokens; BOS is
     * added only when the template does not write it itself. */
    r = pl_tokenizer_encode(f->tok, text, len, !pl_chat_template_writes_bos(fam), true, out, cap,
                            ret_n);
    if (r == -ENOSPC)
        (void)snprintf(err, err_len, "the rendered conversation is longer than the context");
    else if (r < 0)
        (void)snprintf(err, err_len, "the rendered conversation cannot be tokenized");
    else
        *ret_family = fam;
out:
    free(text);
    free(cm);
    return r;
}

/* ---- Per request: set-up (event thread) ---- */

void pl_daemon_reqfeat_init(struct pl_daemon_reqfeat *rf) {
    memset(rf, 0, offsetof(struct pl_daemon_reqfeat, hold));
}

void pl_daemon_reqfeat_done(struct pl_daemon_reqfeat *rf) {
    pl_stop_free(rf->stop);
    pl_grammar_state_free(rf->gst);
    pl_grammar_free(rf->grammar);
    free(rf->lp_logits);
    free(rf->lp);
    free(rf->top);
    pl_daemon_reqfeat_init(rf);
}

int pl_daemon_reqfeat_set_stop(struct pl_daemon_reqfeat *rf, const char *const *strs,
                               const size_t *lens, size_t n) {
    if (n == 0)
        return 0;
    if (n > PL_DAEMON_MAX_STOP)
        return -EINVAL;
    pl_stop_free(rf->stop);
    rf->stop = NULL;
    return pl_stop_new(strs, lens, n, &rf->stop);
}

int pl_daemon_reqfeat_set_grammar(struct pl_daemon_reqfeat *rf, const struct pl_daemon_features *f,
                                  const char *schema, size_t len, char *err, size_t err_len) {
    if (len > PL_DAEMON_MAX_SCHEMA) {
        (void)snprintf(err, err_len, "json_schema: over %u bytes", PL_DAEMON_MAX_SCHEMA);
        return -EINVAL;
    }
    int r = pl_grammar_compile_json(f->vocab, schema, len, &rf->grammar, err, err_len);
    if (r < 0) {
        rf->grammar = NULL;
        return r;
    }
    r = pl_grammar_state_new(rf->grammar, &rf->gst);
    if (r < 0) {
        pl_grammar_free(rf->grammar);
        rf->grammar = NULL;
        rf->gst = NULL;
        (void)snprintf(err, err_len, "out of memory for the grammar");
    }
    return r;
}

int pl_daemon_reqfeat_set_logprobs(struct pl_daemon_reqfeat *rf, uint32_t top_n, uint32_t n_vocab) {
    if (top_n > PL_DAEMON_MAX_TOP_LOGPROBS || n_vocab == 0)
        return -EINVAL;
    rf->lp_logits = malloc((size_t)n_vocab * sizeof(float));
    rf->lp = malloc(PL_DAEMON_LOGPROB_IDS * sizeof(float));
    rf->top = malloc((size_t)PL_DAEMON_LOGPROB_IDS * (top_n ? top_n : 1) * sizeof(*rf->top));
    if (!rf->lp_logits || !rf->lp || !rf->top) {
        free(rf->lp_logits);
        free(rf->lp);
        free(rf->top);
        rf->lp_logits = rf->lp = NULL;
        rf->top = NULL;
        return -ENOMEM;
    }
    rf->top_n = top_n;
    rf->n_vocab = n_vocab;
    return 0;
}

/* ---- Per token (inference thread) ---- */

void pl_daemon_reqfeat_start(struct pl_daemon_reqfeat *rf) {
    rf->fed = rf->emitted = 0;
    rf->n_hold = rf->n_lp = 0;
    if (rf->stop)
        pl_stop_reset(rf->stop);
    if (rf->gst)
        pl_grammar_state_reset(rf->gst);
}

int pl_daemon_reqfeat_pre_sample(struct pl_daemon_reqfeat *rf, float *logits,
                                 uint32_t n_remaining) {
    if (rf->gst && pl_grammar_mask(rf->gst, logits, n_remaining) <= 0)
        return -EINVAL;
    if (rf->lp)
        memcpy(rf->lp_logits, logits, (size_t)rf->n_vocab * sizeof(float));
    return 0;
}

int pl_daemon_reqfeat_post_sample(struct pl_daemon_reqfeat *rf, int32_t tok) {
    int ended = 0;
    if (rf->gst) {
        int r = pl_grammar_accept(rf->gst, tok);
        if (r < 0)
            return r;
        ended = r == 1;
    }
    if (rf->lp && rf->n_lp < PL_DAEMON_LOGPROB_IDS) {
        float chosen = -INFINITY;
        struct pl_logprob *top = rf->top + (size_t)rf->n_lp * rf->top_n;
        int n = pl_logprobs_compute(rf->lp_logits, rf->n_vocab, tok, rf->top_n,
                                    rf->top_n ? top : NULL, &chosen);
        /* Unreachable for logits the model produced; keep the arrays aligned anyway. */
        for (uint32_t i = n < 0 ? 0 : (uint32_t)n; i < rf->top_n; i++)
            top[i] = (struct pl_logprob){.id = -1, .logprob = -INFINITY};
        rf->lp[rf->n_lp++] = n < 0 ? -INFINITY : chosen;
    }
    return ended;
}

bool pl_daemon_reqfeat_room(const struct pl_daemon_reqfeat *rf) {
    return !rf->lp || rf->n_lp < PL_DAEMON_LOGPROB_IDS;
}

void pl_daemon_reqfeat_clear_logprobs(struct pl_daemon_reqfeat *rf) {
    rf->n_lp = 0;
}

/* Move held bytes up to stream offset upto into out. */
static void release(struct pl_daemon_reqfeat *rf, uint64_t upto, char *out, size_t *out_len) {
    uint32_t k = (uint32_t)(upto - rf->emitted);
    memcpy(out + *out_len, rf->hold, k);
    *out_len += k;
    memmove(rf->hold, rf->hold + k, rf->n_hold - k);
    rf->n_hold -= k;
    rf->emitted = upto;
}

int pl_daemon_reqfeat_text(struct pl_daemon_reqfeat *rf, const char *piece, size_t len, char *out,
                           size_t cap, size_t *out_len) {
    if (len > PL_DAEMON_PIECE_MAX)
        return -EINVAL;
    if (cap - *out_len < PL_DAEMON_TEXT_PER_TOKEN)
        return -ENOSPC;
    if (!rf->stop) {
        memcpy(out + *out_len, piece, len);
        *out_len += len;
        return 0;
    }
    /* The matcher holds back at most PL_STOP_MAX_LEN - 1 bytes, so hold has room for the
     * piece. */
    memcpy(rf->hold + rf->n_hold, piece, len);
    rf->n_hold += (uint32_t)len;
    rf->fed += len;
    struct pl_stop_result res;
    int m = pl_stop_feed(rf->stop, piece, len, &res);
    if (m < 0)
        return m;
    release(rf, res.safe, out, out_len);
    if (m == 1)
        rf->n_hold = 0; /* the stop string and anything after it are dropped */
    return m;
}

int pl_daemon_reqfeat_flush(struct pl_daemon_reqfeat *rf, char *out, size_t cap, size_t *out_len) {
    if (!rf->stop || rf->n_hold == 0)
        return 0;
    if (cap - *out_len < rf->n_hold)
        return -ENOSPC;
    struct pl_stop_result res;
    int m = pl_stop_flush(rf->stop, &res);
    if (m < 0)
        return m;
    if (m == 1) {
        rf->n_hold = 0;
        return 1;
    }
    release(rf, res.safe, out, out_len);
    return 0;
}
