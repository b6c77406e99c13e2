/*
 * kserve_shm.c -- the shared-memory extensions: a table of regions
 * registered by clients, lent to inference requests.  System regions are
 * POSIX shared-memory objects; CUDA regions (CUDA builds, s->cuda) are
 * device memory of a client process opened from its cudaIpcMemHandle
 * (kserve_cudashm.c).  Both kinds share one name space, as in Triton.
 *
 * Registration (Triton's SharedMemoryManager): shm_open(key) read-write,
 * or read-only when the key's permissions allow only that; the registered
 * window [offset, offset + byte_size) must lie inside the object (fstat);
 * the window is mapped (from the page below offset, so any offset works).
 * Names are unique; the status lists regions sorted by name, like Triton's
 * std::map.  Unlike Triton, the server refuses keys of its own segments
 * (prefixes "hps." and ".hps.", a segment being built: a client could
 * otherwise have OUTPUT0 written over the volatile DB), keys with a NUL byte, and more than
 * HPS__KSERVE_SHM_MAX_REGIONS regions.
 *
 * Truncation.  A request reads and writes a system window in place, and a
 * mapped page past the end of its object faults (SIGBUS).  So a region
 * keeps its descriptor, and every hps__kserve_shm_acquire() checks the object's
 * size again (fstat): a client that shrank its object after registering it
 * gets a 400, not a dead worker.  (A client that shrinks it while a
 * request of its own is using the window can still fault the worker: that
 * window is mapped memory for the length of the lookup.)
 *
 * CUDA registration: raw_handle.b64 must decode to the 64 bytes of a
 * cudaIpcMemHandle_t, device_id must be a device this process sees, the
 * handle must open there, and byte_size may not exceed the allocation
 * behind it.  A CUDA window is never dereferenced here: hps__kserve_shm_read() and
 * hps__kserve_shm_write() copy to and from it on the region's device.
 *
 * Lifetime.  A region is referenced by the table while registered and by
 * every request that uses it (hps__kserve_shm_acquire .. hps__kserve_shm_release).
 * Unregistering removes it from the table at once (its name can be
 * registered again) and unmaps it when the last request lets go, so an
 * in-flight lookup never touches unmapped memory.  One mutex guards the
 * table and the counts; it is held only for list walks and counter updates,
 * never across a lookup.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "worker/kserve_internal.h"

/** Keys of this prefix belong to Triton's Python backend. */
#define RESERVED_PREFIX "triton_python_backend_shm_region_"
/** Keys of this prefix name HPS segments (shmdb/segment.c: "/hps.<name>"). */
#define SEGMENT_PREFIX "hps."
/** ... and of this one a segment being built, and the coordinator's lock
 * (shmdb/segment.c, coordinator/segment.c: "/.hps.<name>.new",
 * "/.hps.<name>.lock"): a build is published under the first prefix. */
#define STAGED_PREFIX ".hps."
/** Longest region name or key accepted. */
#define SHM_NAME_MAX 255
/** Most regions registered at once, of both kinds: each system region holds
 * a descriptor and a mapping (vm.max_map_count), and the table is a list. */
#define HPS__KSERVE_SHM_MAX_REGIONS 4096

#define NAMEFMT       "%.*s"
#define NAMEARG(s, n) (int)((n) > 128 ? hps__kserve_utf8_cut((s), 128) : (n)), (s)

struct hps__kserve_shm_region {
    struct hps__kserve_shm_region *next;
    char *name;
    char *key;
    uint64_t offset;
    uint64_t byte_size;
    int fd;    /* the object (system regions; -1 otherwise): its size is checked per use */
    void *map; /* mmap base, page-aligned */
    size_t map_len;
    char *addr; /* the registered window: map + offset % page */
    bool writable;
    bool cuda;                       /* a CUDA region: addr = ipc.base, no key */
    int64_t device_id;               /* cuda */
    struct hps__kserve_cuda_ipc ipc; /* cuda */
    bool registered;                 /* in the table */
    unsigned users;                  /* requests holding it */
};

