/*
 * test-kafka-msg.c -- the broker-independent parts of include/hps/kafka.h:
 * message parser on good and bad values, topic and model regexes built from
 * update filters, consumer-group names, key groups and partitions.
 */
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hps/kafka.h"

#define DIM 4

/* "HCTR", value_size, then n records of key (kb bytes) + DIM floats. */
static size_t build(uint8_t *buf, uint32_t value_size, uint32_t kb, size_t n)
{
    uint32_t hdr[2] = {HPS_KAFKA_MAGIC, value_size};
    memcpy(buf, hdr, 8);
    size_t off = 8;
    for (size_t i = 0; i < n; i++) {
        uint64_t key = 100 + i;
        memcpy(buf + off, &key, kb);
        off += kb;
        float v[DIM] = {(float)i, 1, 2, 3};
        memcpy(buf + off, v, sizeof(v));
        off += sizeof(v);
    }
    return off;
}

static void test_parse_good(void **state)
{
    (void)state;
    uint8_t buf[1024];
    for (uint32_t kb = 4; kb <= 8; kb += 4) {
        size_t len = build(buf, DIM * 4, kb, 3);
        hps_kafka_msg_t m;
        assert_int_equal(hps_kafka_parse(buf, len, 0, kb, DIM * 4, &m), HPS_KAFKA_OK);
        assert_int_equal(m.count, 3);
        assert_int_equal(m.record_size, kb + DIM * 4);
        assert_ptr_equal(m.records, buf + 8);
        uint64_t key = 0;
        memcpy(&key, m.records + 2 * m.record_size, kb);
        assert_int_equal(key, 102);
    }
}

static void test_parse_bad(void **state)
{
    (void)state;
    uint8_t buf[1024];
    hps_kafka_msg_t m;
    size_t len = build(buf, DIM * 4, 8, 2);
    assert_int_equal(hps_kafka_parse(buf, len, 3, 8, DIM * 4, &m), HPS_KAFKA_SKIP_KEYED);
    assert_int_equal(hps_kafka_parse(NULL, 0, 0, 8, DIM * 4, &m), HPS_KAFKA_SKIP_EMPTY);
    assert_int_equal(hps_kafka_parse(buf, 7, 0, 8, DIM * 4, &m), HPS_KAFKA_SKIP_MAGIC);
    assert_int_equal(hps_kafka_parse(buf, 8, 0, 8, DIM * 4, &m), HPS_KAFKA_BEACON);
    assert_int_equal(hps_kafka_parse(buf, len - 1, 0, 8, DIM * 4, &m), HPS_KAFKA_SKIP_TRUNCATED);
    assert_int_equal(hps_kafka_parse(buf, len, 0, 8, DIM * 4 + 4, &m), HPS_KAFKA_SKIP_VALUE_SIZE);
    /* 8-byte keys read as 4-byte keys: the record size does not divide. */
    size_t len1 = build(buf, DIM * 4, 8, 1);
    assert_int_equal(hps_kafka_parse(buf, len1, 0, 4, DIM * 4, &m), HPS_KAFKA_SKIP_TRUNCATED);
    buf[0] ^= 1;
    assert_int_equal(hps_kafka_parse(buf, len, 0, 8, DIM * 4, &m), HPS_KAFKA_SKIP_MAGIC);
    assert_string_equal(hps_kafka_verdict_name(HPS_KAFKA_SKIP_VALUE_SIZE), "value_size");
    /* The skip reasons' names (the workers' metric labels); none for the rest. */
    assert_string_equal(hps_update_reason_name(HPS_KAFKA_SKIP_UNKNOWN), "unknown_table");
    assert_string_equal(hps_update_reason_name(HPS_KAFKA_SKIP_MAGIC), "magic");
    assert_null(hps_update_reason_name(HPS_KAFKA_OK));
    assert_null(hps_update_reason_name(HPS_KAFKA_BEACON));
    assert_null(hps_update_reason_name(HPS_KAFKA_NUM_VERDICTS));
    assert_string_equal(hps_kafka_verdict_name(HPS_KAFKA_BEACON), "beacon");
    assert_string_equal(hps_kafka_verdict_name(HPS_KAFKA_NUM_VERDICTS), "?");
}

