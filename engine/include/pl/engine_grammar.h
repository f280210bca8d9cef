/* SPDX-License-Identifier: MIT */
/* Grammar-constrained generation: JSON. A byte-level pushdown automaton accepts exactly
 * the JSON texts of a grammar (JSON mode: any object; or a JSON-Schema subset compiled to
 * the same automaton), and per-step token masks are computed by walking a byte trie of the
 * vocabulary with the automaton, pruning a whole subtree at the first rejected byte, with
 * masks cached per automaton state. The daemon and the in-process CLI use it for
 * `--format json` / `--json-schema`.
 *
 * Objects: a pl_grammar_vocab per tokenizer (immutable, shared), a pl_grammar per schema
 * (immutable, shared), a pl_grammar_state per generation (mutable, one thread at a time;
 * every buffer allocated by pl_grammar_state_new(), nothing allocated per token).
 *
 * The accepted language is a subset of JSON chosen to make generation terminate: no
 * whitespace before or after the top-level value, at most PL_GRAMMAR_MAX_WS whitespace bytes
 * (space, tab, newline) in a row between tokens of a container, numbers with at most 18
 * integer and 18 fraction digits and a 2-digit exponent, \u escapes that are not surrogates,
 * strings of valid UTF-8, nesting at most PL_GRAMMAR_MAX_DEPTH deep. */
#ifndef PL_ENGINE_ENGINE_GRAMMAR_H
#define PL_ENGINE_ENGINE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_GRAMMAR_MAX_WS 4u
#define PL_GRAMMAR_MAX_DEPTH 32u
#define PL_GRAMMAR_MAX_PIECE 128u /* longer token pieces are never allowed */
#define PL_GRAMMAR_MAX_SCHEMA (1u << 20)

struct pl_tokenizer;
struct pl_grammar_vocab;
struct pl_grammar;
struct pl_grammar_state;

/* Byte trie of every token piece of t (borrowed; only read during the call). Control and
 * empty-piece tokens are excluded, EOG tokens are remembered separately. Build once per
 * model. Errors: -EINVAL, -ENOMEM. */
int pl_grammar_vocab_new(const struct pl_tokenizer *t, struct pl_grammar_vocab **ret);
void pl_grammar_vocab_free(struct pl_grammar_vocab *v);

/* Compile a grammar. schema NULL: JSON mode (the top-level value is an object, any
 * content). Otherwise schema is a JSON-Schema document (len bytes, untrusted) in this
 * subset: "type" (a name or an array of names: object, array, string, integer, number,
 * boolean, null); object "properties" (up to 64, generated in declaration order), "required",
 * "additionalProperties" (false, true or a schema: used when no properties are declared;
 * with declared properties only those are generated); array "items" (a schema),
 * "minItems", "maxItems"; string "minLength", "maxLength" (code points); "enum" and "const"
 * of any JSON values (values not matching a "type" beside them are dropped); nested
 * schemas up to 16 deep; `true` / `{}` mean any value. Annotations (title, description,
 * default, examples, format, $schema, $id, $comment, readOnly, writeOnly, deprecated) are
 * ignored; any other keyword is refused so that no output can break a constraint.
 * v is borrowed and must outlive the grammar; it may be NULL for a grammar used only with
 * pl_grammar_feed_text() (no masks).
 * Errors (message in err when err_len > 0): -EINVAL (malformed JSON or schema, an
 * unsatisfiable bound), -PL_ERR_UNSUPPORTED (a keyword or form outside the subset, limits
 * exceeded), -ENOMEM. */
int pl_grammar_compile_json(const struct pl_grammar_vocab *v, const char *schema, size_t len,
                            struct pl_grammar **ret, char *err, size_t err_len);
void pl_grammar_free(struct pl_grammar *g);

/* A generation's state, at the start of the text. g is borrowed and must outlive it.
 * Errors: -EINVAL, -ENOMEM. */
int pl_grammar_state_new(const struct pl_grammar *g, struct pl_grammar_state **ret);
void pl_grammar_state_free(struct pl_grammar_state *st);
/* Back to the start of the text (the mask cache is kept: it stays valid). */
void pl_grammar_state_reset(struct pl_grammar_state *st);

/* Set logits[n_vocab] of every token the grammar does not allow next to -INFINITY. A
 * token is allowed when its whole piece is accepted; EOG tokens only when the text is
 * complete. n_remaining is how many more tokens may be generated counting this one (0: no
 * limit): with a limit, only tokens after which the shortest completion (in bytes) fits in
 * the tokens left are allowed, and once that is impossible only tokens that shorten it, so
 * the value is closed in time whenever the vocabulary has single-byte tokens. Returns the
 * number of allowed tokens (EOG included), -EINVAL (NULL, no vocabulary, the state already
 * ended). Allocates nothing. */
int pl_grammar_mask(struct pl_grammar_state *st, float *logits, uint32_t n_remaining);

/* Advance over a sampled token. Returns 0, 1 when token is an EOG token accepted on a
 * complete text (the state has ended), -EINVAL (token not allowed here; the state is
 * unchanged). */
int pl_grammar_accept(struct pl_grammar_state *st, int32_t token);

/* Advance over len bytes of text (e.g. a forced prefix, or tests). 0, or -EINVAL when a
 * byte is rejected (the state is unchanged). */
int pl_grammar_feed_text(struct pl_grammar_state *st, const char *text, size_t len);

/* True when the text so far is a complete value (EOG would be allowed). */
bool pl_grammar_state_complete(const struct pl_grammar_state *st);
/* Fewest bytes that complete the text (0 when complete; saturates at UINT32_MAX). */
uint32_t pl_grammar_state_distance(const struct pl_grammar_state *st);

#endif
