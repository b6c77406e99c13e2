/*
 * gcache.cu -- host side of the GPU embedding cache: create / destroy,
 * workspaces, the public lookup / insert / update / dump / stats entry
 * points (argument checks, then the hps_k_* launchers of the <op>.cu files),
 * and the two small maintenance kernels (init, occupancy).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gcache_internal.cuh"

#define GC_THREADS 256

__global__ void k_init(hps_table_ref_t t)
{
    uint64_t slots = t.num_sets * HPS_GCACHE_WAYS;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t s = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; s < slots; s += stride) {
        hps__gcache_key(t, s) = HPS_GCACHE_EMPTY_KEY;
        hps__gcache_stamp(t, s) = 0;
    }
}

__global__ void k_occupancy(hps_table_ref_t t, uint64_t lo, uint64_t hi, unsigned long long *count)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x, mine = 0;
    for (uint64_t s = lo + (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; s < hi; s += stride)
        mine += __ldcg(&hps__gcache_key(t, s)) != HPS_GCACHE_EMPTY_KEY;
    hps__gcache_block_add((uint64_t *)count, mine);
}

static unsigned gc_blocks(const hps_table_ref_t *t)
{
    return (unsigned)t->num_sms * (2048 / GC_THREADS);
}

extern "C" hps_err_t hps_k_init(const hps_table_ref_t *ref, cudaStream_t stream)
{
    k_init<<<gc_blocks(ref), GC_THREADS, 0, stream>>>(*ref);
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}

extern "C" hps_err_t hps_k_occupancy(const hps_table_ref_t *ref, uint64_t lo, uint64_t hi,
                                     unsigned long long *d_count, cudaStream_t stream)
{
    k_occupancy<<<gc_blocks(ref), GC_THREADS, 0, stream>>>(*ref, lo, hi, d_count);
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}

/* Point t's arrays into base (hps__gcache_gc_offsets); returns the bytes needed. */
static uint64_t gc_layout(hps_table_ref_t *t, char *base)
{
    uint64_t off[6];
    hps__gcache_gc_offsets(t->num_sets, t->rwords, off);
    if (base) {
        t->rec = (uint64_t *)(base + off[0]);
        t->tags = (uint8_t *)(base + off[1]);
        t->vals = (float *)(base + off[2]);
        t->ver = (uint32_t *)(base + off[3]);
        t->clock = (uint64_t *)(base + off[4]);
        t->ctr = t->clock + 1;
    }
    return off[5];
}

/* Free what gc_new allocated (not the cache memory) and the handle. */
static void gc_handle_free(hps_gcache_t *c)
{
    if (c->stats_stream)
        cudaStreamDestroy(c->stats_stream);
    cudaFree(c->d_occ);
    pthread_mutex_destroy(&c->stats_mu);
    (void)cudaGetLastError();
    free(c);
}

/* Check the arguments and fill the host handle (no cache memory yet). */
static bool dtype_ok(hps_dtype_t dtype)
{
    return (unsigned)dtype < HPS_DTYPE_COUNT;
}

static hps_err_t gc_new(uint64_t capacity_rows, uint32_t dim, hps_dtype_t dtype,
                        hps_gcache_policy_t policy, int device, hps_gcache_t **ret_cache)
{
    if (!ret_cache || capacity_rows == 0 || dim == 0 || dim > HPS_GCACHE_MAX_DIM ||
        !dtype_ok(dtype) || (policy != HPS_GCACHE_LRU && policy != HPS_GCACHE_LFU))
        return HPS_EINVAL;
    uint64_t sets = (capacity_rows + HPS_GCACHE_WAYS - 1) / HPS_GCACHE_WAYS;
    if (sets * HPS_GCACHE_WAYS >= UINT32_MAX) /* slots are 32-bit in the lookup records */
        return HPS_EINVAL;
    HPS_CUDA_TRY(cudaSetDevice(device));
    hps_gcache_t *c = (hps_gcache_t *)calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->device = device;
    c->fused_max = HPS_GCACHE_FUSED_MAX;
    c->ref.num_sets = sets;
    c->ref.dim = dim;
    c->ref.dtype = dtype;
    c->ref.rwords = hps__gcache_gc_row_words(dtype, dim);
    c->ref.policy = policy;
    c->ref.lru_window = ~(uint64_t)(HPS_GCACHE_LRU_RESOLUTION - 1);
    c->bytes = gc_layout(&c->ref, NULL);
    c->num_shards = 1;
    c->shard_dev[0] = device;
    c->shard_set[1] = sets;
    pthread_mutex_init(&c->stats_mu, NULL);
    int major = 0;
    cudaError_t e = cudaDeviceGetAttribute(&c->ref.num_sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    c->pdl_ok = major >= 9; /* griddepcontrol: compute capability 9.0 */
    c->ref.pdl = c->pdl_ok;
    hps_err_t err = e == cudaSuccess ? hps_k_lookup_setup(&c->ref) : 0;
    if (err) {
        gc_handle_free(c);
        return err;
    }
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->stats_stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&c->d_occ, sizeof(*c->d_occ));
    if (e != cudaSuccess) {
        gc_handle_free(c);
        return hps__gcache_cuda_err(e);
    }
    *ret_cache = c;
    return 0;
}

