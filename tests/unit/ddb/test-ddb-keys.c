/*
 * test-ddb-keys.c -- pure functions of the Redis Cluster client and the
 * distributed DB: CRC16/XMODEM and hash slots (Redis Cluster spec vectors),
 * hash tags, MOVED/ASK parsing, HugeCTR's partition hash names.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hps/ddb.h"
#include "hps/rcluster.h"

static uint16_t slot_of(const char *k)
{
    return hps_rcluster_key_slot(k, strlen(k));
}

static void test_crc16_vectors(void **state)
{
    (void)state;
    assert_int_equal(hps_rcluster_crc16("123456789", 9), 0x31C3);
    assert_int_equal(hps_rcluster_crc16("", 0), 0);
    assert_int_equal(hps_rcluster_crc16(NULL, 0), 0);
    /* redis-cli CLUSTER KEYSLOT values */
    assert_int_equal(slot_of("foo"), 12182);
    assert_int_equal(slot_of("bar"), 5061);
    assert_int_equal(slot_of("hello"), 866);
}

static void test_hash_tags(void **state)
{
    (void)state;
    assert_int_equal(slot_of("{user1000}.following"), slot_of("{user1000}.followers"));
    assert_int_equal(slot_of("{user1000}.following"), slot_of("user1000"));
    /* empty tag: whole key; only the first '{' counts */
    assert_int_equal(slot_of("foo{}{bar}"), hps_rcluster_crc16("foo{}{bar}", 10) & 16383);
    assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    assert_int_equal(slot_of("foo{bar}{zap}"), slot_of("bar"));
    assert_int_equal(slot_of("{no close"), hps_rcluster_crc16("{no close", 9) & 16383);
    /* binary-safe */
    const char bin[] = {'{', 0, 1, '}', 'x'};
    assert_int_equal(hps_rcluster_key_slot(bin, 5), hps_rcluster_crc16(bin + 1, 2) & 16383);
}

static void test_key_names(void **state)
{
    (void)state;
    char v[HPS_DDB_KEY_MAX], t[HPS_DDB_KEY_MAX];
    assert_int_equal(hps_ddb_key_name("wdl", "sparse_embedding1", 3, 'v', v, sizeof(v)),
                     (int)strlen("hps_et{hps_et.wdl.sparse_embedding1/p3}v"));
    assert_string_equal(v, "hps_et{hps_et.wdl.sparse_embedding1/p3}v");
    hps_ddb_key_name("wdl", "sparse_embedding1", 3, 't', t, sizeof(t));
    assert_string_equal(t, "hps_et{hps_et.wdl.sparse_embedding1/p3}t");
    assert_int_equal(slot_of(v), slot_of(t));
    assert_int_equal(slot_of(v), slot_of("hps_et.wdl.sparse_embedding1/p3"));
    assert_int_equal(hps_ddb_key_name("m", "t", 0, 'x', v, sizeof(v)), HPS_EINVAL);
    assert_int_equal(hps_ddb_key_name("m", "t", 0, 'v', v, 5), HPS_EINVAL);
}

static void test_redirects(void **state)
{
    (void)state;
    hps_rcluster_redirect_t r;
    assert_int_equal(hps_rcluster_parse_redirect("MOVED 3999 127.0.0.1:6381", &r), 0);
    assert_false(r.ask);
    assert_int_equal(r.slot, 3999);
    assert_string_equal(r.host, "127.0.0.1");
    assert_int_equal(r.port, 6381);
    assert_int_equal(hps_rcluster_parse_redirect("ASK 16383 [::1]:7002", &r), 0);
    assert_true(r.ask);
    assert_int_equal(r.slot, 16383);
    assert_string_equal(r.host, "::1");
    assert_int_equal(r.port, 7002);
    assert_int_equal(hps_rcluster_parse_redirect("MOVED 0 redis-7.local:30001", &r), 0);
    assert_string_equal(r.host, "redis-7.local");
    static const char *bad[] = {"MOVED 16384 h:1",
                                "MOVED x h:1",
                                "MOVED 1 h",
                                "MOVED 1 h:",
                                "MOVED 1 h:70000",
                                "ERR wrong",
                                "ASK",
                                "MOVED 1 :80",
                                "CLUSTERDOWN The cluster is down"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        assert_int_equal(hps_rcluster_parse_redirect(bad[i], &r), HPS_EINVAL);
}

static void test_bad_options(void **state)
{
    (void)state;
    hps_ddb_opts_t o;
    hps_ddb_t *db = NULL;
    char err[256] = "";
    hps_ddb_opts_init(&o);
    o.enable_tls = true;
    assert_int_equal(hps_ddb_open(&o, &db, err, sizeof(err)), HPS_EUNSUPPORTED);
    assert_non_null(strstr(err, "TLS"));
    assert_null(db);
    hps_ddb_opts_init(&o);
    o.address = "nohostport";
    assert_int_equal(hps_ddb_open(&o, &db, err, sizeof(err)), HPS_EINVAL);
    assert_non_null(strstr(err, "nohostport"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc16_vectors), cmocka_unit_test(test_hash_tags),
        cmocka_unit_test(test_key_names),     cmocka_unit_test(test_redirects),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
