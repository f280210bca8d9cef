/* SPDX-License-Identifier: MIT */
/* picolm-bench serve: what serving through picolmd costs and gains. In one run it measures the
 * model's in-process greedy decode (pl_engine directly, no daemon), then starts the built
 * picolmd on the same model in a temporary socket directory and, for each client count N, forks N
 * processes that each stream one greedy generation through libpicolm at the same moment. Reports
 * aggregate and per-client tok/s, TTFT and inter-token latency percentiles, and the end-to-end
 * latency of 1-token requests against their in-process cost (both measured in alternating blocks,
 * so that a slower stretch of a shared machine weighs on both alike). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "picolm.h"
#include "pl/engine_model.h"
#include "pl/engine_sampler.h"
#include "pl/engine_tokenizer.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

#define MAX_CLIENT_COUNTS 16
#define MAX_DAEMON_ARGS 16
#define MAX_CLIENTS 256
/* 1-token requests per side: as many as fit in ONE_TOKEN_BUDGET_NS each (a median of few is
 * as noisy as the difference it measures), between the two bounds. */
#define ONE_TOKEN_MIN 50
#define ONE_TOKEN_MAX 500
#define ONE_TOKEN_BUDGET_NS 1500000000ull
#define MAX_REPS 64
/* Shortest first-to-last-chunk time that counts as a decode rate (the broker's default
 * stream coalescing window). */
#define DECODE_SPAN_MIN_NS 1000000ull
#define DAEMON_START_TIMEOUT_MS 120000
#define DEFAULT_PROMPT "Once upon a time, there was a little"

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Percentile (0..100) of v[n] (sorted in place), nearest rank; 0 for n == 0. */
static uint64_t pct(uint64_t *v, size_t n, double p) {
    if (!n)
        return 0;
    qsort(v, n, sizeof(*v), cmp_u64);
    size_t k = (size_t)ceil(p / 100.0 * (double)n);
    return v[k ? k - 1 : 0];
}

/* ---- In-process baseline ---- */

/* The model stays loaded while the broker runs (it sleeps meanwhile), so that decode runs
 * can be interleaved with the 1-client rounds: a slower or busier stretch of the machine
 * then weighs on both sides of the comparison alike. */
struct inproc {
    char backing[16];      /* where the weights were placed (as picolmd places them) */
    double decode_tok_s;   /* greedy decode, one sequence: median of the runs */
    double e2e_tok_s;      /* the same runs from the prompt on: n_tokens / (prefill, first
                              token, decode), as a client's generation is timed */
    uint64_t one_token_ns; /* median: prompt prefill + sample one token (measured beside
                              the broker's: one_token_compare()) */
    uint32_t n_prompt;
    uint32_t n_gen;
    uint32_t n_tokens;
    struct pl_model *m;
    struct pl_ctx *ctx;
    struct pl_sampler *smp;
    int32_t *toks, *pos, *seq;
    float *logits;
    uint64_t rates[2 * MAX_REPS]; /* milli-tok/s of each decode run */
    uint64_t e2e[2 * MAX_REPS];   /* milli-tok/s of each run from the prompt on */
    uint32_t n_rates;
};

static void inproc_close(struct inproc *ip) {
    pl_sampler_free(ip->smp);
    pl_ctx_free(ip->ctx);
    pl_model_free(ip->m);
    free(ip->toks);
    free(ip->pos);
    free(ip->seq);
    free(ip->logits);
    ip->smp = NULL;
    ip->ctx = NULL;
    ip->m = NULL;
    ip->toks = ip->pos = ip->seq = NULL;
    ip->logits = NULL;
}

/* n 1-token requests in process: prefill the prompt and sample one token, from an empty
 * cache; each one's time into v. Returns 0 or a negative errno. */
static int inproc_one_token(struct inproc *ip, uint64_t *v, int n) {
    for (int rep = 0; rep < n; rep++) {
        pl_ctx_seq_clear(ip->ctx, 0);
        pl_sampler_reset(ip->smp);
        uint64_t t0 = pl_now_ns();
        struct pl_batch b = {.n = ip->n_prompt, .token = ip->toks, .pos = ip->pos, .seq = ip->seq};
        int r = pl_ctx_decode(ip->ctx, &b, ip->logits);
        if (r < 0)
            return r;
        (void)pl_sampler_sample(ip->smp, ip->logits);
        v[rep] = pl_now_ns() - t0;
    }
    return 0;
}

/* One greedy decode of n_tokens after the prompt (the same work a client asks the broker
 * for); its rate joins ip->rates and ip->decode_tok_s becomes the median so far. */
static int inproc_decode(struct inproc *ip) {
    if (ip->n_rates == sizeof(ip->rates) / sizeof(ip->rates[0]))
        return 0;
    pl_ctx_seq_clear(ip->ctx, 0);
    pl_sampler_reset(ip->smp);
    uint64_t t_pre = pl_now_ns();
    struct pl_batch b = {.n = ip->n_prompt, .token = ip->toks, .pos = ip->pos, .seq = ip->seq};
    int r = pl_ctx_decode(ip->ctx, &b, ip->logits);
    if (r < 0)
        return r;
    int32_t id = pl_sampler_sample(ip->smp, ip->logits);
    uint64_t t0 = pl_now_ns();
    uint32_t n_gen = 0;
    for (; n_gen + 1 < ip->n_tokens; n_gen++) {
        pl_sampler_accept(ip->smp, id);
        int32_t p = (int32_t)(ip->n_prompt + n_gen), s = 0;
        struct pl_batch one_b = {.n = 1, .token = &id, .pos = &p, .seq = &s};
        r = pl_ctx_decode(ip->ctx, &one_b, ip->logits);
        if (r < 0)
            return r;
        id = pl_sampler_sample(ip->smp, ip->logits);
    }
    uint64_t t1 = pl_now_ns(), dt = t1 - t0;
    ip->e2e[ip->n_rates] = (uint64_t)((double)(n_gen + 1) * 1e12 / (double)(t1 - t_pre));
    ip->rates[ip->n_rates++] = dt ? (uint64_t)((double)n_gen * 1e12 / (double)dt) : 0;
    ip->n_gen = n_gen + 1;
    uint64_t sorted[2 * MAX_REPS];
    memcpy(sorted, ip->rates, ip->n_rates * sizeof(sorted[0]));
    ip->decode_tok_s = (double)pct(sorted, ip->n_rates, 50) / 1e3;
    memcpy(sorted, ip->e2e, ip->n_rates * sizeof(sorted[0]));
    ip->e2e_tok_s = (double)pct(sorted, ip->n_rates, 50) / 1e3;
    return 0;
}

