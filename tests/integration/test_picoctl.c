/* SPDX-License-Identifier: MIT */
/* picoctl end to end: a real picolmd (stories260K, its own policy file and metrics textfile
 * on temporary dirs), real libpicolm clients in child processes, and the picoctl binary run
 * for every subcommand. JSON output is parsed and checked against what the clients did
 * (sessions, token counts, requests, a killed client's reason); the Prometheus text of
 * `stats --prometheus` and of the textfile is checked by a small parser; exit statuses of an
 * unreachable broker, a non-admin caller and bad usage. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <math.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "json.h"
#include "picolm.h"

#define PICOCTL PL_BINARY_DIR "/bin/picoctl"
#define PICOLMD PL_BINARY_DIR "/bin/picolmd"

static char model_path[4096];

/* ---- Daemon ---- */

struct daemon {
    pid_t pid;
    char dir[64];  /* sockets (0755, so that the admin socket's own mode decides) */
    char mdir[64]; /* metrics textfile dir, writable by the user picolmd serves as */
    char policy[128];
    char sock[128], admin[128], prom[128];
};

static const char policy_text[] = "# picoctl test policy\n"
                                  "[rule testers]\n"
                                  "match = uid:0\n"
                                  "access = allow\n"
                                  "max_sessions = unlimited\n"
                                  "max_queued = unlimited\n"
                                  "max_new_tokens = unlimited\n"
                                  "[rule others]\n"
                                  "match = default\n"
                                  "access = allow\n";

static const struct pl_json *session_of(const struct pl_json *doc, pid_t pid);

/* The daemon of the running test, stopped by the teardown when an assertion left early. */
static struct daemon *current;

/* Sanitizer builds run slower: they set PICOLM_TEST_TIME_SCALE (e.g. 5) for every wait. */
static int scale(int ms) {
    const char *e = getenv("PICOLM_TEST_TIME_SCALE");
    int k = e ? atoi(e) : 1;
    return ms * (k > 0 && k <= 100 ? k : 1);
}

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, 0644), 0);
}

/* ---- Running picoctl ---- */

struct ctl {
    int status; /* exit status, 128 + signal */
    char out[256 * 1024];
    size_t n_out;
    char err[8192];
    size_t n_err;
};

/* Output buffers of picoctl runs (static: a failed assertion must not leak them). */
static struct ctl ctl_main, ctl_start;

/* Run picoctl with args (NULL-terminated); as_nobody: in a child that switched to uid/gid
 * 65534 first. */
static void run_ctl(struct ctl *c, bool as_nobody, const char *const *args) {
    int po[2], pe[2];
    const char *argv[32];
    int n = 0;
    argv[n++] = PICOCTL;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    assert_int_equal(pipe(po), 0);
    assert_int_equal(pipe(pe), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]);
        close(pe[0]);
        if (as_nobody && (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
                          setresuid(65534, 65534, 65534) < 0))
            _exit(126);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    c->n_out = c->n_err = 0;
    struct pollfd p[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
    int open_fds = 2;
    while (open_fds > 0) {
        assert_true(poll(p, 2, scale(20000)) > 0);
        for (int k = 0; k < 2; k++) {
            if (p[k].fd < 0 || !(p[k].revents & (POLLIN | POLLHUP)))
                continue;
            char *buf = k ? c->err : c->out;
            size_t *len = k ? &c->n_err : &c->n_out;
            size_t cap = (k ? sizeof(c->err) : sizeof(c->out)) - 1;
            char sink[4096];
            ssize_t r = *len < cap ? read(p[k].fd, buf + *len, cap - *len)
                                   : read(p[k].fd, sink, sizeof(sink));
            if (r <= 0) {
                close(p[k].fd);
                p[k].fd = -1;
                open_fds--;
            } else if (*len < cap) {
                *len += (size_t)r;
            }
        }
    }
    c->out[c->n_out] = '\0';
    c->err[c->n_err] = '\0';
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    c->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#define CTL(c, d, ...)                                                                             \
    do {                                                                                           \
        const char *_a[] = {"--socket", (d)->admin, __VA_ARGS__, NULL};                            \
        run_ctl((c), false, _a);                                                                   \
    } while (0)

static struct pl_json *parse_json(const struct ctl *c) {
    struct pl_json *j = NULL;
    char err[256];
    if (pl_json_parse(c->out, c->n_out, &j, err, sizeof(err)) != 0)
        fail_msg("picoctl printed invalid JSON (%s): %.400s", err, c->out);
    return j;
}

/* Run picoctl --json ARGS, expect exit 0, return the parsed document. */
static struct pl_json *ctl_json(struct ctl *c, const struct daemon *d, const char *a1,
                                const char *a2) {
    const char *args[] = {"--socket", d->admin, "--json", a1, a2, NULL};
    run_ctl(c, false, args);
    if (c->status != 0)
        fail_msg("picoctl %s %s exited %d: %s", a1, a2 ? a2 : "", c->status, c->err);
    return parse_json(c);
}

static double num(const struct pl_json *j, const char *path) {
    /* "a.b.c" */
    char buf[256], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save)) {
        j = pl_json_get(j, k);
        if (!j)
            fail_msg("JSON has no %s", path);
    }
    if (j->type != PL_JSON_NUMBER)
        fail_msg("JSON %s is not a number", path);
    return j->number;
}

static const char *str(const struct pl_json *j, const char *key) {
    const struct pl_json *v = pl_json_get(j, key);
    if (!v || v->type != PL_JSON_STRING)
        fail_msg("JSON has no string %s", key);
    return v->str;
}

