/* SPDX-License-Identifier: MIT */
/* Per-request output features of a Generate (pl_daemon_features_*, pl_daemon_reqfeat_*):
 * chat messages rendered with the model's template, JSON / JSON-Schema constrained output,
 * stop strings matched across token boundaries (the engine's Aho-Corasick matcher with a
 * hold-back buffer), and logprobs. The event thread (dispatch.c) validates the fields and
 * builds a request's state; the inference thread (scheduler.c) uses it per token without
 * allocating; the event thread frees it when the request slot is released. */
#ifndef PL_DAEMON_REQUEST_FEATURES_H
#define PL_DAEMON_REQUEST_FEATURES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pl/engine_logprobs.h"
#include "pl/engine_stop.h"

struct pl_model;
struct pl_grammar;
struct pl_grammar_state;
struct pl_daemon_features;

/* Limits on what one Generate may ask for. */
#define PL_DAEMON_MAX_STOP PL_STOP_MAX         /* stop strings */
#define PL_DAEMON_MAX_STOP_LEN PL_STOP_MAX_LEN /* bytes per stop string */
#define PL_DAEMON_MAX_MSGS 1024u               /* chat messages */
#define PL_DAEMON_MAX_ROLE 64u                 /* bytes of a role */
#define PL_DAEMON_MAX_SCHEMA (16u * 1024)      /* bytes of a JSON schema */
#define PL_DAEMON_MAX_TOP_LOGPROBS 20u         /* top-N logprobs per token */
/* Bytes of one token's piece the output path handles (longer pieces give no text). */
#define PL_DAEMON_PIECE_MAX 512u
/* Text a request may hold back for a stop string, plus one piece: what one token can add to
 * the output at most. */
#define PL_DAEMON_TEXT_PER_TOKEN (PL_DAEMON_MAX_STOP_LEN + PL_DAEMON_PIECE_MAX)
/* Tokens buffered per TokenChunk when logprobs are on (keeps the record small). */
#define PL_DAEMON_LOGPROB_IDS 64u

/* ---- Per model (event thread) ---- */

/* Detect the model's chat template and build the grammar vocabulary. A model without a
 * recognised template still works (messages then need an explicit template name). Borrows
 * m. Returns 0, -ENOMEM, or the grammar vocabulary's error. */
int pl_daemon_features_new(const struct pl_model *m, struct pl_daemon_features **ret);
void pl_daemon_features_free(struct pl_daemon_features *f);
/* The family detected from tokenizer.chat_template (enum pl_chat_family), or 0. */
int pl_daemon_features_chat_family(const struct pl_daemon_features *f);

/* One chat message as decoded from the request (borrowed). */
struct pl_daemon_chat_msg {
    const char *role;
    const char *content;
};

/* Render n messages with the template named tmpl ("" or NULL: the model's) and tokenize
 * the text (special tokens parsed, BOS as the template and vocabulary want) into out (cap
 * ids). *ret_family gets the family used. Returns 0 or a negative code with a message for
 * the client in err: -EINVAL (bad messages, unknown template name), -PL_ERR_UNSUPPORTED (no
 * template named and none recognised in the model), -ENOSPC (longer than cap), -ENOMEM. */
int pl_daemon_features_render_chat(const struct pl_daemon_features *f,
                                   const struct pl_daemon_chat_msg *msgs, size_t n,
                                   const char *tmpl, int32_t *out, size_t cap, size_t *ret_n,
                                   int *ret_family, char *err, size_t err_len);

/* ---- Per request ---- */