void hps__kserve_shm_init(struct hps__kserve_shm *s, bool enabled, bool cuda)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    s->enabled = enabled;
    s->cuda = enabled && cuda && hps__kserve_cuda_ipc_supported();
}

static void region_free(struct hps__kserve_shm_region *r)
{
    if (r->cuda)
        hps__kserve_cuda_ipc_close(&r->ipc);
    if (r->map)
        munmap(r->map, r->map_len);
    if (r->fd >= 0)
        close(r->fd);
    free(r->name);
    free(r->key);
    free(r);
}

void hps__kserve_shm_fini(struct hps__kserve_shm *s)
{
    hps__kserve_shm_unregister(s, false, NULL);
    hps__kserve_shm_unregister(s, true, NULL);
    pthread_mutex_destroy(&s->mu);
}

/* ------------------------------------------------------------------------ */
/* Register                                                                  */
/* ------------------------------------------------------------------------ */

/** The fields of a register request. */
struct reg_args {
    const char *name;
    const char *key;
    size_t key_len; /* as JSON gave it: a NUL inside makes it longer than strlen */
    int64_t offset;
    int64_t byte_size;
};

/* Triton's message for a register request body that is not an object. */
static int reg_object(json_object *root, hps__kserve_kerr_t *err)
{
    if (json_object_is_type(root, json_type_object))
        return 0;
    return hps__kserve_kerr_set(
        err, 400,
        "failed to parse the request JSON buffer: the request must be a JSON "
        "object");
}

/* Triton's messages for a missing or mistyped field. */
static int reg_field(json_object *root, const char *field, json_type type, json_object **ret,
                     hps__kserve_kerr_t *err)
{
    if (!json_object_object_get_ex(root, field, ret))
        return hps__kserve_kerr_set(err, 400, "Shared memory register request has no '%s' field",
                                    field);
    if (!json_object_is_type(*ret, type))
        return hps__kserve_kerr_set(err, 400, "Unable to parse '%s'", field);
    return 0;
}

static int reg_parse(json_object *root, struct reg_args *a, hps__kserve_kerr_t *err)
{
    json_object *v;
    if (reg_object(root, err))
        return -1;
    if (reg_field(root, "key", json_type_string, &v, err))
        return -1;
    a->key = json_object_get_string(v);
    a->key_len = (size_t)json_object_get_string_len(v);
    a->offset = 0;
    if (json_object_object_get_ex(root, "offset", &v)) {
        if (!json_object_is_type(v, json_type_int) || (a->offset = json_object_get_int64(v)) < 0)
            return hps__kserve_kerr_set(err, 400, "Unable to parse 'offset'");
    }
    if (reg_field(root, "byte_size", json_type_int, &v, err))
        return -1;
    a->byte_size = json_object_get_int64(v);
    if (a->byte_size < 0)
        return hps__kserve_kerr_set(err, 400, "Unable to parse 'byte_size'");
    return 0;
}

/* The first 128 bytes of a key for a message, a NUL byte written as the
 * two characters \0 (a C string stops at it; the JSON body escapes the
 * rest).  buf: at least 257 bytes. */
static const char *key_text(const struct reg_args *a, char *buf)
{
    size_t n = 0;
    for (size_t i = 0; i < a->key_len && i < 128; i++) {
        if (a->key[i] == '\0') {
            buf[n++] = '\\';
            buf[n++] = '0';
        } else {
            buf[n++] = a->key[i];
        }
    }
    buf[n] = '\0';
    return buf;
}

/* Keys the server refuses: empty, all slashes or with a NUL byte, the
 * reserved prefix, and the prefix of HPS segments. */