/* Empty every slot of a freshly allocated cache; synchronous. */
static hps_err_t gc_init(hps_gcache_t *c)
{
    gc_layout(&c->ref, c->base);
    HPS_CUDA_TRY(cudaMemset(c->base, 0, c->bytes));
    hps_err_t err = hps_k_init(&c->ref, 0);
    return err ? err : hps__gcache_cuda_err(cudaDeviceSynchronize());
}

extern "C" hps_err_t hps_gcache_create(uint64_t capacity_rows, uint32_t dim, hps_dtype_t dtype,
                                       hps_gcache_policy_t policy, int device,
                                       hps_gcache_t **ret_cache)
{
    hps_gcache_t *c = NULL;
    hps_err_t err = gc_new(capacity_rows, dim, dtype, policy, device, &c);
    if (err)
        return err;
    err = hps__gcache_cuda_err(cudaMalloc((void **)&c->base, c->bytes));
    if (!err)
        err = gc_init(c);
    if (err) {
        hps_gcache_destroy(c);
        return err;
    }
    *ret_cache = c;
    return 0;
}

/* A shareable cache (one piece, or sharded over shards): VMM memory,
 * initialized; its descriptors in ret_fds. */
static hps_err_t gc_create_vmm(uint64_t capacity_rows, uint32_t dim, hps_dtype_t dtype,
                               hps_gcache_policy_t policy, int device,
                               const hps_gcache_shards_t *shards, hps_gcache_t **ret_cache,
                               int *ret_fds, uint32_t *ret_num_fds)
{
    hps_gcache_t *c = NULL;
    int fds[HPS_GCACHE_MAX_PARTS];
    hps_err_t err = gc_new(capacity_rows, dim, dtype, policy, device, &c);
    if (err)
        return err;
    if (shards) {
        c->num_shards = shards->num_devices;
        memcpy(c->shard_dev, shards->devices, shards->num_devices * sizeof(int));
    }
    err = hps__gcache_vmm_create(c, fds);
    if (!err)
        err = gc_init(c);
    if (err) {
        for (uint32_t p = 0; c->base && p < c->num_parts; p++)
            close(fds[p]);
        hps_gcache_destroy(c);
        return err;
    }
    memcpy(ret_fds, fds, c->num_parts * sizeof(int));
    *ret_num_fds = c->num_parts;
    *ret_cache = c;
    return 0;
}

/* Map another process's shareable cache from its descriptors. */
static hps_err_t gc_import_vmm(const int *fds, uint32_t num_fds, uint64_t capacity_rows,
                               uint32_t dim, hps_dtype_t dtype, hps_gcache_policy_t policy,
                               int device, const hps_gcache_shards_t *shards,
                               hps_gcache_t **ret_cache)
{
    hps_gcache_t *c = NULL;
    hps_err_t err = gc_new(capacity_rows, dim, dtype, policy, device, &c);
    if (err)
        return err;
    if (shards) {
        c->num_shards = shards->num_devices;
        memcpy(c->shard_dev, shards->devices, shards->num_devices * sizeof(int));
    }
    err = hps__gcache_vmm_import(c, fds, num_fds);
    if (err) {
        gc_handle_free(c);
        return err;
    }
    gc_layout(&c->ref, c->base);
    *ret_cache = c;
    return 0;
}

static bool shards_ok(const hps_gcache_shards_t *s)
{
    if (!s || s->num_devices == 0 || s->num_devices > HPS_GCACHE_MAX_SHARDS)
        return false;
    for (uint32_t i = 0; i < s->num_devices; i++)
        for (uint32_t j = 0; j < i; j++)
            if (s->devices[i] < 0 || s->devices[i] == s->devices[j])
                return false;
    return s->devices[0] >= 0;
}

