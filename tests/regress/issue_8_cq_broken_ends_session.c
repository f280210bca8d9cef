/* SPDX-License-Identifier: MIT */
/* Regression (issue 8, found by picolm-evil-client's cq-cons-garbage attack): a client that
 * wrote a bad consumer index into its completion ring and stayed connected kept its session:
 * the scheduler saw the broken ring, stalled the session's replies and requests (holding their
 * KV blocks) and waited for a hang-up that never came; nothing was counted. Now the scheduler
 * tells the event thread (PL_DAEMON_NOTICE_CQ_BROKEN), which ends the session as a protocol
 * error. Pass: the broker hangs up on that client within 5 s, protocol_errors grows by one,
 * another client is served, and no session or KV stays in use. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "daemon_harness.h"
#include "pl/picolm.pb-c.h"
#include "pl_test_client.h"
#include "records.h"

static char model[4096];
static struct pl_test_daemon daemon_;

static int teardown(void **state) {
    (void)state;
    pl_test_daemon_done(&daemon_);
    return 0;
}

static bool hung_up(int sock, int timeout_ms) {
    struct pollfd p = {.fd = sock, .events = POLLIN};
    while (poll(&p, 1, timeout_ms) > 0) {
        char x;
        ssize_t n = recv(sock, &x, 1, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN))
            return true;
    }
    return false;
}

static void test_broken_completion_ring_ends_the_session(void **state) {
    (void)state;
    struct pl_test_daemon *d = &daemon_;
    assert_int_equal(pl_test_daemon_start(d, model, NULL), 0);
    uint64_t e0 = 0, e1 = 0;
    assert_int_equal(pl_test_daemon_counter(d, "protocol_errors", &e0), 0);

    struct pl_test_client bad, good;
    assert_int_equal(pl_test_client_connect(d->dir, &bad), 0);
    assert_int_equal(pl_test_client_connect(d->dir, &good), 0);
    atomic_store(&bad.cq.ctrl->cons, 0x40000008u);
    /* Replies that fill the ring, so the broker has to look at the consumer index. */
    static uint8_t text[4000];
    memset(text, 'x', sizeof(text));
    Picolm__V1__Tokenize t = PICOLM__V1__TOKENIZE__INIT;
    t.text.data = text;
    t.text.len = sizeof(text);
    for (uint64_t id = 1; id <= 40; id++) {
        t.request_id = id;
        if (pl_test_client_send(&bad, PL_DAEMON_REC_TOKENIZE, &t.base) < 0)
            break;
    }
    assert_true(hung_up(bad.sock, 5000));
    assert_int_equal(pl_test_daemon_counter(d, "protocol_errors", &e1), 0);
    assert_int_equal(e1 - e0, 1);

    static struct pl_test_result r;
    assert_int_equal(pl_test_client_generate(&good, 5, NULL, 0, "Once", 8, true, true), 0);
    assert_int_equal(pl_test_client_collect(&good, 5, &r, 5000, NULL, NULL), 0);
    assert_int_equal(r.n_ids, 8);
    pl_test_client_close(&bad);
    pl_test_client_close(&good);
    assert_int_equal(pl_test_daemon_wait_idle(d, 2000), 0);
    assert_int_equal(pl_test_daemon_stop(d), 0);
}

int main(void) {
    if (pl_test_model_path("stories260K.gguf", model, sizeof(model)) < 0)
        return 77;
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_broken_completion_ring_ends_the_session, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
