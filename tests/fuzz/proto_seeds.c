/* SPDX-License-Identifier: MIT */
/* Writes a seed corpus for fuzz_proto into the folder given as argv[1]. Each file is one
 * selector byte (record type in the low 3 bits, see fuzz_proto.c) followed by a payload:
 * real requests as libpicolm sends them (prompt, tokens, sampling, stop strings, cancel,
 * tokenize, detokenize, model info), requests with absurd values (max_tokens 2^31, negative
 * temperature, NaN top-p, infinite penalties, 2^31 token ids, unknown fields), and broken
 * encodings (truncated, overlong varints, lengths past the end, wrong wire types, groups). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pl/picolm.pb-c.h"
#include "records.h"

static const char *dir;
static int n_written;

static void write_seed(uint8_t sel, const void *p, size_t n) {
    char path[4096];
    (void)snprintf(path, sizeof(path), "%s/seed-%03d", dir, n_written++);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(&sel, 1, 1, f) != 1 || (n && fwrite(p, 1, n, f) != n) || fclose(f)) {
        perror(path);
        exit(1);
    }
}

static void write_msg(uint8_t sel, const ProtobufCMessage *m) {
    static uint8_t buf[1 << 16];
    size_t n = protobuf_c_message_get_packed_size(m);
    if (n > sizeof(buf))
        exit(1);
    (void)protobuf_c_message_pack(m, buf);
    write_seed(sel, buf, n);
    if (n > 2) /* and a truncated copy */
        write_seed(sel, buf, n / 2);
}

static void generates(void) {
    static int32_t ids[600];
    Picolm__V1__Generate g;
    Picolm__V1__SamplingParams sp;
    Picolm__V1__TokenList tl;
    ProtobufCBinaryData stops[9];

    picolm__v1__generate__init(&g);
    g.request_id = 1;
    g.input_case = PICOLM__V1__GENERATE__INPUT_PROMPT;
    g.prompt.data = (uint8_t *)"Once upon a time";
    g.prompt.len = 16;
    g.max_tokens = 32;
    g.stream = 1;
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);

    picolm__v1__sampling_params__init(&sp);
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.min_p = 0.05f;
    sp.repeat_penalty = 1.1f;
    sp.penalty_last_n = 64;
    sp.seed = 42;
    sp.has_seed = 1;
    g.sampling = &sp;
    for (int i = 0; i < 9; i++) {
        stops[i].data = (uint8_t *)"\n\nThe end";
        stops[i].len = 1 + (size_t)i;
    }
    g.stop = stops;
    g.n_stop = 3;
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);

    /* Absurd values the broker must refuse with an Error, not a crash. */
    g.max_tokens = 1u << 31;
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);
    sp.temperature = -1.0f;
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);
    sp.temperature = 0.7f;
    sp.top_p = nanf("");
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);
    sp.top_p = -0.5f;
    sp.repeat_penalty = INFINITY;
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);
    sp.repeat_penalty = -1.0f;
    sp.frequency_penalty = nanf("");
    sp.penalty_last_n = -5;
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);
    sp.penalty_last_n = 1 << 30;
    sp.top_k = -7;
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);
    g.n_stop = 9;
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);
    stops[0].len = 0;
    g.n_stop = 1;
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);
    g.logprobs = 5;
    g.format = "json";
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);

    /* Token input, in range and not. */
    picolm__v1__generate__init(&g);
    picolm__v1__token_list__init(&tl);
    for (int i = 0; i < 600; i++)
        ids[i] = (i % 3 == 0) ? 1 : i * 7;
    tl.ids = ids;
    tl.n_ids = 20;
    g.request_id = 77;
    g.input_case = PICOLM__V1__GENERATE__INPUT_TOKENS;
    g.tokens = &tl;
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);
    ids[3] = -1;
    ids[4] = INT32_MAX;
    tl.n_ids = 600;
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);
    g.request_id = 0;
    tl.n_ids = 0;
    write_msg(PL_DAEMON_REC_GENERATE, &g.base);
}

