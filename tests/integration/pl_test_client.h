/* SPDX-License-Identifier: MIT */
/* A minimal picolmd client for the integration tests (pl_test_client_*): connect and
 * handshake, send records, wait for records, run a Generate to its end, and admin status.
 * The real client library is libpicolm (client/); this one exists so the daemon's tests do
 * not depend on it. */
#ifndef PL_TESTS_PL_TEST_CLIENT_H
#define PL_TESTS_PL_TEST_CLIENT_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "pl/admin.pb-c.h"
#include "pl/ipc_region.h"
#include "pl/ipc_ring.h"

struct pl_test_client {
    int sock;
    int db_broker, db_client;
    uint64_t session_id;
    struct pl_ipc_region reg;
    struct pl_ipc_ring sq, cq;
};

struct pl_test_result {
    int32_t ids[4096];
    uint32_t n_ids;
    char text[16384];
    uint32_t n_text;
    uint32_t n_chunks;
    uint32_t finish;     /* FinishReason, 0 if an Error came */
    uint32_t error_code; /* ErrorCode, 0 if Done came */
    uint32_t generated;
};

int pl_test_client_connect(const char *dir, struct pl_test_client *c);
void pl_test_client_close(struct pl_test_client *c);
int pl_test_client_send(struct pl_test_client *c, uint32_t type, const ProtobufCMessage *m);
int pl_test_client_send_raw(struct pl_test_client *c, uint32_t type, const void *p, uint32_t n);
/* Wait up to timeout_ms for one record. Returns 1, 0 on timeout, < 0 on error. */
int pl_test_client_recv(struct pl_test_client *c, uint32_t *type, void *buf, uint32_t cap,
                        uint32_t *len, int timeout_ms);
/* Submit a Generate of tokens (or text when ids is NULL). */
int pl_test_client_generate(struct pl_test_client *c, uint64_t id, const int32_t *ids, uint32_t n,
                            const char *text, uint32_t max_tokens, bool stream, bool ignore_eos);
/* Read records for request id until its Done/Error (or timeout). on_chunk, when set, runs
 * after each TokenChunk. Returns 0, -ETIMEDOUT or < 0. */
int pl_test_client_collect(struct pl_test_client *c, uint64_t id, struct pl_test_result *res,
                           int timeout_ms, void (*on_chunk)(void *), void *arg);

/* One admin status round trip; free with picolm__admin__v1__admin_response__free_unpacked. */
int pl_test_admin(const char *dir, const Picolm__Admin__V1__AdminRequest *req,
                  Picolm__Admin__V1__AdminResponse **ret);
int pl_test_admin_status(const char *dir, Picolm__Admin__V1__AdminResponse **ret);
/* A broker-wide counter or gauge of the admin Stats by name. Returns 0, -ENOENT (no such
 * name) or < 0. */
int pl_test_admin_counter(const char *dir, const char *name, uint64_t *ret);

/* What /proc/PID/smaps says of one mapping (kB). */
struct pl_test_smaps {
    unsigned long long size_kb, locked_kb, kernel_page_kb, anon_huge_kb, hugetlb_kb;
};
/* The mapping of process pid that starts at addr (hugetlb_kb: Private_Hugetlb). Returns 0,
 * -ENOENT when no mapping starts there, or -errno. */
int pl_test_smaps(pid_t pid, uint64_t addr, struct pl_test_smaps *ret);

#endif
