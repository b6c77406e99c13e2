/*
 * miss.h -- the misses of a device-output lookup, handled on the device
 * (kernels/miss.cu): libhps's GPU path (worker/libhps/gpu_lookup.c) calls
 * it after the caches' lookup kernels, so that a call whose tables are
 * answered with their default value needs no host staging, and only the
 * missed keys (not every key and every miss position) travel back to the
 * host for the background insert job and the synchronous fetches.
 *
 * Two forms: hps_gcache_miss_gather, a launch of its own after per-table
 * lookups (large calls), and hps_gcache_miss_lookup_tables, the one-launch
 * lookup over every table with the split as its tail (calls of at most
 * HPS_GCACHE_FUSED_MAX keys per table), where a call with no misses pays
 * nothing for it.
 *
 * Part of the gcache library's API for libhps (C linkage, hps_gcache_
 * prefix), but not of include/hps/gcache.h: it serves libhps's GPU path
 * only.  Only with CUDA.
 */
#ifndef HPS_KERNELS_MISS_H
#define HPS_KERNELS_MISS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "hps/gcache.h"
#include "hps/hps.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One missed key of a call: its key and its position in its table's keys. */
typedef struct hps_gmiss {
    int64_t key;  /**< the key as looked up */
    uint32_t pos; /**< table-relative position (row pos of the table's output) */
    uint32_t pad; /**< zero */
} hps_gmiss_t;

/** hps_gcache_miss_gather's flag bit of a table: fetch its misses now. */
#define HPS_GMISS_SYNC 1u

/**
 * @brief Split the misses of one call by table (one launch for every
 * table): per table, decide as HugeCTR's hit_rate_threshold does, fill the
 * misses of the tables answered with their default value in d_out, and
 * compact every missed key with its position into d_rec.
 *
 * Table t has n_t = d_key_off[t + 1] - d_key_off[t] keys and
 * m_t = d_mcount[t] misses (taken as 0 when n_t = 0, whatever d_mcount[t]
 * holds).  Its misses are synchronous (flag HPS_GMISS_SYNC) when
 * 1.0 - (double)m_t / (double)n_t < threshold, evaluated in IEEE double as
 * the host would; otherwise each missed row of d_out is set to d_def[t].
 * Rows of hits and of synchronous tables' misses are not touched.
 *
 * @param[in] nt          tables (>= 1).
 * @param[in] d_key_off   device, uint32 (nt + 1): ascending, [0] = 0.
 * @param[in] d_out_off   device, uint64 (nt): each table's first float in d_out.
 * @param[in] d_dim       device, uint32 (nt): floats per row of each table.
 * @param[in] d_def       device, float32 (nt): each table's default value.
 * @param[in] threshold   hit_rate_threshold (any value; > 1 makes every
 *                        table with misses synchronous).
 * @param[in] d_keys      device, int64 (d_key_off[nt]): the call's keys,
 *                        table-major.
 * @param[in] d_midx      device, uint32 (d_key_off[nt]): table t's miss
 *                        positions at d_midx[d_key_off[t] .. + m_t), as
 *                        hps_gcache_lookup / hps_gcache_lookup_tables
 *                        leave them.
 * @param[in] d_mcount    device, uint32 (nt): misses per table.
 * @param[out] d_out      device, float32: the call's output (every table's
 *                        rows at d_out_off[t], row length d_dim[t]).
 * @param[out] d_head     device, uint32 (2 * nt): [t] = m_t, [nt + t] = the
 *                        table's flags (HPS_GMISS_SYNC or 0).
 * @param[out] d_rec      device, (sum m_t) records: table t's misses at
 *                        d_rec[sum_{u<t} m_u ..], in d_midx's order.
 * @param stream          everything is enqueued on it; nothing waits on
 *                        the host.  Reads what earlier work on the stream
 *                        wrote (the lookup's d_midx / d_mcount).
 * @return 0, HPS_EINVAL (nt 0 or a NULL pointer) or HPS_EIO (launch
 *         failed; the CUDA error is cleared).
 */
hps_err_t hps_gcache_miss_gather(uint32_t nt, const uint32_t *d_key_off, const uint64_t *d_out_off,
                                 const uint32_t *d_dim, const float *d_def, double threshold,
                                 const int64_t *d_keys, const uint32_t *d_midx,
                                 const uint32_t *d_mcount, float *d_out, uint32_t *d_head,
                                 hps_gmiss_t *d_rec, cudaStream_t stream);

/**
 * @brief hps_gcache_lookup_tables with the split of its misses as its tail
 * (one launch): the same rows, miss positions and counts, and the head and
 * records of hps_gcache_miss_gather at the same threshold, written by the last
 * block of the grid to finish (kernels/miss.cuh: hps__gcache_gm_split_last).
 *
 * Unlike hps_gcache_miss_gather, every missed row of d_out is given its table's
 * default value, the rows of synchronous tables included (their caller
 * overwrites those with the fetched rows; libhps always does), so the tail
 * does no per-row work.
 *
 * @param[in] set       the model's caches (hps_gcache_set_create).
 * @param[in] d_keys    device, int64 (n): the call's keys, table-major.
 * @param[in] n         keys (at most UINT32_MAX; 0 writes a zero head).
 * @param[in] d_key_off device, uint32 (nt + 1), nt = the set's tables.
 * @param[in] d_out_off device, uint64 (nt): each table's first float in d_out.
 * @param[in] d_def     device, float32 (nt): each table's default value.
 * @param[in] threshold hit_rate_threshold, as hps_gcache_miss_gather.
 * @param[out] d_out    device, float32: the rows (as hps_gcache_lookup_tables).
 * @param[out] d_midx   device, uint32 (n): miss positions, table t's at
 *                      d_midx[d_key_off[t] ..].
 * @param[in,out] d_mcount device, uint32 (nt): must be 0 at the launch;
 *                      the misses per table after it.
 * @param[in,out] d_ticket device, uint32: must be 0 at the launch (the
 *                      blocks count themselves out on it); gridDim after.
 * @param[out] d_head   device, uint32 (2 * nt): as hps_gcache_miss_gather.
 * @param[out] d_rec    device, (sum of misses) records: as hps_gcache_miss_gather.
 * @param stream        everything is enqueued on it; nothing waits.
 * @return 0, HPS_EINVAL (a NULL pointer, n > UINT32_MAX) or HPS_EIO.
 */
hps_err_t hps_gcache_miss_lookup_tables(hps_gcache_set_t *set, const int64_t *d_keys, uint64_t n,
                                        const uint32_t *d_key_off, const uint64_t *d_out_off,
                                        const float *d_def, double threshold, float *d_out,
                                        uint32_t *d_midx, uint32_t *d_mcount, uint32_t *d_ticket,
                                        uint32_t *d_head, hps_gmiss_t *d_rec, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
