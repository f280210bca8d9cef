/* SPDX-License-Identifier: MIT */
/* Weighted fair share for the inference scheduler (pl_policy_sched_*): stride scheduling on
 * virtual time. Each session (entity) carries a virtual time that advances by
 * tokens * PL_POLICY_SCHED_STRIDE1 / weight when it is charged; the scheduler gives the next
 * slots to runnable entities with the smallest virtual time. Over any busy period two
 * sessions of weights 1 and 3 therefore get tokens in the ratio 1:3. Classes are strict:
 * every runnable interactive entity is picked before any batch one, so batch work only uses
 * slots interactive work leaves free. An entity that wakes up after idling starts at its
 * class's current virtual time: idling banks no credit. The caller owns the entities (e.g.
 * inside its session table) and calls these from one thread. No allocation, no clock. */
#ifndef PL_POLICY_POLICY_SCHED_H
#define PL_POLICY_POLICY_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pl/policy_file.h"

/* Virtual time one token costs an entity of weight 1. */
#define PL_POLICY_SCHED_STRIDE1 (UINT64_C(1) << 30)

struct pl_policy_sched_entity {
    uint64_t vtime;  /* wraps; compared by signed difference */
    uint64_t stride; /* STRIDE1 / weight */
    uint32_t weight;
    enum pl_policy_class cls;
    bool runnable;
};

struct pl_policy_sched {
    uint64_t vclock[_PL_POLICY_CLASS_MAX]; /* smallest vtime handed a slot, per class */
};

void pl_policy_sched_init(struct pl_policy_sched *s);

/* Set up e (not runnable) with weight (clamped to 1..PL_POLICY_MAX_WEIGHT) and class cls. */
void pl_policy_sched_entity_init(const struct pl_policy_sched *s, struct pl_policy_sched_entity *e,
                                 uint32_t weight, enum pl_policy_class cls);
/* Change weight / class (policy reload). Moving to another class restarts at its clock. */
void pl_policy_sched_entity_set(const struct pl_policy_sched *s, struct pl_policy_sched_entity *e,
                                uint32_t weight, enum pl_policy_class cls);

/* e has work: make it runnable, not earlier than its class's clock. No-op if runnable. */
void pl_policy_sched_wake(const struct pl_policy_sched *s, struct pl_policy_sched_entity *e);
/* e has no work left. */
void pl_policy_sched_sleep(struct pl_policy_sched_entity *e);

/* Choose up to max runnable entities among ents[0..n) (NULL entries are skipped) for the next
 * step: interactive before batch, then smallest vtime, then lowest index. Writes their
 * indices to ret_idx in that order and returns how many (0 when none is runnable). Advances
 * the class clocks. */
size_t pl_policy_sched_pick(struct pl_policy_sched *s, struct pl_policy_sched_entity *const *ents,
                            size_t n, size_t max, size_t *ret_idx);

/* Charge e for n_tokens it was given (prompt tokens prefilled or tokens decoded). */
void pl_policy_sched_charge(struct pl_policy_sched_entity *e, uint64_t n_tokens);

#endif
