/* SPDX-License-Identifier: MIT */
/* picolm: the user CLI. Subcommands generate / tokenize / eval / info / chat, served by
 * picolmd through libpicolm (the default; `--socket PATH`, else $PICOLM_SOCKET, else
 * /run/picolm/picolm.sock) or run in-process with `--model FILE`, through the backend table
 * of cli_backend.h (cli_daemon.c, cli_local.c).
 * Exit status: 0 success, 1 a runtime failure (I/O, memory, forward pass, an error reported by
 * the broker), 2 a usage error: bad or missing arguments, or a model file that is missing,
 * unreadable or malformed, 3 the broker is unreachable. Every error is one line on stderr
 * starting with "picolm: ". */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_args.h"
#include "cli_backend.h"
#include "cli_json.h"
#include "picolm.h"
#include "pl/engine_model.h"
#include "pl/engine_sampler.h"
#include "pl/engine_stop.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
#define EXIT_UNREACHABLE 3

#define PL_CLI_VERSION "0.1.0"
#define PL_CLI_DEFAULT_SOCKET PICOLM_DEFAULT_SOCKET

/* stdout buffer: output is flushed per token anyway, the buffer batches the rest. */
#define STDOUT_BUF_BYTES (64u << 10)

/* Largest --json-schema file (picolmd's limit) and --messages file. */
#define PL_CLI_MAX_SCHEMA (16u * 1024)
#define PL_CLI_MAX_MESSAGES_FILE (64u << 20)

__attribute__((format(printf, 1, 2))) static void die_line(const char *fmt, ...);

/* Print "picolm: <message>" as one line on stderr (newlines in the message are flattened). */
static void die_line(const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    (void)fprintf(stderr, "picolm: %s\n", buf);
}

/* ---- Options shared by the subcommands ---- */

struct common_opts {
    const char *model;
    const char *socket;
    int64_t threads;
    int64_t ctx;
    const char *kv_type;
    bool verbose;
};

#define COMMON_OPTS(c)                                                                             \
    {"model",                                                                                      \
     'm',                                                                                          \
     PL_CLI_OPT_STR,                                                                               \
     &(c)->model,                                                                                  \
     0,                                                                                            \
     0,                                                                                            \
     false,                                                                                        \
     false,                                                                                        \
     "FILE",                                                                                       \
     "GGUF model to run in-process (default: ask the daemon)",                                     \
     false},                                                                                       \
        {"socket",                                                                                 \
         0,                                                                                        \
         PL_CLI_OPT_STR,                                                                           \
         &(c)->socket,                                                                             \
         0,                                                                                        \
         0,                                                                                        \
         false,                                                                                    \
         false,                                                                                    \
         "PATH",                                                                                   \
         "picolmd socket (default: $PICOLM_SOCKET, else " PL_CLI_DEFAULT_SOCKET ")",               \
         false},                                                                                   \
        {"threads", 't',   PL_CLI_OPT_I64, &(c)->threads, 0,                                       \
         512,       false, false,          "N",           "worker threads (0: one per CPU)",       \
         false},                                                                                   \
        {"ctx",                                                                                    \
         'c',                                                                                      \
         PL_CLI_OPT_I64,                                                                           \
         &(c)->ctx,                                                                                \
         1,                                                                                        \
         1048576,                                                                                  \
         false,                                                                                    \
         false,                                                                                    \
         "N",                                                                                      \
         "context length in tokens (default: min(trained length, 4096))",                          \
         false},                                                                                   \
        {"kv-type", 0,     PL_CLI_OPT_STR, &(c)->kv_type, 0,                                       \
         0,         false, false,          "f16|f32",     "KV cache element type (default f16)",   \
         false},                                                                                   \
    {                                                                                              \
        "verbose", 'v', PL_CLI_OPT_FLAG, &(c)->verbose, 0, 0, false, false, NULL,                  \
            "print the seed, token counts and timings on stderr", false                            \
    }

/* Open the daemon backend (default) or the in-process one (--model). Returns 0, or the exit
 * status after printing the error: EXIT_USAGE, EXIT_UNREACHABLE or EXIT_RUNTIME. */
static int open_backend(const struct common_opts *c, struct pl_cli_backend **ret) {
    struct pl_cli_local_opts lo = {
        .n_threads = (uint32_t)c->threads,
        .n_ctx = (uint32_t)c->ctx,
        .kv_type = PL_KV_F16,
    };
    char err[512] = "";
    if (c->model && c->socket) {
        die_line("--model and --socket exclude each other (in-process or through the daemon)");
        return EXIT_USAGE;
    }
    if (!c->model) {
        if (c->threads || c->ctx || c->kv_type) {
            die_line("--threads, --ctx and --kv-type apply to --model only (the daemon has its "
                     "own settings)");
            return EXIT_USAGE;
        }
        int r = pl_cli_daemon_open(c->socket, ret, err, sizeof(err));
        if (r == -ECONNREFUSED) {
            die_line("broker unreachable: %s (start picolmd, or use --model FILE)", err);
            return EXIT_UNREACHABLE;
        }
        if (r < 0) {
            die_line("broker: %s", err[0] ? err : pl_strerror(r));
            return EXIT_RUNTIME;
        }
        return 0;
    }
    if (c->kv_type) {
        if (strcmp(c->kv_type, "f16") == 0) {
            lo.kv_type = PL_KV_F16;
        } else if (strcmp(c->kv_type, "f32") == 0) {
            lo.kv_type = PL_KV_F32;
        } else {
            die_line("--kv-type: expected 'f16' or 'f32', got '%.64s'", c->kv_type);
            return EXIT_USAGE;
        }
    }
    int r = pl_cli_local_open(c->model, &lo, ret, err, sizeof(err));
    if (r < 0) {
        die_line("--model: cannot load '%.512s': %s", c->model, err[0] ? err : pl_strerror(r));
        return EXIT_USAGE;
    }
    return 0;
}

/* Exit status for a failed backend operation: bad input (also a request the model cannot
 * serve as asked, e.g. messages without a template) is a usage error. */
static int fail_op(struct pl_cli_backend *b, const char *what, int r) {
    die_line("%s: %s", what, b->err[0] ? b->err : pl_strerror(r));
    return (r == -EINVAL || r == -E2BIG || r == -PL_ERR_UNSUPPORTED) ? EXIT_USAGE : EXIT_RUNTIME;
}

/* Parse a subcommand's options; prints help (returns 0 with *ret_done) or the error. */
static int parse_or_help(const char *cmd, const char *synopsis, const char *about,
                         struct pl_cli_opt *opts, size_t n_opts, int argc, char **argv,
                         bool *ret_done) {
    char err[PL_CLI_ERR_LEN];
    int r = pl_cli_args_parse(opts, n_opts, argc, argv, err, sizeof(err));
    *ret_done = false;
    if (r == 1) {
        (void)printf("usage: picolm %s %s\n\n%s\n\noptions:\n", cmd, synopsis, about);
        pl_cli_args_usage(opts, n_opts, stdout);
        *ret_done = true;
        return 0;
    }
    if (r == -ENOENT) {
        die_line("%s: %s (see 'picolm %s --help')", cmd, err, cmd);
        return EXIT_USAGE;
    }
    if (r < 0) {
        die_line("%s", err);
        return EXIT_USAGE;
    }
    return 0;
}

