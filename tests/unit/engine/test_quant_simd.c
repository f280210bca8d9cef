/* SPDX-License-Identifier: MIT */
/* Unit tests for the x86 kernel sets (engine/arch/x86/quant_{x86,avx2,avxvnni,avx512}.c): for
 * every type and every set this CPU supports, quant_check.c's checks (vec_dot against the
 * scalar reference on generated blocks, vec_dot_a and vec_dotn against vec_dot, from_f32
 * against the reference). vec_dot runs in every variant of a set this CPU can execute
 * (pl_quant_x86_variants(): e.g. the AVX-512 Q4_K fallback for CPUs without GFNI), and the
 * AVX-VNNI set bit for bit against AVX2. Then the dispatch, PICOLM_FORCE_SCALAR, the lookups
 * and the prefetch settings. Sets the CPU lacks are skipped; with none at all the binary
 * exits 77. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "pl/engine_quant.h"
#include "pl/engine_types.h"
#include "quant_blocks.h"
#include "quant_check.h"
#include "quant_x86.h"

static const char *const isas[] = {"avx2", "avxvnni", "avx512"};
#define N_ISAS (sizeof(isas) / sizeof(isas[0]))

/* ---- vec_dot against the reference ---- */

/* Every kernel of one variant of a set (quant_check.c). The AVX-VNNI set computes the AVX2
 * kernels' integer sums by other instructions, so it has their bits as well (not Q8_0's:
 * AVX2 sums other elements per int32 lane there). */
static void check_dot(const char *isa, const char *variant, const struct qc_type *ti) {
    char label[64];
    (void)snprintf(label, sizeof(label), "%s/%s", isa, variant);
    const struct pl_quant_kernels *k = pl_quant_kernels_variant(isa, variant, ti->type);
    const struct pl_quant_kernels *twin =
        strcmp(isa, "avxvnni") == 0 && ti->type != PL_GGML_TYPE_Q8_0
            ? pl_quant_kernels_isa("avx2", ti->type)
            : NULL;
    assert_non_null(k);
    qc_check_dot(label, k, twin, ti);
}

static int n_isas_checked;

static void test_vec_dot_matches_reference(void **state) {
    (void)state;
    for (size_t s = 0; s < N_ISAS; s++) {
        if (!pl_quant_x86_supported(isas[s])) {
            print_message("[  SKIP    ] %s: not supported by this CPU\n", isas[s]);
            continue;
        }
        n_isas_checked++;
        /* every variant the set has on this CPU, e.g. AVX-512 without its GFNI kernels */
        const char *const *v = pl_quant_x86_variants(isas[s]);
        assert_non_null(v);
        assert_string_equal(v[0], "default");
        for (; *v; v++)
            for (size_t t = 0; t < qc_n_types; t++)
                check_dot(isas[s], *v, &qc_types[t]);
    }
    /* AVX-512 with GFNI+VBMI has multi-token Q4_K and Q6_K kernels */
    const char *const *v = pl_quant_x86_variants("avx512");
    if (pl_quant_x86_supported("avx512") && v && v[1]) {
        assert_true(qc_n_dotn_checked > 0);
        assert_true(qc_n_dota_checked > 0); /* and the aligned-activation Q4_K kernel */
    }
}

/* ---- from_f32 bit-identical to the reference ---- */

static void test_from_f32_bit_identical(void **state) {
    (void)state;
    for (size_t s = 0; s < N_ISAS; s++) {
        if (!pl_quant_x86_supported(isas[s]))
            continue;
        for (size_t t = 0; t < qc_n_act_types; t++)
            qc_check_from_f32(isas[s], pl_quant_kernels_isa(isas[s], qc_act_types[t]),
                              qc_act_types[t]);
    }
}

/* ---- Dispatch ---- */

static void test_dispatch_picks_best_set(void **state) {
    (void)state;
    const char *best = pl_quant_x86_supported("avx512")    ? "avx512"
                       : pl_quant_x86_supported("avxvnni") ? "avxvnni"
                       : pl_quant_x86_supported("avx2")    ? "avx2"
                                                           : "scalar";
    const char *env = getenv("PICOLM_FORCE_SCALAR");
    if (env && env[0] && strcmp(env, "0") != 0)
        best = "scalar";
    assert_string_equal(pl_quant_isa(), best);
    for (size_t t = 0; t < qc_n_types; t++) {
        const struct pl_quant_kernels *k = pl_quant_kernels(qc_types[t].type);
        const struct pl_quant_kernels *want = pl_quant_kernels_isa(best, qc_types[t].type);
        assert_non_null(k);
        assert_non_null(want);
        assert_ptr_equal(k->vec_dot, want->vec_dot);
        assert_ptr_equal(k->from_f32, want->from_f32);
        assert_ptr_equal(k->to_f32, want->to_f32);
    }
}

/* The child half of the next test: a fresh process, PICOLM_FORCE_SCALAR=1 in its env. */
static int force_scalar_child(void) {
    if (strcmp(pl_quant_isa(), "scalar") != 0)
        return 1;
    for (size_t t = 0; t < qc_n_types; t++)
        if (pl_quant_kernels(qc_types[t].type) != pl_quant_kernels_ref(qc_types[t].type) &&
            pl_quant_kernels(qc_types[t].type)->vec_dot !=
                pl_quant_kernels_ref(qc_types[t].type)->vec_dot)
            return 1;
    return 0;
}