static bool boolean(const struct pl_json *j, const char *key) {
    const struct pl_json *v = pl_json_get(j, key);
    if (!v || v->type != PL_JSON_BOOL)
        fail_msg("JSON has no bool %s", key);
    return v->boolean;
}

/* ---- Daemon start/stop ---- */

static void daemon_start(struct daemon *d) {
    strcpy(d->dir, "/tmp/picoctl-test.XXXXXX");
    strcpy(d->mdir, "/tmp/picoctl-metrics.XXXXXX");
    assert_non_null(mkdtemp(d->dir));
    assert_non_null(mkdtemp(d->mdir));
    assert_int_equal(chmod(d->dir, 0755), 0);
    assert_int_equal(chmod(d->mdir, 01777), 0);
    snprintf(d->policy, sizeof(d->policy), "%s/policy.conf", d->dir);
    snprintf(d->sock, sizeof(d->sock), "%s/picolm.sock", d->dir);
    snprintf(d->admin, sizeof(d->admin), "%s/admin.sock", d->dir);
    snprintf(d->prom, sizeof(d->prom), "%s/picolm.prom", d->mdir);
    write_file(d->policy, policy_text);
    const char *args[] = {PICOLMD,
                          "--model",
                          model_path,
                          "--socket-dir",
                          d->dir,
                          "--foreground",
                          "--ctx",
                          "2048",
                          "--log-level",
                          "warn",
                          "--policy",
                          d->policy,
                          "--metrics-file",
                          d->prom,
                          "--metrics-interval",
                          "1",
                          NULL,
                          NULL,
                          NULL};
    /* Started as root, picolmd serves as the user "picolm"; where the packaging did not
     * create it, as nobody (the same drop and filter). */
    if (geteuid() == 0 && !getpwnam("picolm")) {
        args[16] = "--user";
        args[17] = "nobody";
    }
    d->pid = fork();
    assert_true(d->pid >= 0);
    if (d->pid == 0) {
        /* (the death signal does not survive picolmd's own uid switch: teardown() stops it) */
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(args[0], (char *const *)args);
        _exit(127);
    }
    current = d;
    struct ctl *c = &ctl_start;
    assert_non_null(c);
    for (int i = 0; i < 500; i++) {
        const char *a[] = {"--socket", d->admin, "status", NULL};
        if (access(d->admin, F_OK) == 0) {
            run_ctl(c, false, a);
            if (c->status == 0) {
                return;
            }
        }
        usleep(10000);
    }
    fail_msg("picolmd did not come up");
}

static int daemon_wait(struct daemon *d, int timeout_ms) {
    int st = 0;
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        pid_t r = waitpid(d->pid, &st, WNOHANG);
        if (r == d->pid)
            break;
        if (now_ms() > end) {
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &st, 0);
            d->pid = -1;
            return -1;
        }
        usleep(10000);
    }
    d->pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void cleanup_dirs(struct daemon *d) {
    char p[256];
    const char *names[] = {"picolm.sock", "admin.sock", "policy.conf", NULL};
    for (int i = 0; names[i]; i++) {
        snprintf(p, sizeof(p), "%s/%s", d->dir, names[i]);
        unlink(p);
    }
    unlink(d->prom);
    snprintf(p, sizeof(p), "%s.tmp", d->prom);
    unlink(p);
    rmdir(d->dir);
    rmdir(d->mdir);
}

static int daemon_stop(struct daemon *d) {
    kill(d->pid, SIGTERM);
    int code = daemon_wait(d, scale(20000));
    cleanup_dirs(d);
    current = NULL;
    return code;
}

static int teardown(void **state) {
    if (current && current->pid > 0) {
        kill(current->pid, SIGKILL);
        (void)daemon_wait(current, 5000);
        cleanup_dirs(current);
    }
    current = NULL;
    return 0;
}

/* Poll `sessions --json` until the session of pid has generated a token. */
static void wait_tokens_flow(struct ctl *c, const struct daemon *d, pid_t pid) {
    uint64_t end = now_ms() + (uint64_t)scale(10000);
    for (;;) {
        struct pl_json *j = ctl_json(c, d, "sessions", NULL);
        const struct pl_json *s = session_of(j, pid);
        double out = s ? num(s, "tokens_out") : 0;
        pl_json_free(j);
        if (out > 0)
            return;
        if (now_ms() > end)
            fail_msg("the generation of pid %d did not start", (int)pid);
        usleep(2000);
    }
}

/* ---- Client children ---- */

struct client_report {
    int status;             /* last picolm status */
    uint32_t prompt_tokens; /* sums over the requests */
    uint32_t generated;
    uint32_t requests;
    uint64_t session_id;
    char reason[128]; /* the killed request's reason, or picolm_last_error() */
};

struct client {
    pid_t pid;
    int res_fd; /* reports come here */
    int go_fd;  /* write one byte: continue / exit */
};

enum client_mode {
    CLIENT_RUN_THEN_WAIT = 0, /* n requests, report, wait, (then try one more call), report */
    CLIENT_LONG_GENERATE,     /* report the session id, one long generation, report */
};

static void child_report(int fd, const struct client_report *r) {
    if (write(fd, r, sizeof(*r)) != (ssize_t)sizeof(*r))
        _exit(5);
}

/* Fork a libpicolm client. prompts[i] are generated with max_tokens each (greedy, ignoring
 * EOS, so every request generates exactly max_tokens). */
