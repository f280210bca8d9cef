/* SPDX-License-Identifier: MIT */
/* Apps' features through a real picolmd: chat messages rendered with the model's template
 * (a copy of tiny-llama-spm-Q4_K_M with a ChatML tokenizer.chat_template, compared with the
 * in-process render + tokenize), JSON-Schema constrained output (20 random-seed generations
 * that must parse and validate), stop strings spanning token boundaries, logprobs, and the
 * shared prefix KV cache: a 1000-token prompt's TTFT for the first client, a later client
 * and after a restart with --prefix-cache-dir, with identical greedy tokens each time.
 * Needs $PICOLM_TEST_DATA/models/tiny-llama-spm-Q4_K_M.gguf (exit 77 when missing). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gguf_writer.h"
#include "json.h"
#include "pl/engine_chat.h"
#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/engine_tokenizer.h"
#include "pl/picolm.pb-c.h"
#include "pl/pl_util.h"
#include "pl_test_client.h"
#include "records.h"

static char model_path[4096];
static char chat_model_path[4096];
static char tmp_dir[64];

struct daemon {
    pid_t pid;
    char dir[64];
};

/* Daemons started and not stopped yet: a failed assertion leaves its test with one running,
 * which main() kills at the end (an orphan would keep ctest waiting on its output). */
static pid_t live[8];

static void live_set(pid_t old, pid_t pid) {
    for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++)
        if (live[i] == old) {
            live[i] = pid;
            return;
        }
}