static bool posix_match(const char *re, const char *s)
{
    regex_t r;
    assert_int_equal(regcomp(&r, re, REG_EXTENDED | REG_NOSUB), 0);
    bool ok = regexec(&r, s, 0, NULL, 0) == 0;
    regfree(&r);
    return ok;
}

static void test_topic_regex(void **state)
{
    (void)state;
    char buf[256];
    assert_int_equal(hps_kafka_topic_regex(".+", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "^hps_et\\.(.+)\\.[a-zA-Z0-9_-]+$");
    assert_true(posix_match(buf, "hps_et.wdl.sparse_embedding1"));
    assert_false(posix_match(buf, "other.wdl.t"));
    /* HugeCTR's default filter: anchors stripped, so it now matches hps_* models. */
    assert_int_equal(hps_kafka_topic_regex("^hps_.+$", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "^hps_et\\.(hps_.+)\\.[a-zA-Z0-9_-]+$");
    assert_true(posix_match(buf, "hps_et.hps_m.t0"));
    assert_false(posix_match(buf, "hps_et.wdl.t0"));
    assert_int_equal(hps_kafka_topic_regex("a|b", buf, sizeof(buf)), 0);
    assert_true(posix_match(buf, "hps_et.b.t"));
    assert_false(posix_match(buf, "hps_et.c.t"));
    assert_int_equal(hps_kafka_topic_regex("^$", buf, sizeof(buf)), HPS_EINVAL);
    assert_int_equal(hps_kafka_topic_regex(".+", buf, 10), HPS_EINVAL);
    assert_int_equal(hps_kafka_model_regex("mA", buf, sizeof(buf)), 0);
    assert_true(posix_match(buf, "mA"));
    assert_false(posix_match(buf, "mA2"));
}

static void test_topic_names(void **state)
{
    (void)state;
    char buf[HPS_KAFKA_TOPIC_MAX], m[HPS_KAFKA_TOPIC_MAX], t[HPS_KAFKA_TOPIC_MAX];
    assert_int_equal(hps_kafka_topic_name("wdl", "sparse_embedding1", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "hps_et.wdl.sparse_embedding1");
    assert_int_equal(hps_kafka_topic_name("w.dl", "t", buf, sizeof(buf)), HPS_EINVAL);
    assert_int_equal(hps_kafka_topic_split("hps_et.wdl.sparse_embedding1", m, t), 0);
    assert_string_equal(m, "wdl");
    assert_string_equal(t, "sparse_embedding1");
    assert_int_equal(hps_kafka_topic_split("hps_et.a.b.c", m, t), HPS_EINVAL);
    assert_int_equal(hps_kafka_topic_split("__hps_beacon", m, t), HPS_EINVAL);
}

static void test_group_names(void **state)
{
    (void)state;
    char buf[64];
    assert_int_equal(hps_kafka_group_name("volatile", true, "h", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "hps.volatile");
    assert_int_equal(hps_kafka_group_name("persistent", false, "host1", buf, sizeof(buf)), 0);
    assert_string_equal(buf, "hps.persistent.host1");
    assert_int_equal(hps_kafka_group_name("volatile", false, NULL, buf, sizeof(buf)), HPS_EINVAL);
    assert_int_equal(hps_kafka_group_name("persistent", false, "h", buf, 8), HPS_EINVAL);
}

static void test_key_groups(void **state)
{
    (void)state;
    assert_int_equal(hps_kafka_key_group(12345, 8), hps_rrxmrrxmsx_0(12345) % 8);
    assert_int_equal(hps_kafka_partition_of(0x80000005u, 4), 1);
    assert_int_equal(hps_kafka_partition_of(7, 3), 1);
    assert_int_equal(hps_kafka_partition_of(7, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_good),  cmocka_unit_test(test_parse_bad),
        cmocka_unit_test(test_topic_regex), cmocka_unit_test(test_topic_names),
        cmocka_unit_test(test_group_names), cmocka_unit_test(test_key_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
