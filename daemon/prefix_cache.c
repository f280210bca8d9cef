/* SPDX-License-Identifier: MIT */
/* Shared prefix KV cache (see prefix_cache.h): a node per cached block, in a hash table
 * keyed by the chain hash, with a parent link, the block's 16 token ids and an LRU stamp.
 * Persistence: one file per chain end, written to a temporary name and renamed. */
#include "prefix_cache.h"

#include <dirent.h>
#include <seccomp.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pl/engine_gguf.h"
#include "pl/engine_model.h"
#include "pl/pl_err.h"
#include "pl/pl_log.h"
#include "pl/pl_util.h"

#define BT PL_CTX_KV_BLOCK_TOKENS
#define NONE UINT32_MAX
#define FILE_MAGIC "PLPFXKV1"
#define FILE_VERSION 1u
#define MAX_FILES 256u    /* chain files the cache writes at most */
#define SAMPLE_BYTES 256u /* bytes of each tensor sampled into the fingerprint */

struct node {
    uint64_t hash;   /* chain hash up to the end of this block */
    uint64_t stamp;  /* LRU clock at last use */
    uint32_t parent; /* node index or NONE */
    uint32_t next;   /* hash bucket chain, or the free list */
    uint32_t block;  /* engine KV block id (one reference held) */
    uint32_t depth;  /* blocks before this one in the chain */
    uint32_t n_children;
    bool used;
    bool saved;    /* covered by a file */
    bool has_file; /* a file named after this node exists */
    int32_t tok[BT];
};

struct pl_daemon_pcache {
    struct pl_ctx *ctx;
    uint8_t fp[16];
    uint64_t seed; /* chain hash of the empty prefix (from fp) */
    uint32_t n_vocab;
    uint32_t max_blocks;
    uint32_t n_nodes;
    struct node *nodes; /* [max_blocks] */
    uint32_t free_head;
    uint32_t *buckets;  /* [n_buckets] */
    uint32_t n_buckets; /* power of two */
    uint64_t clock;
    uint32_t *ids; /* [max chain] lookup result / save scratch */
    uint32_t max_chain;
    uint32_t n_files;
    bool dirty;        /* chains inserted since the last save */
    int dir_fd;        /* -1: no persistence */
    uint8_t *blockbuf; /* [block_bytes] */
    size_t block_bytes;
    struct pl_daemon_pcache_stats st;
};

/* The persistence directory of the live cache, for the lockdown (one cache per broker). */
static int persist_dir_fd = -1;

int pl_daemon_pcache_persist_fd(void) {
    return persist_dir_fd;
}

/* Allow syscall name when its argument a (and b, unless b < 0) is the directory fd. */
static int allow_at(scmp_filter_ctx f, const char *name, int a, int b, int fd) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0; /* not on this architecture */
    if (b < 0)
        return seccomp_rule_add(f, SCMP_ACT_ALLOW, nr, 1,
                                SCMP_CMP((unsigned)a, SCMP_CMP_EQ, (scmp_datum_t)fd, 0));
    return seccomp_rule_add(f, SCMP_ACT_ALLOW, nr, 2,
                            SCMP_CMP((unsigned)a, SCMP_CMP_EQ, (scmp_datum_t)fd, 0),
                            SCMP_CMP((unsigned)b, SCMP_CMP_EQ, (scmp_datum_t)fd, 0));
}

int pl_daemon_pcache_seccomp(void *filter) {
    int fd = persist_dir_fd, r;
    if (fd < 0 || !filter)
        return 0;
    /* openat(dir, "NAME.tmp", O_WRONLY|O_CREAT|O_TRUNC): a chain file being written. */
    if ((r = allow_at(filter, "openat", 0, -1, fd)) < 0)
        return r;
    /* renameat(dir, tmp, dir, name): publish it (renameat2 where libc uses it). */
    if ((r = allow_at(filter, "renameat", 0, 2, fd)) < 0 ||
        (r = allow_at(filter, "renameat2", 0, 2, fd)) < 0)
        return r;
    /* unlinkat(dir, name, 0) for evicted chains is allowed by the broker filter itself
     * (pl_policy_seccomp_broker_at with this fd): a conditional rule added here would lose
     * to the table's refusal of every other unlinkat. */
    /* fdatasync(file): the chain is on disk before the rename makes it visible. */
    int nr = seccomp_syscall_resolve_name("fdatasync");
    return nr == __NR_SCMP_ERROR ? 0 : seccomp_rule_add(filter, SCMP_ACT_ALLOW, nr, 0);
}

