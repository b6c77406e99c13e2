/*
 * test-gen-powerlaw.c -- the power-law sampler, the hot-share solver and the
 * criteo-1tb shape.
 *
 * Hot-share tolerance: for the criteo-1tb shape (scales 1, 0.01 and 1e-4)
 * the alpha of hps_gen_alpha_solve() gives an analytic share within 1e-4 of
 * the 96% target, and the share measured by sampling 100000 samples (26
 * draws each) from hps_gen_powerlaw_rank() on the solver's hot set is within
 * 0.005 (absolute) of 96% -- about 30 standard deviations of the sampling
 * noise at these sizes, tight enough to catch a wrong formula.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hps/gen.h"

#define TARGET_TOL 0.005

static void test_pmf_sums_to_one(void **state)
{
    (void)state;
    const double alphas[] = {0.0, 0.5, 1.0, 1.2, 3.0, 10.0};

    for (size_t a = 0; a < sizeof alphas / sizeof alphas[0]; a++) {
        for (uint64_t n = 1; n <= 60; n++) {
            double sum = 0.0, prev = 2.0;
            for (uint64_t r = 1; r <= n; r++) {
                double p = hps_gen_powerlaw_pmf(n, alphas[a], r);
                assert_true(p <= prev + 1e-15); /* non-increasing */
                prev = p;
                sum += p;
                assert_true(fabs(sum - hps_gen_powerlaw_cdf(n, alphas[a], r)) < 1e-12);
            }
            assert_true(fabs(sum - 1.0) < 1e-12);
        }
    }
    assert_true(hps_gen_powerlaw_pmf(10, 1.2, 0) == 0.0);
    assert_true(hps_gen_powerlaw_pmf(10, 1.2, 11) == 0.0);
}

static void test_rank_range(void **state)
{
    (void)state;
    const uint64_t ns[] = {1, 2, 3, 1000, 39884406, 1ULL << 40};
    const double alphas[] = {0.0, 0.99999999, 1.0, 1.2, 4.0, 16.0};

    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        for (size_t a = 0; a < sizeof alphas / sizeof alphas[0]; a++) {
            hps_gen_powerlaw_t pl;
            uint64_t prev = 1;
            hps_gen_powerlaw_init(&pl, ns[i], alphas[a]);
            assert_int_equal(hps_gen_powerlaw_rank(&pl, 0.0), 1);
            for (double u = 0.0; u < 1.0; u += 1.0 / 1024) {
                uint64_t r = hps_gen_powerlaw_rank(&pl, u);
                assert_true(r >= prev && r <= ns[i]); /* monotone, in range */
                prev = r;
            }
            assert_true(hps_gen_powerlaw_rank(&pl, 1.0 - 0x1p-53) <= ns[i]);
        }
    }
    hps_gen_powerlaw_t pl;
    hps_gen_powerlaw_init(&pl, 1000000, 1.2);
    assert_int_equal(hps_gen_powerlaw_rank(&pl, 0.5), 23);
    assert_int_equal(hps_gen_powerlaw_rank(&pl, 0.9), 10555);
}

/* Draw frequencies agree with the pmf (each within 5 standard deviations). */
static void check_frequencies(uint64_t n, double alpha)
{
    enum { DRAWS = 1000000 };
    hps_gen_powerlaw_t pl;
    uint64_t st = 99, *count = calloc(n + 1, sizeof *count);

    assert_non_null(count);
    hps_gen_powerlaw_init(&pl, n, alpha);
    for (int i = 0; i < DRAWS; i++)
        count[hps_gen_powerlaw_rank(&pl, hps_gen_uniform(&st))]++;
    assert_int_equal(count[0], 0);
    for (uint64_t r = 1; r <= n; r++) {
        double p = hps_gen_powerlaw_pmf(n, alpha, r);
        double sd = sqrt(DRAWS * p * (1 - p)) + 1.0;
        assert_true(fabs((double)count[r] - DRAWS * p) < 5 * sd);
    }
    free(count);
}

static void test_sampler_matches_pmf(void **state)
{
    (void)state;
    check_frequencies(10, 1.2);
    check_frequencies(50, 0.0);
    check_frequencies(50, 1.0);
    check_frequencies(1000, 2.5);
}

static const uint64_t criteo_card[26] = {
    39884406, 39043,    17289,    7420,     20263,  3,     7120, 1543, 63,
    38532951, 2953546,  403346,   10,       2208,   11938, 155,  4,    976,
    14,       39979771, 25641295, 39664984, 585935, 12972, 108,  36,
};

static void test_criteo_rows(void **state)
{
    (void)state;
    /* ceil(card * 1e-4), at least 1 */
    const uint64_t want[26] = {3989, 4, 2, 1, 3, 1, 1,    1,    1,    3854, 296, 41, 1,
                               1,    2, 1, 1, 1, 1, 3998, 2565, 3967, 59,   2,   1,  1};
    uint64_t rows[26], total = 0;

    assert_int_equal(hps_gen_criteo_rows(1e-4, rows), 0);
    assert_memory_equal(rows, want, sizeof want);
    assert_int_equal(hps_gen_criteo_rows(1.0, rows), 0);
    assert_memory_equal(rows, criteo_card, sizeof rows);
    for (int t = 0; t < 26; t++)
        total += rows[t];
    assert_int_equal(total, 187767399); /* "188M keys in all" */
    assert_int_equal(hps_gen_criteo_rows(0.5, rows), 0);
    assert_int_equal(rows[0], 19942203);
    assert_int_equal(rows[5], 2);  /* ceil(1.5) */
    assert_int_equal(rows[12], 5); /* exactly 5: no bump from rounding */
    assert_int_equal(hps_gen_criteo_rows(0.1, rows), 0);
    assert_int_equal(rows[12], 1); /* 10 * 0.1 is 1, not 2 */
    assert_int_equal(rows[16], 1);
    assert_int_equal(rows[18], 2);
    assert_int_equal(hps_gen_criteo_rows(0.0, rows), HPS_EINVAL);
    assert_int_equal(hps_gen_criteo_rows(-1.0, rows), HPS_EINVAL);
}