static int inproc_open(const char *model_path, uint32_t n_threads, const char *prompt,
                       uint32_t n_tokens, struct inproc *ret) {
    char err[256] = "";
    struct pl_model *m = NULL;
    struct pl_ctx *ctx = NULL;
    struct pl_sampler *smp = NULL;
    int32_t *toks = NULL, *pos = NULL, *seq = NULL;
    float *logits = NULL;
    struct pl_model_opts mo = {.n_threads = n_threads};
    int r = pl_model_load(model_path, &mo, &m, err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "picolm-bench serve: cannot load %s: %s (%s)\n", model_path, pl_strerror(r),
                err);
        return r;
    }
    /* The weights where picolmd puts them (and picolm generate --model): 2 MiB pages when it
     * can get them. On 4 KiB file pages a large model decodes a third slower, which would
     * flatter the broker. */
    struct pl_weights_info wi;
    r = pl_model_place_weights(m, PL_WEIGHTS_AUTO, &wi);
    if (r < 0)
        goto out;
    (void)snprintf(ret->backing, sizeof(ret->backing), "%s", wi.backing);
    const struct pl_tokenizer *tok = pl_model_tokenizer(m);
    const struct pl_model_hparams *hp = pl_model_hparams(m);
    size_t n_prompt = 0, cap = strlen(prompt) + 8;
    toks = calloc(cap, sizeof(*toks));
    pos = calloc(cap, sizeof(*pos));
    seq = calloc(cap, sizeof(*seq));
    logits = malloc((size_t)hp->n_vocab * sizeof(*logits));
    if (!toks || !pos || !seq || !logits) {
        r = -ENOMEM;
        goto out;
    }
    r = pl_tokenizer_encode(tok, prompt, strlen(prompt), true, false, toks, cap, &n_prompt);
    if (r < 0 || n_prompt == 0) {
        r = r < 0 ? r : -EINVAL;
        fprintf(stderr, "picolm-bench serve: cannot tokenize the prompt: %s\n", pl_strerror(r));
        goto out;
    }
    struct pl_ctx_opts co = {.n_ctx = (uint32_t)n_prompt + n_tokens + 8, .n_seq = 1};
    if (co.n_ctx > hp->n_ctx_train)
        co.n_ctx = hp->n_ctx_train;
    if (n_prompt + n_tokens > co.n_ctx) {
        fprintf(stderr, "picolm-bench serve: prompt + --tokens exceed the model context (%u)\n",
                hp->n_ctx_train);
        r = -EINVAL;
        goto out;
    }
    r = pl_ctx_new(m, &co, &ctx);
    if (r < 0)
        goto out;
    struct pl_sampler_params sp;
    pl_sampler_params_default(&sp);
    sp.temp = 0;
    r = pl_sampler_new(&sp, hp->n_vocab, &smp);
    if (r < 0)
        goto out;

    for (size_t i = 0; i < n_prompt; i++) {
        pos[i] = (int32_t)i;
        seq[i] = 0;
    }

    ret->n_prompt = (uint32_t)n_prompt;
    ret->n_tokens = n_tokens;
    ret->m = m;
    ret->ctx = ctx;
    ret->smp = smp;
    ret->toks = toks;
    ret->pos = pos;
    ret->seq = seq;
    ret->logits = logits;
    return 0;
out:
    if (!err[0])
        fprintf(stderr, "picolm-bench serve: in-process run failed: %s\n", pl_strerror(r));
    pl_sampler_free(smp);
    pl_ctx_free(ctx);
    pl_model_free(m);
    free(toks);
    free(pos);
    free(seq);
    free(logits);
    return r;
}

/* ---- The daemon ---- */

struct daemon {
    pid_t pid;
    char dir[64];
    char sock[128];
};

/* Start picolmd with one engine sequence per client and a context just large enough for the
 * benchmark's requests (so the KV pool stays small on large models). */
static int daemon_start(struct daemon *d, const char *picolmd, const char *model,
                        uint32_t max_clients, uint32_t n_ctx, char **extra, size_t n_extra) {
    (void)snprintf(d->dir, sizeof(d->dir), "/tmp/picolm-bench-XXXXXX");
    if (!mkdtemp(d->dir))
        return -errno;
    (void)snprintf(d->sock, sizeof(d->sock), "%s/picolm.sock", d->dir);
    char sessions[16], active[16], ctx[16];
    /* Twice the clients: the sessions of one round may still be closing when the next one
     * connects. */
    (void)snprintf(sessions, sizeof(sessions), "%u", 2 * max_clients + 4);
    (void)snprintf(active, sizeof(active), "%u", max_clients);
    (void)snprintf(ctx, sizeof(ctx), "%u", n_ctx);
    fflush(NULL);
    d->pid = fork();
    if (d->pid < 0)
        return -errno;
    if (d->pid == 0) {
        int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (devnull >= 0 && !getenv("PICOLM_BENCH_DAEMON_LOG"))
            (void)dup2(devnull, STDERR_FILENO);
        char *argv[14 + MAX_DAEMON_ARGS] = {
            (char *)picolmd,  "--model", (char *)model,  "--socket-dir", d->dir,  "--foreground",
            "--max-sessions", sessions,  "--max-active", active,         "--ctx", ctx};
        for (size_t i = 0; i < n_extra; i++)
            argv[12 + i] = extra[i];
        execv(picolmd, argv);
        _exit(127);
    }
    /* Ready when a client can connect. */
    uint64_t deadline = pl_now_ns() + (uint64_t)DAEMON_START_TIMEOUT_MS * 1000000ull;
    for (;;) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;
            fprintf(stderr,
                    "picolm-bench serve: %s exited during start-up (status %d); set "
                    "PICOLM_BENCH_DAEMON_LOG=1 to see its log\n",
                    picolmd, status);
            return -ECHILD;
        }
        picolm_client *c;
        if (picolm_connect(d->sock, &c) == PICOLM_OK) {
            picolm_close(c);
            return 0;
        }
        if (pl_now_ns() > deadline) {
            fprintf(stderr, "picolm-bench serve: picolmd did not come up\n");
            return -ETIMEDOUT;
        }
        usleep(20000);
    }
}