static int check_key(const struct reg_args *a, hps__kserve_kerr_t *err)
{
    const char *k = a->key + strspn(a->key, "/");
    char kb[257];
    if (*k == '\0' || a->key_len > SHM_NAME_MAX || strlen(a->key) != a->key_len || strchr(k, '/'))
        return hps__kserve_kerr_set(err, 400,
                                    "cannot register shared memory region '%.128s' with key "
                                    "'%s' as the key is not a valid shared memory key",
                                    a->name, key_text(a, kb));
    if (strncmp(k, RESERVED_PREFIX, strlen(RESERVED_PREFIX)) == 0)
        return hps__kserve_kerr_set(
            err, 400,
            "cannot register shared memory region '%.128s' with key "
            "'%.128s' as the key contains the reserved prefix '" RESERVED_PREFIX "'",
            a->name, a->key);
    if (strncmp(k, SEGMENT_PREFIX, strlen(SEGMENT_PREFIX)) == 0 ||
        strncmp(k, STAGED_PREFIX, strlen(STAGED_PREFIX)) == 0)
        return hps__kserve_kerr_set(
            err, 400,
            "cannot register shared memory region '%.128s' with key '%.128s' as "
            "the key names an HPS segment (prefix '" SEGMENT_PREFIX "' or '" STAGED_PREFIX "')",
            a->name, a->key);
    return 0;
}

/* Open the key read-write, else read-only.  O_NONBLOCK: a FIFO put in
 * /dev/shm under the key would block the read-only open until a writer came
 * (glibc passes the flag to open(2); it changes nothing for a shm object). */
static int open_key(const struct reg_args *a, bool *writable, hps__kserve_kerr_t *err)
{
    *writable = true;
    int fd = shm_open(a->key, O_RDWR | O_NONBLOCK | O_CLOEXEC, 0);
    if (fd < 0 && errno == EACCES) {
        *writable = false;
        fd = shm_open(a->key, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
    }
    if (fd < 0)
        hps__kserve_kerr_set(err, 500, "Unable to open shared memory region: '%.128s'", a->key);
    return fd;
}

/* Check that the key is a shared-memory object (a regular file of
 * /dev/shm), check the window against its size and map it. */
static int map_window(int fd, const struct reg_args *a, struct hps__kserve_shm_region *r,
                      hps__kserve_kerr_t *err)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return hps__kserve_kerr_set(err, 500, "Unable to stat shared memory region: '%.128s'",
                                    a->key);
    if (!S_ISREG(st.st_mode))
        return hps__kserve_kerr_set(
            err, 400,
            "cannot register shared memory region '%.128s' with key '%.128s' as "
            "the key is not a shared memory object (%s)",
            a->name, a->key, hps_file_kind(st.st_mode));
    uint64_t size = (uint64_t)st.st_size;
    uint64_t off = (uint64_t)a->offset, len = (uint64_t)a->byte_size;
    if (len == 0 || off > size || len > size - off)
        return hps__kserve_kerr_set(
            err, 400, "failed to register shared memory region '%.128s': invalid args", a->name);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t base = off - off % page;
    r->map_len = (size_t)(len + (off - base));
    int prot = PROT_READ | (r->writable ? PROT_WRITE : 0);
    void *p = mmap(NULL, r->map_len, prot, MAP_SHARED, fd, (off_t)base);
    if (p == MAP_FAILED)
        return hps__kserve_kerr_set(err, 500, "unable to process address space: %s",
                                    strerror(errno));
    r->map = p;
    r->addr = (char *)p + (off - base);
    return 0;
}

/* Build a mapped region from validated arguments; NULL with err set. */
static struct hps__kserve_shm_region *region_open(const struct reg_args *a, hps__kserve_kerr_t *err)
{
    struct hps__kserve_shm_region *r = calloc(1, sizeof(*r));
    if (r)
        r->fd = -1;
    if (!r || !(r->name = strdup(a->name)) || !(r->key = strdup(a->key))) {
        if (r)
            region_free(r);
        hps__kserve_kerr_set(err, 500, "out of memory");
        return NULL;
    }
    r->offset = (uint64_t)a->offset;
    r->byte_size = (uint64_t)a->byte_size;
    r->fd = open_key(a, &r->writable, err);
    if (r->fd < 0 || map_window(r->fd, a, r, err)) {
        region_free(r);
        return NULL;
    }
    return r;
}