static bool write_ok(FILE *f) {
    return fflush(f) == 0 && !ferror(f);
}

/* ---- generate ---- */

struct gen_sink {
    bool json;
    FILE *out;
    int32_t *tokens; /* --json: generated ids */
    size_t n_tokens, cap_tokens;
    char *text; /* --json: generated bytes */
    size_t len_text, cap_text;
    /* --json --logprobs N: per generated id, its logprob and n_top alternatives */
    uint32_t n_top;
    bool any_lp;
    float *lp;              /* [n_tokens]; NAN when unknown */
    struct pl_logprob *top; /* [n_tokens][n_top] */
    size_t cap_lp, cap_top;
};

/* Grow *buf to hold need elements of size sz (doubling: amortised O(1) per token). */
static int grow(void **buf, size_t *cap, size_t need, size_t sz) {
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 256;
    while (n < need)
        n *= 2;
    void *p = realloc(*buf, n * sz);
    if (!p)
        return -ENOMEM;
    *buf = p;
    *cap = n;
    return 0;
}

static int on_token(void *ud, const struct pl_cli_token *t) {
    struct gen_sink *s = ud;
    const char *piece = t->piece;
    size_t len = t->len;
    if (s->json) {
        if (grow((void **)&s->tokens, &s->cap_tokens, s->n_tokens + 1, sizeof(int32_t)) < 0 ||
            grow((void **)&s->text, &s->cap_text, s->len_text + len, 1) < 0)
            return -ENOMEM;
        if (s->n_top || t->has_logprob) {
            if (grow((void **)&s->lp, &s->cap_lp, s->n_tokens + 1, sizeof(float)) < 0 ||
                grow((void **)&s->top, &s->cap_top, (s->n_tokens + 1) * (s->n_top + 1),
                     sizeof(struct pl_logprob)) < 0)
                return -ENOMEM;
        }
        if (t->id >= 0) { /* -1: bytes without a token of their own */
            if (s->lp) {
                s->lp[s->n_tokens] = t->has_logprob ? t->logprob : NAN;
                for (uint32_t j = 0; j < s->n_top; j++)
                    s->top[s->n_tokens * s->n_top + j] =
                        t->has_logprob && j < t->n_top
                            ? t->top[j]
                            : (struct pl_logprob){.id = -1, .logprob = NAN};
                s->any_lp |= t->has_logprob;
            }
            s->tokens[s->n_tokens++] = t->id;
        }
        if (len)
            memcpy(s->text + s->len_text, piece, len);
        s->len_text += len;
        return 0;
    }
    /* Raw bytes: a UTF-8 character split over two tokens is completed by the next write. */
    if (len && fwrite(piece, 1, len, s->out) != len)
        return -EIO;
    if (fflush(s->out) != 0)
        return -EIO;
    return 0;
}

static uint64_t clock_seed(void) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)getpid() << 32;
    /* One splitmix64 round so that close clocks give unrelated seeds. */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void print_ids_json(FILE *f, const int32_t *ids, size_t n) {
    if (!ids && n) {
        (void)fputs("null", f); /* not known (messages rendered by the daemon) */
        return;
    }
    (void)fputc('[', f);
    for (size_t i = 0; i < n; i++)
        (void)fprintf(f, i ? ",%" PRId32 : "%" PRId32, ids[i]);
    (void)fputc(']', f);
}

/* A logprob as JSON: a number, or null for -inf / unknown (JSON has no infinities). */
static void print_lp_json(FILE *f, float v) {
    if (isfinite(v))
        (void)fprintf(f, "%.9g", (double)v);
    else
        (void)fputs("null", f);
}

/* "logprobs":[{"id":..,"logprob":..,"top":[{"id":..,"logprob":..},...]},...] */
static void print_logprobs_json(FILE *f, const struct gen_sink *s) {
    (void)fputs(",\"logprobs\":[", f);
    for (size_t i = 0; i < s->n_tokens; i++) {
        (void)fprintf(f, "%s{\"id\":%" PRId32 ",\"logprob\":", i ? "," : "", s->tokens[i]);
        print_lp_json(f, s->lp ? s->lp[i] : NAN);
        (void)fputs(",\"top\":[", f);
        for (uint32_t j = 0; s->lp && j < s->n_top; j++) {
            const struct pl_logprob *t = &s->top[i * s->n_top + j];
            if (t->id < 0)
                break;
            (void)fprintf(f, "%s{\"id\":%" PRId32 ",\"logprob\":", j ? "," : "", t->id);
            print_lp_json(f, t->logprob);
            (void)fputc('}', f);
        }
        (void)fputs("]}", f);
    }
    (void)fputc(']', f);
}

/* Read a whole file of at most max bytes into a new NUL-terminated buffer. Returns 0, or
 * prints "picolm: OPT: ..." and returns -1. */
static int load_file(const char *opt, const char *path, size_t max, char **ret, size_t *ret_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        die_line("%s: cannot open '%.512s': %s", opt, path, strerror(errno));
        return -1;
    }
    char *buf = malloc(max + 2);
    size_t len = buf ? fread(buf, 1, max + 1, f) : 0;
    bool bad = !buf || ferror(f);
    int err = errno;
    (void)fclose(f);
    if (bad) {
        die_line("%s: cannot read '%.512s': %s", opt, path, buf ? strerror(err) : "out of memory");
        free(buf);
        return -1;
    }
    if (len > max) {
        free(buf);
        die_line("%s: '%.512s' is larger than %zu bytes", opt, path, max);
        return -1;
    }
    buf[len] = '\0';
    *ret = buf;
    *ret_len = len;
    return 0;
}

/* Check --stop values (1..256 bytes each). Returns 0, or prints the error and returns -1. */
static int check_stops(const struct pl_cli_str_list *l) {
    for (size_t i = 0; i < l->n; i++) {
        size_t n = strlen(l->v[i]);
        if (n == 0 || n > PL_STOP_MAX_LEN) {
            die_line("--stop: each stop string must be 1 to %u bytes (got %zu)", PL_STOP_MAX_LEN,
                     n);
            return -1;
        }
    }
    return 0;
}