static void others(void) {
    static int32_t ids[4100];
    Picolm__V1__Cancel c = PICOLM__V1__CANCEL__INIT;
    c.request_id = 3;
    write_msg(PL_DAEMON_REC_CANCEL, &c.base);
    c.request_id = UINT64_MAX;
    write_msg(PL_DAEMON_REC_CANCEL, &c.base);

    Picolm__V1__Tokenize t = PICOLM__V1__TOKENIZE__INIT;
    t.request_id = 4;
    t.text.data = (uint8_t *)"Hello <s> world \xe2\x82\xac";
    t.text.len = strlen((const char *)t.text.data);
    t.add_special = 1;
    t.parse_special = 1;
    write_msg(PL_DAEMON_REC_TOKENIZE, &t.base);

    Picolm__V1__Detokenize dt = PICOLM__V1__DETOKENIZE__INIT;
    for (int i = 0; i < 4100; i++)
        ids[i] = i % 500;
    dt.request_id = 5;
    dt.ids = ids;
    dt.n_ids = 8;
    write_msg(PL_DAEMON_REC_DETOKENIZE, &dt.base);
    dt.n_ids = 4100; /* over the limit */
    write_msg(PL_DAEMON_REC_DETOKENIZE, &dt.base);

    Picolm__V1__ModelInfoRequest mi = PICOLM__V1__MODEL_INFO_REQUEST__INIT;
    mi.request_id = 6;
    write_msg(PL_DAEMON_REC_MODEL_INFO_REQUEST, &mi.base);
}

static void broken(void) {
    /* field 1 varint with 11 continuation bytes (overlong) */
    static const uint8_t overlong[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                       0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    write_seed(PL_DAEMON_REC_CANCEL, overlong, sizeof(overlong));
    /* prompt (field 2, bytes) claiming 2^28 bytes */
    static const uint8_t longlen[] = {0x08, 0x01, 0x12, 0x80, 0x80, 0x80, 0x80, 0x01, 'x'};
    write_seed(PL_DAEMON_REC_GENERATE, longlen, sizeof(longlen));
    /* sampling (field 6, message) whose length runs past the end */
    static const uint8_t sub[] = {0x08, 0x01, 0x32, 0x10, 0x0d, 0x00, 0x00};
    write_seed(PL_DAEMON_REC_GENERATE, sub, sizeof(sub));
    /* wrong wire type for request_id (fixed64 instead of varint) */
    static const uint8_t wt[] = {0x09, 1, 2, 3, 4, 5, 6, 7, 8};
    write_seed(PL_DAEMON_REC_GENERATE, wt, sizeof(wt));
    /* start-group / end-group wire types, field number 0, field 2^29-1 */
    static const uint8_t grp[] = {0x0b, 0x0c, 0x00, 0x01, 0xf8, 0xff, 0xff, 0xff, 0x0f, 0x00};
    write_seed(PL_DAEMON_REC_GENERATE, grp, sizeof(grp));
    /* unknown fields of every wire type around a valid Cancel */
    static const uint8_t unk[] = {0x08, 0x07, 0xf8, 0x01, 0x05, 0xfa, 0x01, 0x02, 'a',
                                  'b',  0xfd, 0x01, 1,    2,    3,    4,    0x81, 0x02,
                                  1,    2,    3,    4,    5,    6,    7,    8};
    write_seed(PL_DAEMON_REC_CANCEL, unk, sizeof(unk));
    /* packed ids with a length that is not a multiple of the varints inside */
    static const uint8_t packed[] = {0x08, 0x05, 0x12, 0x03, 0x81, 0x81, 0x81};
    write_seed(PL_DAEMON_REC_DETOKENIZE, packed, sizeof(packed));
    /* the same oneof set twice: prompt, then tokens */
    static const uint8_t oneof[] = {0x08, 0x01, 0x12, 0x02, 'h', 'i', 0x1a, 0x03, 0x0a, 0x01, 0x05};
    write_seed(PL_DAEMON_REC_GENERATE, oneof, sizeof(oneof));
    /* types that are not client requests, and a handshake-state session */
    static const uint8_t one[] = {0x08, 0x01};
    write_seed(0, one, sizeof(one));
    write_seed(6, one, sizeof(one));
    write_seed(16 | 2, one, sizeof(one));
    write_seed(8 | PL_DAEMON_REC_CANCEL, one, sizeof(one));
    write_seed(PL_DAEMON_REC_MODEL_INFO_REQUEST, NULL, 0);
    /* 10 MB is cut by the ring; the largest record the broker sees is 32 KiB of prompt */
    static uint8_t big[32768];
    memset(big, 'a', sizeof(big));
    big[0] = 0x08;
    big[1] = 0x01;
    big[2] = 0x12;
    big[3] = 0xf9;
    big[4] = 0xff;
    big[5] = 0x01;
    write_seed(PL_DAEMON_REC_GENERATE, big, sizeof(big) - 1);
    /* many tiny stop strings: arena pressure */
    for (size_t i = 0; i + 3 <= 30000; i += 3) {
        big[i] = 0x3a;
        big[i + 1] = 0x01;
        big[i + 2] = 'x';
    }
    write_seed(PL_DAEMON_REC_GENERATE, big, 30000);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    generates();
    others();
    broken();
    return 0;
}