struct pl_daemon_reqfeat {
    /* [event] set up before the hand-over, freed after it */
    struct pl_stop *stop;       /* NULL: no stop strings */
    struct pl_grammar *grammar; /* NULL: unconstrained */
    struct pl_grammar_state *gst;
    uint32_t top_n;         /* top logprobs per token; logprobs on when lp != NULL */
    float *lp_logits;       /* [n_vocab] logits before sampling (logprobs only) */
    float *lp;              /* [PL_DAEMON_LOGPROB_IDS] chosen logprobs */
    struct pl_logprob *top; /* [PL_DAEMON_LOGPROB_IDS][top_n] */
    uint32_t n_vocab;
    /* [infer] */
    uint64_t fed;     /* stream bytes given to the stop matcher */
    uint64_t emitted; /* stream bytes released to the output */
    uint32_t n_hold;  /* bytes [emitted, fed) */
    uint32_t n_lp;    /* tokens with logprobs buffered */
    char hold[PL_DAEMON_TEXT_PER_TOKEN];
};

/* Zero state: no features. */
void pl_daemon_reqfeat_init(struct pl_daemon_reqfeat *rf);
/* Free what rf holds and zero it (event thread). */
void pl_daemon_reqfeat_done(struct pl_daemon_reqfeat *rf);

/* Stop strings (borrowed, copied): n strings of 1..PL_DAEMON_MAX_STOP_LEN bytes, at most
 * PL_DAEMON_MAX_STOP. Returns 0, -EINVAL, -ENOMEM. */
int pl_daemon_reqfeat_set_stop(struct pl_daemon_reqfeat *rf, const char *const *strs,
                               const size_t *lens, size_t n);
/* Constrain output to JSON (schema NULL) or the schema (len bytes, untrusted). Returns 0 or
 * a negative code with the compiler's message in err. */
int pl_daemon_reqfeat_set_grammar(struct pl_daemon_reqfeat *rf, const struct pl_daemon_features *f,
                                  const char *schema, size_t len, char *err, size_t err_len);
/* Ask for logprobs with top_n (<= PL_DAEMON_MAX_TOP_LOGPROBS) alternatives per token.
 * Returns 0, -EINVAL, -ENOMEM. */
int pl_daemon_reqfeat_set_logprobs(struct pl_daemon_reqfeat *rf, uint32_t top_n, uint32_t n_vocab);

/* ---- Per token (inference thread; nothing allocated) ---- */

/* Reset the per-generation state before the request runs. */
void pl_daemon_reqfeat_start(struct pl_daemon_reqfeat *rf);
/* Before sampling: apply the grammar mask to logits[n_vocab] (n_remaining tokens may still
 * be generated counting this one, 0: no limit) and keep a copy for logprobs. Returns 0, or
 * -EINVAL when the grammar allows no token. */
int pl_daemon_reqfeat_pre_sample(struct pl_daemon_reqfeat *rf, float *logits, uint32_t n_remaining);
/* After sampling tok: advance the grammar and record logprobs. Returns 0, 1 when the
 * grammar ended (tok is an EOG accepted on a complete value), -EINVAL (tok refused by the
 * grammar: a sampler bug). */
int pl_daemon_reqfeat_post_sample(struct pl_daemon_reqfeat *rf, int32_t tok);
/* Whether another token fits the buffered logprobs. */
bool pl_daemon_reqfeat_room(const struct pl_daemon_reqfeat *rf);
/* Forget buffered logprobs (they were written out). */
void pl_daemon_reqfeat_clear_logprobs(struct pl_daemon_reqfeat *rf);

/* One generated piece: bytes now final are appended to out (cap bytes, *out_len updated;
 * room for PL_DAEMON_TEXT_PER_TOKEN more is required). Returns 1 when a stop string
 * completed (out then ends right before it), 0 otherwise, -ENOSPC (no room; nothing
 * changed), -EINVAL (len above PL_DAEMON_PIECE_MAX). */
int pl_daemon_reqfeat_text(struct pl_daemon_reqfeat *rf, const char *piece, size_t len, char *out,
                           size_t cap, size_t *out_len);
/* The request ended without a stop match: release the held bytes (out needs room for
 * them). Same returns. */
int pl_daemon_reqfeat_flush(struct pl_daemon_reqfeat *rf, char *out, size_t cap, size_t *out_len);

#endif
