/*
 * test-pdb-model.c -- loading whole models into the persistent DB: every
 * table of a good model is loaded exactly; a model with one bad table (wrong
 * vector size, truncated file, missing file, 32-bit key out of range) is
 * refused before anything is written -- no column family is created, even
 * for the good tables, and a reopened DB holds nothing.
 */
#include "pdbtest.h"

typedef struct model {
    char *dirs[3];
    int64_t keys[3][400];
    size_t n[3];
    uint32_t dim[3];
} model_t;

static void make_model(pfx_t *f, model_t *m)
{
    static const char *names[3] = {"t0.model", "t1.model", "t2.model"};
    size_t t, i;

    for (t = 0; t < 3; t++) {
        m->n[t] = 100 + 150 * t;
        m->dim[t] = (uint32_t[]){1, 16, 128}[t];
        for (i = 0; i < m->n[t]; i++)
            m->keys[t][i] = (int64_t)(t_mix(i + 1000 * t) & 0xffffffffu); /* fits uint32 */
        m->dirs[t] =
            t_write_table(f->root, names[t], 50 + (uint32_t)t, m->keys[t], m->n[t], m->dim[t]);
    }
}

static void free_model(model_t *m)
{
    size_t t;

    for (t = 0; t < 3; t++)
        free(m->dirs[t]);
}

static void specs_of(const model_t *m, hps_modelfile_spec_t *s)
{
    size_t t;

    for (t = 0; t < 3; t++)
        s[t] = (hps_modelfile_spec_t){(const char *[]){"emb0", "emb1", "emb2"}[t], m->dirs[t],
                                      m->dim[t], t == 1 ? 4 : 8};
}

static int count_fn(const char *model, const char *table, void *ctx)
{
    (void)model, (void)table;
    ++*(int *)ctx;
    return 0;
}

/* The DB holds no table at all, now and after a reopen. */
static void assert_nothing_written(pfx_t *f)
{
    hps_pdb_table_t *t = NULL;
    hps_pdb_stats_t st;
    int count = 0;

    hps_pdb_stats(f->db, &st);
    assert_int_equal(st.bulk_rows + st.insert_rows + st.sst_files, 0);
    T_ERR(hps_pdb_table(f->db, "m", "emb0", false, &t, t_msg, sizeof(t_msg)), HPS_ENOTFOUND);
    T_OK(hps_pdb_foreach_table(f->db, count_fn, &count));
    assert_int_equal(count, 0);
    T_OK(hps_pdb_close(f->db, t_msg, sizeof(t_msg)));
    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_foreach_table(f->db, count_fn, &count));
    assert_int_equal(count, 0);
}

static void test_load_good_model(void **state)
{
    pfx_t *f = *state;
    hps_modelfile_spec_t s[3];
    hps_pdb_table_t *t = NULL;
    model_t *m = calloc(1, sizeof(*m));
    uint32_t k32[400];
    size_t i;
    int count = 0;

    make_model(f, m);
    specs_of(m, s);
    f->db = p_open(f->path, false, 0);
    T_OK(hps_pdb_load_model(f->db, "m", s, 3, 64, t_msg, sizeof(t_msg)));
    T_OK(hps_pdb_foreach_table(f->db, count_fn, &count));
    assert_int_equal(count, 3);
    T_OK(hps_pdb_table(f->db, "m", "emb0", false, &t, t_msg, sizeof(t_msg)));
    p_check(t, m->keys[0], m->n[0], 8, m->dim[0], 50, NULL);
    T_OK(hps_pdb_table(f->db, "m", "emb1", false, &t, t_msg, sizeof(t_msg)));
    for (i = 0; i < m->n[1]; i++)
        k32[i] = (uint32_t)m->keys[1][i];
    p_check(t, k32, m->n[1], 4, m->dim[1], 51, NULL);
    T_OK(hps_pdb_table(f->db, "m", "emb2", false, &t, t_msg, sizeof(t_msg)));
    p_check(t, m->keys[2], m->n[2], 8, m->dim[2], 52, NULL);
    /* loading again (a restart) overwrites in place */
    T_OK(hps_pdb_load_model(f->db, "m", s, 3, 0, t_msg, sizeof(t_msg)));
    p_check(t, m->keys[2], m->n[2], 8, m->dim[2], 52, NULL);
    free_model(m);
    free(m);
}

static void test_wrong_vector_size_refuses_model(void **state)
{
    pfx_t *f = *state;
    hps_modelfile_spec_t s[3];
    model_t *m = calloc(1, sizeof(*m));

    make_model(f, m);
    specs_of(m, s);
    s[2].dim = 64; /* the last table: configured dim disagrees with its file */
    f->db = p_open(f->path, false, 0);
    T_ERR(hps_pdb_load_model(f->db, "m", s, 3, 0, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_MSG_HAS("table 'emb2': ");
    T_MSG_HAS("t2.model/emb_vector");
    T_MSG_HAS("t2.model/key");
    T_MSG_HAS("dim is 64");
    assert_nothing_written(f);
    free_model(m);
    free(m);
}

static void test_truncated_table_refuses_model(void **state)
{
    pfx_t *f = *state;
    hps_modelfile_spec_t s[3];
    model_t *m = calloc(1, sizeof(*m));

    make_model(f, m);
    specs_of(m, s);
    t_resize(m->dirs[1], "key", (off_t)m->n[1] * 8 - 4);
    f->db = p_open(f->path, false, 0);
    T_ERR(hps_pdb_load_model(f->db, "m", s, 3, 0, t_msg, sizeof(t_msg)), HPS_ETRUNCATED);
    T_MSG_HAS("table 'emb1': ");
    T_MSG_HAS("t1.model/key");
    assert_nothing_written(f);
    free_model(m);
    free(m);
}

static void test_missing_and_bad_key_refuse_model(void **state)
{
    pfx_t *f = *state;
    hps_modelfile_spec_t s[3];
    model_t *m = calloc(1, sizeof(*m));
    char *p;

    make_model(f, m);
    specs_of(m, s);
    f->db = p_open(f->path, false, 0);
    /* a 32-bit-key table whose file holds a key >= 2^32 */
    s[0].key_bytes = 4;
    m->keys[0][77] = (int64_t)1 << 33;
    p = t_join(m->dirs[0], "key");
    t_write_file(p, m->keys[0], m->n[0] * 8);
    free(p);
    T_ERR(hps_pdb_load_model(f->db, "m", s, 3, 0, t_msg, sizeof(t_msg)), HPS_EINVAL);
    T_MSG_HAS("table 'emb0': ");
    T_MSG_HAS("row 77");
    s[0].key_bytes = 8;
    /* a missing emb_vector in the middle table */
    p = t_join(m->dirs[1], "emb_vector");
    assert_int_equal(unlink(p), 0);
    T_ERR(hps_pdb_load_model(f->db, "m", s, 3, 0, t_msg, sizeof(t_msg)), HPS_ENOTFOUND);
    T_MSG_HAS(p);
    free(p);
    /* bad model name */
    T_ERR(hps_pdb_load_model(f->db, "bad.name", s, 3, 0, t_msg, sizeof(t_msg)), HPS_EINVAL);
    assert_nothing_written(f);
    free_model(m);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_load_good_model, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_wrong_vector_size_refuses_model, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_truncated_table_refuses_model, p_setup, p_teardown),
        cmocka_unit_test_setup_teardown(test_missing_and_bad_key_refuse_model, p_setup, p_teardown),
    };

    return cmocka_run_group_tests_name("pdb-model", tests, NULL, NULL);
}
