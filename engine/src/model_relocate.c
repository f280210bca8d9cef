/* SPDX-License-Identifier: MIT */
/* Moving a loaded model's weights out of the GGUF file mapping into other memory: memory the
 * caller chose (pl_model_relocate_weights) or huge pages the model maps itself
 * (pl_model_place_weights: hugetlb -> THP -> file, each step down explained). The whole
 * tensor data section is copied as one, so every tensor keeps its offset and therefore its
 * alignment relative to the destination; then each struct pl_weight is repointed. The copy
 * goes in chunks, and the file pages of each chunk leave this process once copied, so the
 * resident size never holds two copies; then the matrices with a packed kernel layout are
 * rewritten into it (matmul.h). Called once, before any context exists. */
#include "pl/engine_model.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "matmul.h"
#include "model_impl.h"
#include "pl/engine_gguf.h"
#include "pl/pl_util.h"

#define HUGE_2M ((size_t)2 << 20)
#define COPY_CHUNK ((size_t)4 << 20)

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << 26)
#endif

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

/* dst <- the data section, COPY_CHUNK at a time; when the section lies in our own file
 * mapping, the pages already copied are dropped from it (they are clean: a later touch
 * would read them from the file again, but nothing touches them after repointing). */
static void copy_section(const struct pl_model *m, uint8_t *dst, const uint8_t *sec,
                         size_t sec_bytes) {
    const bool drop = pl_gguf_is_mapped(m->gguf);
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t dropped = PL_ALIGN_UP((uintptr_t)sec, page); /* never the header's pages */
    for (size_t off = 0; off < sec_bytes; off += COPY_CHUNK) {
        size_t n = PL_MIN(COPY_CHUNK, sec_bytes - off);
        memcpy(dst + off, sec + off, n);
        if (!drop)
            continue;
        /* The section runs to the end of the file: its last page is ours to drop too. */
        uintptr_t end = (uintptr_t)(sec + off + n);
        end = off + n == sec_bytes ? PL_ALIGN_UP(end, page) : end & ~(page - 1);
        if (end > dropped) {
            (void)madvise((void *)dropped, end - dropped, MADV_DONTNEED);
            dropped = end;
        }
    }
}

/* The matrices of layer l, in ret[0 .. LAYER_MATS). */
#define LAYER_MATS PL_LAYER_N_MATS
static void layer_mats(struct pl_layer *l, struct pl_weight *ret[LAYER_MATS]) {
    struct pl_weight *ws[LAYER_MATS] = {PL_LAYER_MATS(l)};
    memcpy(ret, ws, sizeof(ws));
}

/* Now that the weights are in memory of our own, rewrite the matrices whose tiled kernel
 * has a layout of its own into it (matmul.h; same bytes, bit-identical products): not the
 * token embeddings, whose rows the forward pass dequantizes, nor a tied output (the same
 * bytes). A matrix that cannot be packed (no memory for the row buffer) stays as it is. */
static void pack_weights(struct pl_model *m) {
    m->n_packed = 0;
    if (m->output.data != m->tok_embd.data)
        m->n_packed += pl_mm_repack_weight(&m->output) > 0;
    for (uint32_t i = 0; i < m->hp.n_layer; i++) {
        struct pl_weight *ws[LAYER_MATS];
        layer_mats(&m->layers[i], ws);
        for (size_t j = 0; j < LAYER_MATS; j++)
            m->n_packed += pl_mm_repack_weight(ws[j]) > 0;
    }
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
        struct pl_weight *ws[LAYER_MATS];
        layer_mats(&m->layers[i], ws);
        for (size_t j = 0; j < LAYER_MATS; j++)
            if (weight_offset(ws[j], sec, sec_bytes, &off) < 0)
                return -EINVAL;
    }

    copy_section(m, dst, sec, sec_bytes);
    repoint(&m->tok_embd, sec, dst);
    repoint(&m->output, sec, dst);
    for (uint32_t i = 0; i < m->hp.n_layer; i++) {
        struct pl_weight *ws[LAYER_MATS];
        layer_mats(&m->layers[i], ws);
        for (size_t j = 0; j < LAYER_MATS; j++)
            repoint(ws[j], sec, dst);
    }
    pack_weights(m);
    return 0;
}