extern "C" hps_err_t hps_gcache_create_shared(uint64_t capacity_rows, uint32_t dim,
                                              hps_dtype_t dtype, hps_gcache_policy_t policy,
                                              int device, hps_gcache_t **ret_cache, int *ret_fd)
{
    uint32_t n = 0;
    if (!ret_fd)
        return HPS_EINVAL;
    return gc_create_vmm(capacity_rows, dim, dtype, policy, device, NULL, ret_cache, ret_fd, &n);
}

extern "C" hps_err_t hps_gcache_import(int fd, uint64_t capacity_rows, uint32_t dim,
                                       hps_dtype_t dtype, hps_gcache_policy_t policy, int device,
                                       hps_gcache_t **ret_cache)
{
    if (fd < 0)
        return HPS_EINVAL;
    return gc_import_vmm(&fd, 1, capacity_rows, dim, dtype, policy, device, NULL, ret_cache);
}

extern "C" hps_err_t hps_gcache_create_sharded(uint64_t capacity_rows, uint32_t dim,
                                               hps_dtype_t dtype, hps_gcache_policy_t policy,
                                               int device, const hps_gcache_shards_t *shards,
                                               hps_gcache_t **ret_cache, int *ret_fds,
                                               uint32_t *ret_num_fds)
{
    if (!shards_ok(shards) || !ret_fds || !ret_num_fds)
        return HPS_EINVAL;
    return gc_create_vmm(capacity_rows, dim, dtype, policy, device, shards, ret_cache, ret_fds,
                         ret_num_fds);
}

extern "C" hps_err_t hps_gcache_import_sharded(const int *fds, uint32_t num_fds,
                                               uint64_t capacity_rows, uint32_t dim,
                                               hps_dtype_t dtype, hps_gcache_policy_t policy,
                                               int device, const hps_gcache_shards_t *shards,
                                               hps_gcache_t **ret_cache)
{
    if (!shards_ok(shards) || !fds || num_fds == 0 || num_fds > HPS_GCACHE_MAX_PARTS)
        return HPS_EINVAL;
    for (uint32_t p = 0; p < num_fds; p++)
        if (fds[p] < 0)
            return HPS_EINVAL;
    return gc_import_vmm(fds, num_fds, capacity_rows, dim, dtype, policy, device, shards,
                         ret_cache);
}

extern "C" uint32_t hps_gcache_num_shards(const hps_gcache_t *c)
{
    return c->num_shards;
}

extern "C" hps_err_t hps_gcache_shard_stats(hps_gcache_t *c, uint32_t shard, int *ret_device,
                                            uint64_t *ret_bytes, uint64_t *ret_occupied)
{
    if (!c || shard >= c->num_shards || !ret_device || !ret_bytes || !ret_occupied)
        return HPS_EINVAL;
    uint64_t bytes = 0;
    for (uint32_t p = 0; p < c->num_parts; p++)
        if (c->part_shard[p] == shard)
            bytes += c->part_off[p + 1] - c->part_off[p];
    if (c->num_parts == 0) /* cudaMalloc: one piece */
        bytes = c->bytes;
    HPS_CUDA_TRY(cudaSetDevice(c->device));
    unsigned long long occ = 0;
    cudaStream_t st = c->stats_stream;
    pthread_mutex_lock(&c->stats_mu);
    hps_err_t err = hps__gcache_cuda_err(cudaMemsetAsync(c->d_occ, 0, sizeof(occ), st));
    if (!err)
        err = hps_k_occupancy(&c->ref, c->shard_set[shard] * HPS_GCACHE_WAYS,
                              c->shard_set[shard + 1] * HPS_GCACHE_WAYS, c->d_occ, st);
    if (!err)
        err = hps__gcache_cuda_err(
            cudaMemcpyAsync(&occ, c->d_occ, sizeof(occ), cudaMemcpyDeviceToHost, st));
    if (!err)
        err = hps__gcache_cuda_err(cudaStreamSynchronize(st));
    pthread_mutex_unlock(&c->stats_mu);
    if (err)
        return err;
    *ret_device = c->shard_dev[shard];
    *ret_bytes = bytes;
    *ret_occupied = occ;
    return 0;
}

