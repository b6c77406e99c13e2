/*
 * cudashm-client -- the client side of the CUDA shared-memory test
 * (test_worker_cudashm.py): owns a device allocation that hps-worker opens
 * through its cudaIpcMemHandle.
 *
 *   cudashm-client BYTES [DEVICE]
 *
 * Allocates BYTES on DEVICE (default 0), fills every byte with 0xA5, and
 * prints, one per line:
 *
 *   DEVICES <number of CUDA devices>
 *   SIZE <BYTES>
 *   HANDLE <base64 of the 64-byte cudaIpcMemHandle_t>
 *
 * then reads commands from stdin, one per line, answering "OK" or
 * "ERR <why>" on stdout:
 *
 *   dump OFFSET LEN PATH   device bytes [OFFSET, OFFSET+LEN) -> file PATH
 *   load OFFSET PATH       the bytes of file PATH -> device at OFFSET
 *   quit                   free the memory and exit 0 (so does end of input)
 *
 * Exit status 77 (and "NODEVICE <why>") when there is no CUDA device or no
 * driver (gpucheck.h), or DEVICE is not one of them, so the test can skip;
 * "ERR <why>" and exit status 1 on any other CUDA error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpucheck.h"

#define LINE_MAX_LEN 4200

static void b64_encode(const unsigned char *src, size_t n, char *dst)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned w = (unsigned)src[i] << 16;
        if (i + 1 < n)
            w |= (unsigned)src[i + 1] << 8;
        if (i + 2 < n)
            w |= src[i + 2];
        dst[o++] = abc[w >> 18 & 63];
        dst[o++] = abc[w >> 12 & 63];
        dst[o++] = i + 1 < n ? abc[w >> 6 & 63] : '=';
        dst[o++] = i + 2 < n ? abc[w & 63] : '=';
    }
    dst[o] = '\0';
}

static int dump(char *mem, size_t size, unsigned long long off, unsigned long long len,
                const char *path)
{
    if (off > size || len > size - off) {
        printf("ERR window past the allocation\n");
        return 0;
    }
    unsigned char *buf = malloc(len ? len : 1);
    cudaError_t ce =
        buf ? cudaMemcpy(buf, mem + off, len, cudaMemcpyDeviceToHost) : cudaErrorMemoryAllocation;
    FILE *f = ce == cudaSuccess ? fopen(path, "wb") : NULL;
    if (f && fwrite(buf, 1, len, f) == len && fclose(f) == 0)
        printf("OK\n");
    else
        printf("ERR %s\n", ce != cudaSuccess ? cudaGetErrorString(ce) : "cannot write the file");
    free(buf);
    return 0;
}

static int load(char *mem, size_t size, unsigned long long off, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("ERR cannot open %s\n", path);
        return 0;
    }
    unsigned char *buf = malloc(size);
    size_t n = buf ? fread(buf, 1, size, f) : 0;
    fclose(f);
    cudaError_t ce = cudaSuccess;
    if (!buf || off > size || n > size - off)
        printf("ERR the file does not fit at that offset\n");
    else if ((ce = cudaMemcpy(mem + off, buf, n, cudaMemcpyHostToDevice)) != cudaSuccess)
        printf("ERR %s\n", cudaGetErrorString(ce));
    else
        printf("OK\n");
    free(buf);
    return 0;
}

/* One command line; returns 1 on quit. */
static int command(char *mem, size_t size, char *line)
{
    char path[LINE_MAX_LEN];
    unsigned long long off, len;
    if (strncmp(line, "quit", 4) == 0)
        return 1;
    if (sscanf(line, "dump %llu %llu %4095s", &off, &len, path) == 3)
        return dump(mem, size, off, len, path);
    if (sscanf(line, "load %llu %4095s", &off, path) == 2)
        return load(mem, size, off, path);
    printf("ERR unknown command\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: cudashm-client BYTES [DEVICE]\n");
        return 1;
    }
    size_t size = strtoull(argv[1], NULL, 10);
    int device = argc > 2 ? atoi(argv[2]) : 0;
    int count = 0;
    const char *why;
    int rc = hps_gpu_probe(&count, &why);
    if (rc == 0 && count <= device)
        rc = 77, why = "no such device";
    if (rc != 0) {
        printf("%s %s\n", rc == 77 ? "NODEVICE" : "ERR", why);
        return rc;
    }
    cudaError_t ce;
    char *mem = NULL;
    cudaIpcMemHandle_t h;
    if ((ce = cudaSetDevice(device)) != cudaSuccess ||
        (ce = cudaMalloc((void **)&mem, size)) != cudaSuccess ||
        (ce = cudaMemset(mem, 0xA5, size)) != cudaSuccess ||
        (ce = cudaDeviceSynchronize()) != cudaSuccess ||
        (ce = cudaIpcGetMemHandle(&h, mem)) != cudaSuccess) {
        printf("ERR %s\n", cudaGetErrorString(ce));
        return 1;
    }
    char b64[4 * ((sizeof(h) + 2) / 3) + 1];
    b64_encode((const unsigned char *)&h, sizeof(h), b64);
    printf("DEVICES %d\nSIZE %zu\nHANDLE %s\n", count, size, b64);
    fflush(stdout);
    char line[LINE_MAX_LEN];
    while (fgets(line, sizeof(line), stdin)) {
        int quit = command(mem, size, line);
        fflush(stdout);
        if (quit)
            break;
    }
    cudaFree(mem);
    return 0;
}