static void daemon_stop(struct daemon *d) {
    if (d->pid > 0) {
        (void)kill(d->pid, SIGTERM);
        int status;
        for (int i = 0; i < 500; i++) {
            if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
                d->pid = 0;
                break;
            }
            usleep(10000);
        }
        if (d->pid > 0) {
            (void)kill(d->pid, SIGKILL);
            (void)waitpid(d->pid, &status, 0);
        }
        d->pid = 0;
    }
    char p[160];
    (void)snprintf(p, sizeof(p), "%s/admin.sock", d->dir);
    (void)unlink(p);
    (void)unlink(d->sock);
    (void)rmdir(d->dir);
}

/* ---- Client processes ---- */

/* Per-client results in a MAP_SHARED area the children write. */
struct client_rec {
    int32_t status; /* picolm status of the generation */
    uint32_t n_tokens;
    uint32_t n_itl;                           /* gaps recorded */
    uint32_t n_first;                         /* tokens in the first chunk */
    uint64_t t_start, t_first, t_last, t_end; /* submit, first and last token, return */
    uint64_t itl[]; /* [max tokens] per-token gaps after the first token, ns */
};

struct run_ctx {
    const char *sock;
    const char *prompt;
    uint32_t n_tokens;
    size_t rec_bytes;
    uint8_t *area;
};

static struct client_rec *rec_at(const struct run_ctx *rc, size_t i) {
    return (struct client_rec *)(void *)(rc->area + i * rc->rec_bytes);
}

struct stream_state {
    struct client_rec *rec;
    uint32_t cap;
    uint64_t last;
};

static int on_chunk(void *user, const struct picolm_chunk *ch) {
    struct stream_state *s = user;
    uint64_t t = pl_now_ns();
    if (!ch->n_ids)
        return 0;
    if (!s->rec->t_first) {
        s->rec->t_first = t;
        s->rec->n_first = (uint32_t)ch->n_ids;
    } else {
        /* A chunk of k tokens: its gap is spread over them. */
        uint64_t gap = (t - s->last) / ch->n_ids;
        for (size_t k = 0; k < ch->n_ids && s->rec->n_itl < s->cap; k++)
            s->rec->itl[s->rec->n_itl++] = gap;
    }
    s->rec->n_tokens += (uint32_t)ch->n_ids;
    s->rec->t_last = t;
    s->last = t;
    return 0;
}

static void fill_params(struct picolm_generate_params *p, const char *prompt, uint32_t n) {
    picolm_generate_params_init(p);
    p->prompt = prompt;
    p->max_tokens = n;
    p->flags = PICOLM_GEN_IGNORE_EOS;
    p->sampling.temperature = 0; /* greedy */
    p->sampling.repeat_penalty = 1;
}

/* Child: connect, wait for the start signal on go_fd, stream one generation. */
static void client_main(const struct run_ctx *rc, size_t idx, int ready_fd, int go_fd) {
    struct client_rec *rec = rec_at(rc, idx);
    picolm_client *c;
    int r = picolm_connect(rc->sock, &c);
    char b = r == PICOLM_OK ? 'r' : 'x';
    if (write(ready_fd, &b, 1) != 1 || r != PICOLM_OK) {
        rec->status = r != PICOLM_OK ? r : PICOLM_E_SYSTEM;
        _exit(1);
    }
    if (read(go_fd, &b, 1) != 1) {
        rec->status = PICOLM_E_SYSTEM;
        _exit(1);
    }
    struct picolm_generate_params p;
    fill_params(&p, rc->prompt, rc->n_tokens);
    struct stream_state st = {.rec = rec, .cap = rc->n_tokens};
    rec->t_start = pl_now_ns();
    r = picolm_generate(c, &p, on_chunk, &st, NULL);
    rec->t_end = pl_now_ns();
    rec->status = r;
    picolm_close(c);
    _exit(r == PICOLM_OK ? 0 : 1);
}

struct round {
    uint32_t n_clients;
    uint32_t n_failed;
    double aggregate_tok_s;
    double client_tok_s_mean, client_tok_s_min;
    double decode_tok_s_mean; /* per client: tokens after the first chunk / first to last
                                 chunk, over the clients where that took DECODE_SPAN_MIN_NS
                                 or more; 0: none did */
    uint64_t ttft_p50, ttft_p99, itl_p50, itl_p99;
};

