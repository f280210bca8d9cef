/* SPDX-License-Identifier: MIT */
/* libpicolm: the client library applications link to use the model picolmd keeps resident.
 * This header is the whole public ABI (symbol version PICOLM_1.0): plain C11, opaque handles,
 * no access to internals. Link with `pkg-config --cflags --libs libpicolm`.
 *
 * Model of use:
 *   picolm_client *c;
 *   if (picolm_connect(NULL, &c) != PICOLM_OK) ...;          // $PICOLM_SOCKET or default
 *   struct picolm_generate_params p;
 *   picolm_generate_params_init(&p);
 *   p.prompt = "Once upon a time";
 *   struct picolm_result res = {.size = sizeof(res)};
 *   int r = picolm_generate(c, &p, on_chunk, user, &res);     // streams chunks to on_chunk
 *   ...
 *   picolm_close(c);
 *
 * Return values. Every function that can fail returns an int that is PICOLM_OK (0) or one of
 * the negative values of enum picolm_status; the numbers are stable within the major version
 * and new codes may be added (treat unknown negative values as errors). picolm_strerror()
 * names a code; picolm_last_error() gives the detail of the last failure on a client.
 *
 * Requests. A connection may have several requests in flight: each gets a request id (a
 * non-zero uint64 unique on the connection). Streams (picolm_stream_start) can be interleaved
 * freely; tokens arriving for one stream while another is read are queued in the stream
 * they belong to.
 *
 * Threads. A client handle and everything derived from it (streams) must be used by one
 * thread at a time; different handles are independent. The one exception is picolm_cancel(),
 * which may be called from any thread at any time (also from inside a callback) while the
 * handle is open. After fork(), only the parent may use handles opened before it (the child
 * shares their rings; it should connect anew).
 *
 * Structs with a `size` first field grow over time: the caller sets size to
 * sizeof(the struct as it knows it); the library reads (input) or writes (output) only that
 * many bytes. A size smaller than the first layout of the struct is PICOLM_E_INVALID (for
 * picolm_generate_params, PICOLM_GENERATE_PARAMS_SIZE_V0 is the first layout). An input struct
 * larger than the library knows is accepted when the extra bytes are all zero, else refused with
 * PICOLM_E_UNSUPPORTED. */
#ifndef PICOLM_H
#define PICOLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PICOLM_VERSION_MAJOR 1
#define PICOLM_VERSION_MINOR 0

/* Default socket when neither the argument nor $PICOLM_SOCKET names one. */
#define PICOLM_DEFAULT_SOCKET "/run/picolm/picolm.sock"

/* ---- Status codes ---- */

enum picolm_status {
    PICOLM_OK = 0,
    PICOLM_E_INVALID = -1,      /* a bad argument, or the broker refused a field's value */
    PICOLM_E_DENIED = -2,       /* the broker's policy refuses this caller or request */
    PICOLM_E_QUOTA = -3,        /* a policy limit (tokens, requests, rate) was hit */
    PICOLM_E_EXHAUSTED = -4,    /* the broker is out of sessions, KV memory or queue room */
    PICOLM_E_BROKER_GONE = -5,  /* the broker closed the connection or died */
    PICOLM_E_PROTOCOL = -6,     /* the broker sent something malformed; the handle is dead */
    PICOLM_E_CANCELLED = -7,    /* the request was cancelled (by picolm_cancel, the callback,
                                   an administrator or a draining broker) */
    PICOLM_E_UNREACHABLE = -8,  /* no broker listens on the socket (missing, refused) */
    PICOLM_E_VERSION = -9,      /* the broker speaks another major protocol version */
    PICOLM_E_NOMEM = -10,       /* out of memory in this process */
    PICOLM_E_TIMEOUT = -11,     /* the wait set with picolm_set_timeout() expired */
    PICOLM_E_CONTEXT = -12,     /* the prompt does not fit the model's context */
    PICOLM_E_UNSUPPORTED = -13, /* the broker or library does not support the request */
    PICOLM_E_NOT_FOUND = -14,   /* no such request in flight */
    PICOLM_E_RANGE = -15,       /* an output buffer is too small (the size needed is given) */
    PICOLM_E_SHUTDOWN = -16,    /* the broker is shutting down and takes no new work */
    PICOLM_E_INTERNAL = -17,    /* the broker failed internally */
    PICOLM_E_SYSTEM = -18,      /* an operating-system call failed (errno in last_error) */
};

