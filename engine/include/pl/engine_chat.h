/* SPDX-License-Identifier: MIT */
/* Chat templates: turn a list of messages (role + content) into the prompt text a chat
 * model was trained on. The common template families are recognised from the GGUF key
 * `tokenizer.chat_template` (a Jinja source we do not execute: distinctive markers pick a
 * family) or named explicitly, and each is rendered by hand-written code that produces
 * exactly what the family's Hugging Face Jinja template renders. Used by the daemon for
 * Generate requests that carry messages, and by the in-process CLI (`picolm chat`). */
#ifndef PL_ENGINE_ENGINE_CHAT_H
#define PL_ENGINE_ENGINE_CHAT_H

#include <stdbool.h>
#include <stddef.h>

enum pl_chat_family {
    PL_CHAT_LLAMA2 = 1, /* Llama-2-chat: <s>[INST] <<SYS>>\n..\n<</SYS>>\n\n.. [/INST] .. </s> */
    PL_CHAT_LLAMA3, /* Llama-3 instruct: <|start_header_id|>role<|end_header_id|>\n\n..<|eot_id|> */
    PL_CHAT_CHATML, /* ChatML / Qwen: <|im_start|>role\n..<|im_end|>\n */
    PL_CHAT_ZEPHYR, /* Zephyr: <|role|>\n..</s>\n */
    PL_CHAT_MISTRAL, /* Mistral/Mixtral instruct v0.1-v0.2: <s>[INST] .. [/INST]..</s> */
    PL_CHAT_PHI3,    /* Phi-3: <|role|>\n..<|end|>\n */
    PL_CHAT_GEMMA,   /* Gemma: <start_of_turn>user\n..<end_of_turn>\n, "model" for assistant */
    _PL_CHAT_MAX
};

/* One message; both strings borrowed, any bytes (not NUL-terminated). role is 1..64 bytes
 * of [A-Za-z0-9_-]; content may be empty. */
struct pl_chat_msg {
    const char *role;
    size_t role_len;
    const char *content;
    size_t content_len;
};

/* Most messages a conversation may hold, and most bytes of one message's content. */
#define PL_CHAT_MAX_MSGS 4096u
#define PL_CHAT_MAX_CONTENT (16u << 20)

/* The family of a Jinja chat template source (len bytes, not necessarily NUL-terminated),
 * recognised by its markers: "<|start_header_id|>" Llama 3; "<|im_start|>" ChatML;
 * "<start_of_turn>" Gemma; "<|user|>" with "<|end|>" Phi-3, without it Zephyr; "[INST]" with
 * "<<SYS>>" Llama 2, without it Mistral. Returns the family (> 0), -EINVAL (NULL with
 * len > 0), -PL_ERR_UNSUPPORTED (no family recognised). */
int pl_chat_template_detect(const char *jinja_src, size_t len);

/* The family named name (NUL-terminated): "llama2", "llama3", "chatml" (alias "qwen"),
 * "zephyr", "mistral", "phi3", "gemma". Returns the family or -PL_ERR_UNSUPPORTED, -EINVAL. */
int pl_chat_template_from_name(const char *name);
/* The canonical name of a family; NULL for an unknown value. */
const char *pl_chat_template_name(enum pl_chat_family family);

/* Strings that end an assistant turn in this family (for stop-string matching when the
 * model writes them as text; the daemon also stops on the vocabulary's EOG tokens): e.g.
 * "<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>", "</s>". Static storage; *ret_n
 * gets the count. NULL (and *ret_n 0) for an unknown family. */
const char *const *pl_chat_stop_strings(enum pl_chat_family family, size_t *ret_n);

/* Whether the family's template writes bos_text itself (Llama 2, Llama 3, Mistral, Gemma).
 * For the others (ChatML, Zephyr, Phi-3) a caller whose vocabulary adds BOS prepends it
 * when tokenizing. */
bool pl_chat_template_writes_bos(enum pl_chat_family family);

/* Render n messages (borrowed) as the family's template does, followed by the opening of
 * an assistant turn when add_generation_prompt is true (Llama 2 and Mistral templates have
 * no such opening: their text already ends with " [/INST]"). bos_text / eos_text are the
 * vocabulary's BOS and EOS token texts (NUL-terminated; NULL means ""). The result is meant
 * to be tokenized with special-token parsing on and without adding BOS again when
 * pl_chat_template_writes_bos() is true.
 * Per-family rules, as the Jinja templates have them: Llama 2 puts a leading system message
 * in <<SYS>> inside the first user turn and strips contents; Mistral and Gemma merge a
 * leading system message into the first user turn ("SYS\n\nUSER"); these three require
 * roles to alternate user/assistant after the optional system message. Llama 3 and Gemma
 * trim contents. Phi-3 and Zephyr accept system/user/assistant only; ChatML and Llama 3
 * write any role.
 * Writes up to cap bytes to out (NUL-terminated when the text and the NUL fit; out may be
 * NULL when cap is 0); *ret_len gets the text length (also on -ENOSPC, so a caller can
 * size a buffer: it needs *ret_len + 1 bytes).
 * Returns 0, -ENOSPC (cap too small), -EINVAL (unknown family, NULL arguments, a role
 * that is malformed or not allowed by the family, roles out of order, more than
 * PL_CHAT_MAX_MSGS messages, a content above PL_CHAT_MAX_CONTENT bytes). */
int pl_chat_render(enum pl_chat_family family, const struct pl_chat_msg *msgs, size_t n,
                   bool add_generation_prompt, const char *bos_text, const char *eos_text,
                   char *out, size_t cap, size_t *ret_len);

#endif