/* PICOLM_FORCE_SCALAR=1 is read once per process: re-execute this binary with it set. */
static void test_force_scalar_keeps_reference(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char *argv[] = {"test_engine_quant_simd", "--force-scalar-child", NULL};
        setenv("PICOLM_FORCE_SCALAR", "1", 1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_isa_lookup_rejects_bad_input(void **state) {
    (void)state;
    assert_null(pl_quant_kernels_isa("neon", PL_GGML_TYPE_Q4_0));
    assert_null(pl_quant_kernels_isa(NULL, PL_GGML_TYPE_Q4_0));
    assert_null(pl_quant_kernels_isa("avx2", _PL_GGML_TYPE_MAX));
    assert_null(pl_quant_kernels_isa("avx2x", PL_GGML_TYPE_Q4_0));
    assert_false(pl_quant_x86_supported("sse9"));
    assert_false(pl_quant_x86_supported(NULL));
    assert_true(pl_quant_x86_supported("scalar"));
    assert_ptr_equal(pl_quant_kernels_isa("scalar", PL_GGML_TYPE_Q6_K),
                     pl_quant_kernels_ref(PL_GGML_TYPE_Q6_K));
    /* types without kernels stay NULL in every set */
    for (size_t s = 0; s < N_ISAS; s++)
        if (pl_quant_x86_supported(isas[s]))
            assert_null(pl_quant_kernels_isa(isas[s], PL_GGML_TYPE_IQ2_XXS));
    assert_null(pl_quant_x86_variants("neon"));
    assert_null(pl_quant_x86_variants(NULL));
    assert_null(pl_quant_kernels_variant("avx2", "no-such-variant", PL_GGML_TYPE_Q4_0));
    assert_null(pl_quant_kernels_variant("scalar", "no-gfni", PL_GGML_TYPE_Q4_0));
    assert_null(pl_quant_kernels_variant(NULL, NULL, PL_GGML_TYPE_Q4_0));
}

/* The variant lookup: "default" (and NULL) is the set itself; on a CPU with GFNI+VBMI the
 * AVX-512 "no-gfni" variant really is a different Q4_K kernel (the F/BW fallback), and the
 * same as the default for every type that has no GFNI kernel. */
static void test_variants(void **state) {
    (void)state;
    for (size_t s = 0; s < N_ISAS; s++) {
        if (!pl_quant_x86_supported(isas[s]))
            continue;
        for (const char *const *v = pl_quant_x86_variants(isas[s]); *v; v++)
            for (size_t t = 0; t < qc_n_types; t++)
                assert_non_null(pl_quant_kernels_variant(isas[s], *v, qc_types[t].type));
        assert_ptr_equal(pl_quant_kernels_variant(isas[s], NULL, PL_GGML_TYPE_Q4_K),
                         pl_quant_kernels_isa(isas[s], PL_GGML_TYPE_Q4_K));
        assert_ptr_equal(pl_quant_kernels_variant(isas[s], "default", PL_GGML_TYPE_Q4_K),
                         pl_quant_kernels_isa(isas[s], PL_GGML_TYPE_Q4_K));
    }
    const char *const *v = pl_quant_x86_variants("avx512");
    if (!v || !v[1]) {
        print_message("[  SKIP    ] avx512 no-gfni: CPU without AVX-512 or GFNI+VBMI\n");
        return;
    }
    assert_string_equal(v[1], "no-gfni");
    const struct pl_quant_kernels *a =
        pl_quant_kernels_variant("avx512", "default", PL_GGML_TYPE_Q4_K);
    const struct pl_quant_kernels *b =
        pl_quant_kernels_variant("avx512", "no-gfni", PL_GGML_TYPE_Q4_K);
    assert_true(a->vec_dot != b->vec_dot);
    a = pl_quant_kernels_variant("avx512", "default", PL_GGML_TYPE_Q6_K);
    b = pl_quant_kernels_variant("avx512", "no-gfni", PL_GGML_TYPE_Q6_K);
    assert_ptr_equal(a->vec_dot, b->vec_dot);
}

/* Under PICOLM_PREFETCH (CTest runs this file again with each hint at extreme distances,
 * with and without the page touch, so every prefetch branch of every kernel runs on every
 * machine) the kernels take the
 * variable's setting. */
static void test_prefetch_env_honoured(void **state) {
    (void)state;
    const char *e = getenv("PICOLM_PREFETCH");
    const struct pl_quant_prefetch *p = pl_quant_prefetch();
    struct pl_quant_prefetch want = *p;
    if (!e || !e[0]) {
        assert_true(!strcmp(p->source, "amd") || !strcmp(p->source, "amd-zen4") ||
                    !strcmp(p->source, "intel"));
        return;
    }
    assert_string_equal(p->source, "PICOLM_PREFETCH");
    assert_int_equal(pl_quant_prefetch_parse(e, &want), 0);
    assert_int_equal(p->hint, want.hint);
    assert_int_equal(p->bytes, want.bytes);
    assert_int_equal(p->decode_bytes, want.decode_bytes);
    assert_int_equal(p->streams, want.streams);
    assert_int_equal(p->page_ahead, want.page_ahead);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--force-scalar-child") == 0)
        return force_scalar_child();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vec_dot_matches_reference),
        cmocka_unit_test(test_from_f32_bit_identical),
        cmocka_unit_test(test_dispatch_picks_best_set),
        cmocka_unit_test(test_force_scalar_keeps_reference),
        cmocka_unit_test(test_isa_lookup_rejects_bad_input),
        cmocka_unit_test(test_variants),
        cmocka_unit_test(test_prefetch_env_honoured),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    if (r == 0 && n_isas_checked == 0)
        return 77; /* no SIMD set on this CPU: nothing was compared */
    return r;
}