/* ---- Hashing ---- */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A 64-bit hash of bytes continuing from h (not cryptographic: every use that matters is
 * confirmed by comparing the data itself; the file checksum only catches corruption). */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = mix64(h ^ w) + 0x9e3779b97f4a7c15ull;
        b += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, b, n);
    return mix64(h ^ w ^ ((uint64_t)n << 56)) + 0x9e3779b97f4a7c15ull;
}

static uint64_t chain_hash(uint64_t parent, const int32_t *tok) {
    return hash_bytes(parent, tok, BT * sizeof(int32_t));
}

static uint64_t hash_u64(uint64_t h, uint64_t v) {
    return hash_bytes(h, &v, sizeof(v));
}

void pl_daemon_pcache_fingerprint(const struct pl_model *m, uint8_t ret[16]) {
    const struct pl_model_hparams *hp = pl_model_hparams(m);
    const struct pl_gguf *g = pl_model_gguf(m);
    /* Two independent lanes give 128 bits. */
    uint64_t h[2] = {0x7069636f6c6d4b56ull, 0x50524546495843ull};
    for (int l = 0; l < 2; l++) {
        uint64_t x = h[l];
        x = hash_bytes(x, hp->arch, strnlen(hp->arch, sizeof(hp->arch)));
        uint32_t u[] = {hp->n_vocab, hp->n_embd,   hp->n_layer, hp->n_head,      hp->n_head_kv,
                        hp->n_ff,    hp->head_dim, hp->n_rot,   hp->tied_output, hp->has_qkv_bias};
        x = hash_bytes(x, u, sizeof(u));
        float f[] = {hp->rope_freq_base, hp->rope_freq_scale, hp->rms_eps};
        x = hash_bytes(x, f, sizeof(f));
        uint64_t nt = pl_gguf_n_tensors(g);
        x = hash_u64(x, nt);
        for (uint64_t i = 0; i < nt; i++) {
            const struct pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
            x = hash_bytes(x, t->name, strlen(t->name));
            x = hash_u64(x, ((uint64_t)t->type << 32) | t->n_dims);
            for (uint32_t d = 0; d < t->n_dims && d < PL_GGUF_MAX_DIMS; d++)
                x = hash_u64(x, t->ne[d]);
            x = hash_u64(x, t->offset);
            x = hash_u64(x, t->n_bytes);
            /* Data samples: the start, the middle and the end of every tensor (fine-tunes
             * of one base share every shape). */
            const uint8_t *p = t->data;
            uint64_t k = PL_MIN((uint64_t)SAMPLE_BYTES, t->n_bytes);
            x = hash_bytes(x, p, (size_t)k);
            x = hash_bytes(x, p + (t->n_bytes - k) / 2, (size_t)k);
            x = hash_bytes(x, p + t->n_bytes - k, (size_t)k);
        }
        h[l] = x;
    }
    memcpy(ret, &h[0], 8);
    memcpy(ret + 8, &h[1], 8);
}

/* ---- Table ---- */

static uint32_t find(const struct pl_daemon_pcache *pc, uint64_t hash, uint32_t parent,
                     const int32_t *tok) {
    for (uint32_t i = pc->buckets[hash & (pc->n_buckets - 1)]; i != NONE; i = pc->nodes[i].next) {
        const struct node *n = &pc->nodes[i];
        if (n->hash == hash && n->parent == parent && !memcmp(n->tok, tok, sizeof(n->tok)))
            return i;
    }
    return NONE;
}

static uint32_t add(struct pl_daemon_pcache *pc, uint64_t hash, uint32_t parent, const int32_t *tok,
                    uint32_t block) {
    uint32_t i = pc->free_head;
    struct node *n = &pc->nodes[i];
    pc->free_head = n->next;
    *n = (struct node){.hash = hash,
                       .stamp = pc->clock,
                       .parent = parent,
                       .block = block,
                       .depth = parent == NONE ? 0 : pc->nodes[parent].depth + 1,
                       .used = true};
    memcpy(n->tok, tok, sizeof(n->tok));
    uint32_t *b = &pc->buckets[hash & (pc->n_buckets - 1)];
    n->next = *b;
    *b = i;
    if (parent != NONE)
        pc->nodes[parent].n_children++;
    pc->n_nodes++;
    pc->st.inserted++;
    return i;
}