static void daemon_start(struct daemon *d, const char *model, const char *const *extra) {
    const char *args[40];
    int n = 0;
    strcpy(d->dir, "/tmp/picolmd-feat.XXXXXX");
    assert_non_null(mkdtemp(d->dir));
    args[n++] = PL_BINARY_DIR "/bin/picolmd";
    args[n++] = "--model";
    args[n++] = model;
    args[n++] = "--socket-dir";
    args[n++] = d->dir;
    args[n++] = "--foreground";
    args[n++] = "--ctx";
    args[n++] = "1280";
    args[n++] = "--max-active";
    args[n++] = "4";
    args[n++] = "--log-level";
    args[n++] = "warn";
    for (int i = 0; extra && extra[i]; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    d->pid = fork();
    assert_true(d->pid >= 0);
    if (d->pid == 0) {
        execv(args[0], (char *const *)args);
        _exit(127);
    }
    live_set(0, d->pid);
    for (int i = 0; i < 1000; i++) {
        Picolm__Admin__V1__AdminResponse *resp = NULL;
        if (pl_test_admin_status(d->dir, &resp) == 0) {
            picolm__admin__v1__admin_response__free_unpacked(resp, NULL);
            return;
        }
        usleep(10000);
    }
    fail_msg("picolmd did not come up");
}

static void daemon_stop(struct daemon *d) {
    int st = 0;
    kill(d->pid, SIGTERM);
    assert_int_equal(waitpid(d->pid, &st, 0), d->pid);
    live_set(d->pid, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char p[128];
    snprintf(p, sizeof(p), "%s/picolm.sock", d->dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/admin.sock", d->dir);
    unlink(p);
    rmdir(d->dir);
}

/* ---- One generation, everything recorded ---- */

struct gen {
    int32_t ids[2048];
    uint32_t n_ids;
    char text[16384];
    uint32_t n_text;
    float lp[2048];
    uint32_t n_lp;
    Picolm__V1__TokenLogprob top[2048 * 5];
    uint32_t n_top;
    uint32_t finish, error_code;
    char error[256];
    uint64_t ttft_ns;
};

static void run(struct pl_test_client *c, Picolm__V1__Generate *g, struct gen *out) {
    static uint64_t next_id = 1;
    static uint8_t buf[65536];
    memset(out, 0, sizeof(*out));
    g->request_id = next_id++;
    g->stream = true;
    assert_int_equal(pl_test_client_send(c, PL_DAEMON_REC_GENERATE, &g->base), 0);
    for (;;) {
        uint32_t type, len;
        int r = pl_test_client_recv(c, &type, buf, sizeof(buf), &len, 120000);
        assert_int_equal(r, 1);
        if (type == PL_DAEMON_REC_TOKEN_CHUNK) {
            Picolm__V1__TokenChunk *m = picolm__v1__token_chunk__unpack(NULL, len, buf);
            assert_non_null(m);
            assert_int_equal(m->request_id, g->request_id);
            if (m->n_logprobs)
                assert_int_equal(m->n_logprobs, m->n_ids);
            for (size_t i = 0; i < m->n_ids && out->n_ids < 2048; i++)
                out->ids[out->n_ids++] = m->ids[i];
            for (size_t i = 0; i < m->n_logprobs && out->n_lp < 2048; i++)
                out->lp[out->n_lp++] = m->logprobs[i];
            for (size_t i = 0; i < m->n_top && out->n_top < 2048 * 5; i++)
                out->top[out->n_top++] = *m->top[i];
            assert_true(out->n_text + m->text.len <= sizeof(out->text));
            if (m->text.len)
                memcpy(out->text + out->n_text, m->text.data, m->text.len);
            out->n_text += (uint32_t)m->text.len;
            picolm__v1__token_chunk__free_unpacked(m, NULL);
        } else if (type == PL_DAEMON_REC_DONE) {
            Picolm__V1__Done *m = picolm__v1__done__unpack(NULL, len, buf);
            assert_non_null(m);
            out->finish = m->finish_reason;
            out->ttft_ns = m->ttft_ns;
            picolm__v1__done__free_unpacked(m, NULL);
            return;
        } else if (type == PL_DAEMON_REC_ERROR) {
            Picolm__V1__Error *m = picolm__v1__error__unpack(NULL, len, buf);
            assert_non_null(m);
            out->error_code = m->code;
            snprintf(out->error, sizeof(out->error), "%s", m->message);
            picolm__v1__error__free_unpacked(m, NULL);
            return;
        }
    }
}

static void gen_tokens(Picolm__V1__Generate *g, Picolm__V1__TokenList *tl, int32_t *ids, size_t n,
                       uint32_t max_tokens) {
    picolm__v1__generate__init(g);
    picolm__v1__token_list__init(tl);
    tl->ids = ids;
    tl->n_ids = n;
    g->input_case = PICOLM__V1__GENERATE__INPUT_TOKENS;
    g->tokens = tl;
    g->max_tokens = max_tokens;
}

/* ---- A chat-template copy of the test model ---- */

static const char chatml_src[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

static int make_chat_model(const char *src, const char *dst) {
    struct pl_gguf *g = NULL;
    struct bench_gguf_writer *w = NULL;
    int r = pl_gguf_open(src, &g, NULL, 0);
    if (r < 0)
        return r;
    r = bench_gguf_writer_new((uint32_t)pl_gguf_alignment(g), &w);
    for (uint64_t i = 0; r == 0 && i < pl_gguf_n_kv(g); i++) {
        const struct pl_gguf_kv *kv = pl_gguf_kv_at(g, i);
        if (pl_gguf_str_eq(kv->key, "general.alignment") ||
            pl_gguf_str_eq(kv->key, "tokenizer.chat_template"))
            continue;
        r = bench_gguf_writer_copy_kv(w, kv);
    }
    if (r == 0)
        r = bench_gguf_writer_add_str(w, "tokenizer.chat_template", chatml_src);
    for (uint64_t i = 0; r == 0 && i < pl_gguf_n_tensors(g); i++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        r = bench_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
    }
    if (r == 0)
        r = bench_gguf_writer_open(w, dst);
    for (uint64_t i = 0; r == 0 && i < pl_gguf_n_tensors(g); i++) {
        const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        r = bench_gguf_writer_write(w, t->data, t->n_bytes);
    }
    if (r == 0)
        r = bench_gguf_writer_close(w);
    bench_gguf_writer_free(w);
    pl_gguf_close(g);
    return r;
}

/* ---- Chat ---- */

static void test_chat_uses_the_model_template(void **state) {
    (void)state;
    struct daemon d;
    struct pl_test_client c;
    daemon_start(&d, chat_model_path, NULL);
    assert_int_equal(pl_test_client_connect(d.dir, &c), 0);

    Picolm__V1__ChatMessage m0 = PICOLM__V1__CHAT_MESSAGE__INIT, m1 = m0;
    m0.role = "system";
    m0.content = "You are a storyteller.";
    m1.role = "user";
    m1.content = "Tell me about a cat.";
    Picolm__V1__ChatMessage *ms[2] = {&m0, &m1};
    Picolm__V1__ChatMessages cm = PICOLM__V1__CHAT_MESSAGES__INIT;
    cm.messages = ms;
    cm.n_messages = 2;
    Picolm__V1__Generate g;
    picolm__v1__generate__init(&g);
    g.input_case = PICOLM__V1__GENERATE__INPUT_MESSAGES;
    g.messages = &cm;
    g.max_tokens = 12;
    g.ignore_eos = true;
    static struct gen a, b;
    run(&c, &g, &a);
    assert_int_equal(a.error_code, 0);
    assert_int_equal(a.n_ids, 12);

    /* The same conversation rendered and tokenized in-process gives the same tokens. */
    struct pl_model *m = NULL;
    assert_int_equal(pl_model_load(chat_model_path, NULL, &m, NULL, 0), 0);
    const struct pl_tokenizer *tok = pl_model_tokenizer(m);
    struct pl_gguf_str src;
    assert_int_equal(pl_gguf_get_str(pl_model_gguf(m), "tokenizer.chat_template", &src), 0);
    assert_int_equal(pl_chat_template_detect(src.ptr, src.len), PL_CHAT_CHATML);
    struct pl_chat_msg cms[2] = {{"system", 6, m0.content, strlen(m0.content)},
                                 {"user", 4, m1.content, strlen(m1.content)}};
    char text[512];
    size_t len = 0, n = 0;
    assert_int_equal(pl_chat_render(PL_CHAT_CHATML, cms, 2, true, "", "", text, sizeof(text), &len),
                     0);
    assert_string_equal(text, "<|im_start|>system\nYou are a storyteller.<|im_end|>\n"
                              "<|im_start|>user\nTell me about a cat.<|im_end|>\n"
                              "<|im_start|>assistant\n");
    static int32_t ids[1024];
    assert_int_equal(pl_tokenizer_encode(tok, text, len, true, true, ids, 1024, &n), 0);
    pl_model_free(m);
    Picolm__V1__TokenList tl;
    gen_tokens(&g, &tl, ids, n, 12);
    g.ignore_eos = true;
    run(&c, &g, &b);
    assert_int_equal(b.error_code, 0);
    assert_int_equal(a.n_ids, b.n_ids);
    assert_memory_equal(a.ids, b.ids, a.n_ids * sizeof(int32_t));

    /* A role the family refuses, and an unknown template name: INVALID_ARGUMENT. */
    picolm__v1__generate__init(&g);
    g.input_case = PICOLM__V1__GENERATE__INPUT_MESSAGES;
    g.messages = &cm;
    cm.template_ = "nosuch";
    run(&c, &g, &a);
    assert_int_equal(a.error_code, PICOLM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT);
    assert_non_null(strstr(a.error, "nosuch"));
    cm.template_ = "phi3";
    m1.role = "tool";
    run(&c, &g, &a);
    assert_int_equal(a.error_code, PICOLM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT);

    pl_test_client_close(&c);
    daemon_stop(&d);
}

/* ---- Grammar ---- */

static const char schema[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":"
    "\"string\",\"maxLength\":6},\"maxItems\":3}},\"required\":[\"name\",\"age\"]}";

static void test_json_schema_outputs_parse_and_validate(void **state) {
    (void)state;
    struct daemon d;
    struct pl_test_client c;
    daemon_start(&d, model_path, NULL);
    assert_int_equal(pl_test_client_connect(d.dir, &c), 0);
    static struct gen out;
    int32_t prompt[3] = {1, 450, 29871};
    srand(1234);
    for (int i = 0; i < 20; i++) {
        Picolm__V1__Generate g;
        Picolm__V1__TokenList tl;
        Picolm__V1__SamplingParams sp = PICOLM__V1__SAMPLING_PARAMS__INIT;
        gen_tokens(&g, &tl, prompt, 3, 96);
        sp.temperature = 1.0f;
        sp.has_seed = true;
        sp.seed = (uint64_t)rand();
        g.sampling = &sp;
        g.format = "json";
        g.json_schema.data = (uint8_t *)schema;
        g.json_schema.len = strlen(schema);
        run(&c, &g, &out);
        assert_int_equal(out.error_code, 0);
        struct pl_json *j = NULL;
        char err[128];
        if (pl_json_parse(out.text, out.n_text, &j, err, sizeof(err)) != 0)
            fail_msg("generation %d: not JSON (%s): %.*s", i, err, (int)out.n_text, out.text);
        assert_int_equal(j->type, PL_JSON_OBJECT);
        const struct pl_json *name = pl_json_get(j, "name"), *age = pl_json_get(j, "age");
        assert_non_null(name);
        assert_non_null(age);
        assert_int_equal(name->type, PL_JSON_STRING);
        assert_int_equal(age->type, PL_JSON_NUMBER);
        assert_true(age->number == (double)(int64_t)age->number);
        const struct pl_json *tags = pl_json_get(j, "tags");
        if (tags) {
            assert_int_equal(tags->type, PL_JSON_ARRAY);
            assert_true(tags->n <= 3);
            for (size_t k = 0; k < tags->n; k++)
                assert_int_equal(tags->items[k].type, PL_JSON_STRING);
        }
        for (size_t k = 0; k < j->n; k++)
            assert_true(!strcmp(j->keys[k], "name") || !strcmp(j->keys[k], "age") ||
                        !strcmp(j->keys[k], "tags"));
        pl_json_free(j);
    }
    /* A schema outside the subset: INVALID_ARGUMENT with the compiler's message. */
    Picolm__V1__Generate g;
    Picolm__V1__TokenList tl;
    gen_tokens(&g, &tl, prompt, 3, 8);
    g.json_schema.data = (uint8_t *)"{\"type\":\"string\",\"pattern\":\"a+\"}";
    g.json_schema.len = strlen((const char *)g.json_schema.data);
    run(&c, &g, &out);
    assert_int_equal(out.error_code, PICOLM__V1__ERROR_CODE__ERROR_CODE_INVALID_ARGUMENT);
    assert_true(strlen(out.error) > 0);
    pl_test_client_close(&c);
    daemon_stop(&d);
}

/* ---- Stop strings and logprobs ---- */

static void test_stop_across_tokens_and_logprobs(void **state) {
    (void)state;
    struct daemon d;
    struct pl_test_client c;
    daemon_start(&d, model_path, NULL);
    assert_int_equal(pl_test_client_connect(d.dir, &c), 0);
    int32_t prompt[3] = {1, 9038, 2501};
    static struct gen base, cut;
    Picolm__V1__Generate g;
    Picolm__V1__TokenList tl;
    gen_tokens(&g, &tl, prompt, 3, 32);
    g.ignore_eos = true;
    g.logprobs = 5;
    run(&c, &g, &base);
    assert_int_equal(base.error_code, 0);
    assert_int_equal(base.n_ids, 32);
    /* Logprobs: one per token, top-5 sorted, greedy picks the top one. */
    assert_int_equal(base.n_lp, 32);
    assert_int_equal(base.n_top, 32 * 5);
    for (uint32_t i = 0; i < 32; i++) {
        assert_true(base.lp[i] <= 0.0f);
        assert_int_equal(base.top[i * 5].id, base.ids[i]);
        assert_true(base.top[i * 5].logprob == base.lp[i]);
        for (uint32_t k = 1; k < 5; k++)
            assert_true(base.top[i * 5 + k].logprob <= base.top[i * 5 + k - 1].logprob);
    }
    /* A stop string made of the end of one token's piece and the start of the next. */
    struct pl_model *m = NULL;
    assert_int_equal(pl_model_load(model_path, NULL, &m, NULL, 0), 0);
    size_t off = 0, at = 0;
    char stop[16];
    size_t stop_len = 0;
    for (uint32_t i = 0; i + 1 < base.n_ids && !stop_len; i++) {
        char p0[64], p1[64];
        int n0 = pl_tokenizer_piece(pl_model_tokenizer(m), base.ids[i], p0, sizeof(p0));
        int n1 = pl_tokenizer_piece(pl_model_tokenizer(m), base.ids[i + 1], p1, sizeof(p1));
        if (i >= 4 && n0 >= 2 && n1 >= 2) {
            memcpy(stop, p0 + n0 - 2, 2);
            memcpy(stop + 2, p1, 2);
            stop_len = 4;
            at = off + (size_t)n0 - 2;
        }
        off += n0 > 0 ? (size_t)n0 : 0;
    }
    pl_model_free(m);
    assert_true(stop_len == 4);
    /* The first occurrence in the text is where the output must end. */
    const char *first = memmem(base.text, base.n_text, stop, stop_len);
    assert_non_null(first);
    at = PL_MIN(at, (size_t)(first - base.text));
    ProtobufCBinaryData st = {.len = stop_len, .data = (uint8_t *)stop};
    gen_tokens(&g, &tl, prompt, 3, 32);
    g.ignore_eos = true;
    g.n_stop = 1;
    g.stop = &st;
    run(&c, &g, &cut);
    assert_int_equal(cut.error_code, 0);
    assert_int_equal(cut.finish, PICOLM__V1__FINISH_REASON__FINISH_REASON_STOP);
    assert_int_equal(cut.n_text, at);
    assert_memory_equal(cut.text, base.text, at);
    pl_test_client_close(&c);
    daemon_stop(&d);
}

/* ---- Shared prefix KV cache ---- */

static void test_prefix_cache_ttft_and_identity(void **state) {
    (void)state;
    char cache_dir[128];
    snprintf(cache_dir, sizeof(cache_dir), "%s/pcache", tmp_dir);
    const char *extra[] = {"--prefix-cache-dir", cache_dir, NULL};
    static int32_t prompt[1000 + 8];
    srand(99);
    prompt[0] = 1;
    for (int i = 1; i < 1000; i++)
        prompt[i] = 100 + rand() % 20000;
    static struct gen first, later, restarted, nocache, other;
    Picolm__V1__Generate g;
    Picolm__V1__TokenList tl;

    struct daemon d;
    struct pl_test_client c1, c2;
    daemon_start(&d, model_path, extra);
    assert_int_equal(pl_test_client_connect(d.dir, &c1), 0);
    gen_tokens(&g, &tl, prompt, 1000, 16);
    g.ignore_eos = true;
    run(&c1, &g, &first);
    assert_int_equal(first.error_code, 0);
    /* Another client, another session: same system prompt. */
    assert_int_equal(pl_test_client_connect(d.dir, &c2), 0);
    uint64_t hits = 1, hit_tokens = 0, loaded = 0, blocks = 0;
    assert_int_equal(pl_test_admin_counter(d.dir, "prefix_cache_hits", &hits), 0);
    assert_int_equal(hits, 0); /* the first request had nothing to find */
    run(&c2, &g, &later);
    assert_int_equal(later.error_code, 0);
    /* The second started from the first's blocks: all but the prompt's last few tokens. */
    assert_int_equal(pl_test_admin_counter(d.dir, "prefix_cache_hits", &hits), 0);
    assert_int_equal(pl_test_admin_counter(d.dir, "prefix_cache_hit_tokens", &hit_tokens), 0);
    assert_int_equal(pl_test_admin_counter(d.dir, "prefix_cache_blocks", &blocks), 0);
    assert_int_equal(hits, 1);
    assert_true(hit_tokens > 900 && hit_tokens < 1000);
    assert_true(blocks * 16 >= hit_tokens);
    /* A different tail after the shared prefix still matches a full prefill. */
    int32_t orig = prompt[999];
    prompt[999] = 4242;
    run(&c2, &g, &other);
    assert_int_equal(other.error_code, 0);
    prompt[999] = orig;
    pl_test_client_close(&c1);
    pl_test_client_close(&c2);
    daemon_stop(&d);

    /* Restart: the chain comes back from the directory. */
    daemon_start(&d, model_path, extra);
    assert_int_equal(pl_test_client_connect(d.dir, &c1), 0);
    gen_tokens(&g, &tl, prompt, 1000, 16);
    g.ignore_eos = true;
    run(&c1, &g, &restarted);
    assert_int_equal(restarted.error_code, 0);
    assert_int_equal(pl_test_admin_counter(d.dir, "prefix_cache_loaded_blocks", &loaded), 0);
    assert_int_equal(pl_test_admin_counter(d.dir, "prefix_cache_hits", &hits), 0);
    assert_int_equal(pl_test_admin_counter(d.dir, "prefix_cache_hit_tokens", &hit_tokens), 0);
    assert_true(loaded * 16 >= hit_tokens);
    assert_int_equal(hits, 1);
    assert_true(hit_tokens > 900 && hit_tokens < 1000);
    pl_test_client_close(&c1);
    daemon_stop(&d);

    /* Reference: no cache at all. */
    const char *off[] = {"--prefix-cache-tokens", "0", NULL};
    daemon_start(&d, model_path, off);
    assert_int_equal(pl_test_client_connect(d.dir, &c1), 0);
    run(&c1, &g, &nocache);
    static struct gen other_ref;
    prompt[999] = 4242;
    run(&c1, &g, &other_ref);
    assert_int_equal(pl_test_admin_counter(d.dir, "prefix_cache_hits", &hits), 0);
    assert_int_equal(pl_test_admin_counter(d.dir, "prefix_cache_blocks", &blocks), 0);
    assert_int_equal(hits, 0);
    assert_int_equal(blocks, 0);
    pl_test_client_close(&c1);
    daemon_stop(&d);

    print_message("prefix cache, 1000-token prompt: TTFT first %.2f ms, later client %.2f ms, "
                  "after restart %.2f ms, no cache %.2f ms\n",
                  first.ttft_ns / 1e6, later.ttft_ns / 1e6, restarted.ttft_ns / 1e6,
                  nocache.ttft_ns / 1e6);
    assert_int_equal(first.n_ids, 16);
    assert_memory_equal(first.ids, nocache.ids, 16 * sizeof(int32_t));
    assert_memory_equal(later.ids, nocache.ids, 16 * sizeof(int32_t));
    assert_memory_equal(restarted.ids, nocache.ids, 16 * sizeof(int32_t));
    assert_memory_equal(other.ids, other_ref.ids, 16 * sizeof(int32_t));
    /* The TTFTs above are printed, not asserted: on a loaded CI host a cached start once took
     * longer than a full prefill (a test is no timer). The counters say what happened. */

    /* Another model with the same directory: every file is a miss, output unchanged. */
    char other_model[4096];
    snprintf(other_model, sizeof(other_model), "%s", model_path);
    char *q4 = strstr(other_model, "Q4_K_M");
    assert_non_null(q4);
    memcpy(q4, "Q5_K_M", 6);
    if (access(other_model, R_OK) == 0) {
        static struct gen a, b;
        const char *no[] = {"--prefix-cache-tokens", "0", NULL};
        daemon_start(&d, other_model, no);
        assert_int_equal(pl_test_client_connect(d.dir, &c1), 0);
        run(&c1, &g, &a);
        pl_test_client_close(&c1);
        daemon_stop(&d);
        daemon_start(&d, other_model, extra);
        assert_int_equal(pl_test_client_connect(d.dir, &c1), 0);
        run(&c1, &g, &b);
        pl_test_client_close(&c1);
        daemon_stop(&d);
        assert_int_equal(a.error_code, 0);
        assert_int_equal(b.error_code, 0);
        assert_memory_equal(a.ids, b.ids, 16 * sizeof(int32_t));
    }
}

int main(void) {
    const char *data = getenv("PICOLM_TEST_DATA");
    if (!data) {
        fprintf(stderr, "PICOLM_TEST_DATA not set: skipping\n");
        return 77;
    }
    snprintf(model_path, sizeof(model_path), "%s/models/tiny-llama-spm-Q4_K_M.gguf", data);
    if (access(model_path, R_OK) != 0) {
        fprintf(stderr, "%s missing: skipping\n", model_path);
        return 77;
    }
    strcpy(tmp_dir, "/tmp/picolm-feat.XXXXXX");
    if (!mkdtemp(tmp_dir))
        return 1;
    snprintf(chat_model_path, sizeof(chat_model_path), "%s/chatml.gguf", tmp_dir);
    if (make_chat_model(model_path, chat_model_path) != 0) {
        fprintf(stderr, "cannot write %s\n", chat_model_path);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_cache_ttft_and_identity),
        cmocka_unit_test(test_chat_uses_the_model_template),
        cmocka_unit_test(test_json_schema_outputs_parse_and_validate),
        cmocka_unit_test(test_stop_across_tokens_and_logprobs),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++)
        if (live[i] > 0) {
            (void)kill(live[i], SIGKILL);
            (void)waitpid(live[i], NULL, 0);
        }
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", tmp_dir);
    return r;
}
