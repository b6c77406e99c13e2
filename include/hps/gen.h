/*
 * gen.h -- synthetic HugeCTR models and request workloads (hps-gen).
 *
 * Everything that hps-gen writes is a pure function of a few integers, so a
 * test, an integration test or a benchmark can check any lookup exactly
 * without reading the model files:
 *
 *   key       hps_gen_key(t, i)       the i-th key of table t (int64 models), or
 *             hps_gen_key32(t, i)     the same for 32-bit-key models;
 *   vector    hps_gen_vector(t, key, dim, out)
 *                                     out[d] = hps_gen_value(t, key, d);
 *   file row  hps_gen_shuffle_at()    which key i sits at row j of the files;
 *   requests  hps_gen_powerlaw_rank() rank r of a draw; the key is key(t, r-1),
 *             so the most popular keys are the first ones generated.
 *
 * Tables are numbered t = 0, 1, ... in the order of the model's
 * sparse_files.  The value of a vector does not depend on the dimension (a
 * prefix of a longer vector is the shorter one) nor on the file order, nor
 * on any seed: only the key order in the files and the request draws use a
 * seed.
 *
 * Model files (reference/hugectr-hps.md section 1): a directory per table
 * holding `key` (N packed int64, native byte order, also for 32-bit-key
 * models) and `emb_vector` (N x dim float32, row j belongs to key j), no
 * header.
 *
 * Request files (hps-gen requests; read by hps-bench): native byte order,
 *
 *     offset 0   char[8]   magic "HPSREQ1\0"            (HPS_GEN_REQ_MAGIC)
 *     offset 8   uint32    num_tables T
 *     offset 12  uint32    batch B (samples per request)
 *     offset 16  uint64    count C (requests)
 *     offset 24  int64     C requests of T*B keys each, table-major: request c
 *                          holds table 0's B keys (one per sample), then
 *                          table 1's, ... -- exactly the KEYS input of one
 *                          inference request (NUMKEYS = B for every table).
 *
 * File size = 24 + C*T*B*8 bytes.  Keys of 32-bit-key models are stored as
 * int64 too (the KEYS input is always int64).
 *
 * Functions marked "inline" need only this header (and -lm for the sampler);
 * the others are in the hps_gen library (meson dependency hps_gen_dep,
 * defined in tools/hps-gen/meson.build).  Every function is pure or works
 * only on its arguments: all are thread-safe, with no global state.
 * Keys, vectors and the shuffle use integer arithmetic only (bit-exact
 * everywhere); the power-law sampler also uses libm's exp, log, log1p and
 * expm1, so its draws are reproducible for a given libm (a different libm
 * may move a rare draw that falls on a rank boundary by one rank).
 */
#ifndef HPS_GEN_H
#define HPS_GEN_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hps/hps.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Vectors ------------------------------------------------------------- */

/** 2^64 / golden ratio: Weyl increment of splitmix64, also a table salt. */
#define HPS_GEN_GOLDEN 0x9E3779B97F4A7C15ULL
/** Odd constant that spreads the element index d. */
#define HPS_GEN_DIM_MUL 0xD1B54A32D192ED03ULL

/**
 * @brief Per-row seed of the vector function:
 *        rrxmrrxmsx_0((uint64)key ^ ((uint64)table + 1) * HPS_GEN_GOLDEN).
 * @param[in] table  Table index t (0-based, order of sparse_files).
 * @param[in] key    The key (a uint32 key of a 32-bit model zero-extended).
 * @return 64-bit seed.  Pure; thread-safe.
 */
static inline uint64_t hps_gen_row_seed(uint32_t table, int64_t key)
{
    return hps_rrxmrrxmsx_0((uint64_t)key ^ (((uint64_t)table + 1) * HPS_GEN_GOLDEN));
}

/**
 * @brief Element d of a row, from its row seed (see hps_gen_value()).
 *
 *   h = rrxmrrxmsx_0(row_seed + ((uint64)d + 1) * HPS_GEN_DIM_MUL)   (mod 2^64)
 *   value = ((int32)(h >> 40) - 2^23) / 2^23
 *
 * @param[in] row_seed  hps_gen_row_seed(table, key).
 * @param[in] d         Element index, 0 <= d < dim.
 * @return A float32 k / 2^23 with k an integer in [-2^23, 2^23): in [-1, 1),
 *         24 significant bits, so exact in float32, in double and in text
 *         printed with "%.9g".  Pure; thread-safe.
 */
