/*
 * keyset.h -- the distinct keys of a batch and how often each occurs
 * (worker/libhps/keyset.c).  Host memory; one caller at a time per keyset_t.
 *
 * The GPU worker inserts a table's missed rows into its GPU embedding cache.
 * A batch's misses repeat keys, and a small cache may be asked to take more
 * distinct keys than it has slots.  The insert kernel runs one warp per row
 * and one writer per set, so both make warps queue on the same set locks.
 * In bench/e2e-gpu.sh at 8,192 samples (an NVIDIA H200, an instrumented
 * build, windows of 50 synchronous inserts), inserts of 629-2,250 rows on
 * average took 1.9-7.9 ms of kernel time on average; that model's caches for tables larger than
 * their cache have 1, 3, 4, 19 and 161-250 sets of 32 rows.
 * The worker therefore fetches and inserts each distinct key once, and at
 * most the cache's capacity of them: the most requested.  The same
 * benchmark's GPU lookup time per request then fell from 11,434 us to
 * 4,370-4,389 us.
 */
#ifndef HPS_WORKER_KEYSET_H
#define HPS_WORKER_KEYSET_H

#include <stddef.h>
#include <stdint.h>

/** Distinct keys of the last keyset_build; zero-initialize before first use. */
typedef struct keyset {
    size_t n;        /**< distinct keys */
    int64_t *keys;   /**< [n] in the order of first occurrence */
    uint32_t *count; /**< [n] occurrences (the caller may zero some, see keyset_top) */
    uint32_t *where; /**< [batch] distinct index of each batch position */
    /* private */
    uint32_t *slots; /* open addressing: distinct index + 1; 0 = empty */
    size_t slots_cap, cap, where_cap;
} keyset_t;

/**
 * @brief Find the distinct keys of keys[0..n) (int64, host): s->keys,
 * s->count and s->where are rewritten; earlier contents are lost.
 * @param[in] n  batch length, at most UINT32_MAX - 1.
 * @return 0; -ENOMEM (s is then empty, s->n = 0); -EINVAL (n too large).
 * Buffers grow as needed and are kept for the next call.
 */
int keyset_build(keyset_t *s, const int64_t *keys, size_t n);

/**
 * @brief Choose at most limit distinct keys with a non-zero count, the
 * largest counts first (ties: the earlier first occurrence).
 * @param[out] pick  [min(limit, s->n)] distinct indices, written in
 *                   ascending order (so rows can be compacted in place).
 * @return how many were written; 0 for limit 0, or -ENOMEM when limit is
 *         below the candidates and the sort's buffer cannot be had.
 */
long keyset_top(const keyset_t *s, size_t limit, uint32_t *pick);

/** @brief Free the buffers (s zeroed; reusable). */
void keyset_free(keyset_t *s);

#endif
