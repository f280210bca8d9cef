/* SPDX-License-Identifier: MIT */
/* Unit tests for policy/src/policy_sched.c: simulated steps of an inference loop check that
 * weights 1:3 give token rates 1:3 within 5%, that three weights share in proportion, that
 * interactive work always goes first, that idling banks no credit, that batches of several
 * slots are ordered, and that virtual time survives wrapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "pl/policy_sched.h"

/* Run steps of one slot each; count tokens per entity (charge cost tokens per pick). */
static void run(struct pl_policy_sched *s, struct pl_policy_sched_entity **e, size_t n,
                size_t slots, unsigned steps, uint64_t cost, uint64_t *got) {
    size_t idx[16];
    for (unsigned t = 0; t < steps; t++) {
        size_t k = pl_policy_sched_pick(s, e, n, slots, idx);
        for (size_t i = 0; i < k; i++) {
            pl_policy_sched_charge(e[idx[i]], cost);
            got[idx[i]] += cost;
        }
    }
}

static void assert_ratio(uint64_t a, uint64_t b, double want, double tol) {
    double r = (double)a / (double)b;
    if (r < want * (1 - tol) || r > want * (1 + tol))
        fail_msg("ratio %llu/%llu = %f, want %f +- %.0f%%", (unsigned long long)a,
                 (unsigned long long)b, r, want, tol * 100);
}

static void test_sched_weights_1_to_3(void **state) {
    (void)state;
    struct pl_policy_sched s;
    pl_policy_sched_init(&s);
    struct pl_policy_sched_entity a, b;
    pl_policy_sched_entity_init(&s, &a, 1, PL_POLICY_CLASS_INTERACTIVE);
    pl_policy_sched_entity_init(&s, &b, 3, PL_POLICY_CLASS_INTERACTIVE);
    pl_policy_sched_wake(&s, &a);
    pl_policy_sched_wake(&s, &b);
    struct pl_policy_sched_entity *e[] = {&a, &b};
    uint64_t got[2] = {0};
    run(&s, e, 2, 1, 4000, 1, got);
    assert_int_equal(got[0] + got[1], 4000);
    assert_ratio(got[1], got[0], 3.0, 0.05);
    /* Over any short window too: 40 steps give 10:30 (stride is exact for 1 and 3). */
    uint64_t w[2] = {0};
    run(&s, e, 2, 1, 40, 1, w);
    assert_true(w[0] >= 9 && w[0] <= 11);
    /* Chunked charges (prefill of 16 tokens per pick) keep the ratio. */
    uint64_t c[2] = {0};
    run(&s, e, 2, 1, 4000, 16, c);
    assert_ratio(c[1], c[0], 3.0, 0.05);
}

static void test_sched_three_weights_and_batches(void **state) {
    (void)state;
    struct pl_policy_sched s;
    pl_policy_sched_init(&s);
    struct pl_policy_sched_entity x[4];
    uint32_t weights[4] = {100, 200, 500, 1000};
    struct pl_policy_sched_entity *e[5];
    for (int i = 0; i < 4; i++) {
        pl_policy_sched_entity_init(&s, &x[i], weights[i], PL_POLICY_CLASS_INTERACTIVE);
        pl_policy_sched_wake(&s, &x[i]);
        e[i] = &x[i];
    }
    e[4] = NULL; /* holes in the table are skipped */
    uint64_t got[5] = {0};
    /* 2 slots per step among 4 sessions: one session per slot, never twice in a step. */
    size_t idx[4];
    for (int t = 0; t < 9000; t++) {
        size_t k = pl_policy_sched_pick(&s, e, 5, 2, idx);
        assert_int_equal(k, 2);
        assert_true(idx[0] != idx[1]);
        assert_true(x[idx[0]].vtime <= x[idx[1]].vtime);
        for (size_t i = 0; i < k; i++) {
            pl_policy_sched_charge(e[idx[i]], 1);
            got[idx[i]]++;
        }
    }
    /* Weight 1000 would deserve 1000/1800 of 2 slots > 1: capped at one slot per step (9000
     * tokens, minus the first step where all start equal); the rest share the other slot
     * 100:200:500. */
    assert_true(got[3] >= 8998 && got[3] <= 9000);
    assert_ratio(got[1], got[0], 2.0, 0.05);
    assert_ratio(got[2], got[0], 5.0, 0.05);
    assert_int_equal(got[4], 0);
    /* More slots than runnable entities: each once. */
    assert_int_equal(pl_policy_sched_pick(&s, e, 5, 4, idx), 4);
    pl_policy_sched_sleep(&x[0]);
    pl_policy_sched_sleep(&x[1]);
    pl_policy_sched_sleep(&x[2]);
    pl_policy_sched_sleep(&x[3]);
    assert_int_equal(pl_policy_sched_pick(&s, e, 5, 4, idx), 0);
}