static inline float hps_gen_value_at(uint64_t row_seed, uint32_t d)
{
    uint64_t h = hps_rrxmrrxmsx_0(row_seed + ((uint64_t)d + 1) * HPS_GEN_DIM_MUL);
    int32_t k = (int32_t)(h >> 40) - (1 << 23);
    return (float)k * 0x1p-23f;
}

/**
 * @brief Element d of the vector of `key` in table `table`:
 *        hps_gen_value_at(hps_gen_row_seed(table, key), d).
 * @param[in] table  Table index t.
 * @param[in] key    The key.
 * @param[in] d      Element index (any; independent of the table's dim).
 * @return A float in [-1, 1) with value * 2^23 an integer.  Pure; thread-safe.
 */
static inline float hps_gen_value(uint32_t table, int64_t key, uint32_t d)
{
    return hps_gen_value_at(hps_gen_row_seed(table, key), d);
}

/**
 * @brief The whole vector of `key`: out[d] = hps_gen_value(table, key, d).
 * @param[in]  table  Table index t.
 * @param[in]  key    The key.
 * @param[in]  dim    Floats to write (embedding_vecsize of the table).
 * @param[out] out    (dim) float32, host memory.
 * Pure apart from @p out; thread-safe.
 */
static inline void hps_gen_vector(uint32_t table, int64_t key, uint32_t dim, float *out)
{
    uint64_t seed = hps_gen_row_seed(table, key);

    for (uint32_t d = 0; d < dim; d++)
        out[d] = hps_gen_value_at(seed, d);
}

/** Mixed into the row seed by model versions after the first. */
#define HPS_GEN_VERSION_MUL 0x8cb92ba72f3d8dd7ULL

/**
 * @brief The vector of `key` in version `version` of a model (hps-gen model
 * --model-version): version 1 is hps_gen_vector(); every later version
 * changes every element, checkably:
 *   seed = hps_gen_row_seed(table, key) ^ ((version - 1) * HPS_GEN_VERSION_MUL)
 *   out[d] = hps_gen_value_at(seed, d).
 * @param[in] version  >= 1 (0 counts as 1).
 */
static inline void hps_gen_vector_v(uint32_t table, int64_t key, uint32_t dim, uint32_t version,
                                    float *out)
{
    uint64_t v = version ? version - 1u : 0u;
    uint64_t seed = hps_gen_row_seed(table, key) ^ (v * HPS_GEN_VERSION_MUL);

    for (uint32_t d = 0; d < dim; d++)
        out[d] = hps_gen_value_at(seed, d);
}

/* ---- Keys ---------------------------------------------------------------- */

/** Keys of 64-bit models are in [0, HPS_GEN_KEY_LIMIT) = [0, 2^62). */
#define HPS_GEN_KEY_LIMIT (1ULL << 62)
/** Keys of 32-bit models are in [0, HPS_GEN_KEY32_LIMIT) = [0, 2^32 - 1). */
#define HPS_GEN_KEY32_LIMIT 0xFFFFFFFFULL

/**
 * @brief The i-th key of table `table` of a 64-bit-key model.
 *
 * With M = 2^62 - 1 and every step modulo 2^62:
 *
 *   x = (i + (table + 1) * HPS_GEN_GOLDEN) & M
 *   x ^= x >> 31;  x = (x * 0xBF58476D1CE4E5B9) & M
 *   x ^= x >> 29;  x = (x * 0x94D049BB133111EB) & M
 *   x ^= x >> 32;  key = x
 *
 * Each step is a bijection of [0, 2^62) (an addition, xor-shifts right, and
 * products by odd constants), so for a fixed table the function is a
 * bijection of i in [0, 2^62): the keys of a table are distinct, scattered
 * (not sequential), non-negative and below 2^62 (exact in a double, hence
 * safe for JSON and JavaScript consumers; never INT64_MAX, the empty key of
 * HugeCTR's GPU cache).  Different tables get different permutations.
 *
 * @param[in] table  Table index t.
 * @param[in] i      Key index, < 2^62 (higher bits are ignored).
 * @return The key, in [0, 2^62).  Pure; thread-safe.
 */