extern "C" uint64_t hps_gcache_rows_within(uint64_t max_bytes, uint32_t dim, hps_dtype_t dtype,
                                           uint32_t num_devices)
{
    if (dim == 0 || dim > HPS_GCACHE_MAX_DIM || !dtype_ok(dtype) || num_devices == 0 ||
        num_devices > HPS_GCACHE_MAX_SHARDS)
        return 0;
    uint64_t g = hps__gcache_vmm_granularity(0);
    uint32_t rw = hps__gcache_gc_row_words(dtype, dim);
    uint64_t lo = 0, hi = max_bytes / ((4ull * rw + 17) * HPS_GCACHE_WAYS) * num_devices + 1;
    if (hi > UINT32_MAX / HPS_GCACHE_WAYS - 1) /* slots are 32-bit (gc_new) */
        hi = UINT32_MAX / HPS_GCACHE_WAYS - 1;
    while (lo < hi) { /* the most sets whose largest shard fits */
        uint64_t mid = (lo + hi + 1) / 2;
        if (hps__gcache_vmm_max_shard_bytes(mid, rw, num_devices, g) <= max_bytes)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo * HPS_GCACHE_WAYS;
}

extern "C" uint64_t hps_gcache_bytes(const hps_gcache_t *c)
{
    return c->bytes;
}

extern "C" void hps_gcache_destroy(hps_gcache_t *c)
{
    if (!c)
        return;
    if (cudaSetDevice(c->device) == cudaSuccess)
        cudaDeviceSynchronize();
    if (c->shared)
        hps__gcache_vmm_release(c);
    else
        cudaFree(c->base);
    gc_handle_free(c);
}

extern "C" void hps_gcache_set_fused_max(hps_gcache_t *c, uint64_t max_keys)
{
    c->fused_max = max_keys;
}

extern "C" void hps_gcache_set_lookup_path(hps_gcache_t *c, hps_gcache_path_t path)
{
    c->lookup_path = path;
}

extern "C" void hps_gcache_set_strict(hps_gcache_t *c, int strict)
{
    c->ref.strict = strict != 0;
}

extern "C" void hps_gcache_set_overlap(hps_gcache_t *c, int on)
{
    c->ref.pdl = on && c->pdl_ok;
}

extern "C" hps_err_t hps_gcache_set_lru_resolution(hps_gcache_t *c, uint32_t lookups)
{
    if (!c || lookups == 0 || (lookups & (lookups - 1)))
        return HPS_EINVAL;
    c->ref.lru_window = ~(uint64_t)(lookups - 1);
    return 0;
}

extern "C" uint32_t hps_gcache_dim(const hps_gcache_t *c)
{
    return c->ref.dim;
}
extern "C" hps_dtype_t hps_gcache_storage_type(const hps_gcache_t *c)
{
    return (hps_dtype_t)c->ref.dtype;
}
extern "C" uint32_t hps_gcache_row_bytes(const hps_gcache_t *c)
{
    return c->ref.rwords * (uint32_t)sizeof(float);
}
extern "C" uint64_t hps_gcache_capacity(const hps_gcache_t *c)
{
    return c->ref.num_sets * HPS_GCACHE_WAYS;
}
extern "C" uint64_t hps_gcache_num_sets(const hps_gcache_t *c)
{
    return c->ref.num_sets;
}

extern "C" hps_err_t hps_gcache_ws_create(hps_gcache_t *c, uint64_t max_keys,
                                          hps_gcache_ws_t **ret_ws)
{
    if (!c || !ret_ws || max_keys == 0 || max_keys > (1ull << 30))
        return HPS_EINVAL;
    uint64_t cap = 64;
    while (cap < 2 * max_keys)
        cap <<= 1;
    HPS_CUDA_TRY(cudaSetDevice(c->device));
    hps_gcache_ws_t *ws = (hps_gcache_ws_t *)calloc(1, sizeof(*ws));
    if (!ws)
        return -ENOMEM;
    ws->cache = c;
    ws->max_keys = max_keys;
    ws->ref.cap_mask = cap - 1;
    cudaError_t e = cudaMalloc((void **)&ws->ref.dkeys, cap * sizeof(uint64_t));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&ws->ref.dres, cap * sizeof(uint64_t));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&ws->ref.inv, max_keys * sizeof(uint32_t));
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&ws->ref.miss_ctr, 4 * sizeof(uint32_t));
    if (e == cudaSuccess)
        e = cudaMemset(ws->ref.dkeys, 0xff, cap * sizeof(uint64_t)); /* all-ones = empty */
    if (e == cudaSuccess)
        e = cudaMemset(ws->ref.dres, 0xff, cap * sizeof(uint64_t));
    if (e == cudaSuccess)
        e = cudaMemset(ws->ref.miss_ctr, 0, 4 * sizeof(uint32_t));
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        hps_err_t err = hps__gcache_cuda_err(e);
        hps_gcache_ws_destroy(ws);
        return err;
    }
    *ret_ws = ws;
    return 0;
}

