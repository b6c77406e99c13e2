/*
 * load-ident.c -- the identity of a table's model files, recorded by the
 * persistent DB after it ingested them (see RESTARTS at the top of load.c):
 * path, size, mtime and FNV-1a hashes of the first and the last MiB of the
 * key and emb_vector files.  The format and the hashes must never change:
 * an existing persistent DB whose record stops matching re-ingests its
 * tables and loses the online updates applied since.
 *
 * Also what identifies the persistent DB's contents as a whole (a token
 * renewed before any table's rows are replaced, recorded in each segment
 * built), and what those identities tell before a build: whether a segment
 * initialize_after_startup = false would keep still matches, and whether
 * the disk has room for the tables ingested anew.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "hps/log.h"
#include "load-internal.h"

#define FILE_ID_MAX    1400       /* one file's part of an identity */
#define CONTENT_ID_MAX 64         /* one file's contents part */
#define PATH_ID_MAX    1200       /* longer paths are named by their hash in it */
#define HASH_SPAN      (1u << 20) /* bytes hashed at each end of a file */

#define FNV_PRIME 0x100000001b3ULL

/* pread exactly len bytes at off. */
static bool pread_all(int fd, unsigned char *buf, size_t len, off_t off)
{
    while (len > 0) {
        ssize_t got = pread(fd, buf, len, off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return false;
        buf += got;
        off += got;
        len -= (size_t)got;
    }
    return true;
}

/* FNV-1a (64 bit) of the first span bytes of fd, folded into *head, and of
 * its last span bytes, into *tail.  The two hashes run interleaved: each
 * is one serial chain of multiplies, and two chains keep the CPU busy. */
static bool hash_ends(int fd, off_t size, size_t span, uint64_t *head, uint64_t *tail)
{
    enum { PIECE = 65536 };
    unsigned char *a = malloc(2 * PIECE);
    uint64_t h = *head, t = *tail;
    bool ok = a != NULL;
    for (size_t off = 0; ok && off < span; off += PIECE) {
        size_t n = span - off < PIECE ? span - off : PIECE;
        const unsigned char *b = a + PIECE;
        ok = pread_all(fd, a, n, (off_t)off) &&
             pread_all(fd, a + PIECE, n, size - (off_t)span + (off_t)off);
        for (size_t i = 0; ok && i < n; i++) {
            h = (h ^ a[i]) * FNV_PRIME;
            t = (t ^ b[i]) * FNV_PRIME;
        }
    }
    free(a);
    *head = h;
    *tail = t;
    return ok;
}

/* "<path> size=S mtime=SEC.NSEC head=H tail=T" of one file; a path longer
 * than PATH_ID_MAX is written "path-fnv1a=<hash of the path>" so that every
 * valid path fits the persistent DB's record.  Its contents part, "size=S
 * head=H tail=T", into content (CONTENT_ID_MAX bytes).  false with errno
 * set. */
static bool file_ident(const char *path, char *buf, size_t len, char *content)
{
    /* O_NONBLOCK: a FIFO put in place since validation must not hang here */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return false;
    int e = fstat(fd, &st) < 0 ? errno : !S_ISREG(st.st_mode) ? EINVAL : 0;
    if (e) {
        close(fd);
        errno = e;
        return false;
    }
    uint64_t head = 0xcbf29ce484222325ULL, tail = head;
    size_t span = (uint64_t)st.st_size < HASH_SPAN ? (size_t)st.st_size : HASH_SPAN;
    bool ok = hash_ends(fd, st.st_size, span, &head, &tail);
    close(fd);
    char named[64];
    if (strlen(path) > PATH_ID_MAX) {
        uint64_t h = 0xcbf29ce484222325ULL;
        for (const char *p = path; *p; p++)
            h = (h ^ (unsigned char)*p) * FNV_PRIME;
        snprintf(named, sizeof(named), "path-fnv1a=%016" PRIx64, h);
    }
    int n = snprintf(buf, len, "%s size=%lld mtime=%lld.%09ld head=%016" PRIx64 " tail=%016" PRIx64,
                     strlen(path) > PATH_ID_MAX ? named : path, (long long)st.st_size,
                     (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec, head, tail);
    snprintf(content, CONTENT_ID_MAX, "size=%lld head=%016" PRIx64 " tail=%016" PRIx64,
             (long long)st.st_size, head, tail);
    if (!ok)
        errno = EIO;
    else if (n <= 0 || (size_t)n >= len)
        errno = ENAMETOOLONG;
    return ok && n > 0 && (size_t)n < len;
}

static bool stamp_of(const char *dir, const char *file, struct coord_file_stamp *s)
{
    char path[PATH_MAX + 16];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    if (stat(path, &st) != 0)
        return false;
    *s = (struct coord_file_stamp){
        .dev = st.st_dev, .ino = st.st_ino, .size = st.st_size, .mtim = st.st_mtim};
    return true;
}

void coord_files_stamp(const hps_conf_model_t *m, size_t t, coord_ident_t *id)
{
    if (!stamp_of(m->sparse_files[t], "key", &id->stamp[0]) ||
        !stamp_of(m->sparse_files[t], "emb_vector", &id->stamp[1]))
        id->stamp[0].ino = 0; /* the check that follows refuses the files */
}

bool coord_files_unchanged(const hps_conf_model_t *m, size_t t, const coord_ident_t *id)
{
    struct coord_file_stamp now[2];
    if (!id->stamp[0].ino)
        return true; /* none taken */
    if (!stamp_of(m->sparse_files[t], "key", &now[0]) ||
        !stamp_of(m->sparse_files[t], "emb_vector", &now[1]))
        return false;
    for (int i = 0; i < 2; i++)
        if (now[i].dev != id->stamp[i].dev || now[i].ino != id->stamp[i].ino ||
            now[i].size != id->stamp[i].size || now[i].mtim.tv_sec != id->stamp[i].mtim.tv_sec ||
            now[i].mtim.tv_nsec != id->stamp[i].mtim.tv_nsec)
            return false;
    return true;
}

/* The identity of table t's files (see the top of this file); their
 * contents' identity into content when it is not NULL. */
bool coord_table_ident(const coord_t *c, const hps_conf_model_t *m, size_t t, char *buf, size_t len,
                       char *content)
{
    char key[PATH_MAX + 16], vec[PATH_MAX + 16], kid[FILE_ID_MAX], vid[FILE_ID_MAX];
    char kc[CONTENT_ID_MAX], vc[CONTENT_ID_MAX];
    snprintf(key, sizeof(key), "%s/key", m->sparse_files[t]);
    snprintf(vec, sizeof(vec), "%s/emb_vector", m->sparse_files[t]);
    if (!file_ident(key, kid, sizeof(kid), kc) || !file_ident(vec, vid, sizeof(vid), vc))
        return false;
    int dim = (int)m->embedding_vecsize_per_table[t];
    if (content)
        snprintf(content, CONTENT_IDENT_MAX, "v1 dim=%d key_bytes=%u; key %s; emb_vector %s", dim,
                 c->key_bytes, kc, vc);
    int n = snprintf(buf, len, "v1 dim=%d key_bytes=%u; %s; %s", dim, c->key_bytes, kid, vid);
    if (n <= 0 || (size_t)n >= len)
        errno = ENAMETOOLONG;
    return n > 0 && (size_t)n < len;
}

void coord_ident_name(const char *model, const char *table, char *buf, size_t len)
{
    snprintf(buf, len, "loaded.hps_et.%s.%s", model, table);
}

/* ---- the persistent DB's contents token --------------------------------- */

#define TOKEN_NAME "contents" /* metadata entry "hps.meta.contents": 16 hex digits */

uint64_t coord_pdb_token_of(hps_pdb_t *pdb)
{
    char buf[32];
    if (!pdb || hps_pdb_meta_get(pdb, TOKEN_NAME, buf, sizeof(buf), NULL, 0) < 0)
        return 0;
    return strtoull(buf, NULL, 16);
}

uint64_t coord_pdb_token(coord_t *c)
{
    return coord_pdb_token_of(c->pdb);
}

int coord_pdb_token_renew(coord_t *c)
{
    uint64_t t = 0;
    char buf[32], err[512];
    while (t == 0)
        if (getrandom(&t, sizeof(t), 0) != (ssize_t)sizeof(t)) {
            HPS_ERROR("persistent DB: no random bytes for its contents token: %s", strerror(errno));
            return HPS_EXIT_PDB;
        }
    snprintf(buf, sizeof(buf), "%016" PRIx64, t);
    if (hps_pdb_meta_put(c->pdb, TOKEN_NAME, buf, err, sizeof(err)) < 0) {
        HPS_ERROR("persistent DB: recording its contents token: %s", err);
        return HPS_EXIT_PDB;
    }
    c->pdb_token_renewed = true;
    return 0;
}

void coord_pdb_token_record(coord_t *c)
{
    if (!c->pdb)
        return;
    uint64_t t = coord_pdb_token(c);
    /* A persistent DB without one (new, or written by an older build) holds
     * what this segment was built from now: its first token. */
    if (!t && !c->conf->persistent_db.read_only && coord_pdb_token_renew(c) == 0)
        t = coord_pdb_token(c);
    hps_shmdb_set_pdb_token(c->db, t);
}

/* ---- what a build would do to the persistent DB ------------------------- */

/* Whether pdb's record of table <model>.<table> names files: it holds them
 * and a build does not ingest them again. */
static bool pdb_holds(hps_pdb_t *pdb, const char *model, const char *table, const char *files)
{
    char name[320], rec[HPS_PDB_META_MAX];
    coord_ident_name(model, table, name, sizeof(name));
    return hps_pdb_meta_get(pdb, name, rec, sizeof(rec), NULL, 0) == 0 && strcmp(rec, files) == 0;
}

/* The 1-based position of table t of model m in the segment db, where the
 * segment does not record it (a segment of a build before order: 0): from
 * the INI text its builder recorded (*sc, parsed on first use; NULL when
 * absent or unparsable), else 0 (unknown). */
static uint32_t unrecorded_position(hps_shmdb_t *db, hps_conf_t **sc, bool *tried,
                                    const hps_conf_model_t *m, size_t t)
{
    if (!*tried) {
        char *text = NULL;
        *tried = true;
        if (hps_shmdb_conf_text(db, &text) == 0 &&
            hps_conf_load_string(text, "the segment's INI text", sc, NULL, 0) < 0)
            *sc = NULL;
        free(text);
    }
    const hps_conf_model_t *was = *sc ? hps_conf_model_find(*sc, m->name) : NULL;
    for (size_t u = 0; was && u < was->num_tables; u++)
        if (strcmp(was->embedding_table_names[u], m->embedding_table_names[t]) == 0)
            return (uint32_t)u + 1;
    return 0;
}

/* Whether db holds model m's tables in another order than m gives them
 * (why says how): by the positions db records, else by the INI text its
 * builder recorded, else (neither) when their ids do not grow in m's
 * order (a build creates a model's tables in order; a segment whose ids
 * grow otherwise is rebuilt, which is safe). */
static bool order_differs(hps_shmdb_t *db, const hps_conf_model_t *m, hps_conf_t **sc, bool *tried,
                          char *why, size_t len)
{
    uint32_t prev_id = 0;
    for (size_t t = 0; t < m->num_tables; t++) {
        uint32_t id, pos;
        hps_table_info_t ti;
        if (hps_shmdb_table_find(db, m->name, m->embedding_table_names[t], &id) < 0 ||
            hps_shmdb_table_info(db, id, &ti) < 0)
            continue; /* not in it: created and filled by this start */
        pos = ti.order ? ti.order : unrecorded_position(db, sc, tried, m, t);
        bool unknown_order = pos == 0 && t > 0 && id < prev_id;
        prev_id = id;
        if ((pos && pos != t + 1) || unknown_order) {
            snprintf(why, len,
                     "model %s: its table %s is %s and table %zu in the configuration (the "
                     "tables were reordered or renamed)",
                     m->name, m->embedding_table_names[t],
                     pos ? "at another position in it" : "before the one it follows here", t + 1);
            return true;
        }
    }
    return false;
}

bool coord_kept_segment_stale(coord_t *c, hps_shmdb_t *db, char *why, size_t len)
{
    const hps_conf_persistent_db_t *p = &c->conf->persistent_db;
    bool ingest = c->pdb && !p->read_only && p->initialize_after_startup;
    uint64_t token = hps_shmdb_pdb_token(db);
    if (c->pdb && token && token != coord_pdb_token(c)) {
        snprintf(why, len,
                 "the persistent DB's rows were replaced since it was built (a reload "
                 "or restart that stopped after re-ingesting)");
        return true;
    }
    hps_conf_t *sc = NULL; /* the segment's builder's INI, where needed */
    bool tried = false, stale = false;
    for (size_t i = 0, k = 0; !stale && i < c->conf->num_models; i++) {
        const hps_conf_model_t *m = &c->conf->models[i];
        stale = order_differs(db, m, &sc, &tried, why, len);
        for (size_t t = 0; !stale && t < m->num_tables; t++, k++) {
            uint32_t id;
            hps_table_info_t ti;
            if (hps_shmdb_table_find(db, m->name, m->embedding_table_names[t], &id) < 0 ||
                hps_shmdb_table_info(db, id, &ti) < 0)
                continue; /* not in it: created and filled by this start */
            if (ti.model_version != (uint32_t)m->version) {
                snprintf(why, len, "model %s is version %u in it and %lld in the configuration",
                         m->name, ti.model_version, (long long)m->version);
                stale = true;
            } else if (ingest && c->idents &&
                       !pdb_holds(c->pdb, m->name, m->embedding_table_names[t],
                                  c->idents[k].files)) {
                snprintf(why, len,
                         "model %s table %s: its files are not those the persistent DB "
                         "ingested, which it ingests now",
                         m->name, m->embedding_table_names[t]);
                stale = true;
            }
        }
    }
    hps_conf_free(sc);
    return stale;
}

bool coord_pdb_avail(const char *path, uint64_t *ret)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s", path);
    for (;;) {
        struct statvfs fs;
        if (statvfs(p, &fs) == 0) {
            *ret = (uint64_t)fs.f_bavail * (uint64_t)fs.f_frsize;
            return true;
        }
        char *slash = strrchr(p, '/');
        if (!slash || slash == p)
            return false;
        *slash = '\0';
    }
}

bool coord_pdb_room(const coord_t *c, const coord_t *next, char *msg, size_t len)
{
    const hps_conf_persistent_db_t *p = &next->conf->persistent_db;
    if (p->type != HPS_CONF_PDB_ROCKS_DB || p->read_only || !p->initialize_after_startup ||
        !next->idents)
        return true;
    bool same = c->pdb && strcmp(c->conf->persistent_db.path, p->path) == 0;
    uint64_t need = 0, avail;
    for (size_t i = 0, k = 0; i < next->conf->num_models; i++) {
        const hps_conf_model_t *m = &next->conf->models[i];
        for (size_t t = 0; t < m->num_tables; t++, k++) {
            char f[PATH_MAX];
            if (same &&
                pdb_holds(c->pdb, m->name, m->embedding_table_names[t], next->idents[k].files))
                continue; /* held as it is: not ingested again */
            static const char *const parts[] = {"key", "emb_vector"};
            for (int j = 0; j < 2; j++) {
                struct stat st;
                snprintf(f, sizeof(f), "%s/%s", m->sparse_files[t], parts[j]);
                if (stat(f, &st) == 0)
                    need += (uint64_t)st.st_size;
            }
        }
    }
    /* The rows' bytes and an eighth for the SST files' own (index, filter,
     * block framing), and the room the replacement keeps for RocksDB's logs
     * and metadata; a build that still runs out falls back to what serves. */
    need = need ? need + need / 8 + HPS_COORD_PDB_COMMIT_ROOM : 0;
    if (need == 0 || !coord_pdb_avail(p->path, &avail) || avail >= need)
        return true;
    snprintf(msg, len,
             "not enough disk for the persistent DB: %s has %" PRIu64
             " MiB free, and the tables ingested anew need about %" PRIu64 " MiB%s",
             p->path, avail >> 20, need >> 20,
             c == next ? " (their files' bytes, an eighth more for the SST files, and "
                         "64 MiB for RocksDB's logs): nothing was loaded"
                       : " beside the rows that serve (kept until the workers switch); the "
                         "serving models stay as they are");
    return false;
}