static inline int64_t hps_gen_key(uint32_t table, uint64_t i)
{
    const uint64_t m = HPS_GEN_KEY_LIMIT - 1;
    uint64_t x = (i + ((uint64_t)table + 1) * HPS_GEN_GOLDEN) & m;

    x ^= x >> 31;
    x = (x * 0xBF58476D1CE4E5B9ULL) & m;
    x ^= x >> 29;
    x = (x * 0x94D049BB133111EBULL) & m;
    x ^= x >> 32;
    return (int64_t)x;
}

/** One round of the 32-bit permutation of hps_gen_key32() (lowbias32). */
static inline uint32_t hps__gen_perm32(uint32_t table, uint32_t x)
{
    x += (table + 1u) * 0x9E3779B9u;
    x ^= x >> 16;
    x *= 0x21F0AAADu;
    x ^= x >> 15;
    x *= 0x735A2D97u;
    x ^= x >> 15;
    return x;
}

/**
 * @brief The i-th key of table `table` of a 32-bit-key model.
 *
 *   p(x) = lowbias32(x + (table + 1) * 0x9E3779B9)          (mod 2^32)
 *     where lowbias32: x ^= x>>16; x *= 0x21F0AAAD; x ^= x>>15;
 *                      x *= 0x735A2D97; x ^= x>>15  (Chris Wellons)
 *   key = p(i), or p(p(i)) if p(i) == 0xFFFFFFFF
 *
 * p is a bijection of [0, 2^32); skipping its one image 0xFFFFFFFF by cycle
 * walking makes the key function a bijection of [0, 2^32 - 1) onto itself,
 * so keys are distinct and never 0xFFFFFFFF (the empty key of HugeCTR's
 * 32-bit GPU cache).
 *
 * @param[in] table  Table index t.
 * @param[in] i      Key index, < 2^32 - 1 (a table holds at most 2^32 - 1 rows).
 * @return The key, in [0, 2^32 - 1), as int64 (how model files store it).
 *         Pure; thread-safe.
 */
static inline int64_t hps_gen_key32(uint32_t table, uint64_t i)
{
    uint32_t x = hps__gen_perm32(table, (uint32_t)i);

    if (x == UINT32_MAX)
        x = hps__gen_perm32(table, x);
    return (int64_t)x;
}

/**
 * @brief hps_gen_key() for key_bytes 8, hps_gen_key32() for key_bytes 4.
 * @param[in] table      Table index t.
 * @param[in] i          Key index (< 2^62, or < 2^32 - 1 for key_bytes 4).
 * @param[in] key_bytes  8 (supportlonglong = true) or 4.
 * @return The key.  Pure; thread-safe.
 */
static inline int64_t hps_gen_key_w(uint32_t table, uint64_t i, unsigned key_bytes)
{
    return key_bytes == 4 ? hps_gen_key32(table, i) : hps_gen_key(table, i);
}

/* ---- Pseudo-random numbers ----------------------------------------------- */

/**
 * @brief splitmix64 (Steele, Lea, Flood 2014): advance the state and return
 *        the next 64 random bits.
 *
 *   s += HPS_GEN_GOLDEN; z = s;
 *   z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
 *   z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
 *   return z ^ (z >> 31)
 *
 * @param[in,out] state  The generator (any initial value is fine).  Not
 *                       thread-safe on a shared state: one state per thread.
 */
static inline uint64_t hps_gen_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += HPS_GEN_GOLDEN);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/**
 * @brief A uniform double in [0, 1): (splitmix64(state) >> 11) * 2^-53.
 * @param[in,out] state  As for hps_gen_splitmix64().
 */
static inline double hps_gen_uniform(uint64_t *state)
{
    return (double)(hps_gen_splitmix64(state) >> 11) * 0x1p-53;
}

/* ---- File order ---------------------------------------------------------- */