/* ---- Placement ---- */

static void read_first_line(const char *path, char *buf, size_t len) {
    FILE *f = fopen(path, "re");
    buf[0] = '\0';
    if (!f)
        return;
    if (fgets(buf, (int)len, f))
        buf[strcspn(buf, "\n")] = '\0';
    (void)fclose(f);
}

static void *try_hugetlb(size_t bytes, char *why, size_t why_len) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB, -1, 0);
    if (p != MAP_FAILED)
        return p;
    int e = errno;
    char n[32];
    read_first_line("/proc/sys/vm/nr_hugepages", n, sizeof(n));
    (void)snprintf(why, why_len, "MAP_HUGETLB of %zu MiB failed (%s; vm.nr_hugepages=%s)",
                   bytes >> 20, strerror(e), n[0] ? n : "?");
    return NULL;
}

/* Anonymous memory aligned to 2 MiB so that THP can back all of it; *ret_thp tells whether
 * THP may (madvise accepted and THP not disabled system-wide). */
static void *try_anon(size_t bytes, bool *ret_thp, char *why, size_t why_len) {
    size_t span = bytes + HUGE_2M;
    uint8_t *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *ret_thp = false;
    if (p == MAP_FAILED) {
        (void)snprintf(why, why_len, "anonymous mapping of %zu MiB failed (%s)", bytes >> 20,
                       strerror(errno));
        return NULL;
    }
    uint8_t *a = (uint8_t *)PL_ALIGN_UP((uintptr_t)p, (uintptr_t)HUGE_2M);
    if (a > p)
        (void)munmap(p, (size_t)(a - p));
    if (p + span > a + bytes)
        (void)munmap(a + bytes, (size_t)(p + span - (a + bytes)));
    char mode[128];
    read_first_line("/sys/kernel/mm/transparent_hugepage/enabled", mode, sizeof(mode));
    if (madvise(a, bytes, MADV_HUGEPAGE) < 0)
        (void)snprintf(why, why_len, "madvise(MADV_HUGEPAGE) failed (%s)", strerror(errno));
    else if (strstr(mode, "[never]"))
        (void)snprintf(why, why_len, "transparent huge pages are disabled (%s)", mode);
    else
        *ret_thp = true;
    return a;
}

int pl_weights_mode_parse(const char *s, enum pl_weights_mode *ret) {
    if (!s || !ret)
        return -EINVAL;
    if (!strcmp(s, "auto"))
        *ret = PL_WEIGHTS_AUTO;
    else if (!strcmp(s, "thp"))
        *ret = PL_WEIGHTS_THP;
    else if (!strcmp(s, "file"))
        *ret = PL_WEIGHTS_FILE;
    else
        return -EINVAL;
    return 0;
}

/* Where in its mapping the copy starts: the offset (a multiple of the file's alignment, below
 * 64) that puts the most bytes of the streamed matrices (all but the token embeddings, unless
 * they double as the output) on 64-byte boundaries. The file aligns tensors to 32 bytes by
 * default, so a file may hold them at 32 mod 64 (a size that is an odd multiple of 32 shifts
 * every tensor after it), and the copy keeps the file's offsets; the grouped kernels read a
 * group's super-blocks in 64-byte pieces, each then split over two lines. Zen 4 VM,
 * `picolm-bench decode`, rows of 2048, the matrix 32 bytes off a line (scratch), 3 alternating
 * runs from memory: Q4_0 in groups 29.7-31.5 -> 24.4-27.6 GB/s, Q4_K in groups 30.2-31.5 ->
 * 29.0-30.2, over an L2-sized matrix unchanged. */