static void client_start(struct client *c, const struct daemon *d, enum client_mode mode,
                         const char *const *prompts, uint32_t n, uint32_t max_tokens) {
    int res[2], go[2];
    assert_int_equal(pipe(res), 0);
    assert_int_equal(pipe(go), 0);
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        /* A crash here must end the child, not resume cmocka's test loop in it. */
        int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE};
        for (size_t k = 0; k < sizeof(sigs) / sizeof(sigs[0]); k++)
            signal(sigs[k], SIG_DFL);
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(res[0]);
        close(go[1]);
        struct client_report rep = {0};
        picolm_client *pc = NULL;
        char err[256];
        rep.status = picolm_connect_ex(d->sock, &pc, err, sizeof(err));
        if (rep.status != PICOLM_OK) {
            snprintf(rep.reason, sizeof(rep.reason), "%s", err);
            child_report(res[1], &rep);
            _exit(0);
        }
        rep.session_id = picolm_session_id(pc);
        struct picolm_generate_params gp;
        picolm_generate_params_init(&gp);
        gp.max_tokens = max_tokens;
        gp.flags = PICOLM_GEN_IGNORE_EOS;
        gp.sampling.temperature = 0.0f;
        if (mode == CLIENT_LONG_GENERATE)
            child_report(res[1], &rep); /* session id first: the parent watches it */
        for (uint32_t i = 0; i < n; i++) {
            struct picolm_result r = {.size = sizeof(r)};
            gp.prompt = prompts[i];
            rep.status = picolm_generate(pc, &gp, NULL, NULL, &r);
            rep.requests++;
            rep.prompt_tokens += r.prompt_tokens;
            rep.generated += r.generated_tokens;
            if (rep.status != PICOLM_OK) {
                snprintf(rep.reason, sizeof(rep.reason), "%s",
                         r.reason[0] ? r.reason : picolm_last_error(pc));
                break;
            }
        }
        child_report(res[1], &rep);
        if (mode == CLIENT_RUN_THEN_WAIT) {
            char b;
            if (read(go[0], &b, 1) == 1 && b == 'c') {
                /* One more call after the parent acted (kill): report how it fails. */
                struct picolm_result r = {.size = sizeof(r)};
                gp.prompt = "x";
                gp.max_tokens = 1;
                rep.status = picolm_generate(pc, &gp, NULL, NULL, &r);
                snprintf(rep.reason, sizeof(rep.reason), "%s", picolm_last_error(pc));
                child_report(res[1], &rep);
            }
        }
        picolm_close(pc);
        _exit(0);
    }
    close(res[1]);
    close(go[0]);
    c->res_fd = res[0];
    c->go_fd = go[1];
}

static void client_read(struct client *c, struct client_report *r) {
    struct pollfd p = {.fd = c->res_fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, scale(30000)), 1);
    assert_int_equal(read(c->res_fd, r, sizeof(*r)), sizeof(*r));
}