/* Insert r in name order unless the name is taken; under s->mu. */
static int table_insert(struct hps__kserve_shm *s, struct hps__kserve_shm_region *r,
                        hps__kserve_kerr_t *err)
{
    struct hps__kserve_shm_region **pp = &s->head;
    while (*pp && strcmp((*pp)->name, r->name) < 0)
        pp = &(*pp)->next;
    if (*pp && strcmp((*pp)->name, r->name) == 0)
        return hps__kserve_kerr_set(err, 400, "shared memory region '%.128s' already in manager",
                                    r->name);
    if (s->count >= HPS__KSERVE_SHM_MAX_REGIONS)
        return hps__kserve_kerr_set(err, 400,
                                    "cannot register shared memory region '%.128s': %d regions are "
                                    "registered, the most this server holds; unregister some first",
                                    r->name, HPS__KSERVE_SHM_MAX_REGIONS);
    s->count++;
    r->next = *pp;
    r->registered = true;
    *pp = r;
    return 0;
}

static bool name_taken(struct hps__kserve_shm *s, const char *name)
{
    for (struct hps__kserve_shm_region *r = s->head; r; r = r->next)
        if (strcmp(r->name, name) == 0)
            return true;
    return false;
}

/* 400 if name is registered (either kind). */
static int check_free_name(struct hps__kserve_shm *s, const char *name, hps__kserve_kerr_t *err)
{
    pthread_mutex_lock(&s->mu);
    bool taken = name_taken(s, name);
    pthread_mutex_unlock(&s->mu);
    if (taken)
        return hps__kserve_kerr_set(err, 400, "shared memory region '%.128s' already in manager",
                                    name);
    return 0;
}

/* Insert an opened region (r consumed). */
static int insert_opened(struct hps__kserve_shm *s, struct hps__kserve_shm_region *r,
                         hps__kserve_kerr_t *err)
{
    pthread_mutex_lock(&s->mu);
    int rc = table_insert(s, r, err); /* a racing register may have won */
    pthread_mutex_unlock(&s->mu);
    if (rc)
        region_free(r);
    return rc;
}

/* Register the parsed arguments (the mapping is made outside the lock). */
static int reg_apply(struct hps__kserve_shm *s, const struct reg_args *a, hps__kserve_kerr_t *err)
{
    if (check_free_name(s, a->name, err) || check_key(a, err))
        return -1;
    struct hps__kserve_shm_region *r = region_open(a, err);
    return r ? insert_opened(s, r, err) : -1;
}

/* Check the region name of a register request. */
static int check_name(const char *name, const char *kind, hps__kserve_kerr_t *err)
{
    if (!name || !*name)
        return hps__kserve_kerr_set(
            err, 400, "'region name' is necessary to register %s shared memory region", kind);
    if (strlen(name) > SHM_NAME_MAX)
        return hps__kserve_kerr_set(err, 400, "shared memory region name of more than %d bytes",
                                    SHM_NAME_MAX);
    return 0;
}