static int run_round(const struct run_ctx *rc, uint32_t n_clients, struct round *ret) {
    memset(rc->area, 0, rc->rec_bytes * n_clients);
    int ready[2], go[2];
    if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0)
        return -errno;
    pid_t pids[MAX_CLIENTS];
    fflush(NULL);
    for (uint32_t i = 0; i < n_clients; i++) {
        pids[i] = fork();
        if (pids[i] < 0)
            return -errno;
        if (pids[i] == 0) {
            close(ready[0]);
            close(go[1]);
            client_main(rc, i, ready[1], go[0]);
        }
    }
    close(ready[1]);
    close(go[0]);
    /* Every client connected, then all start at once. */
    for (uint32_t i = 0; i < n_clients; i++) {
        char b;
        if (read(ready[0], &b, 1) != 1)
            break;
    }
    char go_bytes[MAX_CLIENTS];
    memset(go_bytes, 'g', n_clients);
    (void)!write(go[1], go_bytes, n_clients);
    close(go[1]);
    close(ready[0]);
    for (uint32_t i = 0; i < n_clients; i++) {
        int status;
        (void)waitpid(pids[i], &status, 0);
    }

    *ret = (struct round){.n_clients = n_clients, .client_tok_s_min = INFINITY};
    uint64_t t0 = UINT64_MAX, t1 = 0, total = 0;
    uint64_t *ttft = calloc(n_clients, sizeof(*ttft));
    uint64_t *itl = calloc((size_t)n_clients * rc->n_tokens + 1, sizeof(*itl));
    if (!ttft || !itl) {
        free(ttft);
        free(itl);
        return -ENOMEM;
    }
    size_t n_ttft = 0, n_itl = 0;
    double sum_rate = 0, sum_decode = 0;
    uint32_t n_decode = 0;
    for (uint32_t i = 0; i < n_clients; i++) {
        struct client_rec *r = rec_at(rc, i);
        if (r->status != PICOLM_OK || !r->t_first) {
            ret->n_failed++;
            fprintf(stderr, "picolm-bench serve: client %u of %u failed: %s\n", i, n_clients,
                    picolm_strerror(r->status));
            continue;
        }
        t0 = r->t_start < t0 ? r->t_start : t0;
        t1 = r->t_end > t1 ? r->t_end : t1;
        total += r->n_tokens;
        double rate = (double)r->n_tokens * 1e9 / (double)(r->t_end - r->t_start);
        sum_rate += rate;
        /* The tokens after the first chunk, over the time after it (a chunk can carry
         * several tokens: the broker coalesces a fast stream's wake-ups). Not measured when
         * they all came within DECODE_SPAN_MIN_NS of it (a tiny model's whole answer can
         * arrive in one read): the rate would be the client's reading speed. */
        if (r->n_tokens > r->n_first && r->t_last - r->t_first >= DECODE_SPAN_MIN_NS) {
            sum_decode +=
                (double)(r->n_tokens - r->n_first) * 1e9 / (double)(r->t_last - r->t_first);
            n_decode++;
        }
        if (rate < ret->client_tok_s_min)
            ret->client_tok_s_min = rate;
        ttft[n_ttft++] = r->t_first - r->t_start;
        for (uint32_t k = 0; k < r->n_itl && k < rc->n_tokens; k++)
            itl[n_itl++] = r->itl[k];
    }
    uint32_t ok = n_clients - ret->n_failed;
    if (ok) {
        ret->aggregate_tok_s = (double)total * 1e9 / (double)(t1 - t0);
        ret->client_tok_s_mean = sum_rate / ok;
        ret->decode_tok_s_mean = n_decode ? sum_decode / n_decode : 0; /* 0: not measured */
    } else {
        ret->client_tok_s_min = 0;
    }
    ret->ttft_p50 = pct(ttft, n_ttft, 50);
    ret->ttft_p99 = pct(ttft, n_ttft, 99);
    ret->itl_p50 = pct(itl, n_itl, 50);
    ret->itl_p99 = pct(itl, n_itl, 99);
    free(ttft);
    free(itl);
    return 0;
}

static int cmp_round(const void *a, const void *b) {
    double x = ((const struct round *)a)->aggregate_tok_s;
    double y = ((const struct round *)b)->aggregate_tok_s;
    return x < y ? -1 : x > y;
}

/* reps rounds of n_clients: the one of median aggregate tok/s (a round of a small model
 * lasts milliseconds, and one is at the mercy of whatever else the machine runs). Each
 * 1-client round follows an in-process decode run (ip), its direct comparison. */
static int run_rounds(const struct run_ctx *rc, uint32_t n_clients, uint32_t reps,
                      struct inproc *ip, struct round *ret) {
    struct round v[MAX_REPS];
    for (uint32_t i = 0; i < reps; i++) {
        if (i)
            usleep(10000); /* the last round's hang-ups reach the broker */
        if (n_clients == 1 && inproc_decode(ip) < 0)
            return -EIO;
        int r = run_round(rc, n_clients, &v[i]);
        if (r < 0)
            return r;
        if (v[i].n_failed) {
            *ret = v[i];
            return 0;
        }
    }
    qsort(v, reps, sizeof(v[0]), cmp_round);
    *ret = v[reps / 2];
    return 0;
}

/* 1-token requests, one at a time, over one connection: median end to end, and the medians
 * of the broker's own view (receipt to first scheduled step, receipt to the token). */
struct one_token {
    uint64_t total_ns, broker_queue_ns, broker_ttft_ns;
    uint32_t n; /* requests on each side */
};

/* Blocks of 1-token requests, alternately in process and through the broker (one
 * connection), so that both medians come from the same stretch of the machine's time;
 * ret: the broker's medians, *ret_inproc: the in-process one. */
#define ONE_TOKEN_BLOCKS 10

static int one_token_compare(const char *sock, const char *prompt, struct inproc *ip,
                             struct one_token *ret, uint64_t *ret_inproc) {
    static uint64_t v[ONE_TOKEN_MAX], vq[ONE_TOKEN_MAX], vt[ONE_TOKEN_MAX], vi[ONE_TOKEN_MAX];
    uint64_t probe[3];
    if (inproc_one_token(ip, probe, 3) < 0)
        return PICOLM_E_SYSTEM;
    uint64_t t_one = PL_MIN(probe[0], PL_MIN(probe[1], probe[2]));
    uint64_t fit = ONE_TOKEN_BUDGET_NS / (t_one ? t_one : 1);
    const int per = (int)PL_MIN(PL_MAX(fit, (uint64_t)ONE_TOKEN_MIN), (uint64_t)ONE_TOKEN_MAX) /
                    ONE_TOKEN_BLOCKS;
    picolm_client *c;
    int r = picolm_connect(sock, &c);
    if (r != PICOLM_OK)
        return r;
    struct picolm_generate_params p;
    fill_params(&p, prompt, 1);
    for (int blk = 0; blk < ONE_TOKEN_BLOCKS; blk++) {
        if (inproc_one_token(ip, vi + blk * per, per) < 0) {
            fprintf(stderr, "picolm-bench serve: in-process 1-token request failed\n");
            picolm_close(c);
            return PICOLM_E_SYSTEM;
        }
        for (int i = blk * per; i < (blk + 1) * per; i++) {
            struct picolm_result res = {.size = sizeof(res)};
            uint64_t t0 = pl_now_ns();
            r = picolm_generate(c, &p, NULL, NULL, &res);
            v[i] = pl_now_ns() - t0;
            vq[i] = res.queue_ns;
            vt[i] = res.ttft_ns;
            if (r != PICOLM_OK) {
                fprintf(stderr, "picolm-bench serve: 1-token request: %s: %s\n", picolm_strerror(r),
                        picolm_last_error(c));
                picolm_close(c);
                return r;
            }
        }
    }
    picolm_close(c);
    const size_t n = (size_t)per * ONE_TOKEN_BLOCKS;
    ret->n = (uint32_t)n;
    ret->total_ns = pct(v, n, 50);
    ret->broker_queue_ns = pct(vq, n, 50);
    ret->broker_ttft_ns = pct(vt, n, 50);
    *ret_inproc = pct(vi, n, 50);
    return PICOLM_OK;
}

