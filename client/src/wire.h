/* SPDX-License-Identifier: MIT */
/* Ring record types of the client protocol (proto/picolm.proto, top comment). libpicolm's
 * private copy of the table; the numbers are part of the wire format and never change.
 * TODO(#D1): move to a shared proto/ header once the broker has one, so both sides use the
 * same definitions. */
#ifndef PL_CLIENT_WIRE_H
#define PL_CLIENT_WIRE_H

enum pl_client_rec {
    PL_CLIENT_REC_GENERATE = 1,
    PL_CLIENT_REC_CANCEL = 2,
    PL_CLIENT_REC_TOKENIZE = 3,
    PL_CLIENT_REC_DETOKENIZE = 4,
    PL_CLIENT_REC_MODEL_INFO_REQUEST = 5,
    PL_CLIENT_REC_TOKEN_CHUNK = 101,
    PL_CLIENT_REC_DONE = 102,
    PL_CLIENT_REC_ERROR = 103,
    PL_CLIENT_REC_TOKENIZE_RESULT = 104,
    PL_CLIENT_REC_DETOKENIZE_RESULT = 105,
    PL_CLIENT_REC_MODEL_INFO = 106,
};

#endif
