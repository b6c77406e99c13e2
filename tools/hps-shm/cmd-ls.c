/*
 * cmd-ls.c -- hps-shm ls: the segments in /dev/shm and whether they attach.
 *
 * hps_shmdb_probe() explains a refusal (foreign object, other format, ...);
 * a segment that passes is attached briefly, as a tool, to read its header
 * and whether its coordinator (or, before any coordinator beat, its
 * creator) is still attached: STATUS "ok", else "orphan".  Then the staged
 * objects (/dev/shm/.hps.<name>.new): a build in progress, or what a build
 * killed before it published left, which holds its memory until the next
 * coordinator of the name or hps-shm rm removes it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hps-shm.h"

/** What ls knows about one /dev/shm/hps.<name> object. */
typedef struct ls_row {
    const char *name;
    hps_err_t err;           /* 0 = attaches */
    char msg[256];           /* refusal message when err != 0 */
    hps_segment_info_t seg;  /* header, when err == 0 */
    hps__tool_coord_t coord; /* seg.coord_pid's verdict (hps__tool_coord) */
    bool creator_alive;      /* seg.creator_pid is attached (hps_shmdb_creator_attached) */
    size_t procs;            /* live processes attached, this hps-shm not counted */
    long long file_bytes;    /* st_size of the object; -1 if stat failed */
} ls_row_t;

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void ls_read_header(ls_row_t *row)
{
    hps_shmdb_t *db = NULL;

    row->err = hps_shmdb_attach(row->name, &hps__tool_popts, &db);
    if (row->err == 0) {
        row->err = hps_shmdb_segment_info(db, &row->seg);
        row->coord = hps__tool_coord(db, &row->seg);
        row->creator_alive = hps_shmdb_creator_attached(db);
        row->procs = hps_shmdb_other_procs(db);
        hps_shmdb_detach(db);
    }
}

/* An attachable segment is an orphan when the coordinator that beat last is
 * gone, or, where no coordinator ever beat, its creator is: nothing loads
 * or updates it. */
static bool ls_orphan(const ls_row_t *r)
{
    return r->coord == HPS__TOOL_COORD_NONE ? !r->creator_alive : r->coord == HPS__TOOL_COORD_GONE;
}

/* "ok", or "orphan: coordinator pid 12 gone" / "orphan: no coordinator, creator gone". */
static const char *ls_status(const ls_row_t *r, char *buf, size_t len)
{
    if (r->coord == HPS__TOOL_COORD_STALLED) {
        snprintf(buf, len, "stalled: coordinator pid %d silent past worker_timeout_ms %u",
                 (int)r->seg.coord_pid, r->seg.coord_timeout_ms);
        return buf;
    }
    if (!ls_orphan(r))
        return "ok";
    if (r->seg.coord_pid)
        snprintf(buf, len, "orphan: coordinator pid %d gone", (int)r->seg.coord_pid);
    else
        snprintf(buf, len, "orphan: no coordinator, creator gone");
    return buf;
}