static size_t copy_shift(const struct pl_model *m) {
    /* (the offsets are checked by pl_model_relocate_weights: here only their residues count) */
    const uint8_t *sec = (const uint8_t *)pl_gguf_base(m->gguf) + pl_gguf_data_offset(m->gguf);
    const uint64_t align = pl_gguf_alignment(m->gguf);
    uint64_t at[64] = {0}; /* bytes that the shift s puts on a boundary */
    if (align == 0 || align > 32 || 64 % align != 0)
        return 0;
    const struct pl_weight *out = &m->output;
    if (out->data) {
        const uintptr_t o = (uintptr_t)out->data - (uintptr_t)sec;
        at[(64 - o % 64) % 64] += (uint64_t)out->n_rows * out->row_bytes;
    }
    for (uint32_t i = 0; i < m->hp.n_layer; i++) {
        const struct pl_weight *ws[LAYER_MATS] = {PL_LAYER_MATS(&m->layers[i])};
        for (size_t j = 0; j < LAYER_MATS; j++)
            if (ws[j]->data) {
                const uintptr_t o = (uintptr_t)ws[j]->data - (uintptr_t)sec;
                at[(64 - o % 64) % 64] += (uint64_t)ws[j]->n_rows * ws[j]->row_bytes;
            }
    }
    size_t best = 0;
    for (size_t sh = align; sh < 64; sh += align)
        if (at[sh] > at[best])
            best = sh;
    return best;
}

int pl_model_place_weights(struct pl_model *m, enum pl_weights_mode mode,
                           struct pl_weights_info *ret_info) {
    if (!m || !ret_info || m->wcopy ||
        (mode != PL_WEIGHTS_AUTO && mode != PL_WEIGHTS_THP && mode != PL_WEIGHTS_FILE))
        return -EINVAL;
    struct pl_weights_info *info = ret_info;
    char why[256] = "", why2[256] = "";
    const size_t wb = pl_model_relocate_bytes(m);
    const size_t shift = wb ? copy_shift(m) : 0;
    const size_t bytes = PL_ALIGN_UP(wb + shift, HUGE_2M);
    void *dst = NULL;
    bool thp = false;

    memset(info, 0, sizeof(*info));
    info->weight_bytes = wb;
    if (mode == PL_WEIGHTS_FILE) {
        (void)snprintf(info->reason, sizeof(info->reason), "weights mode is \"file\"");
    } else if (wb == 0) {
        (void)snprintf(info->reason, sizeof(info->reason), "the model has no tensor data");
    } else {
        if (mode == PL_WEIGHTS_AUTO)
            dst = try_hugetlb(bytes, why, sizeof(why));
        else
            (void)snprintf(why, sizeof(why), "hugetlb not tried (weights mode \"thp\")");
        if (dst) {
            (void)snprintf(info->backing, sizeof(info->backing), "hugetlb");
            (void)snprintf(info->reason, sizeof(info->reason),
                           "MAP_HUGETLB with 2 MiB pages (%zu pages)", bytes / HUGE_2M);
        } else if ((dst = try_anon(bytes, &thp, why2, sizeof(why2)))) {
            (void)snprintf(info->backing, sizeof(info->backing), thp ? "thp" : "anonymous");
            (void)snprintf(info->reason, sizeof(info->reason), "%s; %s", why,
                           thp ? "anonymous memory with MADV_HUGEPAGE" : why2);
        } else {
            (void)snprintf(info->reason, sizeof(info->reason), "%s; %s", why, why2);
        }
    }
    if (dst) {
        int r = pl_model_relocate_weights(m, (uint8_t *)dst + shift, bytes - shift);
        if (r < 0) {
            (void)munmap(dst, bytes);
            dst = NULL;
            size_t l = strlen(info->reason);
            (void)snprintf(info->reason + l, sizeof(info->reason) - l, "; relocation failed (%s)",
                           strerror(-r));
        } else {
            /* Read-only from now on, as the file mapping was: no path may write them. */
            (void)mprotect(dst, bytes, PROT_READ);
            m->wcopy = dst;
            m->wcopy_bytes = bytes;
            info->packed = m->n_packed;
            if (m->n_packed) {
                size_t l = strlen(info->reason);
                (void)snprintf(info->reason + l, sizeof(info->reason) - l,
                               "; %u matrices repacked for this CPU's tiled kernels", m->n_packed);
            }
            info->base = dst;
            info->bytes = bytes;
            info->shift = shift;
        }
    }
    if (!dst)
        (void)snprintf(info->backing, sizeof(info->backing), "file");
    return 0;
}