static int cmd_generate(int argc, char **argv) {
    struct common_opts c = {0};
    struct pl_sampler_params sp;
    pl_sampler_params_default(&sp);
    const char *prompt = NULL, *tokens_arg = NULL;
    const char *messages_arg = NULL, *template_arg = NULL, *format_arg = NULL, *schema_arg = NULL;
    struct pl_cli_str_list stops = {0};
    int64_t n_predict = -1, top_k = sp.top_k, last_n = sp.penalty_last_n, logprobs = 0;
    uint64_t seed = 0;
    bool json = false, ignore_eos = false;
    struct pl_cli_opt opts[] = {
        COMMON_OPTS(&c),
        {"prompt", 'p', PL_CLI_OPT_STR, &prompt, 0, 0, false, false, "TEXT",
         "prompt text (default: empty, i.e. generate from BOS)", false},
        {"tokens", 0, PL_CLI_OPT_STR, &tokens_arg, 0, 0, false, false, "1,2,3",
         "prompt as token ids instead of text", false},
        {"n-predict", 'n', PL_CLI_OPT_I64, &n_predict, -1, INT32_MAX, false, false, "N",
         "tokens to generate (-1, the default: until end of generation or a full context)", false},
        {"temp", 0, PL_CLI_OPT_FLOAT, &sp.temp, 0, INFINITY, false, false, "T",
         "temperature, 0 = greedy (default 0.8)", false},
        {"top-k", 0, PL_CLI_OPT_I64, &top_k, 0, INT32_MAX, false, false, "K",
         "keep the K most likely tokens, 0 = off (default 40)", false},
        {"top-p", 0, PL_CLI_OPT_FLOAT, &sp.top_p, 0, 1, true, false, "P",
         "nucleus sampling, 1 = off (default 0.95)", false},
        {"min-p", 0, PL_CLI_OPT_FLOAT, &sp.min_p, 0, 1, false, false, "P",
         "drop tokens below P times the top probability, 0 = off (default 0.05)", false},
        {"repeat-penalty", 0, PL_CLI_OPT_FLOAT, &sp.repeat_penalty, 0, INFINITY, true, false, "X",
         "penalise repeated tokens, 1 = off (default 1)", false},
        {"repeat-last-n", 0, PL_CLI_OPT_I64, &last_n, 0, PL_SAMPLER_MAX_PENALTY_LAST_N, false,
         false, "N", "window of recent tokens the penalties look at (default 64)", false},
        {"frequency-penalty", 0, PL_CLI_OPT_FLOAT, &sp.freq_penalty, -INFINITY, INFINITY, false,
         false, "X", "subtract X per occurrence in the window (default 0)", false},
        {"presence-penalty", 0, PL_CLI_OPT_FLOAT, &sp.presence_penalty, -INFINITY, INFINITY, false,
         false, "X", "subtract X once per token present in the window (default 0)", false},
        {"seed", 's', PL_CLI_OPT_U64, &seed, 0, 0, false, false, "S",
         "random seed (default: from the clock; -v prints it)", false},
        {"ignore-eos", 0, PL_CLI_OPT_FLAG, &ignore_eos, 0, 0, false, false, NULL,
         "do not stop at end-of-generation tokens", false},
        {"messages", 0, PL_CLI_OPT_STR, &messages_arg, 0, 0, false, false, "FILE",
         "prompt as a chat: a JSON array of {\"role\",\"content\"}, rendered with the "
         "model's chat template",
         false},
        {"template", 0, PL_CLI_OPT_STR, &template_arg, 0, 0, false, false, "NAME",
         "chat template for --messages: llama2, llama3, chatml, qwen, zephyr, mistral, phi3, "
         "gemma (default: the model's)",
         false},
        {"format", 0, PL_CLI_OPT_STR, &format_arg, 0, 0, false, false, "json",
         "constrain the output to one JSON object", false},
        {"json-schema", 0, PL_CLI_OPT_STR, &schema_arg, 0, 0, false, false, "FILE",
         "constrain the output to JSON valid against this JSON Schema (at most 16 KiB)", false},
        {"stop", 0, PL_CLI_OPT_STR_LIST, &stops, 0, PL_CLI_MAX_STOP, false, false, "STR",
         "end the output before STR (repeatable, up to 16, 1..256 bytes each)", false},
        {"logprobs", 0, PL_CLI_OPT_I64, &logprobs, 0, PL_CLI_MAX_TOP_LOGPROBS, false, false, "N",
         "with --json: each token's logprob and its N most likely alternatives", false},
        {"json", 0, PL_CLI_OPT_FLAG, &json, 0, 0, false, false, NULL,
         "print one JSON object {\"prompt_tokens\",\"tokens\",\"text\"} at the end", false},
    };
    bool done;
    int rc = parse_or_help("generate",
                           "[--socket PATH | --model FILE] [-p TEXT | --tokens IDS | --messages "
                           "FILE] [options]",
                           "Generate text, streamed to stdout as it is produced. With --json the "
                           "text is JSON-escaped;\ninvalid UTF-8 becomes U+FFFD there (the "
                           "token ids give the exact bytes). --logprobs N adds\n\"logprobs\": "
                           "[{\"id\",\"logprob\",\"top\":[{\"id\",\"logprob\"}...]}...] to "
                           "the object (natural logs;\nnull for -inf); without --json it is "
                           "ignored. With --messages, \"prompt_tokens\" is null through\nthe "
                           "daemon (it renders the conversation).",
                           opts, PL_ARRAY_SIZE(opts), argc, argv, &done);
    if (rc || done)
        return rc;
    if ((prompt != NULL) + (tokens_arg != NULL) + (messages_arg != NULL) > 1) {
        die_line("generate: -p, --tokens and --messages exclude each other");
        return EXIT_USAGE;
    }
    if (template_arg && !messages_arg) {
        die_line("generate: --template applies to --messages only");
        return EXIT_USAGE;
    }
    if (format_arg && strcmp(format_arg, "json") != 0) {
        die_line("--format: expected 'json', got '%.64s'", format_arg);
        return EXIT_USAGE;
    }
    if (check_stops(&stops) < 0)
        return EXIT_USAGE;
    if (logprobs > 0 && !json) {
        (void)fprintf(stderr, "picolm: note: --logprobs is printed with --json only; "
                              "ignored\n");
        logprobs = 0;
    }
    sp.top_k = (int32_t)top_k;
    sp.penalty_last_n = (int32_t)last_n;
    bool seed_given = false;
    for (size_t i = 0; i < PL_ARRAY_SIZE(opts); i++)
        if (opts[i].dst == &seed)
            seed_given = opts[i].seen;
    sp.seed = seed_given ? seed : clock_seed();
    if (pl_sampler_params_check(&sp) < 0) {
        die_line("generate: invalid sampling parameters");
        return EXIT_USAGE;
    }

    int32_t *ids = NULL;
    size_t n_ids = 0;
    char err[PL_CLI_ERR_LEN];
    char *schema = NULL, *msg_text = NULL;
    size_t schema_len = 0, msg_len = 0, n_msgs = 0;
    struct pl_cli_msg *msgs = NULL;
    struct pl_cli_chat_msg *cmsgs = NULL;
    struct pl_cli_backend *b = NULL;
    struct gen_sink sink = {.json = json, .out = stdout, .n_top = (uint32_t)logprobs};
    struct pl_cli_gen_stats st = {0};
    if (tokens_arg && pl_cli_args_parse_ids(tokens_arg, &ids, &n_ids, err, sizeof(err)) < 0) {
        die_line("%s", err);
        return EXIT_USAGE;
    }
    rc = EXIT_USAGE;
    if (schema_arg &&
        load_file("--json-schema", schema_arg, PL_CLI_MAX_SCHEMA, &schema, &schema_len) < 0)
        goto out;
    if (messages_arg) {
        if (load_file("--messages", messages_arg, PL_CLI_MAX_MESSAGES_FILE, &msg_text, &msg_len) <
            0)
            goto out;
        int r = pl_cli_json_parse_messages(msg_text, msg_len, &msgs, &n_msgs, err, sizeof(err));
        if (r < 0) {
            die_line("--messages: '%.256s': %s", messages_arg,
                     r == -ENOMEM ? strerror(ENOMEM) : err);
            rc = r == -ENOMEM ? EXIT_RUNTIME : EXIT_USAGE;
            goto out;
        }
        cmsgs = calloc(n_msgs, sizeof(*cmsgs));
        if (!cmsgs) {
            die_line("generate: %s", strerror(ENOMEM));
            rc = EXIT_RUNTIME;
            goto out;
        }
        for (size_t i = 0; i < n_msgs; i++)
            cmsgs[i] = (struct pl_cli_chat_msg){.role = msgs[i].role, .content = msgs[i].content};
    }

    if ((rc = open_backend(&c, &b)) != 0)
        goto out;
    rc = EXIT_USAGE;
    if (messages_arg) {
        /* The backend renders the conversation. */
    } else if (tokens_arg) {
        uint32_t n_vocab = b->ops->n_vocab(b);
        for (size_t i = 0; i < n_ids; i++) {
            if ((uint32_t)ids[i] >= n_vocab) {
                die_line("--tokens: token %" PRId32 " out of range [0, %u)", ids[i], n_vocab);
                goto out;
            }
        }
    } else {
        const char *text = prompt ? prompt : "";
        int r = b->ops->tokenize(b, text, strlen(text), true, &ids, &n_ids);
        if (r < 0) {
            rc = fail_op(b, "tokenize", r);
            goto out;
        }
        if (n_ids == 0) {
            /* An empty prompt with a vocabulary that adds no BOS: start from BOS anyway
             * (there must be something to condition on). */
            struct pl_cli_model_info *mi = malloc(sizeof(*mi));
            if (!mi || b->ops->info(b, mi) < 0 || mi->bos < 0) {
                free(mi);
                die_line("generate: the prompt is empty and the model has no BOS token");
                goto out;
            }
            free(ids);
            ids = malloc(sizeof(*ids));
            if (!ids) {
                free(mi);
                rc = EXIT_RUNTIME;
                goto out;
            }
            ids[0] = mi->bos;
            n_ids = 1;
            free(mi);
        }
    }
    if (c.verbose)
        (void)fprintf(stderr, "picolm: seed %" PRIu64 ", %zu prompt tokens\n", sp.seed, n_ids);

    struct pl_cli_gen_opts go = {.n_predict = n_predict,
                                 .ignore_eos = ignore_eos,
                                 .sampler = sp,
                                 .stop = stops.v,
                                 .n_stop = stops.n,
                                 .json = format_arg != NULL,
                                 .json_schema = schema,
                                 .json_schema_len = schema_len,
                                 .logprobs = (uint32_t)logprobs,
                                 .messages = cmsgs,
                                 .n_messages = n_msgs,
                                 .template_name = template_arg};
    int r = b->ops->generate(b, ids, n_ids, &go, on_token, &sink, &st);
    if (r == -EIO) {
        die_line("generate: cannot write to stdout: %s", strerror(errno));
        rc = EXIT_RUNTIME;
        goto out;
    }
    if (r < 0) {
        rc = fail_op(b, "generate", r);
        goto out;
    }
    if (json) {
        (void)fputs("{\"prompt_tokens\":", stdout);
        if (messages_arg)
            print_ids_json(stdout, st.prompt_ids, st.prompt_ids ? st.n_prompt : 1);
        else
            print_ids_json(stdout, ids, n_ids);
        (void)fputs(",\"tokens\":", stdout);
        print_ids_json(stdout, sink.tokens, sink.n_tokens);
        (void)fputs(",\"text\":", stdout);
        pl_cli_json_write_str(stdout, sink.text ? sink.text : "", sink.len_text);
        if (logprobs > 0)
            print_logprobs_json(stdout, &sink);
        (void)fputs("}\n", stdout);
    } else if (isatty(STDOUT_FILENO)) {
        (void)fputc('\n', stdout); /* leave the shell prompt on its own line */
    }
    if (!write_ok(stdout)) {
        die_line("generate: cannot write to stdout: %s", strerror(errno));
        rc = EXIT_RUNTIME;
        goto out;
    }
    if (c.verbose) {
        static const char *const stop_names[] = {"length", "end of generation", "context full",
                                                 "stop string"};
        (void)fprintf(stderr,
                      "picolm: prompt %zu tokens in %.1f ms, generated %zu tokens in %.1f ms "
                      "(%.1f tokens/s), stop: %s\n",
                      st.n_prompt, (double)st.prompt_ns / 1e6, st.n_gen, (double)st.gen_ns / 1e6,
                      st.gen_ns ? (double)st.n_gen * 1e9 / (double)st.gen_ns : 0.0,
                      stop_names[st.stop]);
    }
    rc = 0;
out:
    free(ids);
    free(schema);
    free(msg_text);
    free(cmsgs);
    pl_cli_json_messages_free(msgs, n_msgs);
    free(sink.tokens);
    free(sink.text);
    free(sink.lp);
    free(sink.top);
    if (b)
        b->ops->close(b);
    return rc;
}