static void ls_probe(const char *name, ls_row_t *row)
{
    char path[sizeof "/dev/shm/hps." + HPS_SHMDB_SEGMENT_NAME_MAX + 64];
    struct stat st;

    memset(row, 0, sizeof *row);
    row->name = name;
    row->err = hps_shmdb_probe(name, row->msg, sizeof row->msg);
    if (row->err == 0)
        ls_read_header(row);
    if (row->err != 0 && row->msg[0] == '\0')
        snprintf(row->msg, sizeof row->msg, "%s", hps_strerror(row->err));
    snprintf(path, sizeof path, "/dev/shm/hps.%s", name);
    row->file_bytes = stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static json_object *ls_row_json(const ls_row_t *r)
{
    json_object *o = json_object_new_object();

    hps__tool_jset(o, "name", hps__tool_json_str(r->name));
    hps__tool_jset(o, "attachable", json_object_new_boolean(r->err == 0));
    hps__tool_jset(o, "status",
                   hps__tool_json_str(r->err                                ? "refused"
                                      : ls_orphan(r)                        ? "orphan"
                                      : r->coord == HPS__TOOL_COORD_STALLED ? "stalled"
                                                                            : "ok"));
    if (r->err != 0) {
        hps__tool_jset(o, "error", hps__tool_json_str(hps_err_name(r->err)));
        hps__tool_jset(o, "message", hps__tool_json_str(r->msg));
        hps__tool_jset(o, "hint", hps__tool_json_str(hps__tool_attach_hint(r->err)));
        hps__tool_jset(o, "file_bytes",
                       r->file_bytes >= 0 ? json_object_new_int64(r->file_bytes) : NULL);
        return o;
    }
    hps__tool_jset(o, "size_bytes", hps__tool_json_u64(r->seg.size_bytes));
    hps__tool_jset(o, "committed_bytes", hps__tool_json_u64(r->seg.committed_bytes));
    hps__tool_jset(o, "used_bytes", hps__tool_json_u64(r->seg.used_bytes));
    hps__tool_jset(o, "tables", json_object_new_int64(r->seg.num_tables));
    hps__tool_jset(o, "creator_pid", json_object_new_int64(r->seg.creator_pid));
    hps__tool_jset(o, "creator_alive", json_object_new_boolean(r->creator_alive));
    hps__tool_jset(o, "coordinator_pid", json_object_new_int64(r->seg.coord_pid));
    hps__tool_jset(o, "coordinator_alive",
                   json_object_new_boolean(r->coord == HPS__TOOL_COORD_ALIVE));
    hps__tool_jset(o, "coordinator_stalled",
                   json_object_new_boolean(r->coord == HPS__TOOL_COORD_STALLED));
    hps__tool_jset(o, "attached_processes", json_object_new_uint64(r->procs));
    return o;
}

/** One staged object (hps_shmdb_staged_info). */
typedef struct ls_staged {
    const char *name;
    hps_err_t err; /* 0 = bytes and building are known */
    uint64_t bytes;
    bool building;
} ls_staged_t;

static int ls_json(const hps__tool_t *t, const ls_row_t *rows, size_t n, const ls_staged_t *st,
                   size_t ns)
{
    json_object *root = json_object_new_object();
    json_object *arr = json_object_new_array();

    for (size_t i = 0; i < n; i++)
        json_object_array_add(arr, ls_row_json(&rows[i]));
    hps__tool_jset(root, "segments", arr);
    arr = json_object_new_array();
    for (size_t i = 0; i < ns; i++) {
        json_object *o = json_object_new_object();
        hps__tool_jset(o, "name", hps__tool_json_str(st[i].name));
        hps__tool_jset(o, "bytes", st[i].err ? NULL : hps__tool_json_u64(st[i].bytes));
        hps__tool_jset(o, "building", json_object_new_boolean(st[i].err || st[i].building));
        json_object_array_add(arr, o);
    }
    hps__tool_jset(root, "staged", arr);
    return hps__tool_emit_json(t, root);
}

static void ls_text_row(const ls_row_t *r, int w)
{
    char size[32], committed[32], status[128];

    if (r->err != 0) {
        if (r->file_bytes >= 0)
            hps__tool_fmt_bytes((uint64_t)r->file_bytes, size, sizeof size);
        else
            snprintf(size, sizeof size, "-");
        printf("%-*s  %10s  %10s  %6s  %8s  refused: %s (%s)\n", w, r->name, size, "-", "-", "-",
               r->msg, hps_err_name(r->err));
        return;
    }
    printf("%-*s  %10s  %10s  %6u  %8d  %s\n", w, r->name,
           hps__tool_fmt_bytes(r->seg.size_bytes, size, sizeof size),
           hps__tool_fmt_bytes(r->seg.committed_bytes, committed, sizeof committed),
           r->seg.num_tables, (int)r->seg.creator_pid, ls_status(r, status, sizeof status));
}

static void ls_text_staged(const ls_staged_t *st, size_t ns)
{
    char size[32];

    for (size_t i = 0; i < ns; i++) {
        if (st[i].err)
            printf("staged /dev/shm/.hps.%s.new: %s\n", st[i].name, hps_strerror(st[i].err));
        else if (st[i].building)
            printf("staged /dev/shm/.hps.%s.new (%s): a build in progress\n", st[i].name,
                   hps__tool_fmt_bytes(st[i].bytes, size, sizeof size));
        else
            printf("staged /dev/shm/.hps.%s.new (%s): left by a build killed before it "
                   "published; `hps-shm rm %s` frees it\n",
                   st[i].name, hps__tool_fmt_bytes(st[i].bytes, size, sizeof size), st[i].name);
    }
}

static int ls_text(const hps__tool_t *t, const ls_row_t *rows, size_t n, const ls_staged_t *st,
                   size_t ns)
{
    int w = 4;

    if (n == 0) {
        puts("no HPS segments in /dev/shm");
        ls_text_staged(st, ns);
        return hps__tool_flush(t);
    }
    for (size_t i = 0; i < n; i++) {
        int len = (int)strlen(rows[i].name);
        w = len > w ? len : w;
    }
    printf("%-*s  %10s  %10s  %6s  %8s  %s\n", w, "NAME", "SIZE", "COMMITTED", "TABLES", "CREATOR",
           "STATUS");
    for (size_t i = 0; i < n; i++)
        ls_text_row(&rows[i], w);
    ls_text_staged(st, ns);
    return hps__tool_flush(t);
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int hps__tool_cmd_ls(const hps__tool_t *t)
{
    char **names = NULL, **snames = NULL;
    size_t n = 0, ns = 0;
    ls_row_t *rows = NULL;
    ls_staged_t *st = NULL;
    int rc;
    hps_err_t err = hps_shmdb_list(&names, &n);

    if (err == 0 && (err = hps_shmdb_list_staged(&snames, &ns)) != 0)
        free_names(names, n);
    if (err != 0)
        return hps__tool_fail(t, err, "check that /dev/shm is mounted and readable",
                              "cannot list /dev/shm");
    rows = calloc(n ? n : 1, sizeof *rows);
    st = calloc(ns ? ns : 1, sizeof *st);
    if (!rows || !st) {
        free(rows);
        free(st);
        free_names(names, n);
        free_names(snames, ns);
        return hps__tool_fail(t, -ENOMEM, NULL, "cannot list the segments");
    }
    if (n > 1)
        qsort(names, n, sizeof *names, cmp_names);
    if (ns > 1)
        qsort(snames, ns, sizeof *snames, cmp_names);
    for (size_t i = 0; i < n; i++)
        ls_probe(names[i], &rows[i]);
    size_t kept = 0;
    for (size_t i = 0; i < ns; i++) {
        st[kept].name = snames[i];
        st[kept].err = hps_shmdb_staged_info(snames[i], &st[kept].bytes, &st[kept].building);
        kept += st[kept].err != HPS_ENOTFOUND; /* published or removed since the listing */
    }
    rc = t->json ? ls_json(t, rows, n, st, kept) : ls_text(t, rows, n, st, kept);
    free(rows);
    free(st);
    free_names(names, n);
    free_names(snames, ns);
    return rc;
}