/* ---- TTFT of a short request while other clients stream ---- */

#define TTFT_REPS 40

static int first_chunk_time(void *user, const struct picolm_chunk *ch) {
    uint64_t *t = user;
    if (ch->n_ids && !*t)
        *t = pl_now_ns();
    return 0;
}

/* Median time from the submission to the first streamed token of a 2-token request on
 * connection c (ret_ns[0]), and the broker's median from its receipt to that token
 * (ret_ns[1]). */
static int ttft_median(picolm_client *c, const char *prompt, uint64_t ret_ns[2]) {
    struct picolm_generate_params p;
    fill_params(&p, prompt, 2);
    uint64_t v[TTFT_REPS], vb[TTFT_REPS];
    for (int i = 0; i < TTFT_REPS; i++) {
        struct picolm_result res = {.size = sizeof(res)};
        uint64_t t_first = 0, t0 = pl_now_ns();
        int r = picolm_generate(c, &p, first_chunk_time, &t_first, &res);
        if (r != PICOLM_OK || !t_first) {
            fprintf(stderr, "picolm-bench serve: TTFT request: %s\n", picolm_strerror(r));
            return r != PICOLM_OK ? r : PICOLM_E_PROTOCOL;
        }
        v[i] = t_first - t0;
        vb[i] = res.ttft_ns;
    }
    ret_ns[0] = pct(v, TTFT_REPS, 50);
    ret_ns[1] = pct(vb, TTFT_REPS, 50);
    return PICOLM_OK;
}

/* Background client: stream generations back to back until *stop. */
static void bg_client_main(const struct run_ctx *rc, uint32_t *started, uint32_t *stop) {
    picolm_client *c;
    if (picolm_connect(rc->sock, &c) != PICOLM_OK)
        _exit(1);
    struct picolm_generate_params p;
    fill_params(&p, rc->prompt, rc->n_tokens);
    (void)__atomic_add_fetch(started, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(stop, __ATOMIC_SEQ_CST))
        if (picolm_generate(c, &p, NULL, NULL, NULL) != PICOLM_OK)
            break;
    picolm_close(c);
    _exit(0);
}

/* TTFT of a short streamed request with the daemon idle, then while n_bg other clients
 * stream (each generating back to back); medians of TTFT_REPS. */