extern "C" void hps_gcache_ws_destroy(hps_gcache_ws_t *ws)
{
    if (!ws)
        return;
    if (cudaSetDevice(ws->cache->device) == cudaSuccess)
        cudaDeviceSynchronize();
    cudaFree(ws->ref.dkeys);
    cudaFree(ws->ref.dres);
    cudaFree(ws->ref.inv);
    cudaFree(ws->ref.miss_ctr);
    (void)cudaGetLastError();
    free(ws);
}

/* A lookup through ref: c's own (rows decoded to fp32) or a stored one's. */
static hps_err_t gc_lookup(hps_gcache_t *c, const hps_table_ref_t *ref, hps_gcache_ws_t *ws,
                           const int64_t *d_keys, uint64_t n, float *d_out, uint8_t *d_hit_mask,
                           uint32_t *d_missing_index, uint32_t *d_missing_count,
                           cudaStream_t stream)
{
    if (!ws || ws->cache != c || n > ws->max_keys || (n && (!d_keys || !d_out)) ||
        (!d_missing_index != !d_missing_count))
        return HPS_EINVAL;
    if (n == 0) {
        if (d_missing_count)
            HPS_CUDA_TRY(cudaMemsetAsync(d_missing_count, 0, sizeof(uint32_t), stream));
        return 0;
    }
    int path = c->lookup_path;
    if (path == HPS_GCACHE_PATH_AUTO)
        path = n <= c->fused_max ? HPS_GCACHE_PATH_FUSED : HPS_GCACHE_PATH_BLOCK;
    bool vec = ref->dim % 4 == 0 && ref->dim <= 128 && ((uintptr_t)d_out & 15) == 0;
    if (path == HPS_GCACHE_PATH_BLOCK && !vec)
        path = HPS_GCACHE_PATH_GLOBAL;
    if (path == HPS_GCACHE_PATH_FUSED)
        return hps_k_lookup_fused(ref, &ws->ref, d_keys, n, d_out, d_hit_mask, d_missing_index,
                                  d_missing_count, stream);
    if (path == HPS_GCACHE_PATH_BLOCK)
        return hps_k_lookup_block(ref, &ws->ref, d_keys, n, d_out, d_hit_mask, d_missing_index,
                                  d_missing_count, stream);
    hps_err_t err = hps_k_dedup_probe(ref, &ws->ref, d_keys, n, stream);
    if (err)
        return err;
    return hps_k_scatter(ref, &ws->ref, d_keys, n, d_out, d_hit_mask, d_missing_index,
                         d_missing_count, stream);
}

extern "C" hps_err_t hps_gcache_lookup(hps_gcache_t *c, hps_gcache_ws_t *ws, const int64_t *d_keys,
                                       uint64_t n, float *d_out, uint8_t *d_hit_mask,
                                       uint32_t *d_missing_index, uint32_t *d_missing_count,
                                       cudaStream_t stream)
{
    if (!c)
        return HPS_EINVAL;
    return gc_lookup(c, &c->ref, ws, d_keys, n, d_out, d_hit_mask, d_missing_index, d_missing_count,
                     stream);
}

/* The stored lookup is the fp32 lookup of rows of rwords "floats": the same
 * kernels copy the slot words unconverted. */
extern "C" hps_err_t hps_gcache_lookup_stored(hps_gcache_t *c, hps_gcache_ws_t *ws,
                                              const int64_t *d_keys, uint64_t n, void *d_out,
                                              uint8_t *d_hit_mask, uint32_t *d_missing_index,
                                              uint32_t *d_missing_count, cudaStream_t stream)
{
    if (!c || ((uintptr_t)d_out & 3))
        return HPS_EINVAL;
    hps_table_ref_t r = c->ref;
    r.dim = r.rwords;
    r.dtype = HPS_DTYPE_FP32;
    return gc_lookup(c, &r, ws, d_keys, n, (float *)d_out, d_hit_mask, d_missing_index,
                     d_missing_count, stream);
}