/**
 * A deterministic shuffle of [0, rows): row j of a table's files holds key
 * index i = hps_gen_shuffle_at(s, j), i.e. key hps_gen_key(t, i).  Like a
 * training dump, the files are not in key or popularity order.
 *
 * Construction: k = bits of rows - 1 (at least 1), m = 2^k - 1; from
 * z = splitmix64 seeded with seed ^ ((table + 1) * HPS_GEN_DIM_MUL) come
 * add = z1 & m, mul1 = z2 | 1, mul2 = z3 | 1, and the round on k bits is
 *
 *   x = (x + add) & m;  x ^= x >> s1;  x = (x * mul1) & m;
 *   x ^= x >> s2;       x = (x * mul2) & m;  x ^= x >> s1
 *
 * with s1 = (k + 1) / 2, s2 = k / 3 + 1: a bijection of [0, 2^k).  Cycle
 * walking (repeat the round while x >= rows; fewer than 2 rounds on average)
 * restricts it to a bijection of [0, rows).
 */
typedef struct hps_gen_shuffle {
    uint64_t rows; /**< size of the permuted range */
    uint64_t mask; /**< 2^k - 1 */
    uint64_t add, mul1, mul2;
    unsigned s1, s2;
} hps_gen_shuffle_t;

/**
 * @brief Set up the file-order shuffle of one table.
 * @param[out] s      The shuffle (caller-allocated).
 * @param[in]  seed   hps-gen model --seed.
 * @param[in]  table  Table index t.
 * @param[in]  rows   Rows of the table, 1 .. 2^62.
 * Thread-safe; @p s may then be shared read-only by any number of threads.
 */
static inline void hps_gen_shuffle_init(hps_gen_shuffle_t *s, uint64_t seed, uint32_t table,
                                        uint64_t rows)
{
    uint64_t st = seed ^ (((uint64_t)table + 1) * HPS_GEN_DIM_MUL);
    unsigned k = rows > 2 ? 64 - (unsigned)__builtin_clzll(rows - 1) : 1;

    s->rows = rows;
    s->mask = k >= 64 ? UINT64_MAX : (1ULL << k) - 1;
    s->add = hps_gen_splitmix64(&st) & s->mask;
    s->mul1 = hps_gen_splitmix64(&st) | 1;
    s->mul2 = hps_gen_splitmix64(&st) | 1;
    s->s1 = (k + 1) / 2;
    s->s2 = k / 3 + 1;
}

/**
 * @brief Key index held by file row @p pos.
 * @param[in] s    From hps_gen_shuffle_init().
 * @param[in] pos  Row of the files, < s->rows.
 * @return The key index i in [0, rows); a bijection of pos.  Thread-safe.
 */
static inline uint64_t hps_gen_shuffle_at(const hps_gen_shuffle_t *s, uint64_t pos)
{
    uint64_t x = pos;

    do {
        x = (x + s->add) & s->mask;
        x ^= x >> s->s1;
        x = (x * s->mul1) & s->mask;
        x ^= x >> s->s2;
        x = (x * s->mul2) & s->mask;
        x ^= x >> s->s1;
    } while (x >= s->rows);
    return x;
}

/* ---- Power-law popularity ------------------------------------------------ */

/**
 * Power-law key popularity, sampled by inverse CDF like HugeCTR's
 * hps_profiler (reference section 8: y = ((N^(1-a) - 1) U + 1)^(1/(1-a))).
 * With b = 1 - alpha and U uniform in [0, 1):
 *
 *   y = ((n+1)^b - 1) U + 1)^(1/b)     = exp(log1p(U * expm1(b ln(n+1))) / b)
 *   y = (n+1)^U                         when b == 0 (alpha == 1)
 *   rank r = floor(y), clamped to [1, n]
 *
 * so P(rank = r) = ((r+1)^b - r^b) / ((n+1)^b - 1): strictly decreasing in r
 * for alpha > 0, uniform for alpha = 0.  (HugeCTR uses n instead of n+1 and
 * rounds y, which halves the probability of rank 1 and rank n, making rank 2
 * the most popular; floor over [1, n+1) gives every rank a full unit.)
 */