/* A static English description of status (never NULL; "unknown status" for unknown codes). */
const char *picolm_strerror(int status);

/* ---- Connection ---- */

typedef struct picolm_client picolm_client;
typedef struct picolm_stream picolm_stream;

/* Connect to the broker: open a SOCK_SEQPACKET socket to socket_path (borrowed; NULL: the
 * value of $PICOLM_SOCKET if set and non-empty, else PICOLM_DEFAULT_SOCKET), handshake, map
 * the shared region and attach its rings. On success *ret is a new handle, owned by the
 * caller (release it with picolm_close()); on failure *ret is untouched. Errors:
 *   PICOLM_E_INVALID      ret is NULL, or the path is empty or too long for a socket
 *   PICOLM_E_UNREACHABLE  nothing listens there (ENOENT, ECONNREFUSED, not a socket...)
 *   PICOLM_E_DENIED       the broker's policy refused this process (or EACCES on the path)
 *   PICOLM_E_EXHAUSTED    the broker has no free session
 *   PICOLM_E_QUOTA        this user already has as many sessions as its policy allows
 *   PICOLM_E_VERSION      the broker speaks another major version
 *   PICOLM_E_BROKER_GONE  the broker hung up during the handshake
 *   PICOLM_E_TIMEOUT      the broker accepted but did not answer within 5 seconds
 *   PICOLM_E_INTERNAL     the broker failed to set the session up
 *   PICOLM_E_PROTOCOL     a malformed welcome or shared region
 *   PICOLM_E_NOMEM, PICOLM_E_SYSTEM
 * There is no handle to ask picolm_last_error() about on failure: pass err/err_len to
 * picolm_connect_ex() for a message. */
int picolm_connect(const char *socket_path, picolm_client **ret);

/* As picolm_connect(); on failure also writes a NUL-terminated message to err (borrowed,
 * err_len bytes; err may be NULL when err_len is 0). */
int picolm_connect_ex(const char *socket_path, picolm_client **ret, char *err, size_t err_len);

/* Close the connection and free the handle. Streams still open on it are freed too (their
 * handles become invalid). NULL is fine. */
void picolm_close(picolm_client *client);

/* The message of the last failure of a call on client (a static "" when none, or when client
 * is NULL). Borrowed: valid until the next call on client. */
const char *picolm_last_error(const picolm_client *client);

/* The session id the broker assigned (for logs and picoctl); 0 when client is NULL. */
uint64_t picolm_session_id(const picolm_client *client);

/* Waiting. When the library waits for the broker it first spins for spin_ns nanoseconds
 * (default 250000, or $PICOLM_SPIN_NS; 0: never spin), pausing for the first 2 us and then
 * yielding the CPU at each look, then sleeps on its doorbell. The spin saves a wake-up (10-50
 * us across CPUs on a virtual machine) when the answer comes within it; after 4 waits in a
 * row that it did not cover (a token stream slower than the spin) it is skipped, and tried
 * again once every 32 waits. A broker that dies is noticed while sleeping within
 * milliseconds. Returns PICOLM_OK or PICOLM_E_INVALID (client NULL, spin_ns above one
 * second). */
int picolm_set_spin(picolm_client *client, uint64_t spin_ns);

/* Bound every single wait for the broker to timeout_ms milliseconds (-1, the default: no
 * bound). A wait that expires fails the call with PICOLM_E_TIMEOUT; the request stays in
 * flight (a stream can be read again; a blocking call gives its request up). Returns
 * PICOLM_OK or PICOLM_E_INVALID (client NULL, timeout_ms < -1). */
int picolm_set_timeout(picolm_client *client, int timeout_ms);

/* ---- Generation ---- */

struct picolm_sampling {
    float temperature;       /* <= 0: greedy (argmax) */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* 0 or >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 0 or 1: off */
    int32_t penalty_last_n;  /* window of recent tokens the penalties look at */
    float frequency_penalty; /* 0: off */
    float presence_penalty;  /* 0: off */
    uint64_t seed;           /* used when has_seed is non-zero */
    uint32_t has_seed;       /* 0: the broker picks a seed and reports it in the result */
    uint32_t reserved;       /* zero */
};

/* picolm_generate_params.flags */
#define PICOLM_GEN_IGNORE_EOS 0x1u /* keep generating past end-of-generation tokens */
#define PICOLM_GEN_NO_STREAM 0x2u  /* the broker sends the whole text in one chunk at the end */

