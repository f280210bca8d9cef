/* SPDX-License-Identifier: MIT */
/* Unit tests for common/: pl_strerror and the checked-arithmetic helpers. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pl/pl_err.h"
#include "pl/pl_util.h"

static void test_strerror_names_errno_and_project_codes(void **state) {
    (void)state;
    assert_string_equal(pl_strerror(-PL_ERR_FORMAT), "malformed file");
    assert_string_equal(pl_strerror(-ENOENT), "No such file or directory");
    assert_string_equal(pl_strerror(-99999), "unknown error");
}

static void test_mul_overflow_detected(void **state) {
    (void)state;
    uint64_t r;
    assert_true(pl_mul_overflow(UINT64_MAX / 2 + 1, (uint64_t)2, &r));
    assert_false(pl_mul_overflow((uint64_t)1 << 31, (uint64_t)2, &r));
    assert_int_equal(r, (uint64_t)1 << 32);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strerror_names_errno_and_project_codes),
        cmocka_unit_test(test_mul_overflow_detected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