/* Sample the model; share of draws of rank <= hot_rows[t]. */
static double sampled_share(const uint64_t *rows, double alpha, const uint64_t *hot)
{
    enum { SAMPLES = 100000 };
    hps_gen_powerlaw_t pl[26];
    uint64_t st = 2024, hits = 0;

    for (int t = 0; t < 26; t++)
        hps_gen_powerlaw_init(&pl[t], rows[t], alpha);
    for (int s = 0; s < SAMPLES; s++) {
        for (int t = 0; t < 26; t++)
            hits += hps_gen_powerlaw_rank(&pl[t], hps_gen_uniform(&st)) <= hot[t];
    }
    return (double)hits / (26.0 * SAMPLES);
}

static void check_criteo_share(double scale, double alpha_lo, double alpha_hi)
{
    uint64_t rows[26], hot[26], total = 0, nhot = 0;
    double alpha, share, set_share = 0.0, measured;

    assert_int_equal(hps_gen_criteo_rows(scale, rows), 0);
    assert_int_equal(
        hps_gen_alpha_solve(26, rows, HPS_GEN_HOT_KEYS, HPS_GEN_HOT_SHARE, &alpha, &share), 0);
    print_message("# criteo-1tb scale %g: alpha %.6f, analytic hot share %.6f\n", scale, alpha,
                  share);
    assert_true(alpha > alpha_lo && alpha < alpha_hi);
    assert_true(fabs(share - HPS_GEN_HOT_SHARE) < 1e-4);
    assert_true(fabs(hps_gen_hot_share(26, rows, alpha, HPS_GEN_HOT_KEYS, hot) - share) < 1e-12);
    for (int t = 0; t < 26; t++) {
        total += rows[t];
        nhot += hot[t];
        set_share += hps_gen_powerlaw_cdf(rows[t], alpha, hot[t]) / 26.0;
    }
    /* The hot set holds ~0.16% of the keys. */
    assert_true(nhot <= (uint64_t)llround(HPS_GEN_HOT_KEYS * (double)total));
    assert_true((double)nhot >= HPS_GEN_HOT_KEYS * (double)total - 27);
    measured = sampled_share(rows, alpha, hot);
    print_message("# hot set %llu of %llu keys, share %.6f, sampled %.6f\n",
                  (unsigned long long)nhot, (unsigned long long)total, set_share, measured);
    assert_true(fabs(measured - set_share) < 0.003);
    assert_true(fabs(measured - HPS_GEN_HOT_SHARE) < TARGET_TOL);
}

static void test_criteo_hot_share_full(void **state)
{
    (void)state;
    check_criteo_share(1.0, 1.15, 1.17);
}

static void test_criteo_hot_share_small(void **state)
{
    (void)state;
    check_criteo_share(0.01, 1.3, 1.4);
    check_criteo_share(1e-4, 3.0, 6.0);
}

static void test_share_monotone(void **state)
{
    (void)state;
    uint64_t rows[26];
    double prev = 0.0;

    hps_gen_criteo_rows(0.001, rows);
    for (double a = 0.0; a <= 6.0; a += 0.25) {
        double s = hps_gen_hot_share(26, rows, a, HPS_GEN_HOT_KEYS, NULL);
        assert_true(s >= prev - 1e-12 && s <= 1.0);
        prev = s;
    }
    /* Single table, uniform: K of N keys get K/N of the accesses. */
    uint64_t n = 100000;
    assert_true(fabs(hps_gen_hot_share(1, &n, 0.0, 0.01, NULL) - 0.01) < 1e-9);
    assert_true(hps_gen_hot_share(0, &n, 1.0, 0.01, NULL) < 0.0);
    assert_true(hps_gen_hot_share(1, &n, 1.0, 0.0, NULL) < 0.0);
}

static void test_solve_edges(void **state)
{
    (void)state;
    uint64_t rows[3] = {1, 1, 1}, big = 1000;
    double alpha = -1.0, share = -1.0;

    /* Every key is hot: alpha 0 reaches the target already. */
    assert_int_equal(hps_gen_alpha_solve(3, rows, 1.0, 0.96, &alpha, &share), 0);
    assert_true(alpha == 0.0 && share == 1.0);
    assert_int_equal(hps_gen_alpha_solve(1, &big, 0.0016, 0.96, &alpha, &share), 0);
    assert_true(fabs(share - 0.96) < 1e-4);
    assert_int_equal(hps_gen_alpha_solve(1, &big, 0.0016, 1.5, &alpha, NULL), HPS_EINVAL);
    assert_int_equal(hps_gen_alpha_solve(0, &big, 0.0016, 0.96, &alpha, NULL), HPS_EINVAL);
    rows[1] = 0;
    assert_int_equal(hps_gen_alpha_solve(3, rows, 0.0016, 0.96, &alpha, NULL), HPS_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pmf_sums_to_one),       cmocka_unit_test(test_rank_range),
        cmocka_unit_test(test_sampler_matches_pmf),   cmocka_unit_test(test_criteo_rows),
        cmocka_unit_test(test_criteo_hot_share_full), cmocka_unit_test(test_criteo_hot_share_small),
        cmocka_unit_test(test_share_monotone),        cmocka_unit_test(test_solve_edges),
    };
    return cmocka_run_group_tests_name("gen-powerlaw", tests, NULL, NULL);
}
