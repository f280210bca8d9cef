/* SPDX-License-Identifier: MIT */
/* Chat template families (engine_chat.h): recognition of a GGUF chat_template by its
 * markers, and one renderer per family written to match the family's Hugging Face Jinja
 * template byte for byte (role checks, system-message placement, trimming, BOS/EOS).
 * Called by the daemon and the in-process CLI when a request carries messages. */
#include "pl/engine_chat.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pl/pl_err.h"
#include "pl/pl_util.h"

#define MAX_ROLE_LEN 64u

/* ---- Family table ---- */

static const char *const stops_llama2[] = {"</s>"};
static const char *const stops_llama3[] = {"<|eot_id|>", "<|end_of_text|>"};
static const char *const stops_chatml[] = {"<|im_end|>", "<|endoftext|>"};
static const char *const stops_zephyr[] = {"</s>"};
static const char *const stops_mistral[] = {"</s>"};
static const char *const stops_phi3[] = {"<|end|>", "<|endoftext|>"};
static const char *const stops_gemma[] = {"<end_of_turn>", "<eos>"};

struct family_info {
    const char *name;
    const char *const *stops;
    size_t n_stops;
    bool writes_bos;
};

static const struct family_info families[_PL_CHAT_MAX] = {
    [PL_CHAT_LLAMA2] = {"llama2", stops_llama2, PL_ARRAY_SIZE(stops_llama2), true},
    [PL_CHAT_LLAMA3] = {"llama3", stops_llama3, PL_ARRAY_SIZE(stops_llama3), true},
    [PL_CHAT_CHATML] = {"chatml", stops_chatml, PL_ARRAY_SIZE(stops_chatml), false},
    [PL_CHAT_ZEPHYR] = {"zephyr", stops_zephyr, PL_ARRAY_SIZE(stops_zephyr), false},
    [PL_CHAT_MISTRAL] = {"mistral", stops_mistral, PL_ARRAY_SIZE(stops_mistral), true},
    [PL_CHAT_PHI3] = {"phi3", stops_phi3, PL_ARRAY_SIZE(stops_phi3), false},
    [PL_CHAT_GEMMA] = {"gemma", stops_gemma, PL_ARRAY_SIZE(stops_gemma), true},
};

static bool valid_family(int f) {
    return f > 0 && f < _PL_CHAT_MAX;
}

static bool has(const char *src, size_t len, const char *marker) {
    return memmem(src, len, marker, strlen(marker)) != NULL;
}

int pl_chat_template_detect(const char *src, size_t len) {
    if (!src && len > 0)
        return -EINVAL;
    if (len == 0)
        return -PL_ERR_UNSUPPORTED;
    /* Most specific markers first: Llama 3 and ChatML templates may mention [INST] in
     * comments, Phi-3 and Zephyr share <|user|>. */
    if (has(src, len, "<|start_header_id|>"))
        return PL_CHAT_LLAMA3;
    if (has(src, len, "<|im_start|>"))
        return PL_CHAT_CHATML;
    if (has(src, len, "<start_of_turn>"))
        return PL_CHAT_GEMMA;
    if (has(src, len, "<|user|>"))
        return has(src, len, "<|end|>") ? PL_CHAT_PHI3 : PL_CHAT_ZEPHYR;
    if (has(src, len, "[INST]"))
        return has(src, len, "<<SYS>>") ? PL_CHAT_LLAMA2 : PL_CHAT_MISTRAL;
    return -PL_ERR_UNSUPPORTED;
}

int pl_chat_template_from_name(const char *name) {
    if (!name)
        return -EINVAL;
    for (int f = 1; f < _PL_CHAT_MAX; f++)
        if (strcmp(name, families[f].name) == 0)
            return f;
    if (strcmp(name, "qwen") == 0)
        return PL_CHAT_CHATML;
    return -PL_ERR_UNSUPPORTED;
}

const char *pl_chat_template_name(enum pl_chat_family family) {
    return valid_family((int)family) ? families[family].name : NULL;
}

const char *const *pl_chat_stop_strings(enum pl_chat_family family, size_t *ret_n) {
    if (!valid_family((int)family)) {
        if (ret_n)
            *ret_n = 0;
        return NULL;
    }
    if (ret_n)
        *ret_n = families[family].n_stops;
    return families[family].stops;
}

bool pl_chat_template_writes_bos(enum pl_chat_family family) {
    return valid_family((int)family) && families[family].writes_bos;
}

/* ---- Output and string helpers ---- */

/* Counts every byte; copies what fits. */
struct writer {
    char *out;
    size_t cap;
    size_t len;
    bool overflow;
};