/* ---- tokenize ---- */

/* Read all of stdin (binary-safe). */
static int read_all(FILE *f, char **ret, size_t *ret_len) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return -ENOMEM;
    for (;;) {
        if (len == cap) {
            char *p = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!p) {
                free(buf);
                return -ENOMEM;
            }
            buf = p;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f)) {
                int e = errno ? errno : EIO;
                free(buf);
                return -e;
            }
            break;
        }
    }
    *ret = buf;
    *ret_len = len;
    return 0;
}

static int cmd_tokenize(int argc, char **argv) {
    struct common_opts c = {0};
    const char *prompt = NULL;
    bool no_bos = false;
    struct pl_cli_opt opts[] = {
        COMMON_OPTS(&c),
        {"prompt", 'p', PL_CLI_OPT_STR, &prompt, 0, 0, false, false, "TEXT",
         "text to tokenize (default: all of stdin, byte for byte)", false},
        {"no-bos", 0, PL_CLI_OPT_FLAG, &no_bos, 0, 0, false, false, NULL,
         "do not add the special tokens (BOS/EOS) the vocabulary asks for", false},
    };
    bool done;
    int rc = parse_or_help("tokenize", "[--socket PATH | --model FILE] [--no-bos] [-p TEXT]",
                           "Print the token ids of the text, space-separated, on one line. "
                           "Special-token text\nsuch as \"<s>\" is not parsed.",
                           opts, PL_ARRAY_SIZE(opts), argc, argv, &done);
    if (rc || done)
        return rc;

    struct pl_cli_backend *b = NULL;
    char *text = NULL;
    size_t len = 0;
    int32_t *ids = NULL;
    size_t n = 0;
    if ((rc = open_backend(&c, &b)) != 0)
        goto out;
    rc = EXIT_USAGE;
    if (prompt) {
        len = strlen(prompt);
    } else {
        int r = read_all(stdin, &text, &len);
        if (r < 0) {
            die_line("tokenize: cannot read stdin: %s", pl_strerror(r));
            rc = EXIT_RUNTIME;
            goto out;
        }
    }
    int r = b->ops->tokenize(b, prompt ? prompt : text, len, !no_bos, &ids, &n);
    if (r < 0) {
        rc = fail_op(b, "tokenize", r);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        (void)printf(i ? " %" PRId32 : "%" PRId32, ids[i]);
    (void)putchar('\n');
    if (!write_ok(stdout)) {
        die_line("tokenize: cannot write to stdout: %s", strerror(errno));
        rc = EXIT_RUNTIME;
        goto out;
    }
    rc = 0;
out:
    free(text);
    free(ids);
    if (b)
        b->ops->close(b);
    return rc;
}

/* ---- eval ---- */

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "eval writes float32 logits in host order, which must be little-endian");