static void file_name(uint64_t hash, char *buf, size_t cap) {
    (void)snprintf(buf, cap, "%016llx.pkv", (unsigned long long)hash);
}

static void remove_node(struct pl_daemon_pcache *pc, uint32_t i) {
    struct node *n = &pc->nodes[i];
    uint32_t *p = &pc->buckets[n->hash & (pc->n_buckets - 1)];
    while (*p != i)
        p = &pc->nodes[*p].next;
    *p = n->next;
    if (n->parent != NONE)
        pc->nodes[n->parent].n_children--;
    pl_ctx_kv_block_unref(pc->ctx, n->block);
    n->used = false;
    n->next = pc->free_head;
    pc->free_head = i;
    pc->n_nodes--;
    pc->st.evicted++;
}

/* The least recently used chain end last used before stamp `before`, or NONE. */
static uint32_t lru_leaf(const struct pl_daemon_pcache *pc, uint64_t before) {
    uint32_t best = NONE;
    for (uint32_t i = 0; i < pc->max_blocks; i++) {
        const struct node *n = &pc->nodes[i];
        if (!n->used || n->n_children || n->stamp >= before)
            continue;
        if (best == NONE || n->stamp < pc->nodes[best].stamp ||
            (n->stamp == pc->nodes[best].stamp && n->depth > pc->nodes[best].depth))
            best = i;
    }
    return best;
}

uint32_t pl_daemon_pcache_evict(struct pl_daemon_pcache *pc, uint32_t n) {
    uint32_t done = 0;
    while (pc && done < n) {
        uint32_t i = lru_leaf(pc, UINT64_MAX);
        if (i == NONE)
            break;
        remove_node(pc, i);
        done++;
    }
    return done;
}

/* ---- Lookup and insert ---- */

uint32_t pl_daemon_pcache_lookup(struct pl_daemon_pcache *pc, const int32_t *tok, uint32_t n_tok,
                                 const uint32_t **ret_ids) {
    uint32_t k = 0, parent = NONE;
    uint64_t h = pc->seed;
    pc->clock++;
    pc->st.lookups++;
    /* At least one prompt token is left to prefill: its logits start the generation; and
     * at least PL_CTX_BATCHED_MIN when the prompt has them, so that the rest goes through
     * the same kernels as a whole prefill would and the answer does not depend on whether
     * the prefix was cached (engine_model.h). */
    const uint32_t keep = n_tok >= PL_CTX_BATCHED_MIN ? PL_CTX_BATCHED_MIN : 1;
    uint32_t max = n_tok ? (n_tok - keep) / BT : 0;
    max = PL_MIN(max, pc->max_chain);
    while (k < max) {
        h = chain_hash(h, tok + (size_t)k * BT);
        uint32_t i = find(pc, h, parent, tok + (size_t)k * BT);
        if (i == NONE)
            break;
        pc->nodes[i].stamp = pc->clock;
        pc->ids[k++] = pc->nodes[i].block;
        parent = i;
    }
    if (k) {
        pc->st.hits++;
        pc->st.hit_tokens += (uint64_t)k * BT;
    }
    *ret_ids = pc->ids;
    return k;
}

void pl_daemon_pcache_insert(struct pl_daemon_pcache *pc, int32_t seq, const int32_t *tok,
                             uint32_t n_tok, uint32_t max_cached) {
    uint32_t full = PL_MIN(n_tok / BT, pc->max_chain), parent = NONE;
    uint64_t h = pc->seed;
    pc->clock++;
    for (uint32_t k = 0; k < full; k++) {
        const int32_t *t = tok + (size_t)k * BT;
        h = chain_hash(h, t);
        uint32_t i = find(pc, h, parent, t);
        if (i == NONE) {
            /* Room: within both limits, by evicting chains used before this insert. */
            while (pc->n_nodes >= pc->max_blocks || pc->n_nodes >= max_cached) {
                uint32_t v = lru_leaf(pc, pc->clock);
                if (v == NONE)
                    return;
                remove_node(pc, v);
            }
            uint32_t blk;
            if (pl_ctx_seq_blocks(pc->ctx, seq, k, 1, &blk) < 0 ||
                pl_ctx_kv_block_ref(pc->ctx, blk) < 0)
                return;
            i = add(pc, h, parent, t, blk);
            pc->dirty = true;
        }
        pc->nodes[i].stamp = pc->clock;
        parent = i;
    }
}

