/* SPDX-License-Identifier: MIT */
/* Unit tests for the aarch64 kernel sets (engine/arch/arm/quant_{arm,neon,neon_dotprod}.c):
 * for every type and both sets ("neon": SMULL/SADALP, "neon-dotprod": SDOT) this CPU runs,
 * quant_check.c's checks (vec_dot against the scalar reference on generated blocks, vec_dotn
 * of 2..8 tokens bit-identical to vec_dot, from_f32 bit-identical to the reference). The
 * dispatch check follows PICOLM_FORCE_SCALAR (CTest runs the binary once with it set, see
 * CMakeLists.txt: no fork, which qemu-user cannot do reliably). Sets the CPU lacks are
 * skipped; with none at all the binary exits 77. Run on x86 hosts through qemu-aarch64
 * (tests/cross/run-aarch64.sh). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pl/engine_quant.h"
#include "pl/engine_types.h"
#include "quant_blocks.h"
#include "quant_arm.h"
#include "quant_check.h"

static const char *const isas[] = {"neon", "neon-dotprod"};
#define N_ISAS (sizeof(isas) / sizeof(isas[0]))

static int n_isas_checked;

static void test_vec_dot_matches_reference(void **state) {
    (void)state;
    for (size_t s = 0; s < N_ISAS; s++) {
        if (!pl_quant_arm_supported(isas[s])) {
            print_message("[  SKIP    ] %s: not supported by this CPU\n", isas[s]);
            continue;
        }
        n_isas_checked++;
        for (size_t t = 0; t < qc_n_types; t++)
            qc_check_dot(isas[s], pl_quant_kernels_isa(isas[s], qc_types[t].type), NULL,
                         &qc_types[t]);
    }
    /* every quantized type has a multi-token kernel on NEON */
    if (n_isas_checked > 0)
        assert_true(qc_n_dotn_checked > 0);
}

/* ---- from_f32 bit-identical to the reference ---- */

static void test_from_f32_bit_identical(void **state) {
    (void)state;
    for (size_t s = 0; s < N_ISAS; s++) {
        if (!pl_quant_arm_supported(isas[s]))
            continue;
        for (size_t t = 0; t < qc_n_act_types; t++)
            qc_check_from_f32(isas[s], pl_quant_kernels_isa(isas[s], qc_act_types[t]),
                              qc_act_types[t]);
    }
}

/* ---- Dispatch ---- */

/* The best set is installed (dot-product over baseline), or the references throughout when
 * PICOLM_FORCE_SCALAR is set (CTest's second run of this binary). */
static void test_dispatch_picks_best_set(void **state) {
    (void)state;
    const char *best = pl_quant_arm_supported("neon-dotprod") ? "neon-dotprod"
                       : pl_quant_arm_supported("neon")       ? "neon"
                                                              : "scalar";
    const char *env = getenv("PICOLM_FORCE_SCALAR");
    if (env && env[0] && strcmp(env, "0") != 0)
        best = "scalar";
    print_message("[  INFO    ] pl_quant_isa() = %s\n", pl_quant_isa());
    assert_string_equal(pl_quant_isa(), best);
    for (size_t t = 0; t < qc_n_types; t++) {
        const struct pl_quant_kernels *k = pl_quant_kernels(qc_types[t].type);
        const struct pl_quant_kernels *want = pl_quant_kernels_isa(best, qc_types[t].type);
        assert_non_null(k);
        assert_non_null(want);
        assert_ptr_equal(k->vec_dot, want->vec_dot);
        assert_ptr_equal(k->from_f32, want->from_f32);
        assert_ptr_equal(k->to_f32, want->to_f32);
        assert_int_equal(k->vec_dot_type, want->vec_dot_type);
        if (strcmp(best, "scalar") == 0)
            assert_ptr_equal(k->vec_dot, pl_quant_kernels_ref(qc_types[t].type)->vec_dot);
    }
}

/* Each set really replaces the reference dot products of the quantized types, and the
 * dot-product set differs from the baseline exactly in those. */
static void test_sets_install_kernels(void **state) {
    (void)state;
    for (size_t t = 0; t < qc_n_types; t++) {
        const struct pl_quant_kernels *r = pl_quant_kernels_ref(qc_types[t].type);
        const struct pl_quant_kernels *n = pl_quant_kernels_isa("neon", qc_types[t].type);
        const struct pl_quant_kernels *d = pl_quant_kernels_isa("neon-dotprod", qc_types[t].type);
        if (!n)
            continue;
        assert_true(n->vec_dot != r->vec_dot);
        assert_ptr_equal(n->to_f32, r->to_f32);
        if (!d)
            continue;
        if (qc_types[t].block > 1)
            assert_true(d->vec_dot != n->vec_dot);
        else
            assert_ptr_equal(d->vec_dot, n->vec_dot);
        assert_ptr_equal(d->from_f32, n->from_f32);
    }
}

static void test_isa_lookup_rejects_bad_input(void **state) {
    (void)state;
    assert_null(pl_quant_kernels_isa("avx2", PL_GGML_TYPE_Q4_0));
    assert_null(pl_quant_kernels_isa(NULL, PL_GGML_TYPE_Q4_0));
    assert_null(pl_quant_kernels_isa("neon", _PL_GGML_TYPE_MAX));
    assert_null(pl_quant_kernels_isa("neonx", PL_GGML_TYPE_Q4_0));
    assert_null(pl_quant_kernels_isa("neon-dot", PL_GGML_TYPE_Q4_0));
    assert_false(pl_quant_arm_supported("sve9"));
    assert_false(pl_quant_arm_supported(NULL));
    assert_true(pl_quant_arm_supported("scalar"));
    assert_ptr_equal(pl_quant_kernels_isa("scalar", PL_GGML_TYPE_Q6_K),
                     pl_quant_kernels_ref(PL_GGML_TYPE_Q6_K));
    /* types without kernels stay NULL in every set */
    for (size_t s = 0; s < N_ISAS; s++)
        if (pl_quant_arm_supported(isas[s]))
            assert_null(pl_quant_kernels_isa(isas[s], PL_GGML_TYPE_IQ2_XXS));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vec_dot_matches_reference),
        cmocka_unit_test(test_from_f32_bit_identical),
        cmocka_unit_test(test_dispatch_picks_best_set),
        cmocka_unit_test(test_sets_install_kernels),
        cmocka_unit_test(test_isa_lookup_rejects_bad_input),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    if (r == 0 && n_isas_checked == 0)
        return 77; /* no SIMD set on this CPU: nothing was compared */
    return r;
}
