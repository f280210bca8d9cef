/* SPDX-License-Identifier: MIT */
/* Ring record types of the client protocol (proto/picolm.proto has the same table): the
 * `type` of each ring record names the protobuf message in its payload. Shared by the
 * daemon and the integration-test client. */
#ifndef PL_DAEMON_RECORDS_H
#define PL_DAEMON_RECORDS_H

enum pl_daemon_rec {
    PL_DAEMON_REC_GENERATE = 1,
    PL_DAEMON_REC_CANCEL = 2,
    PL_DAEMON_REC_TOKENIZE = 3,
    PL_DAEMON_REC_DETOKENIZE = 4,
    PL_DAEMON_REC_MODEL_INFO_REQUEST = 5,
    _PL_DAEMON_REC_CLIENT_MAX,
    PL_DAEMON_REC_TOKEN_CHUNK = 101,
    PL_DAEMON_REC_DONE = 102,
    PL_DAEMON_REC_ERROR = 103,
    PL_DAEMON_REC_TOKENIZE_RESULT = 104,
    PL_DAEMON_REC_DETOKENIZE_RESULT = 105,
    PL_DAEMON_REC_MODEL_INFO = 106,
};

#endif