static void client_finish(struct client *c, char cmd) {
    int st = 0;
    (void)!write(c->go_fd, &cmd, 1);
    close(c->go_fd);
    assert_int_equal(waitpid(c->pid, &st, 0), c->pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(c->res_fd);
}

/* The session of pid in a `sessions --json` document, or NULL. */
static const struct pl_json *session_of(const struct pl_json *doc, pid_t pid) {
    const struct pl_json *arr = pl_json_get(doc, "sessions");
    assert_non_null(arr);
    for (size_t i = 0; i < arr->n; i++)
        if ((pid_t)num(&arr->items[i], "pid") == pid)
            return &arr->items[i];
    return NULL;
}

/* Poll `sessions --json` until no session is listed. */
static void wait_no_sessions(struct ctl *c, const struct daemon *d) {
    uint64_t end = now_ms() + (uint64_t)scale(5000);
    for (;;) {
        struct pl_json *j = ctl_json(c, d, "sessions", NULL);
        size_t n = pl_json_get(j, "sessions")->n;
        pl_json_free(j);
        if (n == 0)
            return;
        if (now_ms() > end)
            fail_msg("sessions still listed after their clients exited");
        usleep(20000);
    }
}

/* ---- A small Prometheus text-format parser ---- */

struct prom_sample {
    char name[128];
    char labels[256]; /* raw, inside the braces, "" when none */
    double value;
};

struct prom {
    struct prom_sample *s;
    size_t n;
    char types[256][128]; /* family names with a TYPE line */
    char type_of[256][16];
    size_t n_types;
};

static bool name_ok(const char *p, size_t n) {
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                  (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return false;
    }
    return true;
}

/* Family of a sample name: strip _bucket/_sum/_count when the base is a histogram. */
static const char *family_type(const struct prom *p, const char *name) {
    char base[128];
    for (size_t i = 0; i < p->n_types; i++)
        if (!strcmp(p->types[i], name))
            return p->type_of[i];
    const char *sfx[] = {"_bucket", "_sum", "_count"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(name), m = strlen(sfx[k]);
        if (n > m && !strcmp(name + n - m, sfx[k])) {
            snprintf(base, sizeof(base), "%.*s", (int)(n - m), name);
            for (size_t i = 0; i < p->n_types; i++)
                if (!strcmp(p->types[i], base) && !strcmp(p->type_of[i], "histogram"))
                    return "histogram";
        }
    }
    return NULL;
}

/* Parse text; fails the test on any syntax error. Checks: HELP/TYPE before samples, names,
 * label syntax (key="value" with escapes), float values, every sample in a declared family. */
static void prom_parse(const char *text, struct prom *p) {
    memset(p, 0, sizeof(*p));
    size_t cap = 4096;
    p->s = calloc(cap, sizeof(*p->s));
    assert_non_null(p->s);
    const char *line = text;
    int lineno = 0;
    while (*line) {
        const char *end = strchr(line, '\n');
        if (!end)
            fail_msg("prometheus: line %d has no newline", lineno + 1);
        size_t len = (size_t)(end - line);
        lineno++;
        if (len == 0) {
            line = end + 1;
            continue;
        }
        if (line[0] == '#') {
            char kind[8], name[128];
            int off = 0;
            if (sscanf(line, "# %7s %127s %n", kind, name, &off) < 2)
                fail_msg("prometheus line %d: bad comment", lineno);
            if (!name_ok(name, strlen(name)))
                fail_msg("prometheus line %d: bad metric name '%s'", lineno, name);
            if (!strcmp(kind, "TYPE")) {
                char type[16];
                if (sscanf(line + off, "%15s", type) != 1 ||
                    (strcmp(type, "counter") && strcmp(type, "gauge") && strcmp(type, "histogram")))
                    fail_msg("prometheus line %d: bad type", lineno);
                for (size_t i = 0; i < p->n_types; i++)
                    if (!strcmp(p->types[i], name))
                        fail_msg("prometheus line %d: TYPE of %s given twice", lineno, name);
                assert_true(p->n_types < 256);
                snprintf(p->types[p->n_types], 128, "%s", name);
                snprintf(p->type_of[p->n_types++], 16, "%s", type);
            } else if (strcmp(kind, "HELP") != 0) {
                fail_msg("prometheus line %d: unknown comment %s", lineno, kind);
            }
            line = end + 1;
            continue;
        }
        struct prom_sample *s = &p->s[p->n];
        assert_true(p->n < cap);
        size_t i = 0;
        while (i < len && line[i] != '{' && line[i] != ' ')
            i++;
        if (!name_ok(line, i) || i >= sizeof(s->name))
            fail_msg("prometheus line %d: bad sample name", lineno);
        snprintf(s->name, sizeof(s->name), "%.*s", (int)i, line);
        if (line[i] == '{') {
            size_t j = ++i, k = 0;
            /* key="value"(,key="value")* } */
            for (;;) {
                size_t key0 = i;
                while (i < len && line[i] != '=')
                    i++;
                if (i >= len || !name_ok(line + key0, i - key0))
                    fail_msg("prometheus line %d: bad label name", lineno);
                if (line[++i] != '"')
                    fail_msg("prometheus line %d: label value not quoted", lineno);
                for (i++; i < len && line[i] != '"'; i++)
                    if (line[i] == '\\') {
                        i++;
                        if (i >= len || (line[i] != '\\' && line[i] != '"' && line[i] != 'n'))
                            fail_msg("prometheus line %d: bad escape", lineno);
                    }
                if (i >= len)
                    fail_msg("prometheus line %d: unterminated label value", lineno);
                i++;
                if (line[i] == ',') {
                    i++;
                    continue;
                }
                if (line[i] != '}')
                    fail_msg("prometheus line %d: expected } after labels", lineno);
                break;
            }
            k = i - j;
            snprintf(s->labels, sizeof(s->labels), "%.*s", (int)k, line + j);
            i++;
        }
        if (line[i] != ' ')
            fail_msg("prometheus line %d: no space before the value", lineno);
        char vbuf[64], *vend;
        snprintf(vbuf, sizeof(vbuf), "%.*s", (int)(len - i - 1), line + i + 1);
        if (!strcmp(vbuf, "+Inf"))
            s->value = INFINITY;
        else {
            s->value = strtod(vbuf, &vend);
            if (vend == vbuf || *vend)
                fail_msg("prometheus line %d: bad value '%s'", lineno, vbuf);
        }
        if (!family_type(p, s->name))
            fail_msg("prometheus line %d: sample %s before/without its TYPE", lineno, s->name);
        p->n++;
        line = end + 1;
    }
}

static void prom_free(struct prom *p) {
    free(p->s);
}

/* The value of name{labels} (labels exact, "" for none); fails when missing. */
static double prom_get(const struct prom *p, const char *name, const char *labels) {
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].name, name) && !strcmp(p->s[i].labels, labels))
            return p->s[i].value;
    fail_msg("prometheus: no sample %s{%s}", name, labels);
    return 0;
}

/* Histogram checks: buckets cumulative, +Inf bucket equals _count. */
static void prom_check_histograms(const struct prom *p) {
    for (size_t t = 0; t < p->n_types; t++) {
        if (strcmp(p->type_of[t], "histogram"))
            continue;
        char bucket[160], count[160];
        snprintf(bucket, sizeof(bucket), "%s_bucket", p->types[t]);
        snprintf(count, sizeof(count), "%s_count", p->types[t]);
        double prev = -1, inf = -1;
        char series[256] = "";
        for (size_t i = 0; i < p->n; i++) {
            if (strcmp(p->s[i].name, bucket))
                continue;
            /* series = labels without le */
            char lab[256];
            snprintf(lab, sizeof(lab), "%s", p->s[i].labels);
            char *le = strstr(lab, "le=\"");
            assert_non_null(le);
            bool is_inf = !strncmp(le, "le=\"+Inf\"", 9);
            if (le > lab && le[-1] == ',')
                le[-1] = '\0';
            else
                *le = '\0';
            if (strcmp(lab, series)) {
                snprintf(series, sizeof(series), "%s", lab);
                prev = -1;
            }
            assert_true(p->s[i].value >= prev);
            prev = p->s[i].value;
            if (is_inf) {
                inf = p->s[i].value;
                assert_true(inf == prom_get(p, count, series));
            }
        }
        assert_true(inf >= 0);
    }
}