uint32_t pl_daemon_pcache_blocks(const struct pl_daemon_pcache *pc) {
    return pc ? pc->n_nodes : 0;
}

const struct pl_daemon_pcache_stats *pl_daemon_pcache_stats(const struct pl_daemon_pcache *pc) {
    return &pc->st;
}

/* ---- Files ---- */

/* On-disk header, little-endian, followed by n_blocks * 16 int32 token ids and then
 * n_blocks blocks of block_bytes (engine layout: per layer, K rows then V rows). */
struct file_hdr {
    char magic[8];
    uint32_t version;
    uint32_t block_tokens;
    uint8_t fp[16];
    uint32_t kv_type;
    uint32_t n_layer;
    uint32_t kv_dim;
    uint32_t n_blocks;
    uint64_t block_bytes;
    uint64_t chain_hash;   /* of the last block */
    uint64_t payload_hash; /* of the token ids and the block data */
};
_Static_assert(sizeof(struct file_hdr) == 72, "file header layout");

static int write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n) {
    uint8_t *b = p;
    while (n) {
        ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EIO;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static void fill_hdr(const struct pl_daemon_pcache *pc, struct file_hdr *h, uint32_t n_blocks) {
    memset(h, 0, sizeof(*h));
    memcpy(h->magic, FILE_MAGIC, 8);
    h->version = FILE_VERSION;
    h->block_tokens = BT;
    memcpy(h->fp, pc->fp, 16);
    h->kv_type = pl_ctx_kv_type(pc->ctx);
    h->n_layer = pl_ctx_kv_layers(pc->ctx);
    h->kv_dim = pl_ctx_kv_dim(pc->ctx);
    h->n_blocks = n_blocks;
    h->block_bytes = pc->block_bytes;
}

/* Write the chain root..leaf as one file. */
static int save_chain(struct pl_daemon_pcache *pc, uint32_t leaf) {
    uint32_t n = pc->nodes[leaf].depth + 1, *chain = pc->ids; /* depth < max_chain */
    for (uint32_t i = leaf, k = n; i != NONE; i = pc->nodes[i].parent)
        chain[--k] = i;
    char name[64], tmp[80];
    file_name(pc->nodes[leaf].hash, name, sizeof(name));
    (void)snprintf(tmp, sizeof(tmp), ".tmp-%s", name);
    int fd = openat(pc->dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    struct file_hdr h;
    fill_hdr(pc, &h, n);
    h.chain_hash = pc->nodes[leaf].hash;
    uint64_t ph = 0;
    for (uint32_t k = 0; k < n; k++)
        ph = hash_bytes(ph, pc->nodes[chain[k]].tok, sizeof(pc->nodes[0].tok));
    /* The payload hash covers the block data too: read each block twice rather than hold
     * the whole chain in memory. */
    for (uint32_t k = 0; k < n; k++) {
        (void)pl_ctx_kv_block_read(pc->ctx, pc->nodes[chain[k]].block, pc->blockbuf,
                                   pc->block_bytes);
        ph = hash_bytes(ph, pc->blockbuf, pc->block_bytes);
    }
    h.payload_hash = ph;
    int r = write_all(fd, &h, sizeof(h));
    for (uint32_t k = 0; k < n && r == 0; k++)
        r = write_all(fd, pc->nodes[chain[k]].tok, sizeof(pc->nodes[0].tok));
    for (uint32_t k = 0; k < n && r == 0; k++) {
        (void)pl_ctx_kv_block_read(pc->ctx, pc->nodes[chain[k]].block, pc->blockbuf,
                                   pc->block_bytes);
        r = write_all(fd, pc->blockbuf, pc->block_bytes);
    }
    if (r == 0 && fdatasync(fd) < 0)
        r = -errno;
    (void)close(fd);
    if (r == 0 && renameat(pc->dir_fd, tmp, pc->dir_fd, name) < 0)
        r = -errno;
    if (r < 0) {
        (void)unlinkat(pc->dir_fd, tmp, 0);
        return r;
    }
    pc->n_files++;
    pc->st.saved += n;
    pc->nodes[leaf].has_file = true;
    /* Shorter chains saved before are covered by this file now. */
    for (uint32_t k = 0; k < n; k++) {
        struct node *c = &pc->nodes[chain[k]];
        c->saved = true;
        if (k + 1 < n && c->has_file) {
            file_name(c->hash, name, sizeof(name));
            if (unlinkat(pc->dir_fd, name, 0) == 0 && pc->n_files > 0)
                pc->n_files--;
            c->has_file = false;
        }
    }
    return 0;
}

void pl_daemon_pcache_save(struct pl_daemon_pcache *pc) {
    if (!pc || pc->dir_fd < 0 || !pc->dirty)
        return;
    pc->dirty = false;
    for (uint32_t i = 0; i < pc->max_blocks; i++) {
        const struct node *n = &pc->nodes[i];
        if (!n->used || n->saved || n->n_children)
            continue;
        if (pc->n_files >= MAX_FILES)
            return;
        int r = save_chain(pc, i);
        if (r < 0) {
            pl_log_warn("prefix cache: cannot save a chain of %u blocks: %s; persistence off",
                        n->depth + 1, pl_strerror(r));
            pl_close_fd(&pc->dir_fd);
            return;
        }
    }
}

/* Read and validate one file; insert its chain. Returns blocks added, or < 0 when the file
 * does not validate. */
static int load_file(struct pl_daemon_pcache *pc, const char *name) {
    struct file_hdr h, want;
    struct stat stb;
    int32_t *tok = NULL;
    uint8_t *data = NULL;
    int added = 0, r = -EINVAL;
    int fd = openat(pc->dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &stb) < 0 || !S_ISREG(stb.st_mode) || read_all(fd, &h, sizeof(h)) < 0)
        goto out;
    fill_hdr(pc, &want, h.n_blocks);
    /* Untrusted file: every field must equal what this daemon would write. */
    if (memcmp(h.magic, want.magic, 8) || h.version != want.version ||
        h.block_tokens != want.block_tokens || memcmp(h.fp, want.fp, 16) ||
        h.kv_type != want.kv_type || h.n_layer != want.n_layer || h.kv_dim != want.kv_dim ||
        h.block_bytes != want.block_bytes || h.n_blocks == 0 || h.n_blocks > pc->max_chain)
        goto out;
    size_t n_tok = (size_t)h.n_blocks * BT, data_len;
    if (pl_mul_overflow((size_t)h.n_blocks, pc->block_bytes, &data_len) ||
        (uint64_t)stb.st_size != sizeof(h) + n_tok * sizeof(int32_t) + data_len)
        goto out;
    tok = malloc(n_tok * sizeof(int32_t));
    data = malloc(data_len);
    if (!tok || !data) {
        r = -ENOMEM;
        goto out;
    }
    if (read_all(fd, tok, n_tok * sizeof(int32_t)) < 0 || read_all(fd, data, data_len) < 0)
        goto out;
    uint64_t ph = 0, ch = pc->seed;
    for (uint32_t k = 0; k < h.n_blocks; k++)
        ph = hash_bytes(ph, tok + (size_t)k * BT, BT * sizeof(int32_t));
    for (uint32_t k = 0; k < h.n_blocks; k++)
        ph = hash_bytes(ph, data + (size_t)k * pc->block_bytes, pc->block_bytes);
    for (size_t i = 0; i < n_tok; i++)
        if (tok[i] < 0 || (uint32_t)tok[i] >= pc->n_vocab)
            goto out;
    for (uint32_t k = 0; k < h.n_blocks; k++)
        ch = chain_hash(ch, tok + (size_t)k * BT);
    char expect[64];
    file_name(ch, expect, sizeof(expect));
    if (ph != h.payload_hash || ch != h.chain_hash || strcmp(expect, name) != 0)
        goto out;
    /* Valid: insert block by block (blocks already cached are kept as they are). */
    uint32_t parent = NONE;
    ch = pc->seed;
    pc->clock++;
    for (uint32_t k = 0; k < h.n_blocks; k++) {
        const int32_t *t = tok + (size_t)k * BT;
        ch = chain_hash(ch, t);
        uint32_t i = find(pc, ch, parent, t), blk;
        if (i == NONE) {
            if (pc->n_nodes >= pc->max_blocks || pl_ctx_kv_block_alloc(pc->ctx, &blk) < 0)
                break;
            (void)pl_ctx_kv_block_write(pc->ctx, blk, data + (size_t)k * pc->block_bytes,
                                        pc->block_bytes);
            i = add(pc, ch, parent, t, blk);
            pc->st.inserted--; /* counted as loaded */
            pc->st.loaded++;
            added++;
        }
        pc->nodes[i].saved = true;
        pc->nodes[i].stamp = pc->clock;
        parent = i;
    }
    if (parent != NONE)
        pc->nodes[parent].has_file = true;
    r = added;
out:
    free(tok);
    free(data);
    (void)close(fd);
    return r;
}

uint32_t pl_daemon_pcache_load(struct pl_daemon_pcache *pc) {
    uint32_t total = 0;
    if (!pc || pc->dir_fd < 0)
        return 0;
    int fd = dup(pc->dir_fd);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        if (fd >= 0)
            (void)close(fd);
        return 0;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len != 20 || strcmp(e->d_name + 16, ".pkv") != 0)
            continue;
        pc->n_files++;
        int r = load_file(pc, e->d_name);
        if (r < 0) {
            /* A mismatch (another model, another KV type, a damaged file) is a miss. */
            pc->st.files_rejected++;
            continue;
        }
        total += (uint32_t)r;
    }
    (void)closedir(dir);
    return total;
}

