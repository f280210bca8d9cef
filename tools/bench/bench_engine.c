/* SPDX-License-Identifier: MIT */
/* picolm-bench engine: how close the forward pass runs to the machine's limits. Measures,
 * in one run: the machine's read bandwidth (bandwidth.c's best read loop over a buffer far
 * larger than the caches, in a child process so it does not inflate our RSS: 1 and N threads
 * at the start, N threads right before and after each decode), where the weights were placed
 * (--weights: huge pages as picolmd puts them, or the file mapping), prefill tok/s on a
 * 512-token prompt (fed in chunks of --batch tokens), decode tok/s over 128 tokens, the
 * decode's effective bandwidth (weight bytes read per token x tok/s), its ratio to the read
 * bandwidth measured around it (median over the repetitions) and to the one at the start,
 * the same against the read loops over the weights' own copy (in this process, around each
 * decode: the very bytes the decode reads), and the peak RSS against model + KV cache. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bandwidth.h"
#include "bench.h"
#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/engine_quant.h"
#include "pl/engine_types.h"
#include "pl/pl_err.h"
#include "pl/pl_util.h"

#define BW_BUF_BYTES (1024ull << 20) /* well past any LLC of this machine class */
#define BW_PASSES 6

static double now_s(void) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- Read bandwidth ----
 * A child process holds the read loop's buffer (it must not count in this process's peak
 * RSS) and measures on request: once at the start (1 and N threads), then right before and
 * right after each decode. The memory bandwidth these shared hosts give one tenant drifts by
 * tens of percent within seconds, so a decode is compared with the bandwidth measured around
 * it: the larger of its two brackets (the conservative side). Requests go over a socket pair
 * as a thread count (0 or EOF: exit), answers come back as a double (<= 0: failed); sends
 * use MSG_NOSIGNAL, so a child that died is an error, not a SIGPIPE. */
struct bw_child {
    pid_t pid;
    int fd; /* parent's end; -1 when closed */
};

static void bw_child_serve(int fd) {
    void *buf =
        mmap(NULL, BW_BUF_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf != MAP_FAILED) {
        (void)madvise(buf, BW_BUF_BYTES, MADV_HUGEPAGE);
        memset(buf, 0x5a, BW_BUF_BYTES); /* every page faulted in before any timing */
    }
    uint32_t n;
    while (recv(fd, &n, sizeof(n), MSG_WAITALL) == (ssize_t)sizeof(n) && n > 0) {
        /* bandwidth.c: the best of a plain and the prefetching read loops, on huge pages. */
        double bw = buf == MAP_FAILED ? -1.0 : bench_bw_read(buf, BW_BUF_BYTES, n, BW_PASSES);
        if (send(fd, &bw, sizeof(bw), MSG_NOSIGNAL) != (ssize_t)sizeof(bw))
            break;
    }
    _exit(0);
}

/* Starts the child. Returns 0 or a negative code. */
static int bw_child_start(struct bw_child *bc) {
    int sv[2];
    bc->pid = -1;
    bc->fd = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -errno;
    pid_t pid = fork();
    if (pid == 0) {
        (void)close(sv[0]);
        bw_child_serve(sv[1]);
    }
    int r = pid < 0 ? -errno : 0;
    (void)close(sv[1]);
    if (r < 0) {
        (void)close(sv[0]);
        return r;
    }
    bc->pid = pid;
    bc->fd = sv[0];
    return 0;
}

/* The read bandwidth of n threads (bytes/s), or a value <= 0 when it could not be measured. */
static double bw_child_measure(struct bw_child *bc, uint32_t n) {
    double bw = -1.0;
    if (bc->pid <= 0 || send(bc->fd, &n, sizeof(n), MSG_NOSIGNAL) != (ssize_t)sizeof(n) ||
        recv(bc->fd, &bw, sizeof(bw), MSG_WAITALL) != (ssize_t)sizeof(bw))
        return -1.0;
    return bw;
}