static void test_sched_interactive_before_batch(void **state) {
    (void)state;
    struct pl_policy_sched s;
    pl_policy_sched_init(&s);
    struct pl_policy_sched_entity bat, inter;
    pl_policy_sched_entity_init(&s, &bat, 1000, PL_POLICY_CLASS_BATCH);
    pl_policy_sched_entity_init(&s, &inter, 1, PL_POLICY_CLASS_INTERACTIVE);
    pl_policy_sched_wake(&s, &bat);
    pl_policy_sched_wake(&s, &inter);
    struct pl_policy_sched_entity *e[] = {&bat, &inter};
    uint64_t got[2] = {0};
    /* One slot: the interactive session gets every token while it has work. */
    run(&s, e, 2, 1, 1000, 1, got);
    assert_int_equal(got[1], 1000);
    assert_int_equal(got[0], 0);
    /* Two slots: batch gets the one left over, in second position. */
    size_t idx[2];
    assert_int_equal(pl_policy_sched_pick(&s, e, 2, 2, idx), 2);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 0);
    /* Interactive idle: batch runs alone. */
    pl_policy_sched_sleep(&inter);
    assert_int_equal(pl_policy_sched_pick(&s, e, 2, 2, idx), 1);
    assert_int_equal(idx[0], 0);
    /* Class change on reload. */
    pl_policy_sched_entity_set(&s, &bat, 10, PL_POLICY_CLASS_INTERACTIVE);
    pl_policy_sched_wake(&s, &inter);
    assert_int_equal(bat.weight, 10);
    assert_int_equal(pl_policy_sched_pick(&s, e, 2, 2, idx), 2);
    assert_int_equal(bat.cls, PL_POLICY_CLASS_INTERACTIVE);
}

static void test_sched_idle_banks_no_credit(void **state) {
    (void)state;
    struct pl_policy_sched s;
    pl_policy_sched_init(&s);
    struct pl_policy_sched_entity a, b;
    pl_policy_sched_entity_init(&s, &a, 100, PL_POLICY_CLASS_INTERACTIVE);
    pl_policy_sched_entity_init(&s, &b, 100, PL_POLICY_CLASS_INTERACTIVE);
    pl_policy_sched_wake(&s, &a);
    struct pl_policy_sched_entity *e[] = {&a, &b};
    uint64_t got[2] = {0};
    run(&s, e, 2, 1, 1000, 1, got); /* b idle: a alone */
    assert_int_equal(got[0], 1000);
    pl_policy_sched_wake(&s, &b);
    /* Now they share equally from here on: b does not get 1000 tokens in a row. */
    uint64_t after[2] = {0};
    run(&s, e, 2, 1, 200, 1, after);
    assert_true(after[0] >= 98 && after[0] <= 102);
    /* Weight clamping: 0 acts as 1, huge as the maximum. */
    struct pl_policy_sched_entity c;
    pl_policy_sched_entity_init(&s, &c, 0, PL_POLICY_CLASS_BATCH);
    assert_int_equal(c.weight, 1);
    pl_policy_sched_entity_set(&s, &c, 1000000, PL_POLICY_CLASS_BATCH);
    assert_int_equal(c.weight, PL_POLICY_MAX_WEIGHT);
    assert_int_equal(c.stride, PL_POLICY_SCHED_STRIDE1 / PL_POLICY_MAX_WEIGHT);
}

static void test_sched_vtime_wraps(void **state) {
    (void)state;
    struct pl_policy_sched s;
    pl_policy_sched_init(&s);
    s.vclock[PL_POLICY_CLASS_INTERACTIVE] = UINT64_MAX - 100 * PL_POLICY_SCHED_STRIDE1;
    struct pl_policy_sched_entity a, b;
    pl_policy_sched_entity_init(&s, &a, 1, PL_POLICY_CLASS_INTERACTIVE);
    pl_policy_sched_entity_init(&s, &b, 3, PL_POLICY_CLASS_INTERACTIVE);
    pl_policy_sched_wake(&s, &a);
    pl_policy_sched_wake(&s, &b);
    struct pl_policy_sched_entity *e[] = {&a, &b};
    uint64_t got[2] = {0};
    run(&s, e, 2, 1, 4000, 1, got); /* crosses zero after ~100 tokens of a */
    assert_true(a.vtime < UINT64_MAX / 2);
    assert_ratio(got[1], got[0], 3.0, 0.05);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sched_weights_1_to_3),
        cmocka_unit_test(test_sched_three_weights_and_batches),
        cmocka_unit_test(test_sched_interactive_before_batch),
        cmocka_unit_test(test_sched_idle_banks_no_credit),
        cmocka_unit_test(test_sched_vtime_wraps),
    };
    return cmocka_run_group_tests_name("policy_sched", tests, NULL, NULL);
}
