/* SPDX-License-Identifier: MIT */
/* A scripted stand-in for picolmd, for the libpicolm tests: a forked child that listens on a
 * temporary SOCK_SEQPACKET socket, performs the real broker side of the ipc handshake (region,
 * rings, doorbells) and then runs a scenario function that reads and writes ring records.
 * It lets the tests drive every response libpicolm must handle, including broken ones. */
#ifndef PL_TESTS_FAKE_BROKER_H
#define PL_TESTS_FAKE_BROKER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "pl/ipc_region.h"
#include "pl/ipc_ring.h"

struct ProtobufCMessage;

/* The child's side of one session. */
struct fb {
    int sock;
    struct pl_ipc_region reg;
    struct pl_ipc_ring sq, cq;
    int broker_fd;        /* the broker's doorbell: the child sleeps on it */
    int client_fd;        /* the client's doorbell: the child rings it */
    uint8_t buf[1 << 16]; /* last record read */
};

typedef void (*fb_scenario_fn)(struct fb *b, void *arg);

struct fb_handle {
    pid_t pid;
    char dir[64];
    char path[108];
};

/* Start a fake broker running scenario(b, arg) after the handshake (reject_status != 0: send
 * that pl_ipc_welcome_status instead and stop). Returns 0 or -errno. The child exits after the
 * scenario returns and the client has hung up (or 10 s passed). */
int fb_start(struct fb_handle *h, fb_scenario_fn scenario, void *arg, uint32_t reject_status);

/* Kill (if running) and reap the child, remove the socket. Returns the child's wait status. */
int fb_stop(struct fb_handle *h);

/* Child: wait up to timeout_ms for the next submission record. Returns 1 with the type and
 * length set (payload in b->buf), 0 on timeout, -1 when the client hung up or the ring broke. */
int fb_recv(struct fb *b, uint32_t *type, uint32_t *len, int timeout_ms);

/* Child: send msg (or raw bytes) as one completion record and ring the client if needed. */
void fb_send(struct fb *b, uint32_t type, const struct ProtobufCMessage *msg);
void fb_send_raw(struct fb *b, uint32_t type, const void *payload, uint32_t len);

/* Child: a well-behaved broker over a toy model: every prompt byte is a token; generation
 * echoes the prompt one token per chunk, interleaving concurrent requests round-robin
 * ("inf..." prompts stream until cancelled); tokenize maps bytes to ids (+1 BOS with
 * add_special); detokenize maps ids back to bytes; model info is fixed. */
void fb_scenario_echo(struct fb *b, void *arg);

#endif