static void put(struct writer *w, const char *s, size_t n) {
    if (n == 0)
        return;
    if (w->len < w->cap) {
        size_t k = PL_MIN(n, w->cap - w->len);
        memcpy(w->out + w->len, s, k);
    }
    if (pl_add_overflow(w->len, n, &w->len))
        w->overflow = true;
}

static void puts_(struct writer *w, const char *s) {
    put(w, s, strlen(s));
}

/* Python's str.strip() on ASCII whitespace (what Jinja's trim and .strip() remove for
 * ASCII text). */
static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static void trimmed(const char *s, size_t n, const char **ret_s, size_t *ret_n) {
    while (n > 0 && is_ws(s[0])) {
        s++;
        n--;
    }
    while (n > 0 && is_ws(s[n - 1]))
        n--;
    *ret_s = s;
    *ret_n = n;
}

static bool role_is(const struct pl_chat_msg *m, const char *r) {
    size_t n = strlen(r);
    return m->role_len == n && memcmp(m->role, r, n) == 0;
}

static bool role_ok(const struct pl_chat_msg *m) {
    if (!m->role || m->role_len == 0 || m->role_len > MAX_ROLE_LEN)
        return false;
    for (size_t i = 0; i < m->role_len; i++) {
        char c = m->role[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

/* After an optional leading system message: user, assistant, user, ... (Llama 2, Mistral
 * and Gemma templates raise an exception otherwise). */
static bool alternates(const struct pl_chat_msg *m, size_t n) {
    size_t first = (n > 0 && role_is(&m[0], "system")) ? 1 : 0;
    for (size_t i = first; i < n; i++) {
        bool want_user = (i - first) % 2 == 0;
        if (!role_is(&m[i], want_user ? "user" : "assistant"))
            return false;
    }
    return true;
}

static bool basic_roles_only(const struct pl_chat_msg *m, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!role_is(&m[i], "system") && !role_is(&m[i], "user") && !role_is(&m[i], "assistant"))
            return false;
    return true;
}

/* ---- Renderers ---- */

static void render_llama2(struct writer *w, const struct pl_chat_msg *m, size_t n, const char *bos,
                          const char *eos) {
    size_t first = 0;
    const struct pl_chat_msg *sys = NULL;
    if (n > 0 && role_is(&m[0], "system")) {
        sys = &m[0];
        first = 1;
    }
    for (size_t i = first; i < n; i++) {
        const char *c;
        size_t cn;
        if (role_is(&m[i], "user")) {
            puts_(w, bos);
            puts_(w, "[INST] ");
            if (i == first && sys) {
                /* strip() applies to "<<SYS>>\n" + system + ... + user as one string: only
                 * the end of the user content can lose whitespace. */
                c = m[i].content;
                cn = m[i].content_len;
                while (cn > 0 && is_ws(c[cn - 1]))
                    cn--;
                puts_(w, "<<SYS>>\n");
                put(w, sys->content, sys->content_len);
                /* An all-blank user message lets strip() eat the "\n\n" too. */
                puts_(w, cn > 0 ? "\n<</SYS>>\n\n" : "\n<</SYS>>");
            } else {
                trimmed(m[i].content, m[i].content_len, &c, &cn);
            }
            put(w, c, cn);
            puts_(w, " [/INST]");
        } else {
            trimmed(m[i].content, m[i].content_len, &c, &cn);
            puts_(w, " ");
            put(w, c, cn);
            puts_(w, " ");
            puts_(w, eos);
        }
    }
}

static void render_llama3(struct writer *w, const struct pl_chat_msg *m, size_t n, bool gen,
                          const char *bos) {
    for (size_t i = 0; i < n; i++) {
        const char *c;
        size_t cn;
        if (i == 0)
            puts_(w, bos);
        puts_(w, "<|start_header_id|>");
        put(w, m[i].role, m[i].role_len);
        puts_(w, "<|end_header_id|>\n\n");
        trimmed(m[i].content, m[i].content_len, &c, &cn);
        put(w, c, cn);
        puts_(w, "<|eot_id|>");
    }
    if (gen)
        puts_(w, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void render_chatml(struct writer *w, const struct pl_chat_msg *m, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        puts_(w, "<|im_start|>");
        put(w, m[i].role, m[i].role_len);
        puts_(w, "\n");
        put(w, m[i].content, m[i].content_len);
        puts_(w, "<|im_end|>\n");
    }
    if (gen)
        puts_(w, "<|im_start|>assistant\n");
}

static void render_zephyr(struct writer *w, const struct pl_chat_msg *m, size_t n, bool gen,
                          const char *eos) {
    for (size_t i = 0; i < n; i++) {
        puts_(w, "<|");
        put(w, m[i].role, m[i].role_len);
        puts_(w, "|>\n");
        put(w, m[i].content, m[i].content_len);
        puts_(w, eos);
        puts_(w, "\n");
    }
    if (gen)
        puts_(w, "<|assistant|>\n");
}

static void render_mistral(struct writer *w, const struct pl_chat_msg *m, size_t n, const char *bos,
                           const char *eos) {
    size_t first = 0;
    const struct pl_chat_msg *sys = NULL;
    if (n > 0 && role_is(&m[0], "system")) {
        sys = &m[0];
        first = 1;
    }
    puts_(w, bos);
    for (size_t i = first; i < n; i++) {
        if (role_is(&m[i], "user")) {
            puts_(w, "[INST] ");
            if (i == first && sys) {
                put(w, sys->content, sys->content_len);
                puts_(w, "\n\n");
            }
            put(w, m[i].content, m[i].content_len);
            puts_(w, " [/INST]");
        } else {
            put(w, m[i].content, m[i].content_len);
            puts_(w, eos);
        }
    }
}

static void render_phi3(struct writer *w, const struct pl_chat_msg *m, size_t n, bool gen,
                        const char *eos) {
    for (size_t i = 0; i < n; i++) {
        puts_(w, "<|");
        put(w, m[i].role, m[i].role_len);
        puts_(w, "|>\n");
        put(w, m[i].content, m[i].content_len);
        puts_(w, "<|end|>\n");
    }
    /* The template closes with EOS when no assistant turn is opened. */
    puts_(w, gen ? "<|assistant|>\n" : eos);
}

static void render_gemma(struct writer *w, const struct pl_chat_msg *m, size_t n, bool gen,
                         const char *bos) {
    size_t first = 0;
    const struct pl_chat_msg *sys = NULL;
    if (n > 0 && role_is(&m[0], "system")) {
        sys = &m[0];
        first = 1;
    }
    puts_(w, bos);
    for (size_t i = first; i < n; i++) {
        const char *c;
        size_t cn;
        bool user = role_is(&m[i], "user");
        puts_(w, user ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (i == first && sys) {
            put(w, sys->content, sys->content_len);
            puts_(w, "\n\n");
        }
        trimmed(m[i].content, m[i].content_len, &c, &cn);
        put(w, c, cn);
        puts_(w, "<end_of_turn>\n");
    }
    if (gen)
        puts_(w, "<start_of_turn>model\n");
}

int pl_chat_render(enum pl_chat_family family, const struct pl_chat_msg *msgs, size_t n,
                   bool add_generation_prompt, const char *bos_text, const char *eos_text,
                   char *out, size_t cap, size_t *ret_len) {
    if (!valid_family((int)family) || (n > 0 && !msgs) || n > PL_CHAT_MAX_MSGS ||
        (cap > 0 && !out) || !ret_len)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (!role_ok(&msgs[i]) || msgs[i].content_len > PL_CHAT_MAX_CONTENT ||
            (msgs[i].content_len > 0 && !msgs[i].content))
            return -EINVAL;
    }
    switch (family) {
    case PL_CHAT_LLAMA2:
    case PL_CHAT_MISTRAL:
    case PL_CHAT_GEMMA:
        if (!alternates(msgs, n))
            return -EINVAL;
        break;
    case PL_CHAT_ZEPHYR:
    case PL_CHAT_PHI3:
        if (!basic_roles_only(msgs, n))
            return -EINVAL;
        break;
    case PL_CHAT_LLAMA3:
    case PL_CHAT_CHATML:
    case _PL_CHAT_MAX:
        break;
    }
    const char *bos = bos_text ? bos_text : "";
    const char *eos = eos_text ? eos_text : "";
    struct writer w = {.out = out, .cap = cap};
    bool gen = add_generation_prompt;
    switch (family) {
    case PL_CHAT_LLAMA2:
        render_llama2(&w, msgs, n, bos, eos);
        break;
    case PL_CHAT_LLAMA3:
        render_llama3(&w, msgs, n, gen, bos);
        break;
    case PL_CHAT_CHATML:
        render_chatml(&w, msgs, n, gen);
        break;
    case PL_CHAT_ZEPHYR:
        render_zephyr(&w, msgs, n, gen, eos);
        break;
    case PL_CHAT_MISTRAL:
        render_mistral(&w, msgs, n, bos, eos);
        break;
    case PL_CHAT_PHI3:
        render_phi3(&w, msgs, n, gen, eos);
        break;
    case PL_CHAT_GEMMA:
        render_gemma(&w, msgs, n, gen, bos);
        break;
    case _PL_CHAT_MAX:
        return -EINVAL;
    }
    if (w.overflow)
        return -EINVAL;
    *ret_len = w.len;
    if (w.len >= cap)
        return -ENOSPC;
    out[w.len] = '\0';
    return 0;
}