struct picolm_generate_params {
    size_t size; /* sizeof(struct picolm_generate_params) */
    /* Input: exactly one of prompt (text, tokenized by the broker with BOS as the model
     * wants) or tokens (ids used as given). All pointers are borrowed for the call only. */
    const char *prompt; /* NULL: use tokens */
    size_t prompt_len;  /* bytes of prompt; 0: strlen(prompt) */
    const int32_t *tokens;
    size_t n_tokens;
    uint32_t max_tokens; /* 0: until end of generation or a full context */
    uint32_t flags;      /* PICOLM_GEN_* */
    struct picolm_sampling sampling;
    const char *const *stop; /* n_stop NUL-terminated stop strings (may be NULL if 0): the
                                output ends before the first one that appears in it (matched
                                across token boundaries; the broker takes at most 16 of 1 to
                                256 bytes each). The result's finish_reason is then STOP. */
    size_t n_stop;
    /* ---- Fields added after the first layout (PICOLM_GENERATE_PARAMS_SIZE_V0 bytes). A
     * caller built against the older header passes the smaller size and gets the defaults
     * below (all zero). ---- */
    /* A third kind of input: a conversation of n_messages messages (borrowed array),
     * rendered by the broker with the model's chat template (or chat_template), tokenized
     * with special tokens parsed, and followed by the opening of an assistant turn. The
     * template's end-of-turn strings are then stop strings too. Exactly one of prompt,
     * tokens and messages is given. */
    const struct picolm_message *messages;
    size_t n_messages;         /* 1..1024 when messages is set */
    const char *chat_template; /* NULL or "": the model's own template; else a family name:
                                  "llama2", "llama3", "chatml" ("qwen"), "zephyr",
                                  "mistral", "phi3", "gemma" (needs messages) */
    /* Constrained output. format "json" (or a json_schema): the output is one JSON object
     * (JSON mode) or a value valid against json_schema (a JSON-Schema subset, at most 16 KiB;
     * see the picolm(1) manual). NULL / "": unconstrained. */
    const char *format;
    const char *json_schema; /* NULL: none; json_schema_len bytes (0: strlen) */
    size_t json_schema_len;
    /* Log-probabilities: 0 none; N (1..20): each generated token's log-probability and the N
     * most likely tokens at its position, read with picolm_chunk_logprob() and
     * picolm_chunk_top(). */
    uint32_t logprobs;
    uint32_t reserved; /* zero */
};

/* One chat message (both strings NUL-terminated, valid UTF-8, borrowed for the call). role:
 * 1..64 bytes, e.g. "system", "user", "assistant" (which roles and orders are allowed
 * depends on the template); content: NULL means "". */
struct picolm_message {
    const char *role;
    const char *content;
};

/* sizeof(struct picolm_generate_params) of the first layout (up to n_stop): callers built
 * against it keep working; the fields after it are then zero. */
#define PICOLM_GENERATE_PARAMS_SIZE_V0                                                             \
    (offsetof(struct picolm_generate_params, n_stop) + sizeof(size_t))

/* Fill p with defaults: size set, no input, max_tokens 0, flags 0, sampling temperature 0.8,
 * top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1, penalty_last_n 64, no seed, no stop
 * strings, messages, format, schema or logprobs. Set
 * sampling.temperature = 0 for greedy decoding. p NULL is ignored. */
void picolm_generate_params_init(struct picolm_generate_params *p);

/* Why a generation ended (picolm_result.finish_reason). */
enum picolm_finish {
    PICOLM_FINISH_UNSPECIFIED = 0,
    PICOLM_FINISH_LENGTH = 1,    /* max_tokens reached or the context is full */
    PICOLM_FINISH_STOP = 2,      /* a stop string matched */
    PICOLM_FINISH_EOS = 3,       /* an end-of-generation token */
    PICOLM_FINISH_CANCELLED = 4, /* cancelled (the call then returns PICOLM_E_CANCELLED) */
};

/* The outcome of one generation, written when the broker reports the end. */
struct picolm_result {
    size_t size; /* set by the caller: sizeof(struct picolm_result) */
    uint64_t request_id;
    uint32_t finish_reason; /* enum picolm_finish */
    uint32_t prompt_tokens;
    uint32_t generated_tokens;
    uint32_t reserved;
    uint64_t queue_ns; /* broker: from receipt to the first scheduled step */
    uint64_t prefill_ns;
    uint64_t decode_ns;
    uint64_t ttft_ns; /* broker: from receipt to the first token */
    uint64_t seed;    /* the seed used */
    char reason[128]; /* broker's detail, NUL-terminated, may be "" */
};

