/* SPDX-License-Identifier: MIT */
/* Moving a loaded model's weights out of the GGUF file mapping into memory the caller chose
 * (the daemon copies them onto huge pages and locks them there). The whole tensor data
 * section is copied at once, so every tensor keeps its offset and therefore its alignment
 * relative to dst; then each struct pl_weight is repointed. Called once, before any context
 * exists. */
#include "pl/engine_model.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "model_impl.h"
#include "pl/engine_gguf.h"

size_t pl_model_relocate_bytes(const struct pl_model *m) {
    if (!m || !m->gguf)
        return 0;
    uint64_t size = pl_gguf_file_size(m->gguf), off = pl_gguf_data_offset(m->gguf);
    return off < size ? (size_t)(size - off) : 0;
}

/* Offset of w's data inside the data section, checked to lie inside it. */
static int weight_offset(const struct pl_weight *w, const uint8_t *sec, size_t sec_bytes,
                         size_t *ret) {
    const uint8_t *p = w->data;
    size_t bytes = (size_t)w->n_rows * w->row_bytes;
    if (!p)
        return 1; /* absent optional tensor */
    if (p < sec || (size_t)(p - sec) > sec_bytes || bytes > sec_bytes - (size_t)(p - sec))
        return -EINVAL;
    *ret = (size_t)(p - sec);
    return 0;
}

static void repoint(struct pl_weight *w, const uint8_t *sec, uint8_t *dst) {
    if (w->data)
        w->data = dst + ((const uint8_t *)w->data - sec);
}

int pl_model_relocate_weights(struct pl_model *m, void *dst, size_t cap) {
    if (!m || !dst || !m->gguf)
        return -EINVAL;
    const uint8_t *sec = (const uint8_t *)pl_gguf_base(m->gguf) + pl_gguf_data_offset(m->gguf);
    size_t sec_bytes = pl_model_relocate_bytes(m), off;
    uint64_t align = pl_gguf_alignment(m->gguf);

    if (sec_bytes == 0 || cap < sec_bytes)
        return -ENOSPC;
    /* Tensors are aligned relative to the file; dst must keep that alignment. */
    if (align == 0 || (uintptr_t)dst % align != 0)
        return -EINVAL;
    /* Check everything before changing anything: on error the model is untouched. */
    if (weight_offset(&m->tok_embd, sec, sec_bytes, &off) < 0 ||
        weight_offset(&m->output, sec, sec_bytes, &off) < 0)
        return -EINVAL;
    for (uint32_t i = 0; i < m->hp.n_layer; i++) {
        const struct pl_layer *l = &m->layers[i];
        const struct pl_weight *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo,
                                        &l->w_gate, &l->w_up, &l->w_down};
        for (size_t j = 0; j < sizeof(ws) / sizeof(ws[0]); j++)
            if (weight_offset(ws[j], sec, sec_bytes, &off) < 0)
                return -EINVAL;
    }

    memcpy(dst, sec, sec_bytes);
    repoint(&m->tok_embd, sec, dst);
    repoint(&m->output, sec, dst);
    for (uint32_t i = 0; i < m->hp.n_layer; i++) {
        struct pl_layer *l = &m->layers[i];
        repoint(&l->wq, sec, dst);
        repoint(&l->wk, sec, dst);
        repoint(&l->wv, sec, dst);
        repoint(&l->wo, sec, dst);
        repoint(&l->w_gate, sec, dst);
        repoint(&l->w_up, sec, dst);
        repoint(&l->w_down, sec, dst);
    }
    return 0;
}
