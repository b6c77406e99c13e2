/*
 * genlib.c -- the non-inline part of gen.h: power-law probabilities, the
 * hot-share computation and its alpha solver, and the criteo-1tb shape.
 *
 * How the hot share is computed.  Every table gets one key per sample, so
 * table t receives 1/T of all accesses and its key of rank r a fraction
 * P_t(r) / T.  The "hot set" is the K most accessed keys of the whole model.
 * Since P_t decreases with r, the hot set is a threshold: every (t, r) with
 * P_t(r) > p, where p is chosen so that the set holds K keys.  For a given
 * threshold each table's count is a binary search over r; the threshold
 * itself is found by bisection on log p (100 halvings of an interval of at
 * most ~1000 in log space leave no visible error).  Keys exactly at the
 * threshold fill the set up to K with their probability.  Everything is
 * computed in log space so that alphas up to 16 on tables of 2^62 rows
 * neither overflow nor underflow.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "hps/gen.h"

/* |1 - alpha| below this is treated as alpha == 1 (logarithmic law). */
#define B_ZERO 1e-12

/* ln P(r) for ranks 1..n, r in [1, n]. */
static double log_pmf(uint64_t n, double alpha, uint64_t r)
{
    double b = 1.0 - alpha;
    double rd = (double)r;

    if (fabs(b) < B_ZERO)
        return log(log1p(1.0 / rd)) - log(log((double)n + 1.0));
    return b * log(rd) + log(fabs(expm1(b * log1p(1.0 / rd)))) -
           log(fabs(expm1(b * log((double)n + 1.0))));
}

double hps_gen_powerlaw_pmf(uint64_t n, double alpha, uint64_t r)
{
    if (r < 1 || r > n)
        return 0.0;
    return exp(log_pmf(n, alpha, r));
}

double hps_gen_powerlaw_cdf(uint64_t n, double alpha, uint64_t c)
{
    double b = 1.0 - alpha;

    if (c == 0)
        return 0.0;
    if (c >= n)
        return 1.0;
    if (fabs(b) < B_ZERO)
        return log((double)c + 1.0) / log((double)n + 1.0);
    return expm1(b * log((double)c + 1.0)) / expm1(b * log((double)n + 1.0));
}

/* Number of ranks r of an n-row table with ln P(r) > lp (P decreases in r). */
static uint64_t count_above(uint64_t n, double alpha, double lp)
{
    uint64_t lo = 0, hi = n; /* answer in [lo, hi] */

    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2;
        if (log_pmf(n, alpha, mid) > lp)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static uint64_t count_all_above(size_t nt, const uint64_t *rows, double alpha, double lp,
                                uint64_t *counts)
{
    uint64_t sum = 0;

    for (size_t t = 0; t < nt; t++) {
        counts[t] = count_above(rows[t], alpha, lp);
        sum += counts[t];
    }
    return sum;
}

static bool valid_rows(size_t nt, const uint64_t *rows, uint64_t *ret_total)
{
    uint64_t total = 0;

    if (nt == 0 || rows == NULL)
        return false;
    for (size_t t = 0; t < nt; t++) {
        if (rows[t] == 0 || __builtin_add_overflow(total, rows[t], &total))
            return false;
    }
    *ret_total = total;
    return true;
}

/* Bisection for the threshold: on return counts[] (sum <= k) are the ranks
 * strictly above exp(*ret_lp), and the next keys have probability ~exp(lp). */
static uint64_t find_threshold(size_t nt, const uint64_t *rows, double alpha, uint64_t k,
                               uint64_t *counts, double *ret_lp)
{
    double lo = 0.0, hi = 0.0; /* count(lo) > k >= count(hi) */

    for (size_t t = 0; t < nt; t++) {
        double l = log_pmf(rows[t], alpha, rows[t]);
        lo = l < lo ? l : lo;
    }
    lo -= 1.0;
    for (int it = 0; it < 100; it++) {
        double mid = 0.5 * (lo + hi);
        if (count_all_above(nt, rows, alpha, mid, counts) > k)
            lo = mid;
        else
            hi = mid;
    }
    *ret_lp = hi;
    return count_all_above(nt, rows, alpha, hi, counts);
}

double hps_gen_hot_share(size_t num_tables, const uint64_t *rows, double alpha, double hot_keys,
                         uint64_t *hot_rows)
{
    uint64_t total, k, sum, *counts;
    double lp, share = 0.0;

    if (!valid_rows(num_tables, rows, &total) || !(alpha >= 0.0) || !(hot_keys > 0.0) ||
        !(hot_keys <= 1.0))
        return -1.0;
    k = (uint64_t)llround(hot_keys * (double)total);
    k = k < 1 ? 1 : k > total ? total : k;
    counts = hot_rows ? hot_rows : malloc(num_tables * sizeof *counts);
    if (counts == NULL)
        return -1.0;
    sum = find_threshold(num_tables, rows, alpha, k, counts, &lp);
    for (size_t t = 0; t < num_tables; t++)
        share += hps_gen_powerlaw_cdf(rows[t], alpha, counts[t]);
    share += (double)(k - sum) * exp(lp); /* keys at the threshold */
    share /= (double)num_tables;
    if (counts != hot_rows)
        free(counts);
    return share > 1.0 ? 1.0 : share;
}

hps_err_t hps_gen_alpha_solve(size_t num_tables, const uint64_t *rows, double hot_keys,
                              double target_share, double *ret_alpha, double *ret_share)
{
    double lo = 0.0, hi = HPS_GEN_ALPHA_MAX, s;
    uint64_t total;

    if (!valid_rows(num_tables, rows, &total) || !(target_share > 0.0) || !(target_share < 1.0) ||
        !(hot_keys > 0.0) || !(hot_keys <= 1.0) || ret_alpha == NULL)
        return HPS_EINVAL;
    if (hps_gen_hot_share(num_tables, rows, lo, hot_keys, NULL) >= target_share) {
        hi = lo;
    } else if (hps_gen_hot_share(num_tables, rows, hi, hot_keys, NULL) > target_share) {
        while (hi - lo > 1e-9) {
            double mid = 0.5 * (lo + hi);
            if (hps_gen_hot_share(num_tables, rows, mid, hot_keys, NULL) < target_share)
                lo = mid;
            else
                hi = mid;
        }
    }
    s = hps_gen_hot_share(num_tables, rows, hi, hot_keys, NULL);
    if (s < 0.0)
        return -ENOMEM;
    *ret_alpha = hi;
    if (ret_share)
        *ret_share = s;
    return 0;
}

/* MLPerf DLRM Criteo 1TB cardinalities (its 26 categorical features). */
static const uint64_t criteo_card[HPS_GEN_CRITEO_TABLES] = {
    39884406, 39043,    17289,    7420,     20263,  3,     7120, 1543, 63,
    38532951, 2953546,  403346,   10,       2208,   11938, 155,  4,    976,
    14,       39979771, 25641295, 39664984, 585935, 12972, 108,  36,
};

hps_err_t hps_gen_criteo_rows(double scale, uint64_t *ret_rows)
{
    if (!(scale > 0.0) || !(scale <= 1e6) || ret_rows == NULL)
        return HPS_EINVAL;
    for (size_t t = 0; t < HPS_GEN_CRITEO_TABLES; t++) {
        double x = (double)criteo_card[t] * scale;
        double r = ceil(x * (1.0 - 1e-12));
        ret_rows[t] = r < 1.0 ? 1 : (uint64_t)r;
    }
    return 0;
}