/* ---- Life cycle ---- */

int pl_daemon_pcache_new(struct pl_ctx *ctx, const struct pl_model *m, uint32_t max_blocks,
                         const char *dir, struct pl_daemon_pcache **ret, char *err,
                         size_t err_len) {
    if (!ctx || !m || !ret || max_blocks == 0)
        return -EINVAL;
    struct pl_daemon_pcache *pc = calloc(1, sizeof(*pc));
    if (!pc)
        return -ENOMEM;
    pc->ctx = ctx;
    pc->dir_fd = -1;
    pc->max_blocks = max_blocks;
    pc->n_vocab = pl_model_hparams(m)->n_vocab;
    pc->max_chain = max_blocks;
    pc->n_buckets = 16;
    while (pc->n_buckets < 2 * max_blocks && pc->n_buckets < (1u << 30))
        pc->n_buckets <<= 1;
    pc->block_bytes = pl_ctx_kv_block_bytes(ctx);
    pc->nodes = calloc(max_blocks, sizeof(*pc->nodes));
    pc->buckets = malloc(pc->n_buckets * sizeof(*pc->buckets));
    pc->ids = calloc(max_blocks, sizeof(*pc->ids));
    pc->blockbuf = malloc(pc->block_bytes);
    if (!pc->nodes || !pc->buckets || !pc->ids || !pc->blockbuf) {
        pl_daemon_pcache_free(pc);
        return -ENOMEM;
    }
    memset(pc->buckets, 0xff, pc->n_buckets * sizeof(*pc->buckets));
    for (uint32_t i = 0; i < max_blocks; i++)
        pc->nodes[i].next = i + 1 < max_blocks ? i + 1 : NONE;
    pc->free_head = 0;
    pl_daemon_pcache_fingerprint(m, pc->fp);
    uint64_t s;
    memcpy(&s, pc->fp, 8);
    pc->seed = mix64(s ^ 0x6b76707265666978ull);
    if (dir && dir[0]) {
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
            int r = -errno;
            (void)snprintf(err, err_len, "prefix cache directory %s: %s", dir, pl_strerror(r));
            pl_daemon_pcache_free(pc);
            return r;
        }
        pc->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (pc->dir_fd < 0) {
            int r = -errno;
            (void)snprintf(err, err_len, "prefix cache directory %s: %s", dir, pl_strerror(r));
            pl_daemon_pcache_free(pc);
            return r;
        }
        persist_dir_fd = pc->dir_fd;
    }
    *ret = pc;
    return 0;
}

void pl_daemon_pcache_free(struct pl_daemon_pcache *pc) {
    if (!pc)
        return;
    if (pc->nodes && pc->buckets) {
        pl_daemon_pcache_save(pc);
        for (uint32_t i = 0; i < pc->max_blocks; i++)
            if (pc->nodes[i].used)
                pl_ctx_kv_block_unref(pc->ctx, pc->nodes[i].block);
    }
    if (persist_dir_fd == pc->dir_fd)
        persist_dir_fd = -1;
    pl_close_fd(&pc->dir_fd);
    free(pc->nodes);
    free(pc->buckets);
    free(pc->ids);
    free(pc->blockbuf);
    free(pc);
}
