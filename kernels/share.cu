/*
 * share.cu -- caches shared by the worker processes of a device: the one
 * allocation of a cache through the CUDA virtual memory management API with
 * POSIX file-descriptor handles (every importer holds a
 * reference, so the memory outlives the process that created it), and the
 * repair of set locks left behind by a process killed mid-write.
 *
 * The driver API is reached through cudaGetDriverEntryPointByVersion, so the
 * library needs no link against libcuda (the runtime loads the driver).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "gcache_internal.cuh"

/* Driver functions used here, resolved once per call site (cheap: a table
 * lookup in the runtime; create / import are rare). */
struct vmm_api {
    decltype(&cuMemGetAllocationGranularity) granularity;
    decltype(&cuMemCreate) create;
    decltype(&cuMemRelease) release;
    decltype(&cuMemAddressReserve) reserve;
    decltype(&cuMemAddressFree) address_free;
    decltype(&cuMemMap) map;
    decltype(&cuMemUnmap) unmap;
    decltype(&cuMemSetAccess) set_access;
    decltype(&cuMemExportToShareableHandle) export_fd;
    decltype(&cuMemImportFromShareableHandle) import_fd;
};

static hps_err_t vmm_sym(const char *name, void **fn)
{
    cudaDriverEntryPointQueryResult q;
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn)
        return e == cudaSuccess ? HPS_EIO : hps__gcache_cuda_err(e);
    return 0;
}

static hps_err_t vmm_load(vmm_api *a)
{
    hps_err_t err = 0;
    err = err ? err : vmm_sym("cuMemGetAllocationGranularity", (void **)&a->granularity);
    err = err ? err : vmm_sym("cuMemCreate", (void **)&a->create);
    err = err ? err : vmm_sym("cuMemRelease", (void **)&a->release);
    err = err ? err : vmm_sym("cuMemAddressReserve", (void **)&a->reserve);
    err = err ? err : vmm_sym("cuMemAddressFree", (void **)&a->address_free);
    err = err ? err : vmm_sym("cuMemMap", (void **)&a->map);
    err = err ? err : vmm_sym("cuMemUnmap", (void **)&a->unmap);
    err = err ? err : vmm_sym("cuMemSetAccess", (void **)&a->set_access);
    err = err ? err : vmm_sym("cuMemExportToShareableHandle", (void **)&a->export_fd);
    err = err ? err : vmm_sym("cuMemImportFromShareableHandle", (void **)&a->import_fd);
    return err;
}

static hps_err_t cu_err(CUresult r)
{
    if (r == CUDA_SUCCESS)
        return 0;
    return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : HPS_EIO;
}

static CUmemAllocationProp vmm_prop(int device)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

