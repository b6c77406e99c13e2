/*
 * test-pdb-meta.c -- hps_pdb_meta_get / hps_pdb_meta_put (coordinator/pdb.c):
 * round trip, overwrite, delete, the name and value bounds, read-only
 * handles, isolation from the tables, and durability across a SIGKILL of the
 * writing process (a re-executed child writes, then kills itself before
 * closing).
 */
#include <signal.h>

#include "pdbtest.h"

static char vbuf[HPS_PDB_META_MAX];

static void meta_is(hps_pdb_t *db, const char *name, const char *want)
{
    T_OK(hps_pdb_meta_get(db, name, vbuf, sizeof(vbuf), t_msg, sizeof(t_msg)));
    assert_string_equal(vbuf, want);
}

static void meta_absent(hps_pdb_t *db, const char *name)
{
    strcpy(vbuf, "stale");
    T_ERR(hps_pdb_meta_get(db, name, vbuf, sizeof(vbuf), t_msg, sizeof(t_msg)), HPS_ENOTFOUND);
    assert_string_equal(vbuf, "");
}

static void test_put_get_overwrite_delete(void **state)
{
    pfx_t *f = *state;

    f->db = p_open(f->path, false, 0);
    meta_absent(f->db, "files.m.t");
    T_OK(hps_pdb_meta_put(f->db, "files.m.t", "a=1", t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_meta_put(f->db, "files.m.u", "", t_msg, sizeof(t_msg)));
    meta_is(f->db, "files.m.t", "a=1");
    meta_is(f->db, "files.m.u", ""); /* an empty value exists */
    T_OK(hps_pdb_meta_put(f->db, "files.m.t", "a=2 b=3", t_msg, sizeof(t_msg)));
    meta_is(f->db, "files.m.t", "a=2 b=3");
    T_OK(hps_pdb_meta_put(f->db, "files.m.t", NULL, t_msg, sizeof(t_msg)));
    meta_absent(f->db, "files.m.t");
    meta_is(f->db, "files.m.u", "");
    /* deleting a missing entry is not an error */
    T_OK(hps_pdb_meta_put(f->db, "never.written", NULL, t_msg, sizeof(t_msg)));
}

static void test_bounds(void **state)
{
    pfx_t *f = *state;
    char name[302], *big = malloc(HPS_PDB_META_MAX + 1), small[8];

    f->db = p_open(f->path, false, 0);
    memset(name, 'n', 300);
    name[300] = '\0';
    T_OK(hps_pdb_meta_put(f->db, name, "longest name", t_msg, sizeof(t_msg)));
    meta_is(f->db, name, "longest name");
    name[300] = 'n';
    name[301] = '\0';
    T_ERR(hps_pdb_meta_put(f->db, name, "x", t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_MSG_HAS("1..300");
    T_ERR(hps_pdb_meta_get(f->db, name, vbuf, sizeof(vbuf), t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_meta_put(f->db, "", "x", t_msg, sizeof(t_msg)), HPS_EINVAL);

    memset(big, 'v', HPS_PDB_META_MAX);
    big[HPS_PDB_META_MAX - 1] = '\0'; /* the longest value */
    T_OK(hps_pdb_meta_put(f->db, "big", big, t_msg, sizeof(t_msg)));
    meta_is(f->db, "big", big);
    big[HPS_PDB_META_MAX - 1] = 'v';
    big[HPS_PDB_META_MAX] = '\0'; /* one byte too long: refused, old value kept */
    T_ERR(hps_pdb_meta_put(f->db, "big", big, t_msg, sizeof(t_msg)), HPS_EINVAL);
    big[HPS_PDB_META_MAX - 1] = '\0';
    meta_is(f->db, "big", big);

    /* a buffer too small for the value: refused, buf left empty */
    T_ERR(hps_pdb_meta_get(f->db, "big", small, sizeof(small), t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_MSG_HAS("does not fit");
    assert_string_equal(small, "");
    T_OK(hps_pdb_meta_put(f->db, "eight", "12345678", t_msg, sizeof(t_msg)));
    T_ERR(hps_pdb_meta_get(f->db, "eight", small, sizeof(small), t_msg, sizeof(t_msg)),
          HPS_EINVAL); /* 8 bytes + NUL do not fit in 8... */
    T_OK(hps_pdb_meta_put(f->db, "seven", "1234567", t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_meta_get(f->db, "seven", small, sizeof(small), t_msg, sizeof(t_msg)));
    assert_string_equal(small, "1234567"); /* ...but 7 + NUL do */

    T_ERR(hps_pdb_meta_get(NULL, "x", vbuf, sizeof(vbuf), t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_meta_get(f->db, NULL, vbuf, sizeof(vbuf), t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_meta_get(f->db, "x", NULL, 16, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_meta_get(f->db, "x", vbuf, 0, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_meta_put(NULL, "x", "v", t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_ERR(hps_pdb_meta_put(f->db, NULL, "v", t_msg, sizeof(t_msg)), HPS_EINVAL);
    free(big);
}

static void test_read_only_and_tables(void **state)
{
    pfx_t *f = *state;
    hps_pdb_table_t *t = NULL;
    int64_t keys[2] = {7, 8};
    float vals[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8}, out[2 * 4];
    size_t hits = 0;

    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_table(f->db, "m", "t", true, &t, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_insert(t, 2, keys, 8, vals, 4, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_meta_put(f->db, "files.m.t", "identity", t_msg, sizeof(t_msg)));
    /* the entry lives beside the table, not in it */
    T_OK(hps_pdb_lookup(t, 2, keys, 8, 4, out, NULL, &hits, t_msg, sizeof(t_msg)));
    assert_int_equal(hits, 2);
    assert_memory_equal(out, vals, sizeof(vals));
    T_OK(hps_pdb_close(f->db, t_msg, sizeof(t_msg)));

    f->db = p_open(f->path, true, 0);
    meta_is(f->db, "files.m.t", "identity");
    T_ERR(hps_pdb_meta_put(f->db, "files.m.t", "other", t_msg, sizeof(t_msg)), -EROFS);
    T_ERR(hps_pdb_meta_put(f->db, "files.m.t", NULL, t_msg, sizeof(t_msg)), -EROFS);
    meta_is(f->db, "files.m.t", "identity");
}

/* Child mode: open path, store one entry, die by SIGKILL without closing. */
static int child_put_and_die(const char *path)
{
    hps_pdb_opts_t o;
    hps_pdb_t *db = NULL;

    hps_pdb_opts_init(&o);
    if (hps_pdb_open(path, &o, &db, t_msg, sizeof(t_msg)) != 0)
        return 3;
    if (hps_pdb_meta_put(db, "files.m.t", "written before SIGKILL", t_msg, sizeof(t_msg)) != 0)
        return 4;
    raise(SIGKILL);
    return 5;
}

static void test_survives_sigkill(void **state)
{
    pfx_t *f = *state;
    int status = p_run_self("test-pdb-meta", "--put-and-die", f->path);

    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    f->db = p_open(f->path, false, 0);
    meta_is(f->db, "files.m.t", "written before SIGKILL");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--put-and-die") == 0)
        return child_put_and_die(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_get_overwrite_delete, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_bounds, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_read_only_and_tables, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_survives_sigkill, p_setup, p_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