/* Parse a whole JSON body (strict, depth 8); NULL with err set. */
static json_object *parse_body(const char *body, size_t len, hps__kserve_kerr_t *err)
{
    json_tokener *tok = json_tokener_new_ex(8);
    if (!tok) {
        hps__kserve_kerr_set(err, 500, "out of memory");
        return NULL;
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *root = len <= INT32_MAX ? json_tokener_parse_ex(tok, body, (int)len) : NULL;
    enum json_tokener_error e = json_tokener_get_error(tok);
    bool whole = root && json_tokener_get_parse_end(tok) == len;
    json_tokener_free(tok);
    if (whole)
        return root;
    hps__kserve_kerr_set(err, 400, "failed to parse the request JSON buffer: %s",
                         root                         ? "trailing bytes"
                         : e == json_tokener_continue ? "unexpected end of JSON"
                                                      : json_tokener_error_desc(e));
    json_object_put(root);
    return NULL;
}

int hps__kserve_shm_register(struct hps__kserve_shm *s, const char *name, const char *body,
                             size_t len, hps__kserve_kerr_t *err)
{
    if (check_name(name, "system", err))
        return -1;
    json_object *root = parse_body(body, len, err);
    if (!root)
        return -1;
    struct reg_args a = {.name = name};
    int rc = reg_parse(root, &a, err) || reg_apply(s, &a, err) ? -1 : 0;
    json_object_put(root);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Register (CUDA)                                                           */
/* ------------------------------------------------------------------------ */

/** The fields of a CUDA register request. */
struct cuda_args {
    const char *name;
    unsigned char handle[HPS__KSERVE_CUDA_IPC_HANDLE_BYTES];
    int64_t device_id;
    int64_t byte_size;
};

/* raw_handle: {"b64": base64 of a cudaIpcMemHandle_t}. */
static int cuda_parse_handle(json_object *root, struct cuda_args *a, hps__kserve_kerr_t *err)
{
    json_object *raw, *b64;
    if (reg_field(root, "raw_handle", json_type_object, &raw, err))
        return -1;
    if (!json_object_object_get_ex(raw, "b64", &b64) || !json_object_is_type(b64, json_type_string))
        return hps__kserve_kerr_set(err, 400, "Unable to parse 'b64'");
    unsigned char buf[HPS__KSERVE_CUDA_IPC_HANDLE_BYTES + 1];
    long n = hps__kserve_b64_decode(json_object_get_string(b64),
                                    (size_t)json_object_get_string_len(b64), buf, sizeof(buf));
    if (n != HPS__KSERVE_CUDA_IPC_HANDLE_BYTES)
        return hps__kserve_kerr_set(
            err, 400, "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t");
    memcpy(a->handle, buf, sizeof(a->handle));
    return 0;
}

static int cuda_parse(json_object *root, struct cuda_args *a, hps__kserve_kerr_t *err)
{
    json_object *v;
    if (reg_object(root, err))
        return -1;
    if (cuda_parse_handle(root, a, err) || reg_field(root, "device_id", json_type_int, &v, err))
        return -1;
    a->device_id = json_object_get_int64(v);
    if (reg_field(root, "byte_size", json_type_int, &v, err))
        return -1;
    a->byte_size = json_object_get_int64(v);
    if (a->byte_size < 0)
        return hps__kserve_kerr_set(err, 400, "Unable to parse 'byte_size'");
    return 0;
}

/* Open the handle and register the region. */
static int cuda_apply(struct hps__kserve_shm *s, const struct cuda_args *a, hps__kserve_kerr_t *err)
{
    if (check_free_name(s, a->name, err))
        return -1;
    if (a->byte_size == 0)
        return hps__kserve_kerr_set(
            err, 400,
            "failed to register CUDA shared memory region '%.128s': invalid "
            "args: byte_size 0",
            a->name);
    struct hps__kserve_shm_region *r = calloc(1, sizeof(*r));
    if (r)
        r->fd = -1;
    if (!r || !(r->name = strdup(a->name))) {
        free(r);
        return hps__kserve_kerr_set(err, 500, "out of memory");
    }
    if (hps__kserve_cuda_ipc_open(a->name, a->handle, a->device_id, (uint64_t)a->byte_size, &r->ipc,
                                  err)) {
        region_free(r);
        return -1;
    }
    r->cuda = true;
    r->device_id = a->device_id;
    r->byte_size = (uint64_t)a->byte_size;
    r->addr = r->ipc.base;
    r->writable = true;
    return insert_opened(s, r, err);
}

int hps__kserve_shm_register_cuda(struct hps__kserve_shm *s, const char *name, const char *body,
                                  size_t len, hps__kserve_kerr_t *err)
{
    if (!s->cuda)
        return hps__kserve_kerr_set(err, 501, "CUDA shared memory is not supported by this server");
    if (check_name(name, "cuda", err))
        return -1;
    json_object *root = parse_body(body, len, err);
    if (!root)
        return -1;
    struct cuda_args a = {.name = name};
    int rc = cuda_parse(root, &a, err) || cuda_apply(s, &a, err) ? -1 : 0;
    json_object_put(root);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Status and unregister                                                     */
/* ------------------------------------------------------------------------ */

static void status_one(hps__kserve_text_t *t, const struct hps__kserve_shm_region *r)
{
    hps__kserve_text_puts(t, "{\"name\":");
    hps__kserve_text_json_str(t, r->name, strlen(r->name));
    if (r->cuda) {
        hps__kserve_text_puts(t, ",\"device_id\":");
        hps__kserve_text_i64(t, r->device_id);
        hps__kserve_text_puts(t, ",\"byte_size\":");
        hps__kserve_text_u64(t, r->byte_size);
        hps__kserve_text_putc(t, '}');
        return;
    }
    hps__kserve_text_puts(t, ",\"key\":");
    hps__kserve_text_json_str(t, r->key, strlen(r->key));
    hps__kserve_text_puts(t, ",\"offset\":");
    hps__kserve_text_u64(t, r->offset);
    hps__kserve_text_puts(t, ",\"byte_size\":");
    hps__kserve_text_u64(t, r->byte_size);
    hps__kserve_text_putc(t, '}');
}

static const char *kind_name(bool cuda)
{
    return cuda ? "CUDA" : "system";
}

int hps__kserve_shm_status(struct hps__kserve_shm *s, bool cuda, const char *name,
                           hps__kserve_text_t *t, hps__kserve_kerr_t *err)
{
    bool found = false, other = false;
    pthread_mutex_lock(&s->mu);
    hps__kserve_text_putc(t, '[');
    for (struct hps__kserve_shm_region *r = s->head; r; r = r->next) {
        if (name && strcmp(r->name, name) != 0)
            continue;
        if (r->cuda != cuda) {
            other = true;
            continue;
        }
        if (found)
            hps__kserve_text_putc(t, ',');
        status_one(t, r);
        found = true;
    }
    hps__kserve_text_putc(t, ']');
    pthread_mutex_unlock(&s->mu);
    if (name && other)
        return hps__kserve_kerr_set(err, 404,
                                    "The region named '%.128s' is registered as %s shared memory, "
                                    "not %s shared memory",
                                    name, kind_name(!cuda), kind_name(cuda));
    if (name && !found)
        return hps__kserve_kerr_set(err, 404, "Unable to find %s shared memory region: '%.128s'",
                                    cuda ? "cuda" : "system", name);
    return 0;
}

/* Take r out of the table; under s->mu.  Returns r if nobody uses it. */
static struct hps__kserve_shm_region *table_remove(struct hps__kserve_shm_region **pp)
{
    struct hps__kserve_shm_region *r = *pp;
    *pp = r->next;
    r->next = NULL;
    r->registered = false;
    return r->users == 0 ? r : NULL;
}

void hps__kserve_shm_unregister(struct hps__kserve_shm *s, bool cuda, const char *name)
{
    struct hps__kserve_shm_region *dead = NULL;
    pthread_mutex_lock(&s->mu);
    struct hps__kserve_shm_region **pp = &s->head;
    while (*pp) {
        if ((*pp)->cuda != cuda || (name && strcmp((*pp)->name, name) != 0)) {
            pp = &(*pp)->next;
            continue;
        }
        struct hps__kserve_shm_region *r = table_remove(pp);
        s->count--;
        if (r) {
            r->next = dead;
            dead = r;
        }
    }
    pthread_mutex_unlock(&s->mu);
    while (dead) {
        struct hps__kserve_shm_region *next = dead->next;
        region_free(dead);
        dead = next;
    }
}

/* ------------------------------------------------------------------------ */
/* Use by inference requests                                                 */
/* ------------------------------------------------------------------------ */

static struct hps__kserve_shm_region *table_find(struct hps__kserve_shm *s, const char *name,
                                                 size_t n)
{
    for (struct hps__kserve_shm_region *r = s->head; r; r = r->next)
        if (strlen(r->name) == n && memcmp(r->name, name, n) == 0)
            return r;
    return NULL;
}

/* 400 if a system region's object no longer holds its registered window
 * (the client truncated it): touching the mapping there would fault. */
static int check_object(const struct hps__kserve_shm_region *r, hps__kserve_kerr_t *err)
{
    struct stat st;
    if (r->cuda)
        return 0;
    if (fstat(r->fd, &st) != 0)
        return hps__kserve_kerr_set(err, 500, "Unable to stat shared memory region: '%.128s'",
                                    r->name);
    if ((uint64_t)st.st_size < r->offset + r->byte_size)
        return hps__kserve_kerr_set(
            err, 400,
            "shared memory region '%.128s' was truncated: its key '%.128s' now "
            "holds %llu bytes, the registered window ends at %llu; register it "
            "again",
            r->name, r->key, (unsigned long long)st.st_size,
            (unsigned long long)(r->offset + r->byte_size));
    return 0;
}

/* Triton's GetMemoryInfo bounds checks against the registered size. */
static int check_bounds(const struct hps__kserve_shm_region *r, uint64_t offset, uint64_t size,
                        hps__kserve_kerr_t *err)
{
    if (offset >= r->byte_size)
        return hps__kserve_kerr_set(err, 400, "Invalid offset for shared memory region: '%.128s'",
                                    r->name);
    if (size > r->byte_size - offset)
        return hps__kserve_kerr_set(
            err, 400, "Invalid offset + byte size for shared memory region: '%.128s'", r->name);
    return 0;
}

int hps__kserve_shm_acquire(struct hps__kserve_shm *s, const char *name, size_t name_len,
                            uint64_t offset, uint64_t size, bool write,
                            struct hps__kserve_shm_ref *ret, hps__kserve_kerr_t *err)
{
    memset(ret, 0, sizeof(*ret));
    if (!s)
        return hps__kserve_kerr_set(err, 404, "Unable to find shared memory region: '" NAMEFMT "'",
                                    NAMEARG(name, name_len));
    pthread_mutex_lock(&s->mu);
    struct hps__kserve_shm_region *r = table_find(s, name, name_len);
    int rc = 0;
    if (!r)
        rc = hps__kserve_kerr_set(err, 404, "Unable to find shared memory region: '" NAMEFMT "'",
                                  NAMEARG(name, name_len));
    else if (check_bounds(r, offset, size, err) || check_object(r, err))
        rc = -1;
    else if (write && !r->writable)
        rc = hps__kserve_kerr_set(err, 400,
                                  "shared memory region '%.128s' is read-only: its key could "
                                  "only be opened for reading",
                                  r->name);
    if (rc == 0) {
        r->users++;
        ret->region = r;
        ret->ptr = r->addr + offset;
        ret->cuda = r->cuda;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int hps__kserve_shm_read(const struct hps__kserve_shm_ref *ref, void *dst, size_t n,
                         hps__kserve_kerr_t *err)
{
    const struct hps__kserve_shm_region *r = ref->region;
    if (!r->cuda) {
        memcpy(dst, ref->ptr, n);
        return 0;
    }
    return hps__kserve_cuda_ipc_read(&r->ipc, (uint64_t)(ref->ptr - r->addr), dst, n, err);
}

int hps__kserve_shm_write(struct hps__kserve_shm_region *r, char *ptr, const void *src, size_t n,
                          hps__kserve_kerr_t *err)
{
    if (!r->cuda) {
        memcpy(ptr, src, n);
        return 0;
    }
    return hps__kserve_cuda_ipc_write(&r->ipc, (uint64_t)(ptr - r->addr), src, n, err);
}

int hps__kserve_shm_device(const struct hps__kserve_shm_region *r)
{
    return r && r->cuda ? r->ipc.device : -1;
}

void hps__kserve_shm_release(struct hps__kserve_shm *s, struct hps__kserve_shm_region *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&s->mu);
    bool last = --r->users == 0 && !r->registered;
    pthread_mutex_unlock(&s->mu);
    if (last)
        region_free(r);
}
