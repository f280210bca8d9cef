/* SPDX-License-Identifier: MIT */
/* The pure part of client record dispatch (dispatch.c), exposed so that the broker's exact
 * decode and validation path can be fuzzed without a running daemon (tests/fuzz/fuzz_proto.c):
 * the per-type rule lookup, size limit and bounded unpack of one record, and the checks of a
 * Generate that need no session or model state. pl_daemon_dispatch_session() uses both. */
#ifndef PL_DAEMON_DISPATCH_H
#define PL_DAEMON_DISPATCH_H

#include <protobuf-c/protobuf-c.h>
#include <stdint.h>

#include "arena.h"
#include "pl/picolm.pb-c.h"

struct pl_sampler_params;

/* Decode one client record of type with len payload bytes at buf (private memory, borrowed)
 * for a session in state (enum pl_daemon_session_state): the type must be a known client
 * request allowed in that state, len within the type's limit, and the payload must unpack
 * with arena (reset first; the message lives in the arena until its next reset).
 * Returns 0 with *ret_msg set, or -PL_ERR_PROTOCOL with *ret_why set to a static reason (the
 * caller ends the session). */
int pl_daemon_dispatch_decode(uint32_t type, uint32_t state, const uint8_t *buf, uint32_t len,
                              struct pl_daemon_arena *arena, ProtobufCMessage **ret_msg,
                              const char **ret_why);

/* Check the fields of a decoded Generate that need no session or model state (unsupported
 * features, stop strings, sampling parameters) and resolve the sampling parameters into
 * *ret_sp. Returns 0, or a picolm.v1.ErrorCode (> 0) with *ret_msg set to a static message
 * for the Error reply. */
int pl_daemon_dispatch_check_generate(const Picolm__V1__Generate *g,
                                      struct pl_sampler_params *ret_sp, const char **ret_msg);

#endif