/* The allocation granularity (the same in every process of the host). */
static hps_err_t vmm_granule(const vmm_api *a, int device, size_t *ret)
{
    CUmemAllocationProp p = vmm_prop(device);
    return cu_err(a->granularity(ret, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
}

/* Round x to the nearest multiple of g. */
static uint64_t round_near(uint64_t x, uint64_t g)
{
    return (x + g / 2) / g * g;
}

/*
 * Cut the cache's range [0, c->bytes) into parts (include/hps/gcache.h,
 * "Sharding"): each of the four arrays into num_shards pieces at the
 * granule nearest to its j/num_shards point; a part belongs to the shard
 * whose piece holds its middle byte; neighbouring parts of one shard merge.
 * Deterministic in (num_sets, rwords, num_shards, g): importers rebuild the
 * creator's plan.  Also fills c->shard_set from the rows array's cuts.
 */
static void vmm_plan(hps_gcache_t *c, uint64_t g)
{
    uint64_t off[6], cuts[4 * HPS_GCACHE_MAX_SHARDS + 2];
    uint32_t n = 0, d = c->num_shards;
    hps__gcache_gc_offsets(c->ref.num_sets, c->ref.rwords, off);
    cuts[n++] = 0;
    cuts[n++] = c->bytes;
    for (int a = 0; a < 4; a++)
        for (uint32_t j = 1; j < d; j++) {
            uint64_t b = round_near(off[a] + (off[a + 1] - off[a]) * j / d, g);
            if (b > 0 && b < c->bytes)
                cuts[n++] = b;
        }
    for (uint32_t i = 1; i < n; i++) /* insertion sort: a few dozen cuts */
        for (uint32_t k = i; k > 0 && cuts[k - 1] > cuts[k]; k--) {
            uint64_t t = cuts[k];
            cuts[k] = cuts[k - 1];
            cuts[k - 1] = t;
        }
    c->num_parts = 0;
    for (uint32_t i = 0; i + 1 < n; i++) {
        if (cuts[i + 1] == cuts[i])
            continue;
        uint64_t mid = cuts[i] + (cuts[i + 1] - cuts[i]) / 2;
        int a = 0;
        while (a < 3 && mid >= off[a + 1])
            a++;
        uint64_t in = mid < off[a + 1] ? mid - off[a] : off[a + 1] - off[a] - 1;
        uint32_t shard = (uint32_t)(in * d / (off[a + 1] - off[a]));
        if (shard >= d)
            shard = d - 1;
        uint32_t p = c->num_parts;
        if (p > 0 && c->part_shard[p - 1] == shard) { /* merge */
            c->part_off[p] = cuts[i + 1];
            continue;
        }
        c->part_off[p] = cuts[i];
        c->part_off[p + 1] = cuts[i + 1];
        c->part_shard[p] = (uint8_t)shard;
        c->num_parts++;
    }
    /* Sets homed on shard j: those whose rows start in its piece of vals. */
    uint64_t set_bytes = (uint64_t)HPS_GCACHE_WAYS * c->ref.rwords * sizeof(float);
    c->shard_set[0] = 0;
    c->shard_set[d] = c->ref.num_sets;
    for (uint32_t j = 1; j < d; j++) {
        uint64_t b = round_near(off[2] + (off[3] - off[2]) * j / d, g);
        uint64_t s = b <= off[2] ? 0 : (b - off[2] + set_bytes - 1) / set_bytes;
        c->shard_set[j] = s < c->ref.num_sets ? s : c->ref.num_sets;
    }
}

/* The most bytes one device holds of a cache of num_sets sets of rwords-word
 * rows sharded over num_shards devices (1: the whole, rounded to g). */
extern "C" uint64_t hps__gcache_vmm_max_shard_bytes(uint64_t num_sets, uint32_t rwords,
                                                    uint32_t num_shards, uint64_t g)
{
    hps_gcache_t *c = (hps_gcache_t *)calloc(1, sizeof(*c));
    if (!c)
        return UINT64_MAX;
    uint64_t off[6], most = 0;
    hps__gcache_gc_offsets(num_sets, rwords, off);
    c->ref.num_sets = num_sets;
    c->ref.rwords = rwords;
    c->num_shards = num_shards;
    c->bytes = (off[5] + g - 1) / g * g;
    vmm_plan(c, g);
    for (uint32_t j = 0; j < num_shards; j++) {
        uint64_t b = 0;
        for (uint32_t p = 0; p < c->num_parts; p++)
            b += c->part_shard[p] == j ? c->part_off[p + 1] - c->part_off[p] : 0;
        most = b > most ? b : most;
    }
    free(c);
    return most;
}

/* The VMM granularity of device (2 MiB on current GPUs, if it cannot be asked). */
extern "C" uint64_t hps__gcache_vmm_granularity(int device)
{
    vmm_api a;
    size_t g = 0;
    if (cudaFree(0) != cudaSuccess || vmm_load(&a) || vmm_granule(&a, device, &g) || g == 0) {
        (void)cudaGetLastError();
        return 2u << 20;
    }
    return g;
}

/* Every device of the shards reachable from this process's device. */
static hps_err_t vmm_peers_ok(const hps_gcache_t *c)
{
    for (uint32_t j = 0; j < c->num_shards; j++) {
        int can = 0;
        if (c->shard_dev[j] == c->device)
            continue;
        if (cudaDeviceCanAccessPeer(&can, c->device, c->shard_dev[j]) != cudaSuccess || !can) {
            (void)cudaGetLastError();
            return HPS_EUNSUPPORTED;
        }
    }
    return 0;
}

/* Unmap and release what vmm_setup mapped (handles still 0 are skipped). */
static void vmm_unmap(const vmm_api *a, hps_gcache_t *c, CUdeviceptr ptr)
{
    for (uint32_t p = 0; p < c->num_parts; p++) {
        if (!c->part_handle[p])
            continue;
        a->unmap(ptr + c->part_off[p], c->part_off[p + 1] - c->part_off[p]);
        a->release((CUmemGenericAllocationHandle)c->part_handle[p]);
        c->part_handle[p] = 0;
    }
    a->address_free(ptr, c->bytes);
}

/*
 * Round, plan, reserve the range and map every part: created on its shard's
 * device and exported into fds[p] (fds_in NULL), or imported from fds_in[p].
 * Then allow this process's device to read and write the whole range.
 */
static hps_err_t vmm_setup(hps_gcache_t *c, const int *fds_in, uint32_t num_fds, int *fds)
{
    vmm_api a;
    size_t g = 0;
    HPS_CUDA_TRY(cudaFree(0)); /* why: the primary context must exist for the driver calls */
    hps_err_t err = vmm_load(&a);
    err = err ? err : vmm_granule(&a, c->shard_dev[0], &g);
    err = err ? err : vmm_peers_ok(c);
    if (err)
        return err;
    c->bytes = (c->bytes + g - 1) / g * g;
    vmm_plan(c, g);
    if (fds_in && num_fds != c->num_parts)
        return HPS_EINVAL;
    CUdeviceptr ptr = 0;
    err = cu_err(a.reserve(&ptr, c->bytes, 0, 0, 0));
    if (err)
        return err;
    for (uint32_t p = 0; fds && p < c->num_parts; p++)
        fds[p] = -1;
    for (uint32_t p = 0; !err && p < c->num_parts; p++) {
        CUmemGenericAllocationHandle h = 0;
        uint64_t len = c->part_off[p + 1] - c->part_off[p];
        if (fds_in) {
            err = cu_err(a.import_fd(&h, (void *)(uintptr_t)fds_in[p],
                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        } else {
            CUmemAllocationProp prop = vmm_prop(c->shard_dev[c->part_shard[p]]);
            err = cu_err(a.create(&h, len, &prop, 0));
            if (!err)
                err = cu_err(a.export_fd(&fds[p], h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
            if (err && h) {
                a.release(h);
                h = 0;
            }
        }
        if (!err) {
            err = cu_err(a.map(ptr + c->part_off[p], len, 0, h, 0));
            if (err)
                a.release(h);
            else
                c->part_handle[p] = (uint64_t)h;
        }
    }
    if (!err) {
        CUmemAccessDesc ad;
        memset(&ad, 0, sizeof(ad));
        ad.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        ad.location.id = c->device;
        ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        for (uint32_t p = 0; !err && p < c->num_parts; p++)
            err = cu_err(
                a.set_access(ptr + c->part_off[p], c->part_off[p + 1] - c->part_off[p], &ad, 1));
    }
    if (err) {
        vmm_unmap(&a, c, ptr);
        for (uint32_t p = 0; fds && p < c->num_parts; p++)
            if (fds[p] >= 0)
                close(fds[p]);
        return err;
    }
    c->base = (char *)(uintptr_t)ptr;
    c->shared = 1;
    return 0;
}

extern "C" hps_err_t hps__gcache_vmm_create(hps_gcache_t *c, int *ret_fds)
{
    return vmm_setup(c, NULL, 0, ret_fds);
}

extern "C" hps_err_t hps__gcache_vmm_import(hps_gcache_t *c, const int *fds, uint32_t num_fds)
{
    return vmm_setup(c, fds, num_fds, NULL);
}

extern "C" void hps__gcache_vmm_release(hps_gcache_t *c)
{
    vmm_api a;
    if (vmm_load(&a))
        return;
    vmm_unmap(&a, c, (CUdeviceptr)(uintptr_t)c->base);
}

/* Sets still locked with the version of the snapshot are stuck: empty them
 * (a half-written row must never be read) and release the lock the way the
 * dead writer would have (v + 1, even). */
__global__ void k_repair(hps_table_ref_t t, const uint32_t *snap, unsigned long long *count)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x, mine = 0;
    hps__gcache_writer_begin(t);
    for (uint64_t s = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; s < t.num_sets;
         s += stride) {
        uint32_t v = hps__gcache_ld_ver(&t.ver[s]);
        if (!(v & 1u) || v != snap[s])
            continue;
        for (int w = 0; w < HPS_GCACHE_WAYS; w++) {
            hps__gcache_key(t, s * HPS_GCACHE_WAYS + w) = HPS_GCACHE_EMPTY_KEY;
            t.tags[s * HPS_GCACHE_WAYS + w] = 0;
            hps__gcache_stamp(t, s * HPS_GCACHE_WAYS + w) = 0;
        }
        hps__gcache_fence(); /* why: the emptied set is visible before it is unlocked */
        mine += atomicCAS(&t.ver[s], v, v + 1) == v;
    }
    hps__gcache_block_add((uint64_t *)count, mine);
    hps__gcache_writer_end(t);
}

/* Count dead writer blocks as ended (launched after k_repair on its stream,
 * so that the epoch cannot look closed while a stuck set is still locked). */
__global__ void k_close_epoch(hps_table_ref_t t, uint64_t dead)
{
    atomicAdd((unsigned long long *)&t.ctr[HPS_GC_WR_ENDED], (unsigned long long)dead);
}

extern "C" hps_err_t hps_k_repair(const hps_table_ref_t *ref, const uint32_t *d_snapshot,
                                  unsigned long long *d_count, uint64_t dead, cudaStream_t stream)
{
    k_repair<<<(unsigned)ref->num_sms * 8, 256, 0, stream>>>(*ref, d_snapshot, d_count);
    if (dead)
        k_close_epoch<<<1, 1, 0, stream>>>(*ref, dead);
    HPS_CUDA_TRY(cudaGetLastError());
    return 0;
}

/* The writer epoch's counters: ep[0] begun, ep[1] ended. */
static hps_err_t read_epoch(const hps_gcache_t *c, uint64_t ep[2])
{
    HPS_CUDA_TRY(
        cudaMemcpy(ep, &c->ref.ctr[HPS_GC_WR_BEGUN], 2 * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    return 0;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

extern "C" hps_err_t hps_gcache_repair(hps_gcache_t *c, unsigned wait_ms, uint64_t *ret_repaired)
{
    if (!c || !ret_repaired || wait_ms == 0)
        return HPS_EINVAL;
    HPS_CUDA_TRY(cudaSetDevice(c->device));
    uint32_t *snap = NULL;
    unsigned long long *d_count = NULL, count = 0;
    uint64_t bytes = c->ref.num_sets * sizeof(uint32_t);
    hps_err_t err = hps__gcache_cuda_err(cudaMalloc((void **)&snap, bytes));
    if (!err)
        err = hps__gcache_cuda_err(cudaMalloc((void **)&d_count, sizeof(*d_count)));
    if (!err)
        err = hps__gcache_cuda_err(cudaMemset(d_count, 0, sizeof(*d_count)));
    uint64_t ep0[2], ep1[2];
    if (!err)
        err = read_epoch(c, ep0);
    if (!err)
        err = hps__gcache_cuda_err(cudaMemcpy(snap, c->ref.ver, bytes, cudaMemcpyDeviceToDevice));
    if (!err) {
        sleep_ms(wait_ms); /* a live writer holds a set for microseconds */
        err = read_epoch(c, ep1);
    }
    if (!err) {
        /* no writer block began or ended during the wait: the open ones are dead */
        bool idle = ep0[0] == ep1[0] && ep0[1] == ep1[1];
        err = hps_k_repair(&c->ref, snap, d_count, idle ? ep1[0] - ep1[1] : 0, 0);
    }
    if (!err)
        err = hps__gcache_cuda_err(
            cudaMemcpy(&count, d_count, sizeof(count), cudaMemcpyDeviceToHost));
    cudaFree(snap);
    cudaFree(d_count);
    if (!err)
        *ret_repaired = count;
    return err;
}