static int write_row(void *ud, const float *logits, uint32_t n_vocab) {
    FILE *f = ud;
    return fwrite(logits, sizeof(float), n_vocab, f) == n_vocab ? 0 : -EIO;
}

static int cmd_eval(int argc, char **argv) {
    struct common_opts c = {0};
    const char *tokens_arg = NULL, *out_path = NULL;
    struct pl_cli_opt opts[] = {
        COMMON_OPTS(&c),
        {"tokens", 0, PL_CLI_OPT_STR, &tokens_arg, 0, 0, false, false, "1,2,3",
         "token ids to evaluate (required)", false},
        {"logits-out", 'o', PL_CLI_OPT_STR, &out_path, 0, 0, false, false, "FILE",
         "where to write the logits ('-': stdout) (required)", false},
    };
    bool done;
    int rc = parse_or_help("eval", "--model FILE --tokens IDS --logits-out FILE",
                           "Evaluate the tokens at positions 0..n-1 and write the logits: "
                           "little-endian float32,\none row of n_vocab per position, no "
                           "header.",
                           opts, PL_ARRAY_SIZE(opts), argc, argv, &done);
    if (rc || done)
        return rc;
    if (!c.model) {
        die_line("eval: runs in-process only (the daemon returns no logits): give --model FILE");
        return EXIT_USAGE;
    }
    if (!tokens_arg) {
        die_line("eval: --tokens: missing (the token ids to evaluate)");
        return EXIT_USAGE;
    }
    if (!out_path) {
        die_line("eval: --logits-out: missing (the output file)");
        return EXIT_USAGE;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    char err[PL_CLI_ERR_LEN];
    if (pl_cli_args_parse_ids(tokens_arg, &ids, &n, err, sizeof(err)) < 0) {
        die_line("%s", err);
        return EXIT_USAGE;
    }

    struct pl_cli_backend *b = NULL;
    FILE *f = NULL;
    bool to_stdout = strcmp(out_path, "-") == 0;
    if ((rc = open_backend(&c, &b)) != 0)
        goto out;
    rc = EXIT_USAGE;
    uint32_t n_vocab = b->ops->n_vocab(b);
    for (size_t i = 0; i < n; i++) {
        if ((uint32_t)ids[i] >= n_vocab) {
            die_line("--tokens: token %" PRId32 " out of range [0, %u)", ids[i], n_vocab);
            goto out;
        }
    }
    f = to_stdout ? stdout : fopen(out_path, "wbe");
    if (!f) {
        die_line("--logits-out: cannot open '%.512s': %s", out_path, strerror(errno));
        goto out;
    }
    int r = b->ops->eval(b, ids, n, write_row, f);
    if (r == -EIO) {
        die_line("--logits-out: write failed: %s", strerror(errno));
        rc = EXIT_RUNTIME;
        goto out;
    }
    if (r < 0) {
        rc = fail_op(b, "eval", r);
        goto out;
    }
    if (!write_ok(f)) {
        die_line("--logits-out: write failed: %s", strerror(errno));
        rc = EXIT_RUNTIME;
        goto out;
    }
    rc = 0;
out:
    if (f && !to_stdout && fclose(f) != 0 && rc == 0) {
        die_line("--logits-out: write failed: %s", strerror(errno));
        rc = EXIT_RUNTIME;
    }
    free(ids);
    if (b)
        b->ops->close(b);
    return rc;
}

/* ---- info ---- */

/* What picolmd says about its model (fewer facts than the file gives in-process). */
static void info_text_daemon(const struct pl_cli_model_info *m) {
    (void)printf("socket:          %s\n", m->path);
    if (m->name[0])
        (void)printf("name:            %s\n", m->name);
    (void)printf("architecture:    %s\n", m->arch);
    (void)printf("parameters:      %" PRIu64 " (%.2f M), file %" PRIu64 " bytes\n", m->n_params,
                 (double)m->n_params / 1e6, m->file_size);
    (void)printf("n_vocab:         %u\n", m->n_vocab);
    (void)printf("n_ctx:           %u (per request, as the daemon serves it)\n", m->n_ctx_train);
    (void)printf("n_embd:          %u\n", m->n_embd);
    (void)printf("n_layer:         %u\n", m->n_layer);
    (void)printf("n_head:          %u (kv %u, head_dim %u)\n", m->n_head, m->n_head_kv,
                 m->head_dim);
    (void)printf("tokenizer:       %s, %u tokens, BOS %" PRId32 ", EOS %" PRId32 "\n",
                 m->tokenizer_kind, m->n_vocab, m->bos, m->eos);
}

static void info_json_daemon(const struct pl_cli_model_info *m) {
    FILE *f = stdout;
    (void)fputs("{\"daemon\":true,\"socket\":", f);
    pl_cli_json_write_str(f, m->path, strlen(m->path));
    (void)fputs(",\"name\":", f);
    pl_cli_json_write_str(f, m->name, strlen(m->name));
    (void)fputs(",\"architecture\":", f);
    pl_cli_json_write_str(f, m->arch, strlen(m->arch));
    (void)fprintf(f,
                  ",\"file_size\":%" PRIu64 ",\"n_params\":%" PRIu64
                  ",\"hparams\":{\"n_vocab\":%u,\"n_ctx\":%u,\"n_embd\":%u,\"n_layer\":%u,"
                  "\"n_head\":%u,\"n_head_kv\":%u,\"head_dim\":%u}",
                  m->file_size, m->n_params, m->n_vocab, m->n_ctx_train, m->n_embd, m->n_layer,
                  m->n_head, m->n_head_kv, m->head_dim);
    (void)fputs(",\"tokenizer\":{\"kind\":", f);
    pl_cli_json_write_str(f, m->tokenizer_kind, strlen(m->tokenizer_kind));
    (void)fprintf(f, ",\"n_vocab\":%u,\"bos\":%" PRId32 ",\"eos\":%" PRId32 "}}\n", m->n_vocab,
                  m->bos, m->eos);
}

static void info_text(const struct pl_cli_model_info *m) {
    (void)printf("file:            %s\n", m->path);
    (void)printf("file size:       %" PRIu64 " bytes\n", m->file_size);
    (void)printf("gguf:            v%u, %" PRIu64 " tensors, %" PRIu64 " metadata keys\n",
                 m->gguf_version, m->n_tensors, m->n_kv);
    if (m->name[0])
        (void)printf("name:            %s\n", m->name);
    (void)printf("architecture:    %s\n", m->arch);
    (void)printf("parameters:      %" PRIu64 " (%.2f M), weights %" PRIu64 " bytes\n", m->n_params,
                 (double)m->n_params / 1e6, m->weight_bytes);
    (void)printf("n_vocab:         %u\n", m->n_vocab);
    (void)printf("n_ctx_train:     %u\n", m->n_ctx_train);
    (void)printf("n_embd:          %u\n", m->n_embd);
    (void)printf("n_layer:         %u\n", m->n_layer);
    (void)printf("n_head:          %u (kv %u, head_dim %u)\n", m->n_head, m->n_head_kv,
                 m->head_dim);
    (void)printf("n_ff:            %u\n", m->n_ff);
    (void)printf("rope:            n_rot %u, freq_base %g, freq_scale %g\n", m->n_rot,
                 (double)m->rope_freq_base, (double)m->rope_freq_scale);
    (void)printf("rms_eps:         %g\n", (double)m->rms_eps);
    (void)printf("output:          %s%s\n", m->tied_output ? "tied to token_embd" : "separate",
                 m->has_qkv_bias ? ", q/k/v biases" : "");
    (void)printf("tokenizer:       %s, %u tokens, BOS %" PRId32 ", EOS %" PRId32 ", adds BOS: %s\n",
                 m->tokenizer_kind, m->n_vocab, m->bos, m->eos, m->adds_bos ? "yes" : "no");
    (void)printf("tensor types:\n");
    for (size_t i = 0; i < m->n_types; i++)
        (void)printf("  %-8s %6" PRIu64 " tensors %12" PRIu64 " bytes\n", m->types[i].name,
                     m->types[i].count, m->types[i].bytes);
}

static void info_json(const struct pl_cli_model_info *m) {
    FILE *f = stdout;
    (void)fputs("{\"file\":", f);
    pl_cli_json_write_str(f, m->path, strlen(m->path));
    (void)fprintf(f,
                  ",\"file_size\":%" PRIu64 ",\"gguf_version\":%u,\"n_tensors\":%" PRIu64
                  ",\"n_kv\":%" PRIu64 ",\"name\":",
                  m->file_size, m->gguf_version, m->n_tensors, m->n_kv);
    pl_cli_json_write_str(f, m->name, strlen(m->name));
    (void)fputs(",\"architecture\":", f);
    pl_cli_json_write_str(f, m->arch, strlen(m->arch));
    (void)fprintf(f,
                  ",\"n_params\":%" PRIu64 ",\"weight_bytes\":%" PRIu64
                  ",\"hparams\":{\"n_vocab\":%u,\"n_ctx_train\":%u,\"n_embd\":%u,"
                  "\"n_layer\":%u,\"n_head\":%u,\"n_head_kv\":%u,\"head_dim\":%u,\"n_ff\":%u,"
                  "\"n_rot\":%u,\"rope_freq_base\":%.9g,\"rope_freq_scale\":%.9g,"
                  "\"rms_eps\":%.9g,\"tied_output\":%s,\"has_qkv_bias\":%s}",
                  m->n_params, m->weight_bytes, m->n_vocab, m->n_ctx_train, m->n_embd, m->n_layer,
                  m->n_head, m->n_head_kv, m->head_dim, m->n_ff, m->n_rot,
                  (double)m->rope_freq_base, (double)m->rope_freq_scale, (double)m->rms_eps,
                  m->tied_output ? "true" : "false", m->has_qkv_bias ? "true" : "false");
    (void)fputs(",\"tokenizer\":{\"kind\":", f);
    pl_cli_json_write_str(f, m->tokenizer_kind, strlen(m->tokenizer_kind));
    (void)fprintf(f, ",\"n_vocab\":%u,\"bos\":%" PRId32 ",\"eos\":%" PRId32 ",\"adds_bos\":%s}",
                  m->n_vocab, m->bos, m->eos, m->adds_bos ? "true" : "false");
    (void)fputs(",\"tensor_types\":[", f);
    for (size_t i = 0; i < m->n_types; i++) {
        (void)fputs(i ? ",{\"type\":" : "{\"type\":", f);
        pl_cli_json_write_str(f, m->types[i].name, strlen(m->types[i].name));
        (void)fprintf(f, ",\"count\":%" PRIu64 ",\"bytes\":%" PRIu64 "}", m->types[i].count,
                      m->types[i].bytes);
    }
    (void)fputs("]}\n", f);
}

static int cmd_info(int argc, char **argv) {
    struct common_opts c = {0};
    bool json = false;
    struct pl_cli_opt opts[] = {
        COMMON_OPTS(&c),
        {"json", 0, PL_CLI_OPT_FLAG, &json, 0, 0, false, false, NULL, "print one JSON object",
         false},
    };
    bool done;
    int rc = parse_or_help("info", "[--socket PATH | --model FILE] [--json]",
                           "Describe the model: architecture, hyperparameters, tensor types, "
                           "tokenizer\n(through the daemon: what it reports about its model).",
                           opts, PL_ARRAY_SIZE(opts), argc, argv, &done);
    if (rc || done)
        return rc;
    struct pl_cli_backend *b = NULL;
    struct pl_cli_model_info *m = NULL;
    if ((rc = open_backend(&c, &b)) != 0)
        goto out;
    rc = EXIT_USAGE;
    m = malloc(sizeof(*m));
    if (!m) {
        die_line("info: %s", strerror(ENOMEM));
        rc = EXIT_RUNTIME;
        goto out;
    }
    int r = b->ops->info(b, m);
    if (r < 0) {
        rc = fail_op(b, "info", r);
        goto out;
    }
    if (m->from_daemon && json)
        info_json_daemon(m);
    else if (m->from_daemon)
        info_text_daemon(m);
    else if (json)
        info_json(m);
    else
        info_text(m);
    if (!write_ok(stdout)) {
        die_line("info: cannot write to stdout: %s", strerror(errno));
        rc = EXIT_RUNTIME;
        goto out;
    }
    rc = 0;
out:
    free(m);
    if (b)
        b->ops->close(b);
    return rc;
}

/* ---- chat ---- */

/* The conversation. With a chat template (the model's, or --template) it is a list of
 * messages the backend renders each turn (in-process as picolmd does; through the daemon,
 * picolmd renders it) and answers end at the template's end of turn. Without one it is the
 * plain concatenation of the user's lines and the answers, one text. */
struct chat_sink {
    /* plain mode */
    char *hist;
    size_t len, cap;
    /* template mode: n_msgs messages, strings owned */
    struct pl_cli_chat_msg *msgs;
    size_t n_msgs, cap_msgs;
    bool has_system;
    /* the answer being streamed */
    char *reply;
    size_t reply_len, reply_cap;
    bool write_failed;
};

static int hist_append(struct chat_sink *s, const char *p, size_t n) {
    if (grow((void **)&s->hist, &s->cap, s->len + n + 1, 1) < 0)
        return -ENOMEM;
    memcpy(s->hist + s->len, p, n);
    s->len += n;
    s->hist[s->len] = '\0';
    return 0;
}

static int on_chat_token(void *ud, const struct pl_cli_token *t) {
    struct chat_sink *s = ud;
    if (t->len && fwrite(t->piece, 1, t->len, stdout) != t->len) {
        s->write_failed = true;
        return -EIO;
    }
    if (fflush(stdout) != 0) {
        s->write_failed = true;
        return -EIO;
    }
    if (grow((void **)&s->reply, &s->reply_cap, s->reply_len + t->len + 1, 1) < 0)
        return -ENOMEM;
    if (t->len)
        memcpy(s->reply + s->reply_len, t->piece, t->len);
    s->reply_len += t->len;
    s->reply[s->reply_len] = '\0';
    return 0;
}

/* Append a message (copies of role and text[0..len)). */
static int msgs_push(struct chat_sink *s, const char *role, const char *text, size_t len) {
    if (grow((void **)&s->msgs, &s->cap_msgs, s->n_msgs + 1, sizeof(*s->msgs)) < 0)
        return -ENOMEM;
    char *r = strdup(role), *c = strndup(text, len);
    if (!r || !c) {
        free(r);
        free(c);
        return -ENOMEM;
    }
    s->msgs[s->n_msgs++] = (struct pl_cli_chat_msg){.role = r, .content = c};
    return 0;
}

static void msgs_free_range(struct chat_sink *s, size_t from, size_t n) {
    for (size_t i = from; i < from + n; i++) {
        free((char *)s->msgs[i].role);
        free((char *)s->msgs[i].content);
    }
    memmove(s->msgs + from, s->msgs + from + n, (s->n_msgs - from - n) * sizeof(*s->msgs));
    s->n_msgs -= n;
}

/* Forget the oldest exchange (a user message and its answer), keeping a system message.
 * Returns false when only the current user message is left. */
static bool msgs_forget_oldest(struct chat_sink *s) {
    size_t first = s->has_system ? 1 : 0;
    if (s->n_msgs - first <= 1)
        return false;
    size_t n = s->n_msgs - first >= 3 ? 2 : 1;
    msgs_free_range(s, first, n);
    return true;
}

/* Tokenize the conversation; while it leaves less than reserve tokens of the context, forget
 * its oldest line. Returns 0 with new ids, -E2BIG when even the last line does not fit. */
static int chat_tokens(struct pl_cli_backend *b, struct chat_sink *s, size_t n_ctx, size_t reserve,
                       int32_t **ret_ids, size_t *ret_n) {
    for (;;) {
        int32_t *ids = NULL;
        size_t n = 0;
        int r = b->ops->tokenize(b, s->hist, s->len, true, &ids, &n);
        if (r < 0)
            return r;
        if (n + reserve <= n_ctx) {
            *ret_ids = ids;
            *ret_n = n;
            return 0;
        }
        free(ids);
        char *nl = memchr(s->hist, '\n', s->len);
        if (!nl)
            return -E2BIG;
        size_t drop = (size_t)(nl - s->hist) + 1;
        memmove(s->hist, s->hist + drop, s->len - drop + 1);
        s->len -= drop;
    }
}

/* One templated turn: the conversation (ending with the user's message) is rendered and
 * answered; when it does not fit the context with room for the answer, the oldest
 * exchanges are forgotten. Returns 0, -E2BIG (even the last message alone does not fit),
 * -PL_ERR_UNSUPPORTED (no template), or the backend's error. */
static int chat_turn_template(struct pl_cli_backend *b, struct chat_sink *s,
                              struct pl_cli_gen_opts *go, size_t n_ctx, size_t reserve,
                              size_t *last_used) {
    /* The last turn's size predicts this one's: trim before asking, estimating each
     * message's share of it as equal. */
    size_t n0 = s->n_msgs;
    while (*last_used + reserve > n_ctx && msgs_forget_oldest(s))
        *last_used = *last_used * s->n_msgs / n0;
    for (;;) {
        struct pl_cli_gen_stats st;
        go->messages = s->msgs;
        go->n_messages = s->n_msgs;
        s->reply_len = 0;
        int r = b->ops->generate(b, NULL, 0, go, on_chat_token, s, &st);
        if (r == -E2BIG && s->reply_len == 0) {
            if (!msgs_forget_oldest(s))
                return -E2BIG;
            continue;
        }
        if (r < 0)
            return r;
        *last_used = st.n_prompt + st.n_gen;
        return 0;
    }
}

static int cmd_chat(int argc, char **argv) {
    struct common_opts c = {0};
    struct pl_sampler_params sp;
    pl_sampler_params_default(&sp);
    int64_t n_predict = 256, top_k = sp.top_k;
    uint64_t seed = 0;
    const char *template_arg = NULL, *system_arg = NULL;
    struct pl_cli_opt opts[] = {
        COMMON_OPTS(&c),
        {"n-predict", 'n', PL_CLI_OPT_I64, &n_predict, -1, INT32_MAX, false, false, "N",
         "tokens per answer at most (default 256; -1: until end of generation)", false},
        {"temp", 0, PL_CLI_OPT_FLOAT, &sp.temp, 0, INFINITY, false, false, "T",
         "temperature, 0 = greedy (default 0.8)", false},
        {"top-k", 0, PL_CLI_OPT_I64, &top_k, 0, INT32_MAX, false, false, "K",
         "keep the K most likely tokens, 0 = off (default 40)", false},
        {"top-p", 0, PL_CLI_OPT_FLOAT, &sp.top_p, 0, 1, true, false, "P",
         "nucleus sampling, 1 = off (default 0.95)", false},
        {"min-p", 0, PL_CLI_OPT_FLOAT, &sp.min_p, 0, 1, false, false, "P",
         "drop tokens below P times the top probability, 0 = off (default 0.05)", false},
        {"repeat-penalty", 0, PL_CLI_OPT_FLOAT, &sp.repeat_penalty, 0, INFINITY, true, false, "X",
         "penalise repeated tokens, 1 = off (default 1)", false},
        {"seed", 's', PL_CLI_OPT_U64, &seed, 0, 0, false, false, "S",
         "random seed (default: from the clock)", false},
        {"template", 0, PL_CLI_OPT_STR, &template_arg, 0, 0, false, false, "NAME",
         "chat template: llama2, llama3, chatml, qwen, zephyr, mistral, phi3, gemma "
         "(default: the model's)",
         false},
        {"system", 0, PL_CLI_OPT_STR, &system_arg, 0, 0, false, false, "TEXT",
         "a system message to start the conversation with", false},
    };
    bool done;
    int rc = parse_or_help("chat", "[--socket PATH | --model FILE] [options]",
                           "Read lines from stdin; answer each one, streamed to stdout and "
                           "ended by a newline.\nThe conversation is kept and rendered with the "
                           "model's chat template (or --template);\neach answer ends at the "
                           "template's end of turn. A model without a template it knows\nis "
                           "served the plain concatenation of lines and answers (said once on "
                           "stderr).\nWhen the conversation outgrows the context, its oldest "
                           "exchanges are forgotten.\nEnd with EOF (Ctrl-D).",
                           opts, PL_ARRAY_SIZE(opts), argc, argv, &done);
    if (rc || done)
        return rc;
    sp.top_k = (int32_t)top_k;
    bool seed_given = false;
    for (size_t i = 0; i < PL_ARRAY_SIZE(opts); i++)
        if (opts[i].dst == &seed)
            seed_given = opts[i].seen;
    sp.seed = seed_given ? seed : clock_seed();
    if (pl_sampler_params_check(&sp) < 0) {
        die_line("chat: invalid sampling parameters");
        return EXIT_USAGE;
    }

    struct pl_cli_backend *b = NULL;
    struct pl_cli_model_info *mi = NULL;
    struct chat_sink sink = {0};
    char *line = NULL;
    size_t line_cap = 0;
    int32_t *ids = NULL;
    if ((rc = open_backend(&c, &b)) != 0)
        goto out;
    rc = EXIT_RUNTIME;
    mi = malloc(sizeof(*mi));
    if (!mi) {
        die_line("chat: %s", strerror(ENOMEM));
        goto out;
    }
    int r = b->ops->info(b, mi);
    if (r < 0) {
        rc = fail_op(b, "chat", r);
        goto out;
    }
    /* With the in-process backend the context is what the engine will use. */
    size_t n_ctx = c.ctx ? (size_t)c.ctx : (mi->n_ctx_train < 4096 ? mi->n_ctx_train : 4096);
    size_t reserve = n_predict > 0 ? (size_t)n_predict + 1 : 129;
    if (reserve >= n_ctx) {
        die_line("chat: -n %" PRId64 " leaves no room for the conversation in a context of %zu "
                 "tokens",
                 n_predict, n_ctx);
        rc = EXIT_USAGE;
        goto out;
    }
    bool templated = true;
    if (system_arg) {
        if (msgs_push(&sink, "system", system_arg, strlen(system_arg)) < 0 ||
            hist_append(&sink, system_arg, strlen(system_arg)) < 0) {
            die_line("chat: %s", strerror(ENOMEM));
            goto out;
        }
        sink.has_system = true;
    }
    size_t last_used = 0;
    bool tty = isatty(STDIN_FILENO);
    struct pl_cli_gen_opts go = {
        .n_predict = n_predict, .sampler = sp, .template_name = template_arg};
    for (;;) {
        if (tty) {
            (void)fputs("> ", stderr);
            (void)fflush(stderr);
        }
        ssize_t n = getline(&line, &line_cap, stdin);
        if (n < 0)
            break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0)
            continue;
        if ((sink.len && hist_append(&sink, "\n", 1) < 0) ||
            hist_append(&sink, line, (size_t)n) < 0 ||
            msgs_push(&sink, "user", line, (size_t)n) < 0) {
            die_line("chat: %s", strerror(ENOMEM));
            goto out;
        }
        if (templated) {
            r = chat_turn_template(b, &sink, &go, n_ctx, reserve, &last_used);
            if (r == -PL_ERR_UNSUPPORTED && !template_arg && sink.reply_len == 0) {
                (void)fprintf(stderr, "picolm: chat: the model has no chat template picolm "
                                      "recognises: using plain concatenation (name one with "
                                      "--template)\n");
                templated = false;
            } else if (r == -E2BIG) {
                die_line("chat: the line does not fit the context (%zu tokens)", n_ctx);
                rc = EXIT_USAGE;
                goto out;
            } else if (r < 0) {
                if (sink.write_failed || r == -EIO) {
                    die_line("chat: cannot write to stdout: %s", strerror(errno));
                    goto out;
                }
                rc = fail_op(b, "chat", r);
                goto out;
            } else if (msgs_push(&sink, "assistant", sink.reply ? sink.reply : "", sink.reply_len) <
                           0 ||
                       hist_append(&sink, sink.reply ? sink.reply : "", sink.reply_len) < 0) {
                die_line("chat: %s", strerror(ENOMEM));
                goto out;
            }
        }
        if (!templated) {
            size_t n_ids = 0;
            r = chat_tokens(b, &sink, n_ctx, reserve, &ids, &n_ids);
            if (r == -E2BIG) {
                die_line("chat: the line does not fit the context (%zu tokens)", n_ctx);
                rc = EXIT_USAGE;
                goto out;
            }
            if (r < 0) {
                rc = fail_op(b, "chat", r);
                goto out;
            }
            struct pl_cli_gen_stats st;
            struct pl_cli_gen_opts plain = {.n_predict = n_predict, .sampler = sp};
            sink.reply_len = 0;
            r = b->ops->generate(b, ids, n_ids, &plain, on_chat_token, &sink, &st);
            free(ids);
            ids = NULL;
            if (sink.write_failed || r == -EIO) {
                die_line("chat: cannot write to stdout: %s", strerror(errno));
                goto out;
            }
            if (r < 0) {
                rc = fail_op(b, "chat", r);
                goto out;
            }
            if (hist_append(&sink, sink.reply ? sink.reply : "", sink.reply_len) < 0) {
                die_line("chat: %s", strerror(ENOMEM));
                goto out;
            }
        }
        (void)fputc('\n', stdout);
        if (!write_ok(stdout)) {
            die_line("chat: cannot write to stdout: %s", strerror(errno));
            goto out;
        }
    }
    if (ferror(stdin)) {
        die_line("chat: cannot read stdin: %s", strerror(errno));
        goto out;
    }
    rc = 0;
out:
    free(ids);
    free(line);
    free(sink.hist);
    free(sink.reply);
    if (sink.msgs)
        msgs_free_range(&sink, 0, sink.n_msgs);
    free(sink.msgs);
    free(mi);
    if (b)
        b->ops->close(b);
    return rc;
}

