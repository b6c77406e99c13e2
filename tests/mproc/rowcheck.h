/*
 * rowcheck.h -- self-checking rows for the multi-process tests.
 *
 * A row written with version `ver` for key `key` holds:
 *   v[0]        = (float)ver, ver < 2^24 (exact in a float)
 *   v[d], d > 0 = a 24-bit hash of (key, ver, d), as a float (exact)
 * A reader recomputes every element from (key, v[0]); a row that mixes two
 * versions, or carries another key's data, fails the check (the chance that
 * two versions agree on dim-1 24-bit hashes is nil).
 */
#ifndef HPS_TESTS_ROWCHECK_H
#define HPS_TESTS_ROWCHECK_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define ROW_VER_MAX (1u << 24)

static inline uint64_t row_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline float row_elem(uint64_t key, uint32_t ver, uint32_t d)
{
    uint64_t h = row_mix(key * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)ver << 20) ^ d);
    return (float)(h >> 40);
}

static inline void row_fill(float *v, uint32_t dim, uint64_t key, uint32_t ver)
{
    v[0] = (float)(ver % ROW_VER_MAX);
    for (uint32_t d = 1; d < dim; d++)
        v[d] = row_elem(key, ver % ROW_VER_MAX, d);
}

/*
 * 0 when v is a whole row of some version of key; else 1 and a description
 * in msg.  *ret_ver receives the version (v[0]).
 */
static inline int row_verify(const float *v, uint32_t dim, uint64_t key, uint32_t *ret_ver,
                             char *msg, size_t msg_len)
{
    float f0 = v[0];
    if (!(f0 >= 0.0f && f0 < (float)ROW_VER_MAX) || (float)(uint32_t)f0 != f0) {
        uint32_t bits;
        memcpy(&bits, &v[0], 4);
        snprintf(msg, msg_len, "key %llu: element 0 (version) is not a version: bits 0x%08x",
                 (unsigned long long)key, bits);
        return 1;
    }
    uint32_t ver = (uint32_t)f0;
    *ret_ver = ver;
    for (uint32_t d = 1; d < dim; d++) {
        float want = row_elem(key, ver, d);
        if (memcmp(&want, &v[d], 4) != 0) {
            /* Which version does the element belong to, if any nearby? */
            long other = -1;
            for (long dv = -64; dv <= 64; dv++) {
                long cand = (long)ver + dv;
                if (dv != 0 && cand >= 0) {
                    float w2 = row_elem(key, (uint32_t)cand, d);
                    if (memcmp(&w2, &v[d], 4) == 0) {
                        other = cand;
                        break;
                    }
                }
            }
            snprintf(msg, msg_len,
                     "TORN key %llu dim %u: element 0 says version %u, element %u = %a "
                     "(expected %a; matches version %ld)",
                     (unsigned long long)key, dim, ver, d, (double)v[d], (double)want, other);
            return 1;
        }
    }
    return 0;
}

/* Output sentinel: rows of missing keys must come back with it intact. */
#define ROW_SENTINEL 0xA5A5A5A5u

static inline void row_poison(float *v, size_t n)
{
    memset(v, 0xA5, n * sizeof(float));
}

/* Index of the first element of v (dim) that is not def (bitwise), or -1:
 * lookups fill the rows of missing keys with the table's default value. */
static inline long row_is_default(const float *v, uint32_t dim, float def)
{
    for (uint32_t d = 0; d < dim; d++)
        if (memcmp(&v[d], &def, sizeof(float)) != 0)
            return d;
    return -1;
}

#endif /* HPS_TESTS_ROWCHECK_H */