/* ---- Tests ---- */

static const char *prompts_a[] = {"Once upon a time", "The little dog", "Lily wanted to"};
static const char *prompts_b[] = {"One day, a big", "Tom and Sue went"};

static void test_status_json(void **state) {
    struct daemon d;
    struct ctl *c = &ctl_main;
    struct stat st;
    assert_non_null(c);
    uint64_t t0 = (uint64_t)time(NULL);
    daemon_start(&d);
    struct pl_json *j = ctl_json(c, &d, "status", NULL);
    assert_true(strlen(str(j, "version")) > 0);
    assert_true(num(j, "uptime_ns") > 0);
    const struct pl_json *m = pl_json_get(j, "model");
    assert_string_equal(str(m, "architecture"), "llama");
    assert_string_equal(str(m, "path"), model_path);
    assert_true(strlen(str(m, "name")) > 0);
    assert_true(strstr(str(m, "quant_mix"), "%") != NULL);
    assert_true(num(m, "n_params") > 100000);
    assert_int_equal(stat(model_path, &st), 0);
    assert_true(num(m, "file_bytes") == (double)st.st_size);
    const struct pl_json *mem = pl_json_get(j, "memory");
    assert_non_null(mem);
    assert_true(num(mem, "bytes_mapped") > 0);
    assert_true(num(mem, "bytes_locked") <= num(mem, "bytes_mapped"));
    assert_true(num(mem, "bytes_hugetlb") + num(mem, "bytes_thp") <= num(mem, "bytes_mapped"));
    assert_true(num(mem, "minor_faults") > 0);
    (void)num(mem, "major_faults");
    (void)boolean(mem, "locked");
    assert_true(strlen(str(mem, "backing")) > 0);
    const struct pl_json *kv = pl_json_get(j, "kv");
    assert_true(num(kv, "total_tokens") >= 2048);
    assert_true(num(kv, "used_tokens") == 0);
    assert_true(num(kv, "bytes") > 0);
    assert_int_equal(pl_json_get(kv, "per_session")->n, 0);
    assert_non_null(pl_json_get(j, "cpus"));
    const struct pl_json *sec = pl_json_get(j, "security");
    (void)boolean(sec, "seccomp");
    (void)boolean(sec, "no_new_privs");
    assert_int_equal(strlen(str(sec, "cap_eff")), 16);
    if (geteuid() == 0 && boolean(sec, "seccomp"))
        assert_true(num(sec, "uid") != 0); /* root start: it dropped to its user */
    const struct pl_json *pol = pl_json_get(j, "policy");
    assert_string_equal(str(pol, "path"), d.policy);
    double loaded_s = num(pol, "loaded_unix_ns") / 1e9;
    assert_true(loaded_s >= (double)t0 - 1 && loaded_s <= (double)time(NULL) + 1);
    assert_true(num(j, "sessions") == 0);
    assert_false(boolean(j, "draining"));
    assert_string_equal(str(pl_json_get(j, "metrics"), "file"), d.prom);
    pl_json_free(j);

    /* The table form works too. */
    CTL(c, &d, "status");
    assert_int_equal(c->status, 0);
    assert_non_null(strstr(c->out, "KV pool"));
    assert_non_null(strstr(c->out, d.policy));
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_sessions_and_stats_match_clients(void **state) {
    struct daemon d;
    struct ctl *c = &ctl_main;
    struct client ca, cb;
    struct client_report ra, rb;
    assert_non_null(c);
    daemon_start(&d);
    client_start(&ca, &d, CLIENT_RUN_THEN_WAIT, prompts_a, 3, 12);
    client_start(&cb, &d, CLIENT_RUN_THEN_WAIT, prompts_b, 2, 7);
    client_read(&ca, &ra);
    client_read(&cb, &rb);
    assert_int_equal(ra.status, PICOLM_OK);
    assert_int_equal(rb.status, PICOLM_OK);
    assert_int_equal(ra.generated, 3 * 12);
    assert_int_equal(rb.generated, 2 * 7);

    /* sessions: one row per connected client, with its counts. */
    struct pl_json *j = ctl_json(c, &d, "sessions", NULL);
    assert_int_equal(pl_json_get(j, "sessions")->n, 2);
    struct {
        struct client *cl;
        struct client_report *r;
    } both[2] = {{&ca, &ra}, {&cb, &rb}};
    for (int k = 0; k < 2; k++) {
        const struct pl_json *s = session_of(j, both[k].cl->pid);
        assert_non_null(s);
        assert_true(num(s, "id") == (double)both[k].r->session_id);
        assert_true(num(s, "uid") == (double)geteuid());
        assert_string_equal(str(s, "exe"), "test_picoctl");
        assert_string_equal(str(s, "identity"), geteuid() == 0 ? "testers" : "others");
        assert_string_equal(str(s, "state"), "open");
        assert_true(strlen(str(s, "user")) > 0);
        assert_true(num(s, "requests") == (double)both[k].r->requests);
        assert_true(num(s, "tokens_in") == (double)both[k].r->prompt_tokens);
        assert_true(num(s, "tokens_out") == (double)both[k].r->generated);
        assert_true(num(s, "tokens_per_s") > 0);
        assert_true(num(s, "ttft_ns") > 0);
        assert_true(num(s, "age_ns") > 0);
        (void)num(s, "queue_wait_ns");
        (void)num(s, "kv_tokens");
        assert_false(boolean(s, "killing"));
    }
    pl_json_free(j);

    /* status: two sessions, each listed in the KV pool. */
    j = ctl_json(c, &d, "status", NULL);
    assert_true(num(j, "sessions") == 2);
    assert_true(num(j, "sessions_total") == 2);
    const struct pl_json *per = pl_json_get(pl_json_get(j, "kv"), "per_session");
    assert_int_equal(per->n, 2);
    bool seen_a = false, seen_b = false;
    for (size_t i = 0; i < per->n; i++) {
        seen_a |= num(&per->items[i], "session") == (double)ra.session_id;
        seen_b |= num(&per->items[i], "session") == (double)rb.session_id;
    }
    assert_true(seen_a && seen_b);
    pl_json_free(j);

    client_finish(&ca, 'q');
    client_finish(&cb, 'q');
    wait_no_sessions(c, &d);

    /* stats: totals and the identity's share equal what the clients did. */
    uint32_t reqs = ra.requests + rb.requests;
    uint32_t tin = ra.prompt_tokens + rb.prompt_tokens, tout = ra.generated + rb.generated;
    j = ctl_json(c, &d, "stats", NULL);
    assert_true(num(j, "counters.requests") == reqs);
    assert_true(num(j, "counters.tokens_in") == tin);
    assert_true(num(j, "counters.tokens_out") == tout);
    assert_true(num(j, "counters.requests_finished_length") == reqs);
    assert_true(num(j, "counters.requests_cancelled") == 0);
    assert_true(num(j, "counters.sessions_opened") == 2);
    assert_true(num(j, "counters.sessions_closed") == 2);
    assert_true(num(j, "histograms.ttft_ns.count") == reqs);
    assert_true(num(j, "histograms.queue_wait_ns.count") == reqs);
    assert_true(num(j, "histograms.inter_token_ns.count") == tout - reqs);
    double steps = num(j, "histograms.step_ns.count");
    assert_true(steps > 0 && num(j, "histograms.batch_tokens.count") == steps);
    /* Every generated token but the last of each request went through a forward step, and
     * the prompt tokens the prefix cache did not already hold. */
    assert_true(num(j, "histograms.batch_tokens.sum") >= (double)(tout - reqs));
    assert_true(num(j, "histograms.batch_tokens.sum") <= (double)(tin + tout - reqs));
    assert_true(num(j, "histograms.ttft_ns.p50") > 0);
    assert_true(num(j, "gauges.sessions_open") == 0);
    const char *id = geteuid() == 0 ? "identities.testers." : "identities.others.";
    char key[128];
    snprintf(key, sizeof(key), "%scounters.tokens_out", id);
    assert_true(num(j, key) == tout);
    snprintf(key, sizeof(key), "%scounters.tokens_in", id);
    assert_true(num(j, key) == tin);
    snprintf(key, sizeof(key), "%scounters.requests", id);
    assert_true(num(j, key) == reqs);
    snprintf(key, sizeof(key), "%shistograms.ttft_ns.count", id);
    assert_true(num(j, key) == reqs);
    pl_json_free(j);

    /* The human tables name the counters. */
    CTL(c, &d, "stats");
    assert_int_equal(c->status, 0);
    assert_non_null(strstr(c->out, "tokens_out"));
    assert_non_null(strstr(c->out, "ttft_ns"));
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_prometheus_output_and_textfile(void **state) {
    struct daemon d;
    struct ctl *c = &ctl_main;
    struct client ca;
    struct client_report ra;
    struct prom p;
    char labels[64];
    assert_non_null(c);
    daemon_start(&d);
    client_start(&ca, &d, CLIENT_RUN_THEN_WAIT, prompts_a, 2, 9);
    client_read(&ca, &ra);
    assert_int_equal(ra.status, PICOLM_OK);
    client_finish(&ca, 'q');
    wait_no_sessions(c, &d);
    snprintf(labels, sizeof(labels), "identity=\"%s\"", geteuid() == 0 ? "testers" : "others");

    CTL(c, &d, "stats", "--prometheus");
    assert_int_equal(c->status, 0);
    prom_parse(c->out, &p);
    prom_check_histograms(&p);
    assert_true(prom_get(&p, "picolm_requests_total", "") == ra.requests);
    assert_true(prom_get(&p, "picolm_tokens_out_total", "") == ra.generated);
    assert_true(prom_get(&p, "picolm_tokens_in_total", "") == ra.prompt_tokens);
    assert_true(prom_get(&p, "picolm_identity_tokens_out_total", labels) == ra.generated);
    assert_true(prom_get(&p, "picolm_ttft_seconds_count", "") == ra.requests);
    assert_true(prom_get(&p, "picolm_ttft_seconds_sum", "") > 0);
    assert_true(prom_get(&p, "picolm_sessions_open", "") == 0);
    assert_true(prom_get(&p, "picolm_kv_total_tokens", "") >= 2048);
    assert_true(prom_get(&p, "picolm_batch_tokens_count", "") > 0);
    assert_non_null(strstr(c->out, "# HELP picolm_ttft_seconds "));
    assert_non_null(strstr(c->out, "# TYPE picolm_ttft_seconds histogram"));
    assert_non_null(strstr(c->out, "# TYPE picolm_tokens_out_total counter"));
    prom_free(&p);

    /* The textfile: written every second, same format, same counts. */
    uint64_t end = now_ms() + (uint64_t)scale(5000);
    for (;;) {
        FILE *f = fopen(d.prom, "r");
        bool ok = false;
        if (f) {
            size_t n = fread(c->out, 1, sizeof(c->out) - 1, f);
            fclose(f);
            c->out[n] = '\0';
            prom_parse(c->out, &p);
            ok = prom_get(&p, "picolm_tokens_out_total", "") == ra.generated;
            if (ok) {
                prom_check_histograms(&p);
                assert_true(prom_get(&p, "picolm_requests_total", "") == ra.requests);
                assert_true(prom_get(&p, "picolm_identity_requests_total", labels) == ra.requests);
            }
            prom_free(&p);
        }
        if (ok)
            break;
        if (now_ms() > end)
            fail_msg("the metrics textfile %s did not show the requests", d.prom);
        usleep(100000);
    }
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_kill_tells_the_client_why(void **state) {
    struct daemon d;
    struct ctl *c = &ctl_main;
    struct client cl, idle;
    struct client_report r, ri;
    const char *long_prompt[] = {"Once upon a time"};
    char sid[32];
    assert_non_null(c);
    daemon_start(&d);

    /* A running generation: kill by session id once tokens flow. */
    client_start(&cl, &d, CLIENT_LONG_GENERATE, long_prompt, 1, 1900);
    client_read(&cl, &r); /* session id */
    assert_int_equal(r.status, PICOLM_OK);
    wait_tokens_flow(c, &d, cl.pid);
    snprintf(sid, sizeof(sid), "%llu", (unsigned long long)r.session_id);
    struct pl_json *j = ctl_json(c, &d, "kill", sid);
    assert_true(num(j, "killed") == 1);
    pl_json_free(j);
    client_read(&cl, &r);
    assert_int_equal(r.status, PICOLM_E_CANCELLED);
    assert_non_null(strstr(r.reason, "killed by admin"));
    assert_true(r.generated > 0 && r.generated < 1900);
    client_finish(&cl, 'q');

    /* An idle client: kill by pid; its next call reports why the session ended. */
    client_start(&idle, &d, CLIENT_RUN_THEN_WAIT, prompts_b, 1, 3);
    client_read(&idle, &ri);
    assert_int_equal(ri.status, PICOLM_OK);
    char pid[32];
    snprintf(pid, sizeof(pid), "%d", (int)idle.pid);
    {
        const char *a[] = {"--socket", d.admin, "--json", "kill", "--pid", pid, NULL};
        run_ctl(c, false, a);
        assert_int_equal(c->status, 0);
        j = parse_json(c);
        assert_true(num(j, "killed") == 1);
        pl_json_free(j);
    }
    /* The broker tells the client, then closes: give it the grace of a few ticks. */
    usleep((useconds_t)scale(500) * 1000);
    assert_int_equal(write(idle.go_fd, "c", 1), 1);
    client_read(&idle, &ri);
    assert_true(ri.status != PICOLM_OK);
    assert_non_null(strstr(ri.reason, "killed by an administrator"));
    client_finish(&idle, 'q');
    wait_no_sessions(c, &d);

    j = ctl_json(c, &d, "stats", NULL);
    assert_true(num(j, "counters.sessions_killed") == 2);
    assert_true(num(j, "counters.requests_cancelled") == 1);
    pl_json_free(j);

    /* Nothing to kill: the broker answers with an error, exit 1. */
    CTL(c, &d, "kill", "999999");
    assert_int_equal(c->status, 1);
    assert_non_null(strstr(c->err, "no session 999999"));
    CTL(c, &d, "kill", "--uid", "4242");
    assert_int_equal(c->status, 1);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_policy_show_and_reload(void **state) {
    struct daemon d;
    struct ctl *c = &ctl_main;
    char text[1024];
    assert_non_null(c);
    daemon_start(&d);
    struct pl_json *j = ctl_json(c, &d, "policy", "show");
    assert_string_equal(str(j, "path"), d.policy);
    assert_string_equal(str(j, "text"), policy_text);
    assert_string_equal(str(j, "last_error"), "");
    double loaded0 = num(j, "loaded_unix_ns");
    pl_json_free(j);

    /* A new rule, reloaded: show has it, the load time moved. */
    usleep(20000);
    snprintf(text, sizeof(text), "[rule extra]\nmatch = uid:4242\naccess = deny\n%s", policy_text);
    write_file(d.policy, text);
    j = ctl_json(c, &d, "policy", "reload");
    assert_true(boolean(j, "reloaded"));
    assert_true(num(j, "loaded_unix_ns") > loaded0);
    pl_json_free(j);
    j = ctl_json(c, &d, "policy", "show");
    assert_non_null(strstr(str(j, "text"), "[rule extra]"));
    pl_json_free(j);
    j = ctl_json(c, &d, "status", NULL);
    assert_true(num(j, "policy.loaded_unix_ns") > loaded0);
    pl_json_free(j);

    /* A broken file: exit 1 naming the file and line; the last error is reported. */
    write_file(d.policy, "[rule broken]\nmatch = nonsense:1\n");
    CTL(c, &d, "policy", "reload");
    assert_int_equal(c->status, 1);
    assert_non_null(strstr(c->err, d.policy));
    j = ctl_json(c, &d, "policy", "show");
    assert_true(strlen(str(j, "last_error")) > 0);
    pl_json_free(j);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_model_info(void **state) {
    struct daemon d;
    struct ctl *c = &ctl_main;
    assert_non_null(c);
    daemon_start(&d);
    struct pl_json *j = ctl_json(c, &d, "model", "info");
    const struct pl_json *md = pl_json_get(j, "metadata");
    assert_non_null(md);
    assert_true(md->n >= 5);
    assert_string_equal(str(md, "general.architecture"), "llama");
    assert_non_null(strstr(str(md, "tokenizer.ggml.tokens"), "512 items"));
    assert_non_null(strstr(str(j, "tokenizer"), "512 tokens"));
    pl_json_free(j);
    CTL(c, &d, "model", "info");
    assert_int_equal(c->status, 0);
    assert_non_null(strstr(c->out, "general.architecture"));
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_top_json_refreshes(void **state) {
    struct daemon d;
    struct ctl *c = &ctl_main;
    assert_non_null(c);
    daemon_start(&d);
    const char *a[] = {"--socket", d.admin,      "--json", "top", "--iterations",
                       "2",        "--interval", "0.1",    NULL};
    run_ctl(c, false, a);
    assert_int_equal(c->status, 0);
    char *nl = strchr(c->out, '\n');
    assert_non_null(nl);
    for (int k = 0; k < 2; k++) {
        struct pl_json *j = NULL;
        char *start = k ? nl + 1 : c->out;
        char *stop = strchr(start, '\n');
        assert_non_null(stop);
        assert_int_equal(pl_json_parse(start, (size_t)(stop - start), &j, NULL, 0), 0);
        assert_non_null(pl_json_get(j, "sessions"));
        assert_non_null(pl_json_get(pl_json_get(j, "stats"), "counters"));
        pl_json_free(j);
    }
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_drain_finishes_running_work(void **state) {
    struct daemon d;
    struct ctl *c = &ctl_main;
    struct client cl;
    struct client_report r;
    const char *long_prompt[] = {"Once upon a time"};
    assert_non_null(c);
    daemon_start(&d);
    client_start(&cl, &d, CLIENT_LONG_GENERATE, long_prompt, 1, 400);
    client_read(&cl, &r);
    assert_int_equal(r.status, PICOLM_OK);
    wait_tokens_flow(c, &d, cl.pid);
    struct pl_json *j = ctl_json(c, &d, "drain", NULL);
    assert_true(boolean(j, "draining"));
    pl_json_free(j);
    /* No new clients... */
    picolm_client *pc = NULL;
    assert_int_not_equal(picolm_connect(d.sock, &pc), PICOLM_OK);
    /* ...but the running request completes, and the daemon exits 0. */
    client_read(&cl, &r);
    assert_int_equal(r.status, PICOLM_OK);
    assert_int_equal(r.generated, 400);
    client_finish(&cl, 'q');
    assert_int_equal(daemon_wait(&d, scale(20000)), 0);
    cleanup_dirs(&d);
    current = NULL;
}

static void test_errors_have_exit_statuses(void **state) {
    struct daemon d;
    struct ctl *c = &ctl_main;
    assert_non_null(c);

    /* Unreachable: 3, with a message naming the socket. */
    {
        const char *a[] = {"--socket", "/nonexistent/picolm/admin.sock", "status", NULL};
        run_ctl(c, false, a);
        assert_int_equal(c->status, 3);
        assert_non_null(strstr(c->err, "cannot reach picolmd"));
        assert_non_null(strstr(c->err, "/nonexistent/picolm/admin.sock"));
        assert_int_equal(c->n_out, 0);
    }
    /* Bad usage: 2. */
    {
        const char *bad[][6] = {{NULL},
                                {"frobnicate", NULL},
                                {"kill", NULL},
                                {"kill", "--pid", "abc", NULL},
                                {"policy", "delete", NULL},
                                {"status", "--bogus", NULL},
                                {"status", "extra", NULL},
                                {"sessions", "--prometheus", NULL},
                                {"--timeout", "0", "status", NULL}};
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            run_ctl(c, false, bad[k]);
            if (c->status != 2)
                fail_msg("usage case %zu exited %d", k, c->status);
            assert_non_null(strstr(c->err, "picoctl: "));
        }
        const char *help[] = {"--help", NULL};
        run_ctl(c, false, help);
        assert_int_equal(c->status, 0);
        assert_non_null(strstr(c->out, "usage: picoctl"));
    }
    /* A caller who is not an admin: refused with "permission denied" (3 when the socket's
     * mode stops it, 1 when the broker's admin check does). */
    daemon_start(&d);
    if (geteuid() == 0) {
        const char *a[] = {"--socket", d.admin, "status", NULL};
        run_ctl(c, true, a);
        assert_true(c->status == 3 || c->status == 1);
        assert_non_null(strstr(c->err, "permission denied"));
    }
    assert_int_equal(daemon_stop(&d), 0);
}

int main(void) {
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data || !*data) {
        fprintf(stderr, "PICOLM_TEST_DATA is not set: skipping\n");
        return 77;
    }
    snprintf(model_path, sizeof(model_path), "%s/models/stories260K.gguf", data);
    if (access(model_path, R_OK) != 0) {
        fprintf(stderr, "%s missing: skipping\n", model_path);
        return 77;
    }
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_status_json, teardown),
        cmocka_unit_test_teardown(test_sessions_and_stats_match_clients, teardown),
        cmocka_unit_test_teardown(test_prometheus_output_and_textfile, teardown),
        cmocka_unit_test_teardown(test_kill_tells_the_client_why, teardown),
        cmocka_unit_test_teardown(test_policy_show_and_reload, teardown),
        cmocka_unit_test_teardown(test_model_info, teardown),
        cmocka_unit_test_teardown(test_top_json_refreshes, teardown),
        cmocka_unit_test_teardown(test_drain_finishes_running_work, teardown),
        cmocka_unit_test_teardown(test_errors_have_exit_statuses, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
