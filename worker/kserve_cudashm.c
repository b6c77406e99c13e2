/*
 * kserve_cudashm.c -- the device side of the CUDA shared-memory extension:
 * open a client's cudaIpcMemHandle, find the size of the allocation behind
 * it, copy to and from it; plus the base64 decoder of raw_handle.b64.
 *
 * Only builds with CUDA (HPS_HAVE_CUDA) do anything; without CUDA the
 * functions say so (501 / 500) and hps__kserve_cuda_ipc_supported() is false, so
 * the server keeps answering /v2/cudasharedmemory with 501.
 *
 * Size of a region.  cudaPointerGetAttributes does not give the size of an
 * allocation; the driver's cuMemGetAddressRange does.  It is fetched through
 * cudart (cudaGetDriverEntryPointByVersion) so that the worker needs no
 * -lcuda at link time.
 *
 * Devices and streams.  Every call sets the region's device on the calling
 * HTTP thread and restores the previous one.  Each region has its own
 * non-blocking stream, so its copies never wait for (or make wait) the work
 * the GPU embedding cache queues on the same device; a copy is polled with
 * cudaStreamQuery until done or HPS__KSERVE_CUDA_COPY_TIMEOUT_MS have passed.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hps_build_config.h"
#include "worker/kserve_internal.h"

#if HPS_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

/* ------------------------------------------------------------------------ */
/* Base64                                                                    */
/* ------------------------------------------------------------------------ */

/* The 6-bit value of a base64 character, -1 if it is not one. */
static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Decode one 4-character group; returns its byte count (1..3) or -1.
 * last: the group ends the input, so it may carry '=' padding. */
static int b64_group(const char *g, bool last, unsigned char out[3])
{
    uint32_t w = 0;
    int pad = 0;
    for (int j = 0; j < 4; j++) {
        int v = 0;
        if (g[j] == '=') {
            if (!last || j < 2)
                return -1;
            pad++;
        } else if (pad || (v = b64_value((unsigned char)g[j])) < 0) {
            return -1; /* a character after '=' or outside the alphabet */
        }
        w = w << 6 | (uint32_t)v;
    }
    out[0] = (unsigned char)(w >> 16);
    out[1] = (unsigned char)(w >> 8);
    out[2] = (unsigned char)w;
    return 3 - pad;
}

long hps__kserve_b64_decode(const char *src, size_t n, unsigned char *dst, size_t cap)
{
    if (n % 4 != 0 || n / 4 * 3 > (size_t)LONG_MAX)
        return -1;
    size_t out = 0;
    for (size_t i = 0; i < n; i += 4) {
        unsigned char b[3];
        int k = b64_group(src + i, i + 4 == n, b);
        if (k < 0 || out + (size_t)k > cap)
            return -1;
        memcpy(dst + out, b, (size_t)k);
        out += (size_t)k;
    }
    return (long)out;
}

#if HPS_HAVE_CUDA

/* ------------------------------------------------------------------------ */
/* CUDA                                                                      */
/* ------------------------------------------------------------------------ */

_Static_assert(sizeof(cudaIpcMemHandle_t) == HPS__KSERVE_CUDA_IPC_HANDLE_BYTES,
               "cudaIpcMemHandle_t is not 64 bytes");

/* cuMemGetAddressRange (the _v2 ABI, CUDA 3.2 on). */
typedef CUresult (*get_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);

bool hps__kserve_cuda_ipc_supported(void)
{
    return true;
}

/* Make device current on this thread; *prev = the one to restore (-1: none). */
static cudaError_t enter(int device, int *prev)
{
    if (cudaGetDevice(prev) != cudaSuccess)
        *prev = -1;
    return cudaSetDevice(device);
}

static void leave(int prev)
{
    if (prev >= 0)
        cudaSetDevice(prev);
}

/* Bytes from p to the end of its allocation; the device is current. */
static int alloc_avail(const char *name, void *p, uint64_t *ret, hps__kserve_kerr_t *err)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t ce =
        cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020, cudaEnableDefault, &q);
    if (ce != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn)
        return hps__kserve_kerr_set(
            err, 500,
            "failed to register CUDA shared memory region '%.128s': the driver "
            "has no cuMemGetAddressRange (%s)",
            name, cudaGetErrorString(ce));
    get_range_fn get_range;
    memcpy(&get_range, &fn, sizeof(get_range));
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult cr = get_range(&base, &size, (CUdeviceptr)(uintptr_t)p);
    if (cr != CUDA_SUCCESS)
        return hps__kserve_kerr_set(err, 400,
                                    "failed to register CUDA shared memory region '%.128s': "
                                    "cuMemGetAddressRange failed with CUresult %d",
                                    name, (int)cr);
    *ret = (uint64_t)(base + size - (CUdeviceptr)(uintptr_t)p);
    return 0;
}

/* Open the handle on the current device and check byte_size against it. */
static int open_checked(const char *name, const unsigned char *handle, uint64_t byte_size,
                        struct hps__kserve_cuda_ipc *m, hps__kserve_kerr_t *err)
{
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof(h));
    void *p = NULL;
    cudaError_t ce = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (ce != cudaSuccess) {
        cudaGetLastError();
        return hps__kserve_kerr_set(
            err, 400,
            "failed to register CUDA shared memory region '%.128s': failed to "
            "open CUDA IPC handle: %s",
            name, cudaGetErrorString(ce));
    }
    m->base = p;
    if (alloc_avail(name, p, &m->avail, err))
        return -1;
    if (byte_size > m->avail)
        return hps__kserve_kerr_set(
            err, 400,
            "failed to register CUDA shared memory region '%.128s': invalid "
            "args: byte_size %llu is larger than the CUDA allocation (%llu "
            "bytes)",
            name, (unsigned long long)byte_size, (unsigned long long)m->avail);
    cudaStream_t st;
    ce = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (ce != cudaSuccess)
        return hps__kserve_kerr_set(err, 500,
                                    "failed to register CUDA shared memory region '%.128s': "
                                    "cudaStreamCreateWithFlags: %s",
                                    name, cudaGetErrorString(ce));
    m->stream = st;
    return 0;
}