static void bw_child_stop(struct bw_child *bc) {
    if (bc->pid <= 0)
        return;
    (void)close(bc->fd); /* EOF: the child exits */
    (void)waitpid(bc->pid, NULL, 0);
    bc->pid = -1;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define MAX_REPS 100

/* The median of v[0..n) (1 <= n <= MAX_REPS), v left as it is. */
static double median_of(const double *v, uint32_t n) {
    double tmp[MAX_REPS];
    memcpy(tmp, v, n * sizeof(*tmp));
    qsort(tmp, n, sizeof(*tmp), cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

/* One decode's bracket: the larger of the read bandwidths before (pre) and after (post)
 * into *bw, the decode's ratio to it into *ratio. False when either measurement failed. */
static bool bracket(double pre, double post, uint64_t bytes, double tok_s, double *bw,
                    double *ratio) {
    if (pre <= 0 || post <= 0)
        return false;
    *bw = PL_MAX(pre, post);
    *ratio = (double)bytes * tok_s / *bw;
    return true;
}

/* ---- Engine runs ---- */

/* Bytes of weights one decode step reads: every tensor but the token embeddings, of which
 * one row is read (all of it when it doubles as the output matrix). */
static uint64_t decode_weight_bytes(const struct pl_gguf *g) {
    uint64_t total = 0;
    bool tied = !pl_gguf_find_tensor(g, "output.weight");
    for (uint64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (!strcmp(t->name, "token_embd.weight") && !tied)
            total += t->n_bytes / (t->n_elems / t->ne[0]);
        else
            total += t->n_bytes;
    }
    return total;
}

/* The tensor type holding most of the bytes (for the report). */
static const char *main_type(const struct pl_gguf *g) {
    uint64_t bytes[_PL_GGML_TYPE_MAX] = {0};
    uint32_t best = 0;
    for (uint64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (t->type < _PL_GGML_TYPE_MAX)
            bytes[t->type] += t->n_bytes;
    }
    for (uint32_t t = 0; t < _PL_GGML_TYPE_MAX; t++)
        if (bytes[t] > bytes[best])
            best = t;
    return pl_type_info(best)->name;
}

static uint32_t argmax(const float *x, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static uint64_t peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024u;
}

/* A "Key:   N kB" line of /proc/self/status in bytes, 0 when unavailable. */
static uint64_t proc_status_bytes(const char *key) {
    char line[256];
    uint64_t v = 0;
    size_t kl = strlen(key);
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            v = strtoull(line + kl + 1, NULL, 10) * 1024u;
            break;
        }
    (void)fclose(f);
    return v;
}

/* Passes per read loop over the weights' copy (struct results' bw_w). A model that fits in
 * the caches gets the caches' figure there: only the child's buffer is the memory's. */
#define BW_W_PASSES 2

/* The engine pinned this thread to one CPU, and threads it starts for a measurement would
 * inherit that (all on one core): for the measurement this thread gets back the CPUs it had
 * at the start (*cpus, NULL: unknown; the measurements pin their workers among them), and
 * afterwards its engine CPU again (affinity_restore with *saved). True when it swapped. */
static bool affinity_widen(const cpu_set_t *cpus, cpu_set_t *saved) {
    return cpus && pthread_getaffinity_np(pthread_self(), sizeof(*saved), saved) == 0 &&
           pthread_setaffinity_np(pthread_self(), sizeof(*cpus), cpus) == 0;
}

static void affinity_restore(bool swapped, const cpu_set_t *saved) {
    if (swapped)
        (void)pthread_setaffinity_np(pthread_self(), sizeof(*saved), saved);
}

/* The read bandwidth of n threads over the weights' copy (bytes/s, <= 0 on failure), on the
 * CPUs of the start (affinity_widen). */
static double weights_bw(const struct pl_weights_info *wi, uint32_t n, const cpu_set_t *cpus) {
    cpu_set_t mine;
    const bool swap = n > 1 && affinity_widen(cpus, &mine);
    const double bw =
        bench_bw_read((const uint8_t *)wi->base + wi->shift, wi->weight_bytes, n, BW_W_PASSES);
    affinity_restore(swap, &mine);
    return bw;
}

/* bench_cpu_speeds() of the first n CPUs of the start (affinity_widen); zeros on failure. */
static void cpu_speeds(uint32_t n, const cpu_set_t *cpus, double *ret) {
    cpu_set_t mine;
    const bool swap = affinity_widen(cpus, &mine);
    if (bench_cpu_speeds(n, ret) < 0)
        for (uint32_t i = 0; i < n; i++)
            ret[i] = 0.0;
    affinity_restore(swap, &mine);
}

static void print_speeds(const char *key, const double *v, uint32_t n, bool json) {
    printf(json ? ",\"%s\":[" : "%s", key);
    for (uint32_t i = 0; i < n; i++)
        printf(json ? "%s%.3f" : "%s%.2f", i ? (json ? "," : " ") : "", v[i]);
    printf(json ? "]" : "");
}

struct results {
    double pp_tps, pp_best_tps, tg_tps, tg_best_tps;
    /* each thread's CPU alone, relative to the fastest (bench_cpu_speeds), at the start and
     * after the last decode; 0 when not measured */
    double speed0[BENCH_MAX_THREADS], speed1[BENCH_MAX_THREADS];
    double bw1, bwn;         /* at the start */
    double bw_dec[MAX_REPS]; /* N threads, around each decode (the larger bracket) */
    double tg_rep[MAX_REPS]; /* each decode's tok/s */
    double ratio[MAX_REPS];  /* each decode's effective bandwidth / its bw_dec */
    double bw_dec_med, ratio_med;
    /* The same read loops over the weights' own copy, in this process (0: no copy): the
     * bytes the decode reads, on the same pages. On a VM whose host backs guest memory with
     * small pages, a read loop slows as its buffer grows (64 MiB -> 1.1 GiB: 55 -> 33 GB/s
     * on the Zen 5 VM), and memory placed at different times reads at different speeds. */
    double bw_w[MAX_REPS], ratio_w[MAX_REPS];
    double bw_w_med, ratio_w_med;
    uint64_t weight_bytes, file_bytes, kv_bytes, peak_rss, anon_rss, hugetlb;
    struct pl_weights_info wi;
};

/* Prefill of n_prompt tokens from an empty cache, in chunks of n_batch. Returns seconds or
 * a negative value on error (code in *ret_r). */
static double run_prefill(struct pl_ctx *c, const int32_t *tok, int32_t *pos, int32_t *seq,
                          uint32_t n_prompt, uint32_t n_batch, float *logits, int *ret_r) {
    pl_ctx_seq_clear(c, 0);
    double t0 = now_s();
    for (uint32_t i = 0; i < n_prompt; i += n_batch) {
        uint32_t n = PL_MIN(n_batch, n_prompt - i);
        for (uint32_t k = 0; k < n; k++) {
            pos[k] = (int32_t)(i + k);
            seq[k] = 0;
        }
        struct pl_batch b = {.n = n, .token = tok + i, .pos = pos, .seq = seq};
        int r = pl_ctx_decode(c, &b, logits);
        if (r < 0) {
            *ret_r = r;
            return -1.0;
        }
    }
    return now_s() - t0;
}

/* Greedy decode of n_gen tokens from an empty cache, starting from token first. */
static double run_decode(struct pl_ctx *c, int32_t first, uint32_t n_gen, uint32_t n_vocab,
                         float *logits, int *ret_r) {
    int32_t tok = first, pos = 0, seq = 0;
    pl_ctx_seq_clear(c, 0);
    double t0 = now_s();
    for (uint32_t i = 0; i < n_gen; i++) {
        struct pl_batch b = {.n = 1, .token = &tok, .pos = &pos, .seq = &seq};
        int r = pl_ctx_decode(c, &b, logits);
        if (r < 0) {
            *ret_r = r;
            return -1.0;
        }
        tok = (int32_t)argmax(logits, n_vocab);
        pos++;
    }
    return now_s() - t0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: picolm-bench engine --model FILE [--threads N] [--json] [--prompt N]\n"
               "                           [--gen N] [--batch N] [--reps N] [--no-bw]\n"
               "                           [--weights auto|thp|file]\n"
               "  --threads N   forward-pass threads (default: 1 per allowed CPU)\n"
               "  --prompt N    prefill prompt tokens (default 512)\n"
               "  --gen N       decoded tokens (default 128)\n"
               "  --batch N     tokens per pl_ctx_decode() call in prefill (default 512)\n"
               "  --reps N      repetitions of prefill and decode (default 2): tok/s their mean,\n"
               "                the decode's bandwidth ratio their median\n"
               "  --no-bw       skip the read-bandwidth measurements (at the start and around\n"
               "                each decode; around each decode also over the weights' copy)\n"
               "  --weights M   where the weights live, as picolmd's hugepages setting: auto\n"
               "                (hugetlb, else THP; the default), thp, or file (the mapping)\n"
               "  --json        one JSON object on stdout instead of text\n");
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *ret) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi)
        return -EINVAL;
    *ret = (uint32_t)v;
    return 0;
}

