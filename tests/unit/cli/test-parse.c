/* test-parse.c -- hps_parse_int() (common/parse.c): decimal only, ranges. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "hps/hps.h"

static void test_accepts(void **state)
{
    (void)state;
    int64_t v = 0;
    assert_true(hps_parse_int("0", 0, 10, &v) && v == 0);
    assert_true(hps_parse_int("010", 0, 100, &v) && v == 10); /* not octal */
    assert_true(hps_parse_int("-1", -1, 5, &v) && v == -1);
    assert_true(hps_parse_int("9223372036854775807", 0, INT64_MAX, &v) && v == INT64_MAX);
    assert_true(hps_parse_int("-9223372036854775808", INT64_MIN, 0, &v) && v == INT64_MIN);
    assert_true(hps_parse_int("1023", 0, 1023, &v) && v == 1023);
}

static void test_refuses(void **state)
{
    (void)state;
    static const char *bad[] = {"",
                                "abc",
                                "1abc",
                                " 1",
                                "1 ",
                                "+1",
                                "0x10",
                                "1e3",
                                "1.0",
                                "-",
                                "--1",
                                "- 1",
                                "4294967297",
                                "99999999999999999999",
                                "-9223372036854775809"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t v = 42;
        assert_false(hps_parse_int(bad[i], INT32_MIN, INT32_MAX, &v));
        assert_int_equal(v, 42); /* untouched */
    }
    int64_t v = 42;
    assert_false(hps_parse_int(NULL, 0, 1, &v));
    assert_false(hps_parse_int("1024", 0, 1023, &v));
    assert_false(hps_parse_int("-1", 0, 1023, &v));
    assert_false(hps_parse_int("9223372036854775808", 0, INT64_MAX, &v)); /* ERANGE */
    errno = 7;
    assert_false(hps_parse_int("99999999999999999999", 0, INT64_MAX, &v));
    assert_int_equal(errno, 7); /* restored */
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_accepts),
                                       cmocka_unit_test(test_refuses)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
