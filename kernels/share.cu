/*
 * share.cu -- caches shared by the worker processes of a device: the one
 * allocation of a cache through the CUDA virtual memory management API with
 * POSIX file-descriptor handles (DESIGN.md: every importer holds a
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
        return e == cudaSuccess ? HPS_EIO : hps__cuda_err(e);
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

/* Round c->bytes up to the device's granularity (the same in every process). */
static hps_err_t vmm_round(const vmm_api *a, hps_gcache_t *c)
{
    CUmemAllocationProp p = vmm_prop(c->device);
    size_t g = 0;
    hps_err_t err = cu_err(a->granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (err)
        return err;
    c->bytes = (c->bytes + g - 1) / g * g;
    return 0;
}

/* Reserve an address range, map handle h there, allow this device access. */
static hps_err_t vmm_map(const vmm_api *a, hps_gcache_t *c, CUmemGenericAllocationHandle h)
{
    CUdeviceptr ptr = 0;
    CUmemAccessDesc ad;
    memset(&ad, 0, sizeof(ad));
    ad.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ad.location.id = c->device;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    hps_err_t err = cu_err(a->reserve(&ptr, c->bytes, 0, 0, 0));
    if (err)
        return err;
    err = cu_err(a->map(ptr, c->bytes, 0, h, 0));
    if (!err) {
        err = cu_err(a->set_access(ptr, c->bytes, &ad, 1));
        if (err)
            a->unmap(ptr, c->bytes);
    }
    if (err) {
        a->address_free(ptr, c->bytes);
        return err;
    }
    c->base = (char *)(uintptr_t)ptr;
    c->handle = (uint64_t)h;
    c->shared = 1;
    return 0;
}

extern "C" hps_err_t hps__vmm_create(hps_gcache_t *c, int *ret_fd)
{
    vmm_api a;
    CUmemGenericAllocationHandle h;
    HPS_CUDA_TRY(cudaFree(0)); /* why: the primary context must exist for the driver calls */
    hps_err_t err = vmm_load(&a);
    err = err ? err : vmm_round(&a, c);
    if (err)
        return err;
    CUmemAllocationProp p = vmm_prop(c->device);
    err = cu_err(a.create(&h, c->bytes, &p, 0));
    if (err)
        return err;
    int fd = -1;
    err = cu_err(a.export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    if (!err)
        err = vmm_map(&a, c, h);
    if (err) {
        if (fd >= 0)
            close(fd);
        a.release(h);
        return err;
    }
    *ret_fd = fd;
    return 0;
}

extern "C" hps_err_t hps__vmm_import(hps_gcache_t *c, int fd)
{
    vmm_api a;
    CUmemGenericAllocationHandle h;
    HPS_CUDA_TRY(cudaFree(0));
    hps_err_t err = vmm_load(&a);
    err = err ? err : vmm_round(&a, c);
    if (err)
        return err;
    err = cu_err(a.import_fd(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    if (err)
        return err;
    err = vmm_map(&a, c, h);
    if (err)
        a.release(h);
    return err;
}

extern "C" void hps__vmm_release(hps_gcache_t *c)
{
    vmm_api a;
    if (vmm_load(&a))
        return;
    CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)c->base;
    a.unmap(ptr, c->bytes);
    a.address_free(ptr, c->bytes);
    a.release((CUmemGenericAllocationHandle)c->handle);
}

/* Sets still locked with the version of the snapshot are stuck: empty them
 * (a half-written row must never be read) and release the lock the way the
 * dead writer would have (v + 1, even). */
__global__ void k_repair(hps_table_ref_t t, const uint32_t *snap, unsigned long long *count)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x, mine = 0;
    hps__writer_begin(t);
    for (uint64_t s = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; s < t.num_sets;
         s += stride) {
        uint32_t v = hps__ld_ver(&t.ver[s]);
        if (!(v & 1u) || v != snap[s])
            continue;
        for (int w = 0; w < HPS_GCACHE_WAYS; w++) {
            hps__key(t, s * HPS_GCACHE_WAYS + w) = HPS_GCACHE_EMPTY_KEY;
            t.tags[s * HPS_GCACHE_WAYS + w] = 0;
            hps__stamp(t, s * HPS_GCACHE_WAYS + w) = 0;
        }
        hps__fence(); /* why: the emptied set is visible before it is unlocked */
        mine += atomicCAS(&t.ver[s], v, v + 1) == v;
    }
    hps__block_add((uint64_t *)count, mine);
    hps__writer_end(t);
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
    hps_err_t err = hps__cuda_err(cudaMalloc((void **)&snap, bytes));
    if (!err)
        err = hps__cuda_err(cudaMalloc((void **)&d_count, sizeof(*d_count)));
    if (!err)
        err = hps__cuda_err(cudaMemset(d_count, 0, sizeof(*d_count)));
    uint64_t ep0[2], ep1[2];
    if (!err)
        err = read_epoch(c, ep0);
    if (!err)
        err = hps__cuda_err(cudaMemcpy(snap, c->ref.ver, bytes, cudaMemcpyDeviceToDevice));
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
        err = hps__cuda_err(cudaMemcpy(&count, d_count, sizeof(count), cudaMemcpyDeviceToHost));
    cudaFree(snap);
    cudaFree(d_count);
    if (!err)
        *ret_repaired = count;
    return err;
}
