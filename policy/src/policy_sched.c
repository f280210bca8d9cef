/* SPDX-License-Identifier: MIT */
/* Weighted fair share (pl_policy_sched_*): stride scheduling on virtual time, two strict
 * classes. The daemon's inference loop calls pick() once per step to fill its batch and
 * charge() for what each picked session consumed. Virtual times wrap, so every comparison
 * is on the signed difference (valid while entities stay within 2^63 of each other, i.e.
 * always, since waking entities are pulled up to the class clock). */
#include "pl/policy_sched.h"

#include "pl/pl_util.h"

static bool vt_before(uint64_t a, uint64_t b) {
    return (int64_t)(a - b) < 0;
}

void pl_policy_sched_init(struct pl_policy_sched *s) {
    *s = (struct pl_policy_sched){{0}};
}

static enum pl_policy_class clamp_class(enum pl_policy_class c) {
    return (unsigned)c < _PL_POLICY_CLASS_MAX ? c : PL_POLICY_CLASS_BATCH;
}

static void set_weight(struct pl_policy_sched_entity *e, uint32_t weight) {
    if (weight < 1)
        weight = 1;
    if (weight > PL_POLICY_MAX_WEIGHT)
        weight = PL_POLICY_MAX_WEIGHT;
    e->weight = weight;
    e->stride = PL_POLICY_SCHED_STRIDE1 / weight;
}

void pl_policy_sched_entity_init(const struct pl_policy_sched *s, struct pl_policy_sched_entity *e,
                                 uint32_t weight, enum pl_policy_class cls) {
    *e = (struct pl_policy_sched_entity){0};
    e->cls = clamp_class(cls);
    e->vtime = s->vclock[e->cls];
    set_weight(e, weight);
}

void pl_policy_sched_entity_set(const struct pl_policy_sched *s, struct pl_policy_sched_entity *e,
                                uint32_t weight, enum pl_policy_class cls) {
    cls = clamp_class(cls);
    if (cls != e->cls) {
        e->cls = cls;
        e->vtime = s->vclock[cls];
    }
    set_weight(e, weight);
}

void pl_policy_sched_wake(const struct pl_policy_sched *s, struct pl_policy_sched_entity *e) {
    if (e->runnable)
        return;
    e->runnable = true;
    /* Idle time banks no credit: resume no earlier than the class's clock. */
    if (vt_before(e->vtime, s->vclock[e->cls]))
        e->vtime = s->vclock[e->cls];
}

void pl_policy_sched_sleep(struct pl_policy_sched_entity *e) {
    e->runnable = false;
}

/* Is entity a (index ia) ahead of b (index ib) in pick order? */
static bool ahead(const struct pl_policy_sched_entity *a, size_t ia,
                  const struct pl_policy_sched_entity *b, size_t ib) {
    if (a->cls != b->cls)
        return a->cls < b->cls;
    if (a->vtime != b->vtime)
        return vt_before(a->vtime, b->vtime);
    return ia < ib;
}

size_t pl_policy_sched_pick(struct pl_policy_sched *s, struct pl_policy_sched_entity *const *ents,
                            size_t n, size_t max, size_t *ret_idx) {
    size_t n_picked = 0;
    const struct pl_policy_sched_entity *prev = NULL;
    size_t prev_i = 0;
    /* Selection by successive minima: each pass takes the best entity strictly after the
     * previous pick in (class, vtime, index) order. O(n * max), no scratch memory. */
    while (n_picked < max) {
        const struct pl_policy_sched_entity *best = NULL;
        size_t best_i = 0;
        for (size_t i = 0; i < n; i++) {
            const struct pl_policy_sched_entity *e = ents[i];
            if (!e || !e->runnable)
                continue;
            if (prev && !ahead(prev, prev_i, e, i))
                continue;
            if (!best || ahead(e, i, best, best_i)) {
                best = e;
                best_i = i;
            }
        }
        if (!best)
            break;
        /* The first pick of a class is its smallest runnable vtime: the class clock. */
        if (!prev || prev->cls != best->cls) {
            if (vt_before(s->vclock[best->cls], best->vtime))
                s->vclock[best->cls] = best->vtime;
        }
        ret_idx[n_picked++] = best_i;
        prev = best;
        prev_i = best_i;
    }
    return n_picked;
}

void pl_policy_sched_charge(struct pl_policy_sched_entity *e, uint64_t n_tokens) {
    /* Wrapping add is intended (virtual time is compared by difference). */
    e->vtime += n_tokens * e->stride;
}
