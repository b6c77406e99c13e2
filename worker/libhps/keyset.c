/*
 * keyset.c -- distinct keys of a batch, with counts (see keyset.h).
 *
 * Open addressing over a power-of-two table of at least twice the batch,
 * linear probing, a multiplicative hash (Fibonacci hashing: the golden
 * ratio's 64-bit constant, high bits taken).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "keyset.h"

static size_t slot_of(int64_t key, unsigned shift)
{
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> shift);
}

/** Room for n batch positions and a table of size slots (zeroed). */
static int reserve(keyset_t *s, size_t n, size_t size)
{
    if (size > s->slots_cap) {
        free(s->slots);
        s->slots = malloc(size * sizeof(*s->slots));
        s->slots_cap = s->slots ? size : 0;
    }
    if (n > s->cap) {
        int64_t *k = realloc(s->keys, n * sizeof(*k));
        s->keys = k ? k : s->keys;
        uint32_t *c = k ? realloc(s->count, n * sizeof(*c)) : NULL;
        s->count = c ? c : s->count;
        s->cap = c ? n : s->cap;
    }
    if (n > s->where_cap) {
        free(s->where);
        s->where = malloc(n * sizeof(*s->where));
        s->where_cap = s->where ? n : 0;
    }
    if (!s->slots || s->cap < n || s->where_cap < n)
        return -ENOMEM;
    memset(s->slots, 0, size * sizeof(*s->slots));
    return 0;
}

int keyset_build(keyset_t *s, const int64_t *keys, size_t n)
{
    s->n = 0;
    if (n >= UINT32_MAX)
        return -EINVAL;
    if (n == 0)
        return 0;
    size_t size = 16; /* a power of two, at least 2n: probes stay short */
    unsigned shift = 60;
    while (size < 2 * n) {
        size *= 2;
        shift--;
    }
    int rc = reserve(s, n, size);
    if (rc < 0)
        return rc;
    size_t mask = size - 1;
    for (size_t i = 0; i < n; i++) {
        size_t h = slot_of(keys[i], shift);
        uint32_t d;
        while ((d = s->slots[h]) && s->keys[d - 1] != keys[i])
            h = (h + 1) & mask;
        if (!d) {
            d = (uint32_t)++s->n;
            s->slots[h] = d;
            s->keys[d - 1] = keys[i];
            s->count[d - 1] = 0;
        }
        s->count[d - 1]++;
        s->where[i] = d - 1;
    }
    return 0;
}

struct ranked {
    uint32_t count, index;
};

static int by_count(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int by_value(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

long keyset_top(const keyset_t *s, size_t limit, uint32_t *pick)
{
    size_t m = 0;
    for (size_t i = 0; i < s->n; i++)
        m += s->count[i] > 0;
    if (m <= limit) { /* all of them, already ascending */
        size_t j = 0;
        for (size_t i = 0; i < s->n; i++)
            if (s->count[i] > 0)
                pick[j++] = (uint32_t)i;
        return (long)j;
    }
    struct ranked *r = malloc(m * sizeof(*r));
    if (!r)
        return -ENOMEM;
    size_t j = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->count[i] > 0)
            r[j++] = (struct ranked){s->count[i], (uint32_t)i};
    qsort(r, m, sizeof(*r), by_count);
    for (j = 0; j < limit; j++)
        pick[j] = r[j].index;
    free(r);
    qsort(pick, limit, sizeof(*pick), by_value);
    return (long)limit;
}

void keyset_free(keyset_t *s)
{
    free(s->slots);
    free(s->keys);
    free(s->count);
    free(s->where);
    memset(s, 0, sizeof(*s));
}
