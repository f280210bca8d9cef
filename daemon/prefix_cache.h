/* SPDX-License-Identifier: MIT */
/* Shared prefix KV cache (pl_daemon_pcache_*): full KV blocks of prompts that were already
 * prefilled, kept by reference and handed to later requests whose prompts start with the
 * same tokens, so they skip that part of the prefill (across sessions and clients). Blocks
 * form chains keyed by a hash of (model fingerprint, every token id up to the block's end);
 * a hit is confirmed by comparing the token ids, never by the hash alone. The least recently
 * used chain ends are evicted when the scheduler needs blocks. Optionally chains are saved
 * to a directory (one file per chain) and loaded at start-up, only when the model
 * fingerprint, the cache geometry, the token ids and a checksum all match; anything else is
 * a miss. Owned and used by the inference thread only (scheduler.c). */
#ifndef PL_DAEMON_PREFIX_CACHE_H
#define PL_DAEMON_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct pl_ctx;
struct pl_model;
struct pl_daemon_pcache;

struct pl_daemon_pcache_stats {
    uint64_t lookups, hits;     /* requests looked up, and those that found >= 1 block */
    uint64_t hit_tokens;        /* prompt tokens whose prefill was skipped */
    uint64_t inserted, evicted; /* blocks */
    uint64_t loaded, saved;     /* blocks read from / written to the directory */
    uint64_t files_rejected;    /* files that did not validate (ignored) */
};

/* The model's fingerprint: 16 bytes from its hyper-parameters, every tensor's name, type,
 * shape, offset and size, and samples of every tensor's data. */
void pl_daemon_pcache_fingerprint(const struct pl_model *m, uint8_t ret[16]);

/* A cache of at most max_blocks blocks of ctx's pool (borrowed; must outlive the cache).
 * dir: a directory for persistence (NULL or "": none), created if missing. Returns 0,
 * -EINVAL, -ENOMEM, -errno (the directory cannot be used; message in err). */
int pl_daemon_pcache_new(struct pl_ctx *ctx, const struct pl_model *m, uint32_t max_blocks,
                         const char *dir, struct pl_daemon_pcache **ret, char *err, size_t err_len);
/* Save what is not saved yet, drop every reference, free. NULL is fine. */
void pl_daemon_pcache_free(struct pl_daemon_pcache *pc);

/* The live cache's persistence directory fd (-1: none), for the broker's lockdown: it is
 * handed to the service user (fchown) and confined by pl_daemon_pcache_seccomp(), which adds
 * rules allowing file creation, renames and unlinks relative to that fd only. */
int pl_daemon_pcache_persist_fd(void);
int pl_daemon_pcache_seccomp(void *scmp_filter);

/* Load every valid chain file of the directory while the cache has room. Files that do not
 * validate are skipped (counted in files_rejected). Returns the blocks loaded. */
uint32_t pl_daemon_pcache_load(struct pl_daemon_pcache *pc);
/* Write a file for every chain not saved yet (the scheduler calls it when idle). */
void pl_daemon_pcache_save(struct pl_daemon_pcache *pc);

/* Blocks the cache holds a reference to. */
uint32_t pl_daemon_pcache_blocks(const struct pl_daemon_pcache *pc);
/* The longest cached chain that prefixes tok[0, n_tok) and leaves at least one token to
 * prefill: *ret_ids points to its block ids (valid until the next call). Returns the number
 * of blocks (0: miss). */
uint32_t pl_daemon_pcache_lookup(struct pl_daemon_pcache *pc, const int32_t *tok, uint32_t n_tok,
                                 const uint32_t **ret_ids);
/* Sequence seq holds the KV of tok[0, n_tok): keep its full blocks not cached yet, evicting
 * older chains, while the cache stays within max_blocks and max_cached. */
void pl_daemon_pcache_insert(struct pl_daemon_pcache *pc, int32_t seq, const int32_t *tok,
                             uint32_t n_tok, uint32_t max_cached);
/* Evict up to n blocks (least recently used chain ends first). Returns the count evicted. */
uint32_t pl_daemon_pcache_evict(struct pl_daemon_pcache *pc, uint32_t n);
const struct pl_daemon_pcache_stats *pl_daemon_pcache_stats(const struct pl_daemon_pcache *pc);

#endif