static int loaded_ttft(const struct run_ctx *rc, uint32_t n_bg, uint64_t ret_idle[2],
                       uint64_t ret_loaded[2]) {
    picolm_client *c;
    int r = picolm_connect(rc->sock, &c);
    if (r != PICOLM_OK)
        return r;
    r = ttft_median(c, rc->prompt, ret_idle);
    if (r != PICOLM_OK) {
        picolm_close(c);
        return r;
    }
    uint32_t *flags = mmap(NULL, 64, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (flags == MAP_FAILED) {
        picolm_close(c);
        return PICOLM_E_SYSTEM;
    }
    pid_t pids[MAX_CLIENTS];
    uint32_t n = 0;
    fflush(NULL);
    for (; n < n_bg; n++) {
        pids[n] = fork();
        if (pids[n] < 0)
            break;
        if (pids[n] == 0)
            bg_client_main(rc, &flags[0], &flags[1]);
    }
    /* Every background client connected, then 20 ms for their streams to get going. */
    uint64_t deadline = pl_now_ns() + 30000000000ull;
    while (__atomic_load_n(&flags[0], __ATOMIC_SEQ_CST) < n && pl_now_ns() < deadline)
        usleep(1000);
    usleep(20000);
    r = ttft_median(c, rc->prompt, ret_loaded);
    __atomic_store_n(&flags[1], 1, __ATOMIC_SEQ_CST);
    for (uint32_t i = 0; i < n; i++) {
        int status;
        (void)waitpid(pids[i], &status, 0);
    }
    (void)munmap(flags, 64);
    picolm_close(c);
    return r;
}

/* ---- TTFT with a shared prompt prefix (the broker's prefix cache) ---- */

#define PREFIX_REPS 5
#define PREFIX_WORDS_MAX 1500u

static const char *const prefix_words[] = {
    "the",      "river",  "a",     "small", "house",   "near",  "old",   "town",
    "where",    "people", "walk",  "every", "morning", "and",   "talk",  "about",
    "weather",  "market", "bread", "light", "long",    "road",  "over",  "hill",
    "children", "play",   "under", "green", "trees",   "while", "birds", "sing",
};

/* Prompt text: "Report V." and n_words words drawn by V (a prefix no other variant shares),
 * then a question q (its own tail). */
static int prefix_prompt(uint32_t variant, uint32_t n_words, uint32_t q, char **ret) {
    const size_t n_list = sizeof(prefix_words) / sizeof(prefix_words[0]);
    size_t cap = (size_t)n_words * 10 + 128, len = 0;
    char *b = malloc(cap);
    if (!b)
        return -ENOMEM;
    uint64_t x = 0x9E3779B97F4A7C15ull ^ ((uint64_t)variant << 17);
    len += (size_t)snprintf(b, cap, "Report %u.", variant);
    for (uint32_t i = 0; i < n_words; i++) {
        const char *w = prefix_words[(pl_xorshift64s(&x) >> 33) % n_list];
        len += (size_t)snprintf(b + len, cap - len, " %s", w);
    }
    (void)snprintf(b + len, cap - len, "\nQuestion %u: what happened next?", q);
    *ret = b;
    return 0;
}

struct prefix_ttft {
    uint32_t prompt_tokens;
    uint64_t cold_ns, warm_ns;               /* submit to first token, medians */
    uint64_t cold_broker_ns, warm_broker_ns; /* broker: receipt to first token, medians */
};

/* PREFIX_REPS times: a prompt of n_words words no earlier request began with (a miss: the
 * whole prompt prefilled), then the same words with another question (a hit: only what
 * follows the cached blocks). Two tokens each, greedy. */
static int shared_prefix_ttft(const char *sock, uint32_t n_words, struct prefix_ttft *ret) {
    picolm_client *c;
    int r = picolm_connect(sock, &c);
    if (r != PICOLM_OK)
        return r;
    uint64_t v[2][PREFIX_REPS], vb[2][PREFIX_REPS];
    for (uint32_t i = 0; i < PREFIX_REPS && r == PICOLM_OK; i++)
        for (uint32_t q = 0; q < 2 && r == PICOLM_OK; q++) {
            char *text = NULL;
            if (prefix_prompt(1000 + i, n_words, q, &text) < 0) {
                r = PICOLM_E_NOMEM;
                break;
            }
            struct picolm_generate_params p;
            fill_params(&p, text, 2);
            struct picolm_result res = {.size = sizeof(res)};
            uint64_t t_first = 0, t0 = pl_now_ns();
            r = picolm_generate(c, &p, first_chunk_time, &t_first, &res);
            free(text);
            if (r == PICOLM_OK && !t_first)
                r = PICOLM_E_PROTOCOL;
            if (r != PICOLM_OK) {
                fprintf(stderr, "picolm-bench serve: shared-prefix request: %s\n",
                        picolm_strerror(r));
                break;
            }
            v[q][i] = t_first - t0;
            vb[q][i] = res.ttft_ns;
            ret->prompt_tokens = res.prompt_tokens;
        }
    picolm_close(c);
    if (r != PICOLM_OK)
        return r;
    ret->cold_ns = pct(v[0], PREFIX_REPS, 50);
    ret->warm_ns = pct(v[1], PREFIX_REPS, 50);
    ret->cold_broker_ns = pct(vb[0], PREFIX_REPS, 50);
    ret->warm_broker_ns = pct(vb[1], PREFIX_REPS, 50);
    return PICOLM_OK;
}

/* ---- Output ---- */

/* s as a JSON string (quotes, backslashes and control bytes escaped). */
static void print_json_str(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

/* ---- Command line ---- */

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: picolm-bench serve --model FILE [--clients 1,2,4,8,16] [--tokens N] [--threads N]\n"
        "                          [--prompt TEXT] [--picolmd PATH] [--daemon-arg ARG]...\n"
        "                          [--loaded-ttft N] [--shared-prefix W] [--reps N] [--json]\n"
        "  --model FILE    GGUF model for picolmd and the in-process baseline\n"
        "  --clients LIST  client process counts, one round each (default 1,2,4,8,16)\n"
        "  --tokens N      tokens each client generates (default 64)\n"
        "  --prompt TEXT   prompt of every request (default: a short story opening)\n"
        "  --threads N     in-process baseline threads (default: 1 per CPU; match the\n"
        "                  daemon's, e.g. --threads 1 with --daemon-arg --cpus --daemon-arg 0)\n"
        "  --picolmd PATH  broker binary (default: picolmd beside this program)\n"
        "  --daemon-arg A  pass A on to picolmd (repeat: --daemon-arg --cpus --daemon-arg 0)\n"
        "  --loaded-ttft N also: TTFT of a short streamed request idle and while N other\n"
        "                  clients stream (medians of 40)\n"
        "  --shared-prefix W also: TTFT of a prompt of W words (1..1500) that no request\n"
        "                  began with before, and of the same words with another question\n"
        "                  after them (the prefix cache's hit); medians of 5 each\n"
        "  --reps N        in-process decode runs and rounds per client count; the median\n"
        "                  is reported (default 5)\n"
        "  --json          one JSON object on stdout instead of text\n");
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *ret) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -EINVAL;
    *ret = (uint32_t)v;
    return 0;
}

static int parse_list(const char *s, uint32_t *out, size_t *ret_n) {
    size_t n = 0;
    char buf[256];
    if (strlen(s) >= sizeof(buf))
        return -EINVAL;
    strcpy(buf, s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_CLIENT_COUNTS || parse_u32(tok, 1, MAX_CLIENTS, &out[n]) < 0)
            return -EINVAL;
        n++;
    }
    if (!n)
        return -EINVAL;
    *ret_n = n;
    return 0;
}

static void default_picolmd(char *buf, size_t cap) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        (void)snprintf(buf, cap, "picolmd");
        return;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    size_t dir_len = slash ? (size_t)(slash - self) : 0;
    if (dir_len + sizeof("/picolmd") > cap) {
        (void)snprintf(buf, cap, "picolmd");
        return;
    }
    memcpy(buf, self, dir_len);
    memcpy(buf + dir_len, "/picolmd", sizeof("/picolmd"));
}