int hps__kserve_cuda_ipc_open(const char *name, const unsigned char *handle, int64_t device_id,
                              uint64_t byte_size, struct hps__kserve_cuda_ipc *ret,
                              hps__kserve_kerr_t *err)
{
    memset(ret, 0, sizeof(*ret));
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        count = 0;
    }
    if (device_id < 0 || device_id >= count)
        return hps__kserve_kerr_set(
            err, 400,
            "failed to register CUDA shared memory region '%.128s': invalid "
            "device_id %lld: this server sees %d CUDA device(s)",
            name, (long long)device_id, count);
    int prev;
    cudaError_t ce = enter((int)device_id, &prev);
    if (ce != cudaSuccess) {
        leave(prev);
        return hps__kserve_kerr_set(
            err, 400,
            "failed to register CUDA shared memory region '%.128s': cannot use "
            "CUDA device %lld: %s",
            name, (long long)device_id, cudaGetErrorString(ce));
    }
    ret->device = (int)device_id;
    int rc = open_checked(name, handle, byte_size, ret, err);
    leave(prev);
    if (rc)
        hps__kserve_cuda_ipc_close(ret);
    return rc;
}

/* Wait for the stream, at most HPS__KSERVE_CUDA_COPY_TIMEOUT_MS. */
static cudaError_t wait_stream(cudaStream_t st)
{
    uint64_t deadline =
        hps__kserve_now_ns() + (uint64_t)HPS__KSERVE_CUDA_COPY_TIMEOUT_MS * 1000000u;
    for (unsigned i = 0;; i++) {
        cudaError_t ce = cudaStreamQuery(st);
        if (ce != cudaErrorNotReady)
            return ce;
        if (hps__kserve_now_ns() > deadline)
            return cudaErrorTimeout;
        if (i >= 64) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

void hps__kserve_cuda_ipc_close(struct hps__kserve_cuda_ipc *m)
{
    if (!m->base)
        return;
    int prev;
    enter(m->device, &prev);
    if (m->stream) {
        /* No request holds the region, so the stream is idle unless a copy
         * timed out; then the destroy waits for it in the background. */
        wait_stream((cudaStream_t)m->stream);
        cudaStreamDestroy((cudaStream_t)m->stream);
    }
    cudaIpcCloseMemHandle(m->base);
    cudaGetLastError();
    leave(prev);
    memset(m, 0, sizeof(*m));
}

/* One copy on the region's stream, waited for. */
static int copy(const struct hps__kserve_cuda_ipc *m, void *dst, const void *src, size_t n,
                enum cudaMemcpyKind kind, hps__kserve_kerr_t *err)
{
    int prev;
    cudaError_t ce = enter(m->device, &prev);
    if (ce == cudaSuccess)
        ce = cudaMemcpyAsync(dst, src, n, kind, (cudaStream_t)m->stream);
    if (ce == cudaSuccess)
        ce = wait_stream((cudaStream_t)m->stream);
    leave(prev);
    if (ce == cudaSuccess)
        return 0;
    cudaGetLastError();
    return hps__kserve_kerr_set(
        err, 500, "CUDA shared memory: copy of %zu bytes %s device %d failed: %s", n,
        kind == cudaMemcpyHostToDevice ? "to" : "from", m->device, cudaGetErrorString(ce));
}

int hps__kserve_cuda_ipc_read(const struct hps__kserve_cuda_ipc *m, uint64_t off, void *dst,
                              size_t n, hps__kserve_kerr_t *err)
{
    return n ? copy(m, dst, m->base + off, n, cudaMemcpyDeviceToHost, err) : 0;
}

int hps__kserve_cuda_ipc_write(const struct hps__kserve_cuda_ipc *m, uint64_t off, const void *src,
                               size_t n, hps__kserve_kerr_t *err)
{
    return n ? copy(m, m->base + off, src, n, cudaMemcpyHostToDevice, err) : 0;
}

#else /* !HPS_HAVE_CUDA */

bool hps__kserve_cuda_ipc_supported(void)
{
    return false;
}

int hps__kserve_cuda_ipc_open(const char *name, const unsigned char *handle, int64_t device_id,
                              uint64_t byte_size, struct hps__kserve_cuda_ipc *ret,
                              hps__kserve_kerr_t *err)
{
    (void)name, (void)handle, (void)device_id, (void)byte_size;
    memset(ret, 0, sizeof(*ret));
    return hps__kserve_kerr_set(err, 501, "CUDA shared memory is not supported by this server");
}

void hps__kserve_cuda_ipc_close(struct hps__kserve_cuda_ipc *m)
{
    (void)m;
}

int hps__kserve_cuda_ipc_read(const struct hps__kserve_cuda_ipc *m, uint64_t off, void *dst,
                              size_t n, hps__kserve_kerr_t *err)
{
    (void)m, (void)off, (void)dst, (void)n;
    return hps__kserve_kerr_set(err, 500, "CUDA shared memory is not supported by this server");
}

int hps__kserve_cuda_ipc_write(const struct hps__kserve_cuda_ipc *m, uint64_t off, const void *src,
                               size_t n, hps__kserve_kerr_t *err)
{
    (void)m, (void)off, (void)src, (void)n;
    return hps__kserve_kerr_set(err, 500, "CUDA shared memory is not supported by this server");
}

#endif /* HPS_HAVE_CUDA */