typedef struct hps_gen_powerlaw {
    uint64_t n;    /**< ranks 1..n */
    double b;      /**< 1 - alpha */
    double scale;  /**< expm1(b * ln(n+1)) (b != 0) */
    double log_n1; /**< ln(n+1) */
} hps_gen_powerlaw_t;

/**
 * @brief Set up the sampler for ranks 1..n.
 * @param[out] pl     The sampler (caller-allocated).
 * @param[in]  n      Number of ranks (rows of the table), >= 1.
 * @param[in]  alpha  Exponent, >= 0 (0 = uniform).
 * Thread-safe; @p pl may be shared read-only.
 */
static inline void hps_gen_powerlaw_init(hps_gen_powerlaw_t *pl, uint64_t n, double alpha)
{
    pl->n = n;
    pl->b = 1.0 - alpha;
    pl->log_n1 = log((double)n + 1.0);
    pl->scale = expm1(pl->b * pl->log_n1);
}

/**
 * @brief Rank of a uniform variate (inverse CDF, see hps_gen_powerlaw_t).
 * @param[in] pl  From hps_gen_powerlaw_init().
 * @param[in] u   Uniform in [0, 1), e.g. hps_gen_uniform().
 * @return Rank r in [1, n]; table t's key of rank r is key(t, r - 1).
 *         Pure; thread-safe.
 */
static inline uint64_t hps_gen_powerlaw_rank(const hps_gen_powerlaw_t *pl, double u)
{
    double y = fabs(pl->b) < 1e-12 ? exp(u * pl->log_n1) : exp(log1p(u * pl->scale) / pl->b);
    uint64_t r = y < 1.0 ? 1 : y >= (double)pl->n ? pl->n : (uint64_t)y;

    return r < 1 ? 1 : r;
}

/**
 * @brief Probability that a draw has rank exactly r (the formula of
 *        hps_gen_powerlaw_t, computed without cancellation).
 * @return P(r) in [0, 1]; 0 for r outside [1, n].  Pure; thread-safe.
 */
double hps_gen_powerlaw_pmf(uint64_t n, double alpha, uint64_t r);

/**
 * @brief Probability that a draw has rank <= c: ((c+1)^b - 1) / ((n+1)^b - 1).
 * @return The share of draws on the c most popular keys, in [0, 1].
 *         Pure; thread-safe.
 */
double hps_gen_powerlaw_cdf(uint64_t n, double alpha, uint64_t c);

/** Criteo 1TB log: 0.16% of the keys receive 96% of the accesses. */
#define HPS_GEN_HOT_KEYS  0.0016
#define HPS_GEN_HOT_SHARE 0.96
/** Largest alpha hps_gen_alpha_solve() returns. */
#define HPS_GEN_ALPHA_MAX 16.0

/**
 * @brief Share of all accesses that go to the hottest keys of a model, when
 *        every table gets one key per sample with popularity power law alpha.
 *
 * Every table receives 1/T of the accesses.  The hot set is the
 * K = max(1, round(hot_keys * sum(rows))) keys of highest access
 * probability over all tables together (a threshold on P_t(r) / T, found
 * by bisection; ties at the threshold are filled with their probability).
 *
 * @param[in]  num_tables  T >= 1.
 * @param[in]  rows        (T) rows of each table, each >= 1.
 * @param[in]  alpha       Power-law exponent, >= 0.
 * @param[in]  hot_keys    Fraction of all keys in the hot set, in (0, 1].
 * @param[out] hot_rows    (T) optional (may be NULL): how many of each table's
 *                         most popular ranks are entirely inside the hot set
 *                         (the sum is <= K; a draw of rank <= hot_rows[t] is
 *                         a hot access).
 * @return The share in [0, 1], or -1 for invalid arguments.  Thread-safe.
 */
double hps_gen_hot_share(size_t num_tables, const uint64_t *rows, double alpha, double hot_keys,
                         uint64_t *hot_rows);