int bench_serve_main(int argc, char **argv) {
    const char *model = NULL, *prompt = DEFAULT_PROMPT;
    char picolmd[PATH_MAX];
    default_picolmd(picolmd, sizeof(picolmd));
    uint32_t counts[MAX_CLIENT_COUNTS] = {1, 2, 4, 8, 16};
    size_t n_counts = 5;
    uint32_t n_tokens = 64, n_threads = 0, loaded_n = 0, reps = 5, prefix_words_n = 0;
    bool json = false;
    char *daemon_args[MAX_DAEMON_ARGS];
    size_t n_daemon_args = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        bool bad = !v;
        if (!bad && !strcmp(a, "--model"))
            model = v;
        else if (!bad && !strcmp(a, "--prompt"))
            prompt = v;
        else if (!bad && !strcmp(a, "--picolmd"))
            (void)snprintf(picolmd, sizeof(picolmd), "%s", v);
        else if (!bad && !strcmp(a, "--daemon-arg") && n_daemon_args < MAX_DAEMON_ARGS)
            daemon_args[n_daemon_args++] = argv[i + 1];
        else if (!bad && !strcmp(a, "--clients"))
            bad = parse_list(v, counts, &n_counts) < 0;
        else if (!bad && !strcmp(a, "--threads"))
            bad = parse_u32(v, 0, 512, &n_threads) < 0;
        else if (!bad && !strcmp(a, "--tokens"))
            bad = parse_u32(v, 2, 1u << 16, &n_tokens) < 0;
        else if (!bad && !strcmp(a, "--reps"))
            bad = parse_u32(v, 1, MAX_REPS, &reps) < 0;
        else if (!bad && !strcmp(a, "--loaded-ttft"))
            bad = parse_u32(v, 1, MAX_CLIENTS - 1, &loaded_n) < 0;
        else if (!bad && !strcmp(a, "--shared-prefix"))
            bad = parse_u32(v, 1, PREFIX_WORDS_MAX, &prefix_words_n) < 0;
        else
            bad = true;
        if (bad) {
            fprintf(stderr, "picolm-bench serve: bad argument '%.64s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!model) {
        usage(stderr);
        return 2;
    }
    if (access(picolmd, X_OK) < 0) {
        fprintf(stderr, "picolm-bench serve: no broker binary at %s (use --picolmd)\n", picolmd);
        return 1;
    }
    uint32_t max_clients = 0;
    for (size_t i = 0; i < n_counts; i++)
        max_clients = counts[i] > max_clients ? counts[i] : max_clients;
    if (loaded_n + 1 > max_clients)
        max_clients = loaded_n + 1; /* the daemon's sessions and decode sequences */

    /* The baseline first, alone on the machine; the model stays loaded (idle) for the decode
     * runs interleaved with the 1-client rounds, and is freed at the end. */
    struct inproc ip = {0};
    if (inproc_open(model, n_threads, prompt, n_tokens, &ip) < 0)
        return 1;
    for (uint32_t i = 0; i < reps; i++)
        if (inproc_decode(&ip) < 0) {
            fprintf(stderr, "picolm-bench serve: in-process decode failed\n");
            inproc_close(&ip);
            return 1;
        }

    struct run_ctx rc = {.prompt = prompt, .n_tokens = n_tokens};
    rc.rec_bytes = sizeof(struct client_rec) + (size_t)n_tokens * sizeof(uint64_t);
    rc.area = mmap(NULL, rc.rec_bytes * max_clients, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (rc.area == MAP_FAILED) {
        fprintf(stderr, "picolm-bench serve: mmap: %s\n", strerror(errno));
        inproc_close(&ip);
        return 1;
    }
    struct daemon d = {0};
    int rcode = 1;
    /* a word takes one to three tokens of the vocabularies we run */
    uint32_t n_ctx = ip.n_prompt + n_tokens + 16;
    if (prefix_words_n && 3 * prefix_words_n + 64 > n_ctx)
        n_ctx = 3 * prefix_words_n + 64;
    if (daemon_start(&d, picolmd, model, max_clients, n_ctx, daemon_args, n_daemon_args) < 0)
        goto out;
    rc.sock = d.sock;

    struct round rounds[MAX_CLIENT_COUNTS];
    for (size_t i = 0; i < n_counts; i++) {
        if (run_rounds(&rc, counts[i], reps, &ip, &rounds[i]) < 0) {
            fprintf(stderr, "picolm-bench serve: round with %u clients failed\n", counts[i]);
            goto out;
        }
    }
    struct one_token one = {0};
    if (one_token_compare(d.sock, prompt, &ip, &one, &ip.one_token_ns) != PICOLM_OK)
        goto out;
    uint64_t ttft_idle_v[2] = {0}, ttft_loaded_v[2] = {0};
    if (loaded_n && loaded_ttft(&rc, loaded_n, ttft_idle_v, ttft_loaded_v) != PICOLM_OK)
        goto out;

    struct prefix_ttft pt = {0};
    if (prefix_words_n && shared_prefix_ttft(d.sock, prefix_words_n, &pt) != PICOLM_OK)
        goto out;

    uint64_t ttft_idle = ttft_idle_v[0], ttft_loaded = ttft_loaded_v[0];
    if (json) {
        printf("{\"model\":");
        print_json_str(model);
        printf(",\"inproc_weights\":");
        print_json_str(ip.backing);
        printf(",\"tokens\":%u,\"prompt_tokens\":%u,"
               "\"inproc_decode_tok_s\":%.2f,\"inproc_e2e_tok_s\":%.2f,"
               "\"inproc_one_token_ns\":%" PRIu64 ",\"daemon_one_token_ns\":%" PRIu64
               ",\"daemon_one_token_broker_queue_ns\":%" PRIu64
               ",\"daemon_one_token_broker_ttft_ns\":%" PRIu64 ",\"loaded_clients\":%u,"
               "\"ttft_idle_ns\":%" PRIu64 ",\"ttft_loaded_ns\":%" PRIu64
               ",\"ttft_idle_broker_ns\":%" PRIu64 ",\"ttft_loaded_broker_ns\":%" PRIu64,
               n_tokens, ip.n_prompt, ip.decode_tok_s, ip.e2e_tok_s, ip.one_token_ns, one.total_ns,
               one.broker_queue_ns, one.broker_ttft_ns, loaded_n, ttft_idle, ttft_loaded,
               ttft_idle_v[1], ttft_loaded_v[1]);
        if (prefix_words_n)
            printf(",\"shared_prefix\":{\"words\":%u,\"prompt_tokens\":%u,\"cold_ttft_ns\":%" PRIu64
                   ",\"warm_ttft_ns\":%" PRIu64 ",\"cold_broker_ttft_ns\":%" PRIu64
                   ",\"warm_broker_ttft_ns\":%" PRIu64 "}",
                   prefix_words_n, pt.prompt_tokens, pt.cold_ns, pt.warm_ns, pt.cold_broker_ns,
                   pt.warm_broker_ns);
        printf(",\"rounds\":[");
        for (size_t i = 0; i < n_counts; i++) {
            const struct round *r = &rounds[i];
            printf("%s{\"clients\":%u,\"failed\":%u,\"aggregate_tok_s\":%.2f,"
                   "\"client_tok_s_mean\":%.2f,\"client_tok_s_min\":%.2f,"
                   "\"decode_tok_s_mean\":%.2f,\"ttft_p50_ns\":%" PRIu64 ",\"ttft_p99_ns\":%" PRIu64
                   ",\"itl_p50_ns\":%" PRIu64 ",\"itl_p99_ns\":%" PRIu64 "}",
                   i ? "," : "", r->n_clients, r->n_failed, r->aggregate_tok_s,
                   r->client_tok_s_mean, r->client_tok_s_min, r->decode_tok_s_mean, r->ttft_p50,
                   r->ttft_p99, r->itl_p50, r->itl_p99);
        }
        printf("]}\n");
    } else {
        printf("model %s, prompt %u tokens, %u generated tokens per client, greedy\n", model,
               ip.n_prompt, n_tokens);
        printf("in-process (pl_engine, 1 sequence, weights on %s): decode %.1f tok/s (%.1f tok/s "
               "from the prompt on); 1-token request %.3f ms\n",
               ip.backing, ip.decode_tok_s, ip.e2e_tok_s, (double)ip.one_token_ns / 1e6);
        printf("through picolmd: 1-token request %.3f ms end to end (%.3f ms over in-process; "
               "broker: %.3f ms from receipt to the step, %.3f ms to the token; medians of %u "
               "each side, alternating in blocks of %u)\n",
               (double)one.total_ns / 1e6, ((double)one.total_ns - (double)ip.one_token_ns) / 1e6,
               (double)one.broker_queue_ns / 1e6, (double)one.broker_ttft_ns / 1e6, one.n,
               one.n / ONE_TOKEN_BLOCKS);
        if (loaded_n)
            printf("TTFT of a short streamed request (submit to first token, p50 of %d): %.3f ms "
                   "idle, %.3f ms while %u clients stream (x%.2f; broker from receipt: %.3f / "
                   "%.3f ms)\n",
                   TTFT_REPS, (double)ttft_idle / 1e6, (double)ttft_loaded / 1e6, loaded_n,
                   ttft_idle ? (double)ttft_loaded / (double)ttft_idle : 0.0,
                   (double)ttft_idle_v[1] / 1e6, (double)ttft_loaded_v[1] / 1e6);
        if (prefix_words_n)
            printf("TTFT with a shared prefix (%u-token prompts, submit to first token, p50 of "
                   "%d): %.3f ms for a prompt no request began with, %.3f ms for the same words "
                   "with another question (x%.3f; broker from receipt: %.3f / %.3f ms)\n",
                   pt.prompt_tokens, PREFIX_REPS, (double)pt.cold_ns / 1e6,
                   (double)pt.warm_ns / 1e6,
                   pt.cold_ns ? (double)pt.warm_ns / (double)pt.cold_ns : 0.0,
                   (double)pt.cold_broker_ns / 1e6, (double)pt.warm_broker_ns / 1e6);
        printf("%7s %6s %12s %12s %12s %12s %10s %10s %10s %10s\n", "clients", "failed",
               "agg tok/s", "client mean", "client min", "decode/cl", "TTFT p50", "TTFT p99",
               "ITL p50", "ITL p99");
        for (size_t i = 0; i < n_counts; i++) {
            const struct round *r = &rounds[i];
            char dec[32] = "n/a";
            if (r->decode_tok_s_mean > 0)
                (void)snprintf(dec, sizeof(dec), "%.1f", r->decode_tok_s_mean);
            printf("%7u %6u %12.1f %12.1f %12.1f %12s %8.2fms %8.2fms %8.3fms %8.3fms\n",
                   r->n_clients, r->n_failed, r->aggregate_tok_s, r->client_tok_s_mean,
                   r->client_tok_s_min, dec, (double)r->ttft_p50 / 1e6, (double)r->ttft_p99 / 1e6,
                   (double)r->itl_p50 / 1e6, (double)r->itl_p99 / 1e6);
        }
        for (size_t i = 0; i < n_counts; i++)
            if (rounds[i].n_clients == 1 && ip.decode_tok_s > 0 && rounds[i].decode_tok_s_mean > 0)
                printf("1 client through picolmd: %.1f tok/s from submit to the last token = "
                       "%.1f%% of in-process from the prompt on (%.1f tok/s between its first "
                       "and last token: %.1f%% of in-process decode)\n",
                       rounds[i].client_tok_s_mean,
                       100.0 * rounds[i].client_tok_s_mean / ip.e2e_tok_s,
                       rounds[i].decode_tok_s_mean,
                       100.0 * rounds[i].decode_tok_s_mean / ip.decode_tok_s);
            else if (rounds[i].n_clients == 1 && ip.decode_tok_s > 0)
                printf("1 client through picolmd: %.1f tok/s from submit to the last token = "
                       "%.1f%% of in-process from the prompt on (its tokens after the first "
                       "came within %.1f ms: no decode rate)\n",
                       rounds[i].client_tok_s_mean,
                       100.0 * rounds[i].client_tok_s_mean / ip.e2e_tok_s,
                       (double)DECODE_SPAN_MIN_NS / 1e6);
        printf("(medians of %u runs, in-process of %u: before the broker and before each "
               "1-client round; decode/cl: tokens after the first chunk per second between the "
               "first and the last chunk, per client, n/a when that took under 1 ms)\n",
               reps, ip.n_rates);
    }
    rcode = 0;
    for (size_t i = 0; i < n_counts; i++)
        if (rounds[i].n_failed)
            rcode = 1;
out:
    daemon_stop(&d);
    inproc_close(&ip);
    (void)munmap(rc.area, rc.rec_bytes * max_clients);
    return rcode;
}