static hps_err_t gc_write(hps_gcache_t *c, const int64_t *d_keys, const void *d_values, uint64_t n,
                          int update_only, cudaStream_t stream)
{
    if (!c || (n && (!d_keys || !d_values)))
        return HPS_EINVAL;
    if (n == 0)
        return 0;
    return hps_k_insert(&c->ref, d_keys, d_values, n, update_only, stream);
}

extern "C" hps_err_t hps_gcache_insert(hps_gcache_t *c, const int64_t *d_keys, const void *d_values,
                                       uint64_t n, cudaStream_t stream)
{
    return gc_write(c, d_keys, d_values, n, 0, stream);
}

extern "C" hps_err_t hps_gcache_update(hps_gcache_t *c, const int64_t *d_keys, const void *d_values,
                                       uint64_t n, cudaStream_t stream)
{
    return gc_write(c, d_keys, d_values, n, 1, stream);
}

extern "C" hps_err_t hps_gcache_dump(hps_gcache_t *c, uint64_t start_set, uint64_t end_set,
                                     int64_t *d_keys_out, uint32_t *d_count, cudaStream_t stream)
{
    if (!c || !d_keys_out || !d_count || start_set > end_set || end_set > c->ref.num_sets)
        return HPS_EINVAL;
    return hps_k_dump(&c->ref, start_set, end_set, d_keys_out, d_count, stream);
}

/* Subtract from the counters: adding the two's complement (the counters
 * are unsigned and only ever read whole). */
__global__ static void k_uncount(uint64_t *ctr, uint64_t lookups, uint64_t hits)
{
    atomicAdd((unsigned long long *)&ctr[HPS_GC_LOOKUPS], (unsigned long long)(0ull - lookups));
    atomicAdd((unsigned long long *)&ctr[HPS_GC_HITS], (unsigned long long)(0ull - hits));
}

extern "C" hps_err_t hps_gcache_uncount(hps_gcache_t *c, uint64_t lookups, uint64_t hits,
                                        cudaStream_t stream)
{
    if (!c || hits > lookups)
        return HPS_EINVAL;
    if (lookups == 0)
        return 0;
    k_uncount<<<1, 1, 0, stream>>>(c->ref.ctr, lookups, hits);
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}

extern "C" hps_err_t hps_gcache_stats(hps_gcache_t *c, hps_gcache_stats_t *ret)
{
    if (!c || !ret)
        return HPS_EINVAL;
    HPS_CUDA_TRY(cudaSetDevice(c->device));
    unsigned long long occ = 0;
    uint64_t ctr[HPS_GC_NCTR];
    cudaStream_t st = c->stats_stream;
    pthread_mutex_lock(&c->stats_mu);
    hps_err_t err = hps__gcache_cuda_err(cudaMemsetAsync(c->d_occ, 0, sizeof(occ), st));
    if (!err)
        err = hps_k_occupancy(&c->ref, 0, c->ref.num_sets * HPS_GCACHE_WAYS, c->d_occ, st);
    if (!err)
        err = hps__gcache_cuda_err(
            cudaMemcpyAsync(&occ, c->d_occ, sizeof(occ), cudaMemcpyDeviceToHost, st));
    if (!err)
        err = hps__gcache_cuda_err(
            cudaMemcpyAsync(ctr, c->ref.ctr, sizeof(ctr), cudaMemcpyDeviceToHost, st));
    if (!err)
        err = hps__gcache_cuda_err(cudaStreamSynchronize(st));
    pthread_mutex_unlock(&c->stats_mu);
    if (err)
        return err;
    ret->capacity_rows = c->ref.num_sets * HPS_GCACHE_WAYS;
    ret->num_sets = c->ref.num_sets;
    ret->occupied = occ;
    ret->lookups = ctr[HPS_GC_LOOKUPS];
    ret->hits = ctr[HPS_GC_HITS];
    ret->inserts = ctr[HPS_GC_INSERTS];
    ret->evictions = ctr[HPS_GC_EVICTIONS];
    ret->updates = ctr[HPS_GC_UPDATES];
    ret->lock_timeouts = ctr[HPS_GC_LOCK_TIMEOUTS];
    /* the copy may read ended after begun: clamp a writer that ended in between */
    ret->writer_blocks_open = ctr[HPS_GC_WR_BEGUN] > ctr[HPS_GC_WR_ENDED]
                                  ? ctr[HPS_GC_WR_BEGUN] - ctr[HPS_GC_WR_ENDED]
                                  : 0;
    return 0;
}