/**
 * @brief The alpha for which hps_gen_hot_share() equals target_share
 *        (bisection over [0, HPS_GEN_ALPHA_MAX] to 1e-9; the share grows with
 *        alpha).  For the criteo-1tb shape at full scale with the defaults
 *        (0.16%, 96%) it is about 1.160 (1.349 at scale 0.01, 4.13 at
 *        scale 1e-4: small models need larger alphas).
 *
 * @param[in]  num_tables    T >= 1.
 * @param[in]  rows          (T) rows of each table, each >= 1.
 * @param[in]  hot_keys      e.g. HPS_GEN_HOT_KEYS.
 * @param[in]  target_share  e.g. HPS_GEN_HOT_SHARE, in (0, 1).
 * @param[out] ret_alpha     The alpha, clamped to [0, HPS_GEN_ALPHA_MAX] when
 *                           the target cannot be reached (too few keys:
 *                           compare *ret_share with the target).
 * @param[out] ret_share     The share that alpha gives (may be NULL).
 * @return 0; HPS_EINVAL for invalid arguments (nothing written); -ENOMEM.
 *         Thread-safe.
 */
hps_err_t hps_gen_alpha_solve(size_t num_tables, const uint64_t *rows, double hot_keys,
                              double target_share, double *ret_alpha, double *ret_share);

/* ---- Model shapes -------------------------------------------------------- */

/** Tables of the criteo-1tb shape. */
#define HPS_GEN_CRITEO_TABLES 26
/** Embedding dimension of the criteo-1tb shape (hps-gen's default). */
#define HPS_GEN_CRITEO_DIM 128

/**
 * @brief Rows of the criteo-1tb shape scaled by @p scale: table t gets
 *        max(1, ceil(card[t] * scale)) rows, with card the MLPerf DLRM Criteo
 *        1TB cardinalities (39884406, 39043, ..., 36).  The ceiling
 *        ignores a relative excess below 1e-12, so that a decimal scale whose
 *        exact product is an integer is not bumped by rounding error.
 * @param[in]  scale     Factor, > 0 and <= 1e6.
 * @param[out] ret_rows  (HPS_GEN_CRITEO_TABLES) rows per table.
 * @return 0; HPS_EINVAL if @p scale is out of range (nothing written).
 *         Thread-safe.
 */
hps_err_t hps_gen_criteo_rows(double scale, uint64_t *ret_rows);

/* ---- Request files ------------------------------------------------------- */

/** Magic of a request file (8 bytes, the last one NUL). */
#define HPS_GEN_REQ_MAGIC "HPSREQ1"

/** Header of a request file (see the file comment): 24 bytes, native order. */
typedef struct hps_gen_req_header {
    char magic[8];       /**< HPS_GEN_REQ_MAGIC with its NUL */
    uint32_t num_tables; /**< T */
    uint32_t batch;      /**< B: samples per request = keys per table */
    uint64_t count;      /**< C: requests */
} hps_gen_req_header_t;

_Static_assert(sizeof(hps_gen_req_header_t) == 24, "request header is 24 bytes");

/**
 * @brief Check a request file header against the file's size.
 * @param[in] h           The first 24 bytes of the file.
 * @param[in] file_bytes  Size of the whole file.
 * @return 0; HPS_EBADMAGIC for a wrong magic; HPS_EINVAL if T, B or C is 0;
 *         HPS_ETRUNCATED if the file is shorter than 24 + C*T*B*8 bytes;
 *         HPS_ECORRUPT if it is longer (or the size overflows).  Thread-safe.
 */
static inline hps_err_t hps_gen_req_check(const hps_gen_req_header_t *h, uint64_t file_bytes)
{
    uint64_t keys, bytes;

    if (memcmp(h->magic, HPS_GEN_REQ_MAGIC, 8) != 0)
        return HPS_EBADMAGIC;
    if (h->num_tables == 0 || h->batch == 0 || h->count == 0)
        return HPS_EINVAL;
    keys = (uint64_t)h->num_tables * h->batch;
    if (__builtin_mul_overflow(keys, h->count, &keys) ||
        __builtin_mul_overflow(keys, (uint64_t)8, &bytes) ||
        __builtin_add_overflow(bytes, (uint64_t)sizeof *h, &bytes))
        return HPS_ECORRUPT;
    if (file_bytes < bytes)
        return HPS_ETRUNCATED;
    return file_bytes == bytes ? 0 : HPS_ECORRUPT;
}

#ifdef __cplusplus
}
#endif
#endif /* HPS_GEN_H */
