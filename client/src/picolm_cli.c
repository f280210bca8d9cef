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
#include "pl/pl_err.h"
#include "pl/pl_util.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
#define EXIT_UNREACHABLE 3

#define PL_CLI_VERSION "0.1.0"
#define PL_CLI_DEFAULT_SOCKET PICOLM_DEFAULT_SOCKET

/* stdout buffer: output is flushed per token anyway, the buffer batches the rest. */
#define STDOUT_BUF_BYTES (64u << 10)

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

#define COMMON_OPTS(c)                                                                           \
    {"model", 'm', PL_CLI_OPT_STR, &(c)->model, 0, 0, false, false, "FILE",                     \
     "GGUF model to run in-process (default: ask the daemon)", false},                           \
    {"socket", 0, PL_CLI_OPT_STR, &(c)->socket, 0, 0, false, false, "PATH",                      \
     "picolmd socket (default: $PICOLM_SOCKET, else " PL_CLI_DEFAULT_SOCKET ")", false},         \
    {"threads", 't', PL_CLI_OPT_I64, &(c)->threads, 0, 512, false, false, "N",                   \
     "worker threads (0: one per CPU)", false},                                                  \
    {"ctx", 'c', PL_CLI_OPT_I64, &(c)->ctx, 1, 1048576, false, false, "N",                      \
     "context length in tokens (default: min(trained length, 4096))", false},                   \
    {"kv-type", 0, PL_CLI_OPT_STR, &(c)->kv_type, 0, 0, false, false, "f16|f32",                 \
     "KV cache element type (default f16)", false},                                              \
    {"verbose", 'v', PL_CLI_OPT_FLAG, &(c)->verbose, 0, 0, false, false, NULL,                   \
     "print the seed, token counts and timings on stderr", false}

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