/* A batch of generated tokens. All pointers are borrowed: valid until the callback returns
 * or the next call on the client, whichever comes first (a callback that calls into the same
 * client must copy what it still needs first). */
struct picolm_chunk {
    uint64_t request_id;
    const int32_t *ids; /* n_ids token ids */
    size_t n_ids;
    const char *text; /* text_len bytes: the exact pieces of ids; a UTF-8 sequence may
                         be split across chunks; not NUL-terminated */
    size_t text_len;
};

/* Log-probabilities of a chunk's tokens, when the request asked for them (logprobs N > 0).
 * chunk must be one libpicolm filled (picolm_stream_next() or the picolm_generate()
 * callback) and still valid (see above); the values are natural logarithms, -INFINITY for
 * a token the output grammar excluded.
 *
 * picolm_chunk_n_top(): how many alternatives each token of the chunk has (N as requested;
 * 0 when the chunk carries no logprobs, or chunk is NULL).
 *
 * picolm_chunk_logprob(): *ret_logprob = log p(ids[i]) at its position. Returns PICOLM_OK,
 * PICOLM_E_INVALID (chunk or ret_logprob NULL, a chunk libpicolm did not fill),
 * PICOLM_E_NOT_FOUND (the chunk carries no logprobs: not requested, or bytes without
 * tokens), PICOLM_E_RANGE (i >= n_ids). Nothing is written on failure.
 *
 * picolm_chunk_top(): the j-th most likely token (0: the most likely) at the position of
 * ids[i]: *ret_id (-1 when the vocabulary had fewer than N tokens to offer) and
 * *ret_logprob (either may be NULL). Sorted by decreasing probability, the lower id first on
 * a tie. Returns as picolm_chunk_logprob(), and PICOLM_E_RANGE for j >= picolm_chunk_n_top(). */
size_t picolm_chunk_n_top(const struct picolm_chunk *chunk);
int picolm_chunk_logprob(const struct picolm_chunk *chunk, size_t i, float *ret_logprob);
int picolm_chunk_top(const struct picolm_chunk *chunk, size_t i, size_t j, int32_t *ret_id,
                     float *ret_logprob);

/* Streaming callback of picolm_generate(): called once per chunk, in order. Return 0 to go
 * on; any other value cancels the request (the call then returns PICOLM_E_CANCELLED). */
typedef int (*picolm_token_cb)(void *user, const struct picolm_chunk *chunk);

/* Run one generation to its end, calling cb (may be NULL) for every chunk. user is passed
 * through. ret (may be NULL; else ret->size must be set) receives the result. Blocks until
 * the broker reports the end; other requests' traffic on the connection is queued for them.
 * Returns PICOLM_OK, or:
 *   PICOLM_E_INVALID      NULL client/params, bad size, no or two inputs, an input too large
 *                         for one record, a non-zero reserved field, a NULL stop string or
 *                         message role, an empty role, a string that is not valid UTF-8,
 *                         chat_template without messages, logprobs above 1024 (the broker
 *                         takes 20); or the broker refused a value (last_error names it:
 *                         too many or too long stop strings, a format other than "json", a
 *                         schema it cannot compile, roles the template does not allow, an
 *                         unknown template name)
 *   PICOLM_E_UNSUPPORTED  also: messages without chat_template for a model whose template
 *                         the broker does not recognise
 *   PICOLM_E_CANCELLED    cb asked to stop, picolm_cancel() or the broker cancelled; ret is
 *                         filled (finish_reason CANCELLED) when the broker said so
 *   PICOLM_E_CONTEXT, PICOLM_E_DENIED, PICOLM_E_QUOTA, PICOLM_E_EXHAUSTED,
 *   PICOLM_E_UNSUPPORTED, PICOLM_E_SHUTDOWN, PICOLM_E_INTERNAL   from the broker
 *   PICOLM_E_BROKER_GONE, PICOLM_E_PROTOCOL, PICOLM_E_TIMEOUT, PICOLM_E_NOMEM,
 *   PICOLM_E_SYSTEM */
int picolm_generate(picolm_client *client, const struct picolm_generate_params *params,
                    picolm_token_cb cb, void *user, struct picolm_result *ret);