int bench_engine_main(int argc, char **argv) {
    const char *path = NULL;
    uint32_t n_threads = 0, n_prompt = 512, n_gen = 128, n_batch = 512, reps = 2;
    bool json = false, do_bw = true;
    enum pl_weights_mode wmode = PL_WEIGHTS_AUTO;
    struct pl_model *m = NULL;
    struct pl_ctx *c = NULL;
    int32_t *tok = NULL, *pos = NULL, *seq = NULL;
    float *logits = NULL;
    struct results res = {0};
    struct bw_child bwc = {.pid = -1, .fd = -1};
    char err[512] = "";
    int r = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!strcmp(a, "--no-bw")) {
            do_bw = false;
            continue;
        }
        int bad = !v;
        if (!bad && !strcmp(a, "--model"))
            path = v;
        else if (!bad && !strcmp(a, "--threads"))
            bad = parse_u32(v, 1, 512, &n_threads) < 0;
        else if (!bad && !strcmp(a, "--prompt"))
            bad = parse_u32(v, 1, 1u << 16, &n_prompt) < 0;
        else if (!bad && !strcmp(a, "--gen"))
            bad = parse_u32(v, 1, 1u << 16, &n_gen) < 0;
        else if (!bad && !strcmp(a, "--batch"))
            bad = parse_u32(v, 1, 1u << 16, &n_batch) < 0;
        else if (!bad && !strcmp(a, "--weights"))
            bad = pl_weights_mode_parse(v, &wmode) < 0;
        else if (!bad && !strcmp(a, "--reps"))
            bad = parse_u32(v, 1, MAX_REPS, &reps) < 0;
        else
            bad = 1;
        if (bad) {
            fprintf(stderr, "engine: bad or unknown option '%.64s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    if (n_threads == 0) {
        cpu_set_t set;
        n_threads = sched_getaffinity(0, sizeof(set), &set) == 0 ? (uint32_t)CPU_COUNT(&set) : 1;
        n_threads = PL_MAX(n_threads, 1u);
    }
    n_batch = PL_MIN(n_batch, n_prompt);

    /* The bandwidth child first, before this process maps anything large. */
    if (do_bw) {
        if ((r = bw_child_start(&bwc)) < 0) {
            fprintf(stderr, "engine: read-bandwidth process: %s\n", pl_strerror(r));
            return 1;
        }
        res.bw1 = bw_child_measure(&bwc, 1);
        res.bwn = n_threads == 1 ? res.bw1 : bw_child_measure(&bwc, n_threads);
        if (res.bw1 <= 0 || res.bwn <= 0) {
            fprintf(stderr, "engine: read-bandwidth measurement failed\n");
            r = -EIO;
            goto out;
        }
    }

    /* the CPUs this thread may run on before the engine pins it (weights_bw) */
    cpu_set_t cpus_start;
    const cpu_set_t *cpus =
        sched_getaffinity(0, sizeof(cpus_start), &cpus_start) == 0 ? &cpus_start : NULL;
    const uint32_t n_speed = PL_MIN(n_threads, BENCH_MAX_THREADS);
    cpu_speeds(n_speed, cpus, res.speed0);
    struct pl_model_opts mo = {.n_threads = n_threads, .pin_threads = true};
    r = pl_model_load(path, &mo, &m, err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "engine: %s: %s\n", path, err[0] ? err : pl_strerror(r));
        return 1;
    }
    if ((r = pl_model_place_weights(m, wmode, &res.wi)) < 0) {
        fprintf(stderr, "engine: placing the weights: %s\n", pl_strerror(r));
        goto out;
    }
    /* --weights file leaves no copy of our own to read */
    const bool do_bw_w = do_bw && res.wi.base && res.wi.weight_bytes > 0;
    const struct pl_model_hparams *hp = pl_model_hparams(m);
    const struct pl_quant_prefetch *pf = pl_quant_prefetch();
    const struct pl_gguf *g = pl_model_gguf(m);
    res.weight_bytes = decode_weight_bytes(g);
    res.file_bytes = pl_gguf_file_size(g);
    const uint32_t n_ctx = PL_ALIGN_UP(PL_MAX(n_prompt, n_gen) + 1, 16u);
    struct pl_ctx_opts co = {.n_ctx = n_ctx, .n_seq = 1, .n_batch = n_batch, .kv_type = PL_KV_F16};
    if ((r = pl_ctx_new(m, &co, &c)) < 0) {
        fprintf(stderr, "engine: context: %s\n", pl_strerror(r));
        goto out;
    }
    res.kv_bytes = (uint64_t)pl_ctx_kv_total(c) * hp->n_layer * 2u *
                   ((uint64_t)hp->n_head_kv * hp->head_dim) * 2u;
    tok = calloc(n_prompt, sizeof(*tok));
    pos = calloc(n_batch, sizeof(*pos));
    seq = calloc(n_batch, sizeof(*seq));
    logits = calloc(hp->n_vocab, sizeof(*logits));
    if (!tok || !pos || !seq || !logits) {
        r = -ENOMEM;
        goto out;
    }
    /* A fixed pseudo-random prompt (BOS first); the ids only have to be valid. */
    uint64_t x = 0x9E3779B97F4A7C15ull;
    tok[0] = 1;
    for (uint32_t i = 1; i < n_prompt; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (int32_t)(3 + x % (hp->n_vocab > 3 ? hp->n_vocab - 3 : 1));
    }

    /* Warm-up: one decode step touches every weight page; a short prefill warms the rest. */
    if (run_decode(c, 1, 2, hp->n_vocab, logits, &r) < 0 ||
        run_prefill(c, tok, pos, seq, PL_MIN(n_batch, 32u), n_batch, logits, &r) < 0)
        goto fail_run;

    double pp_sum = 0.0, tg_sum = 0.0;
    for (uint32_t i = 0; i < reps; i++) {
        double dt = run_prefill(c, tok, pos, seq, n_prompt, n_batch, logits, &r);
        if (dt < 0)
            goto fail_run;
        pp_sum += dt;
        res.pp_best_tps = PL_MAX(res.pp_best_tps, n_prompt / dt);
        const double bw_pre = do_bw ? bw_child_measure(&bwc, n_threads) : 0.0;
        const double bw_w_pre = do_bw_w ? weights_bw(&res.wi, n_threads, cpus) : 0.0;
        dt = run_decode(c, 1, n_gen, hp->n_vocab, logits, &r);
        if (dt < 0)
            goto fail_run;
        const double bw_w_post = do_bw_w ? weights_bw(&res.wi, n_threads, cpus) : 0.0;
        const double bw_post = do_bw ? bw_child_measure(&bwc, n_threads) : 0.0;
        tg_sum += dt;
        res.tg_rep[i] = n_gen / dt;
        res.tg_best_tps = PL_MAX(res.tg_best_tps, res.tg_rep[i]);
        if ((do_bw && !bracket(bw_pre, bw_post, res.weight_bytes, res.tg_rep[i], &res.bw_dec[i],
                               &res.ratio[i])) ||
            (do_bw_w && !bracket(bw_w_pre, bw_w_post, res.weight_bytes, res.tg_rep[i], &res.bw_w[i],
                                 &res.ratio_w[i]))) {
            fprintf(stderr, "engine: read-bandwidth measurement failed\n");
            r = -EIO;
            goto out;
        }
    }
    cpu_speeds(n_speed, cpus, res.speed1);
    if (do_bw) {
        res.bw_dec_med = median_of(res.bw_dec, reps);
        res.ratio_med = median_of(res.ratio, reps);
    }
    if (do_bw_w) {
        res.bw_w_med = median_of(res.bw_w, reps);
        res.ratio_w_med = median_of(res.ratio_w, reps);
    }
    res.pp_tps = n_prompt * reps / pp_sum;
    res.tg_tps = n_gen * reps / tg_sum;
    res.peak_rss = peak_rss_bytes();
    /* Heap memory (KV cache, scratch, tokenizer, libc) is all anonymous and still held
     * here, so the current anonymous RSS is its peak; the weights are file pages. */
    res.anon_rss = proc_status_bytes("RssAnon");
    /* hugetlb pages are not in the RSS: the weights on them count on top. */
    res.hugetlb = proc_status_bytes("HugetlbPages");
    res.peak_rss += res.hugetlb;

    const double eff = (double)res.weight_bytes * res.tg_tps;
    const double ratio_start = do_bw ? eff / res.bwn : 0.0;
    const double overhead = (double)res.peak_rss - (double)res.file_bytes - (double)res.kv_bytes;
    const bool anon_copy = res.wi.base && strcmp(res.wi.backing, "hugetlb") != 0;
    const double anon_overhead = (double)res.anon_rss - (double)res.kv_bytes -
                                 (anon_copy ? (double)res.wi.weight_bytes : 0.0);
    if (json) {
        printf("{\"model\":\"%s\",\"type\":\"%s\",\"isa\":\"%s\",\"tile_isa\":\"%s\",\"threads\":"
               "%" PRIu32 ",\"n_embd\":%" PRIu32 ",\"n_layer\":%" PRIu32 ",\"n_vocab\":%" PRIu32
               ",\"prompt_tokens\":%" PRIu32 ",\"gen_tokens\":%" PRIu32 ",\"batch\":%" PRIu32
               ",\"reps\":%" PRIu32 ",\"weights\":\"%s\",\"packed_matrices\":%" PRIu32
               ",\"prefill_tok_s\":%.2f,\"prefill_best_tok_s\":%.2f"
               ",\"decode_tok_s\":%.2f,\"decode_best_tok_s\":%.2f"
               ",\"weight_bytes_per_token\":%" PRIu64 ",\"decode_effective_gb_s\":%.3f",
               path, main_type(g), pl_quant_isa(), pl_quant_tile_isa(), n_threads, hp->n_embd,
               hp->n_layer, hp->n_vocab, n_prompt, n_gen, n_batch, reps, res.wi.backing,
               res.wi.packed, res.pp_tps, res.pp_best_tps, res.tg_tps, res.tg_best_tps,
               res.weight_bytes, eff * 1e-9);
        printf(",\"prefetch\":\"%s:%u:%u:%u:%u\",\"prefetch_source\":\"%s\"",
               bench_pf_hint_name(pf), pf->bytes, pf->decode_bytes, pf->streams, pf->page_ahead,
               pf->source);
        print_speeds("cpu_speed_start", res.speed0, n_speed, true);
        print_speeds("cpu_speed_end", res.speed1, n_speed, true);
        printf(",\"decode_tok_s_reps\":[");
        for (uint32_t i = 0; i < reps; i++)
            printf("%s%.2f", i ? "," : "", res.tg_rep[i]);
        printf("]");
        if (do_bw) {
            printf(",\"read_gb_s_1t\":%.3f,\"read_gb_s\":%.3f,\"decode_bw_ratio_start\":%.6g"
                   ",\"read_gb_s_decode\":%.3f,\"decode_bw_ratio\":%.6g,\"decode_bw_ratios\":[",
                   res.bw1 * 1e-9, res.bwn * 1e-9, ratio_start, res.bw_dec_med * 1e-9,
                   res.ratio_med);
            for (uint32_t i = 0; i < reps; i++)
                printf("%s%.6g", i ? "," : "", res.ratio[i]);
            printf("],\"read_gb_s_decodes\":[");
            for (uint32_t i = 0; i < reps; i++)
                printf("%s%.3f", i ? "," : "", res.bw_dec[i] * 1e-9);
            printf("]");
        }
        if (do_bw_w) {
            printf(",\"read_gb_s_weights\":%.3f,\"decode_bw_ratio_weights\":%.6g"
                   ",\"decode_bw_ratios_weights\":[",
                   res.bw_w_med * 1e-9, res.ratio_w_med);
            for (uint32_t i = 0; i < reps; i++)
                printf("%s%.6g", i ? "," : "", res.ratio_w[i]);
            printf("]");
        }
        printf(",\"model_file_bytes\":%" PRIu64 ",\"kv_bytes\":%" PRIu64
               ",\"peak_rss_bytes\":%" PRIu64 ",\"rss_overhead_bytes\":%.0f"
               ",\"anon_rss_bytes\":%" PRIu64 ",\"anon_overhead_bytes\":%.0f}\n",
               res.file_bytes, res.kv_bytes, res.peak_rss, overhead, res.anon_rss, anon_overhead);
    } else {
        printf("model           %s (%s, isa %s, tiles %s, %" PRIu32 " threads)\n", path,
               main_type(g), pl_quant_isa(), pl_quant_tile_isa(), n_threads);
        printf("weights         on %s (%s)\n", res.wi.backing, res.wi.reason);
        printf("prefetch        %s, %u B ahead (decode kernels %u B), page touch %u B past, %u "
               "weight stream%s per thread, from %s\n",
               bench_pf_hint_name(pf), pf->bytes, pf->decode_bytes, pf->page_ahead, pf->streams,
               pf->streams == 1 ? "" : "s", pf->source);
        printf("prefill         %.2f tok/s (best %.2f; %" PRIu32 " tokens, chunks of %" PRIu32
               ")\n",
               res.pp_tps, res.pp_best_tps, n_prompt, n_batch);
        printf("decode          %.2f tok/s (best %.2f; %" PRIu32 " tokens)\n", res.tg_tps,
               res.tg_best_tps, n_gen);
        print_speeds("cpu speed       ", res.speed0, n_speed, false);
        print_speeds(" at the start, ", res.speed1, n_speed, false);
        printf(" at the end (each thread's CPU alone, an arithmetic loop, relative to the "
               "fastest)\n");
        printf("weights/token   %.1f MB -> effective %.2f GB/s\n", res.weight_bytes * 1e-6,
               eff * 1e-9);
        if (do_bw) {
            printf("read bandwidth  at the start %.2f GB/s (1 thread), %.2f GB/s (%" PRIu32
                   " threads) -> decode at %.1f%%\n",
                   res.bw1 * 1e-9, res.bwn * 1e-9, n_threads, ratio_start * 100.0);
            printf("around decodes  %.2f GB/s (median) -> decode at %.1f%% (median of",
                   res.bw_dec_med * 1e-9, res.ratio_med * 100.0);
            for (uint32_t i = 0; i < reps; i++)
                printf(" %.1f%%", res.ratio[i] * 100.0);
            printf(")\n");
        }
        if (do_bw_w) {
            printf("over weights    %.2f GB/s (median; the read loop over the weights' copy) -> "
                   "decode at %.1f%% (median of",
                   res.bw_w_med * 1e-9, res.ratio_w_med * 100.0);
            for (uint32_t i = 0; i < reps; i++)
                printf(" %.1f%%", res.ratio_w[i] * 100.0);
            printf(")\n");
        }
        printf("peak RSS        %.1f MiB = model %.1f + KV %.1f + %.1f MiB\n",
               res.peak_rss / 1048576.0, res.file_bytes / 1048576.0, res.kv_bytes / 1048576.0,
               overhead / 1048576.0);
        printf("anonymous RSS   %.1f MiB = %sKV %.1f + %.1f MiB (scratch, tokenizer, libc)\n",
               res.anon_rss / 1048576.0, anon_copy ? "weights + " : "", res.kv_bytes / 1048576.0,
               anon_overhead / 1048576.0);
    }
    goto out;

fail_run:
    fprintf(stderr, "engine: decode failed: %s\n", pl_strerror(r));
out:
    bw_child_stop(&bwc);
    free(tok);
    free(pos);
    free(seq);
    free(logits);
    pl_ctx_free(c);
    pl_model_free(m);
    return r < 0 ? 1 : 0;
}