/* Exit status for a failed backend operation: bad input is a usage error. */
static int fail_op(struct pl_cli_backend *b, const char *what, int r) {
    die_line("%s: %s", what, b->err[0] ? b->err : pl_strerror(r));
    return (r == -EINVAL || r == -E2BIG) ? EXIT_USAGE : EXIT_RUNTIME;
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
    char *text;      /* --json: generated bytes */
    size_t len_text, cap_text;
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

static int on_token(void *ud, int32_t id, const char *piece, size_t len) {
    struct gen_sink *s = ud;
    if (s->json) {
        if (grow((void **)&s->tokens, &s->cap_tokens, s->n_tokens + 1, sizeof(int32_t)) < 0 ||
            grow((void **)&s->text, &s->cap_text, s->len_text + len, 1) < 0)
            return -ENOMEM;
        if (id >= 0) /* -1: bytes without a token of their own (daemon) */
            s->tokens[s->n_tokens++] = id;
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
    (void)fputc('[', f);
    for (size_t i = 0; i < n; i++)
        (void)fprintf(f, i ? ",%" PRId32 : "%" PRId32, ids[i]);
    (void)fputc(']', f);
}

static int cmd_generate(int argc, char **argv) {
    struct common_opts c = {0};
    struct pl_sampler_params sp;
    pl_sampler_params_default(&sp);
    const char *prompt = NULL, *tokens_arg = NULL;
    int64_t n_predict = -1, top_k = sp.top_k, last_n = sp.penalty_last_n;
    uint64_t seed = 0;
    bool json = false, ignore_eos = false;
    struct pl_cli_opt opts[] = {
        COMMON_OPTS(&c),
        {"prompt", 'p', PL_CLI_OPT_STR, &prompt, 0, 0, false, false, "TEXT",
         "prompt text (default: empty, i.e. generate from BOS)", false},
        {"tokens", 0, PL_CLI_OPT_STR, &tokens_arg, 0, 0, false, false, "1,2,3",
         "prompt as token ids instead of text", false},
        {"n-predict", 'n', PL_CLI_OPT_I64, &n_predict, -1, INT32_MAX, false, false, "N",
         "tokens to generate (-1, the default: until end of generation or a full context)",
         false},
        {"temp", 0, PL_CLI_OPT_FLOAT, &sp.temp, 0, INFINITY, false, false, "T",
         "temperature, 0 = greedy (default 0.8)", false},
        {"top-k", 0, PL_CLI_OPT_I64, &top_k, 0, INT32_MAX, false, false, "K",
         "keep the K most likely tokens, 0 = off (default 40)", false},
        {"top-p", 0, PL_CLI_OPT_FLOAT, &sp.top_p, 0, 1, true, false, "P",
         "nucleus sampling, 1 = off (default 0.95)", false},
        {"min-p", 0, PL_CLI_OPT_FLOAT, &sp.min_p, 0, 1, false, false, "P",
         "drop tokens below P times the top probability, 0 = off (default 0.05)", false},
        {"repeat-penalty", 0, PL_CLI_OPT_FLOAT, &sp.repeat_penalty, 0, INFINITY, true, false,
         "X", "penalise repeated tokens, 1 = off (default 1)", false},
        {"repeat-last-n", 0, PL_CLI_OPT_I64, &last_n, 0, PL_SAMPLER_MAX_PENALTY_LAST_N, false,
         false, "N", "window of recent tokens the penalties look at (default 64)", false},
        {"frequency-penalty", 0, PL_CLI_OPT_FLOAT, &sp.freq_penalty, -INFINITY, INFINITY,
         false, false, "X", "subtract X per occurrence in the window (default 0)", false},
        {"presence-penalty", 0, PL_CLI_OPT_FLOAT, &sp.presence_penalty, -INFINITY, INFINITY,
         false, false, "X", "subtract X once per token present in the window (default 0)",
         false},
        {"seed", 's', PL_CLI_OPT_U64, &seed, 0, 0, false, false, "S",
         "random seed (default: from the clock; -v prints it)", false},
        {"ignore-eos", 0, PL_CLI_OPT_FLAG, &ignore_eos, 0, 0, false, false, NULL,
         "do not stop at end-of-generation tokens", false},
        {"json", 0, PL_CLI_OPT_FLAG, &json, 0, 0, false, false, NULL,
         "print one JSON object {\"prompt_tokens\",\"tokens\",\"text\"} at the end", false},
    };
    bool done;
    int rc = parse_or_help("generate",
                           "[--socket PATH | --model FILE] [-p TEXT | --tokens IDS] [options]",
                           "Generate text, streamed to stdout as it is produced. With --json the "
                           "text is JSON-escaped;\ninvalid UTF-8 becomes U+FFFD there (the "
                           "token ids give the exact bytes).",
                           opts, PL_ARRAY_SIZE(opts), argc, argv, &done);
    if (rc || done)
        return rc;
    if (prompt && tokens_arg) {
        die_line("generate: -p and --tokens exclude each other");
        return EXIT_USAGE;
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
    if (tokens_arg && pl_cli_args_parse_ids(tokens_arg, &ids, &n_ids, err, sizeof(err)) < 0) {
        die_line("%s", err);
        return EXIT_USAGE;
    }

    struct pl_cli_backend *b = NULL;
    struct gen_sink sink = {.json = json, .out = stdout};
    struct pl_cli_gen_stats st = {0};
    if ((rc = open_backend(&c, &b)) != 0)
        goto out;
    rc = EXIT_USAGE;
    if (tokens_arg) {
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

    struct pl_cli_gen_opts go = {.n_predict = n_predict, .ignore_eos = ignore_eos,
                                 .sampler = sp};
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
        print_ids_json(stdout, ids, n_ids);
        (void)fputs(",\"tokens\":", stdout);
        print_ids_json(stdout, sink.tokens, sink.n_tokens);
        (void)fputs(",\"text\":", stdout);
        pl_cli_json_write_str(stdout, sink.text ? sink.text : "", sink.len_text);
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
        static const char *const stops[] = {"length", "end of generation", "context full"};
        (void)fprintf(stderr,
                      "picolm: prompt %zu tokens in %.1f ms, generated %zu tokens in %.1f ms "
                      "(%.1f tokens/s), stop: %s\n",
                      st.n_prompt, (double)st.prompt_ns / 1e6, st.n_gen,
                      (double)st.gen_ns / 1e6,
                      st.gen_ns ? (double)st.n_gen * 1e9 / (double)st.gen_ns : 0.0,
                      stops[st.stop]);
    }
    rc = 0;
out:
    free(ids);
    free(sink.tokens);
    free(sink.text);
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
    (void)printf("parameters:      %" PRIu64 " (%.2f M), weights %" PRIu64 " bytes\n",
                 m->n_params, (double)m->n_params / 1e6, m->weight_bytes);
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
    (void)printf("tokenizer:       %s, %u tokens, BOS %" PRId32 ", EOS %" PRId32
                 ", adds BOS: %s\n",
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
    (void)fprintf(f, ",\"file_size\":%" PRIu64 ",\"gguf_version\":%u,\"n_tensors\":%" PRIu64
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
                  m->n_params, m->weight_bytes, m->n_vocab, m->n_ctx_train, m->n_embd,
                  m->n_layer, m->n_head, m->n_head_kv, m->head_dim, m->n_ff, m->n_rot,
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

/* The conversation so far, as one growing text: plain concatenation of the user's lines and
 * the answers (chat templates come later). */
struct chat_sink {
    char *hist;
    size_t len, cap;
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

static int on_chat_token(void *ud, int32_t id, const char *piece, size_t len) {
    struct chat_sink *s = ud;
    (void)id;
    if (len && fwrite(piece, 1, len, stdout) != len) {
        s->write_failed = true;
        return -EIO;
    }
    if (fflush(stdout) != 0) {
        s->write_failed = true;
        return -EIO;
    }
    return hist_append(s, piece, len);
}

/* Tokenize the conversation; while it leaves less than reserve tokens of the context, forget
 * its oldest line. Returns 0 with new ids, -E2BIG when even the last line does not fit. */
static int chat_tokens(struct pl_cli_backend *b, struct chat_sink *s, size_t n_ctx,
                       size_t reserve, int32_t **ret_ids, size_t *ret_n) {
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

static int cmd_chat(int argc, char **argv) {
    struct common_opts c = {0};
    struct pl_sampler_params sp;
    pl_sampler_params_default(&sp);
    int64_t n_predict = 256, top_k = sp.top_k;
    uint64_t seed = 0;
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
        {"repeat-penalty", 0, PL_CLI_OPT_FLOAT, &sp.repeat_penalty, 0, INFINITY, true, false,
         "X", "penalise repeated tokens, 1 = off (default 1)", false},
        {"seed", 's', PL_CLI_OPT_U64, &seed, 0, 0, false, false, "S",
         "random seed (default: from the clock)", false},
    };
    bool done;
    int rc = parse_or_help("chat", "[--socket PATH | --model FILE] [options]",
                           "Read lines from stdin; answer each one, streamed to stdout and "
                           "ended by a newline.\nThe conversation is the plain concatenation "
                           "of lines and answers; when it outgrows\nthe context, its oldest "
                           "lines are forgotten. End with EOF (Ctrl-D).",
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
                 "tokens", n_predict, n_ctx);
        rc = EXIT_USAGE;
        goto out;
    }
    bool tty = isatty(STDIN_FILENO);
    struct pl_cli_gen_opts go = {.n_predict = n_predict, .sampler = sp};
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
            hist_append(&sink, line, (size_t)n) < 0) {
            die_line("chat: %s", strerror(ENOMEM));
            goto out;
        }
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
        r = b->ops->generate(b, ids, n_ids, &go, on_chat_token, &sink, &st);
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
    free(mi);
    if (b)
        b->ops->close(b);
    return rc;
}

/* ---- main ---- */

static void usage(FILE *f) {
    (void)fprintf(f,
                  "usage: picolm COMMAND [--socket PATH | --model FILE] [options]\n"
                  "\n"
                  "commands:\n"
                  "  generate   generate text from a prompt (streamed to stdout)\n"
                  "  chat       answer each line read from stdin, keeping the conversation\n"
                  "  tokenize   print the token ids of a text\n"
                  "  eval       write the logits of a token sequence to a file (--model only)\n"
                  "  info       describe the model\n"
                  "\n"
                  "Through picolmd by default (--socket PATH, else $PICOLM_SOCKET, else\n"
                  PL_CLI_DEFAULT_SOCKET "); --model FILE runs the model in-process instead.\n"
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