/* Iterator form. Submit a generation and return at once with *ret a new stream (owned by the
 * caller: finish it with picolm_stream_end()). Errors as picolm_generate() for the checks
 * done before sending (INVALID, NOMEM, BROKER_GONE, PROTOCOL, TIMEOUT when the submission
 * ring stays full). */
int picolm_stream_start(picolm_client *client, const struct picolm_generate_params *params,
                        picolm_stream **ret);

/* The request id of a stream (for picolm_cancel()); 0 for NULL. */
uint64_t picolm_stream_id(const picolm_stream *stream);

/* Wait for the next chunk of the stream. Returns 1 with *ret_chunk filled (borrowed until the
 * next call on the client); 0 when the generation finished normally (further calls keep
 * returning 0); or an error as picolm_generate() returns (PICOLM_E_CANCELLED when it was
 * cancelled), and keeps returning that error. PICOLM_E_TIMEOUT is not final: call again. */
int picolm_stream_next(picolm_stream *stream, struct picolm_chunk *ret_chunk);

/* Finish a stream: if it is still running, cancel it and wait for the broker to confirm
 * (chunks still arriving are dropped); then write the result to ret (may be NULL; else
 * ret->size must be set; written when the broker reported an end) and free the stream.
 * Returns the stream's final status: PICOLM_OK when it finished normally before it was ended,
 * PICOLM_E_CANCELLED when it was cancelled (also by this call), or its error. NULL returns
 * PICOLM_E_INVALID. */
int picolm_stream_end(picolm_stream *stream, struct picolm_result *ret);

/* Ask the broker to stop request request_id of this client. Asynchronous: the request ends
 * soon after with PICOLM_E_CANCELLED (or normally, if it was already done). Callable from any
 * thread. Returns PICOLM_OK, PICOLM_E_INVALID (client NULL), PICOLM_E_NOT_FOUND (an id this
 * client never issued), PICOLM_E_BROKER_GONE, PICOLM_E_PROTOCOL, PICOLM_E_TIMEOUT. */
int picolm_cancel(picolm_client *client, uint64_t request_id);

/* ---- Tokenizer and model ---- */

/* picolm_tokenize flags */
#define PICOLM_TOK_ADD_SPECIAL 0x1u   /* add BOS/EOS as the model wants */
#define PICOLM_TOK_PARSE_SPECIAL 0x2u /* match special-token text (e.g. "<s>") as tokens */

/* Tokenize text (len bytes, borrowed; len 0: strlen(text)) with the broker's model into ids
 * (cap entries, may be NULL when cap is 0). *ret_n receives the number of ids on PICOLM_OK and
 * the number needed on PICOLM_E_RANGE (ids then untouched). Other errors: PICOLM_E_INVALID
 * (NULL client/text/ret_n, unknown flag, text too large for one record), and the broker and
 * connection errors of picolm_generate(). */
int picolm_tokenize(picolm_client *client, const char *text, size_t len, uint32_t flags,
                    int32_t *ids, size_t cap, size_t *ret_n);

/* Turn ids (n_ids entries, borrowed) back into text: writes the bytes into buf (cap bytes) and
 * a terminating NUL when there is room for it; *ret_len receives the byte count (without the
 * NUL) on PICOLM_OK and the count needed on PICOLM_E_RANGE (buf then untouched). Errors as
 * picolm_tokenize() (PICOLM_E_INVALID also for a bad id, from the broker). */
int picolm_detokenize(picolm_client *client, const int32_t *ids, size_t n_ids, char *buf,
                      size_t cap, size_t *ret_len);

struct picolm_model_info {
    size_t size;           /* set by the caller: sizeof(struct picolm_model_info) */
    char name[128];        /* NUL-terminated, truncated if longer; "" when unknown */
    char architecture[32]; /* e.g. "llama" */
    char tokenizer[32];    /* e.g. "llama" (SentencePiece) or "gpt2" (byte-level BPE) */
    uint32_t n_vocab;
    uint32_t n_ctx; /* the context one request may use */
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint64_t n_params;
    uint64_t file_bytes;
    int32_t bos; /* -1: none */
    int32_t eos; /* -1: none */
};

/* Ask the broker about its model; fills ret up to ret->size. Errors: PICOLM_E_INVALID (NULL,
 * size too small) and the broker and connection errors of picolm_generate(). */
int picolm_model_info(picolm_client *client, struct picolm_model_info *ret);

#ifdef __cplusplus
}
#endif

#endif