/* ---- main ---- */

static void usage(FILE *f) {
    (void)fprintf(f, "usage: picolm COMMAND [--socket PATH | --model FILE] [options]\n"
                     "\n"
                     "commands:\n"
                     "  generate   generate text from a prompt or a chat (--messages), streamed\n"
                     "             to stdout; --format json / --json-schema FILE constrain it,\n"
                     "             --stop STR ends it, --json --logprobs N adds logprobs\n"
                     "  chat       answer each line read from stdin, keeping the conversation\n"
                     "             (rendered with the model's chat template or --template)\n"
                     "  tokenize   print the token ids of a text\n"
                     "  eval       write the logits of a token sequence to a file (--model only)\n"
                     "  info       describe the model\n"
                     "\n"
                     "Through picolmd by default (--socket PATH, else $PICOLM_SOCKET, "
                     "else\n" PL_CLI_DEFAULT_SOCKET
                     "); --model FILE runs the model in-process instead.\n"
                     "'picolm COMMAND --help' lists a command's options. Exit status: 0 success,\n"
                     "1 runtime or broker failure, 2 bad arguments or model file, 3 broker\n"
                     "unreachable.\n");
}

int main(int argc, char **argv) {
    static char outbuf[STDOUT_BUF_BYTES];
    (void)setvbuf(stdout, outbuf, _IOFBF, sizeof(outbuf));
    if (argc < 2) {
        die_line("missing command: generate, chat, tokenize, eval or info (see 'picolm "
                 "--help')");
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    int rc;
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        rc = 0;
    } else if (strcmp(cmd, "--version") == 0) {
        (void)printf("picolm %s\n", PL_CLI_VERSION);
        rc = 0;
    } else if (strcmp(cmd, "generate") == 0) {
        rc = cmd_generate(argc - 2, argv + 2);
    } else if (strcmp(cmd, "tokenize") == 0) {
        rc = cmd_tokenize(argc - 2, argv + 2);
    } else if (strcmp(cmd, "eval") == 0) {
        rc = cmd_eval(argc - 2, argv + 2);
    } else if (strcmp(cmd, "info") == 0) {
        rc = cmd_info(argc - 2, argv + 2);
    } else if (strcmp(cmd, "chat") == 0) {
        rc = cmd_chat(argc - 2, argv + 2);
    } else {
        die_line("unknown command '%.64s' (see 'picolm --help')", cmd);
        return EXIT_USAGE;
    }
    if (fflush(stdout) != 0 && rc == 0) {
        die_line("cannot write to stdout: %s", strerror(errno));
        rc = EXIT_RUNTIME;
    }
    return rc;
}
