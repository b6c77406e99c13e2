/*
 * kserve_response.c -- JSON bodies of the KServe v2 answers.
 *
 * Written directly into a text buffer (no json-c objects): the inference
 * response may carry millions of floats, and every other answer is small
 * and fixed in shape.  Strings that come from the request or the registry
 * go through hps__kserve_text_json_str(); floats use "%.9g", which round-trips
 * every fp32 value, so JSON and binary answers carry identical numbers.
 */
#include <string.h>

#include "worker/kserve_internal.h"

/* Extensions this front end implements (and nothing else). */
static const char *const extensions[] = {
    "binary_tensor_data", "model_repository", "statistics", "model_configuration", "parameters",
};

static void key(hps__kserve_text_t *t, const char *k)
{
    hps__kserve_text_json_str(t, k, strlen(k));
    hps__kserve_text_putc(t, ':');
}

static void str_field(hps__kserve_text_t *t, const char *k, const char *v)
{
    key(t, k);
    hps__kserve_text_json_str(t, v, strlen(v));
}

void hps__kserve_resp_error(hps__kserve_text_t *t, const char *msg)
{
    hps__kserve_text_puts(t, "{\"error\":");
    hps__kserve_text_json_str(t, msg, strlen(msg));
    hps__kserve_text_putc(t, '}');
}

void hps__kserve_resp_server_meta(hps__kserve_text_t *t, const char *name, const char *version,
                                  bool shm, bool cuda_shm)
{
    hps__kserve_text_putc(t, '{');
    str_field(t, "name", name);
    hps__kserve_text_putc(t, ',');
    str_field(t, "version", version);
    hps__kserve_text_puts(t, ",\"extensions\":[");
    for (size_t i = 0; i < sizeof(extensions) / sizeof(extensions[0]); i++) {
        if (i)
            hps__kserve_text_putc(t, ',');
        hps__kserve_text_json_str(t, extensions[i], strlen(extensions[i]));
    }
    if (shm)
        hps__kserve_text_puts(t, ",\"system_shared_memory\"");
    if (cuda_shm)
        hps__kserve_text_puts(t, ",\"cuda_shared_memory\"");
    hps__kserve_text_puts(t, "]}");
}

/* {"name":n,"datatype":dt,"shape":[-1(,-1)]} */
static void tensor_meta(hps__kserve_text_t *t, const struct hps__kserve_kmodel *m, const char *name,
                        const char *dt)
{
    hps__kserve_text_putc(t, '{');
    str_field(t, "name", name);
    hps__kserve_text_putc(t, ',');
    str_field(t, "datatype", dt);
    /* Triton prepends a -1 batch dimension to the config dims when
     * max_batch_size >= 1; the HPS backend's dims are [-1]. */
    hps__kserve_text_puts(t, m->max_batch_size ? ",\"shape\":[-1,-1]}" : ",\"shape\":[-1]}");
}

void hps__kserve_resp_model_meta(hps__kserve_text_t *t, const struct hps__kserve_kmodel *m)
{
    hps__kserve_text_putc(t, '{');
    str_field(t, "name", m->name);
    hps__kserve_text_puts(t, ",\"versions\":[");
    hps__kserve_text_version(t, m);
    hps__kserve_text_puts(t, "],\"platform\":\"hps\",\"inputs\":[");
    tensor_meta(t, m, "KEYS", "INT64");
    hps__kserve_text_putc(t, ',');
    tensor_meta(t, m, "NUMKEYS", "INT32");
    hps__kserve_text_puts(t, "],\"outputs\":[");
    tensor_meta(t, m, "OUTPUT0", "FP32");
    hps__kserve_text_puts(t, "]}");
}

/* "name":{"string_value":"a,b,c"} from a list of T values. */
static void list_param(hps__kserve_text_t *t, const char *name, const struct hps__kserve_kmodel *m,
                       const uint32_t *nums, char *const *strs)
{
    hps__kserve_text_t v;
    hps__kserve_text_init(&v);
    for (uint32_t i = 0; i < m->num_tables; i++) {
        if (i)
            hps__kserve_text_putc(&v, ',');
        if (nums)
            hps__kserve_text_u64(&v, nums[i]);
        else
            hps__kserve_text_puts(&v, strs[i]);
    }
    key(t, name);
    hps__kserve_text_puts(t, "{\"string_value\":");
    if (v.oom)
        t->oom = true;
    else
        hps__kserve_text_json_str(t, v.data ? v.data : "", v.len);
    hps__kserve_text_putc(t, '}');
    hps__kserve_text_fini(&v);
}

static void config_io(hps__kserve_text_t *t, const char *name, const char *type)
{
    hps__kserve_text_putc(t, '{');
    str_field(t, "name", name);
    hps__kserve_text_putc(t, ',');
    str_field(t, "data_type", type);
    hps__kserve_text_puts(t, ",\"format\":\"FORMAT_NONE\",\"dims\":[-1]}");
}

void hps__kserve_resp_model_config(hps__kserve_text_t *t, const struct hps__kserve_kmodel *m)
{
    hps__kserve_text_putc(t, '{');
    str_field(t, "name", m->name);
    hps__kserve_text_puts(t, ",\"platform\":\"\",\"backend\":\"hps\",\"max_batch_size\":");
    hps__kserve_text_u64(t, m->max_batch_size);
    hps__kserve_text_puts(t, ",\"input\":[");
    config_io(t, "KEYS", "TYPE_INT64");
    hps__kserve_text_putc(t, ',');
    config_io(t, "NUMKEYS", "TYPE_INT32");
    hps__kserve_text_puts(t, "],\"output\":[");
    config_io(t, "OUTPUT0", "TYPE_FP32");
    if (m->device_id >= 0) {
        hps__kserve_text_puts(
            t, "],\"instance_group\":[{\"kind\":\"KIND_GPU\",\"count\":1,\"gpus\":[");
        hps__kserve_text_i64(t, m->device_id);
        hps__kserve_text_puts(t, "]}],\"parameters\":{");
    } else {
        hps__kserve_text_puts(t, "],\"instance_group\":[{\"kind\":\"KIND_CPU\",\"count\":1}],"
                                 "\"parameters\":{");
    }
    list_param(t, "embedding_table_names", m, NULL, m->table_names);
    hps__kserve_text_putc(t, ',');
    list_param(t, "embedding_vecsize_per_table", m, m->dims, NULL);
    hps__kserve_text_putc(t, ',');
    list_param(t, "maxnum_catfeature_query_per_table_per_sample", m, m->max_keys_per_sample, NULL);
    hps__kserve_text_puts(t, "}}");
}

static uint64_t load(const _Atomic uint64_t *p)
{
    return atomic_load_explicit(p, memory_order_relaxed);
}

/* "k":{"count":c,"ns":n} */
static void dur_stat(hps__kserve_text_t *t, const char *k, const struct hps__kserve_kdur *d,
                     bool comma)
{
    if (comma)
        hps__kserve_text_putc(t, ',');
    key(t, k);
    hps__kserve_text_puts(t, "{\"count\":");
    hps__kserve_text_u64(t, load(&d->count));
    hps__kserve_text_puts(t, ",\"ns\":");
    hps__kserve_text_u64(t, load(&d->ns));
    hps__kserve_text_putc(t, '}');
}

static void model_stats(hps__kserve_text_t *t, const struct hps__kserve_kmodel *m)
{
    static const struct hps__kserve_kdur zero;
    const struct hps__kserve_kstats *s = &m->stats;
    hps__kserve_text_putc(t, '{');
    str_field(t, "name", m->name);
    hps__kserve_text_putc(t, ',');
    key(t, "version");
    hps__kserve_text_version(t, m);
    hps__kserve_text_puts(t, ",\"last_inference\":");
    hps__kserve_text_u64(t, load(&s->last_inference_ms));
    hps__kserve_text_puts(t, ",\"inference_count\":");
    hps__kserve_text_u64(t, load(&s->inference_count));
    hps__kserve_text_puts(t, ",\"execution_count\":");
    hps__kserve_text_u64(t, load(&s->execution_count));
    hps__kserve_text_puts(t, ",\"inference_stats\":{");
    dur_stat(t, "success", &s->success, false);
    dur_stat(t, "fail", &s->fail, true);
    dur_stat(t, "queue", &s->queue, true);
    dur_stat(t, "compute_input", &s->compute_input, true);
    dur_stat(t, "compute_infer", &s->compute_infer, true);
    dur_stat(t, "compute_output", &s->compute_output, true);
    dur_stat(t, "cache_hit", &zero, true);
    dur_stat(t, "cache_miss", &zero, true);
    hps__kserve_text_puts(t, "},\"response_stats\":{},\"batch_stats\":[],\"memory_usage\":[]}");
}

void hps__kserve_resp_stats(hps__kserve_text_t *t, const struct hps__kserve_kmodel *models,
                            size_t count, const hps_kserve_backend_t *b)
{
    hps__kserve_text_puts(t, "{\"model_stats\":[");
    bool first = true;
    for (size_t i = 0; i < count; i++) {
        if (b && !hps__kserve_model_current(models, count, b, i))
            continue; /* an older shape of a model listed by its current entry */
        if (b && b->model_loaded && !b->model_loaded(b->ctx, i))
            continue; /* no version available (Triton lists ready versions only) */
        if (!first)
            hps__kserve_text_putc(t, ',');
        first = false;
        model_stats(t, &models[i]);
    }
    hps__kserve_text_puts(t, "]}");
}

/* The JSON array of out[0, n): reserve once, then format in place. */
static void float_array(hps__kserve_text_t *t, const float *out, uint64_t n)
{
    hps__kserve_text_putc(t, '[');
    for (uint64_t i = 0; i < n; i++) {
        if (i)
            hps__kserve_text_putc(t, ',');
        hps__kserve_text_f32(t, out[i]);
        if (t->oom)
            return;
    }
    hps__kserve_text_putc(t, ']');
}

/* An output written to shared memory: the region instead of data. */
static void shm_output_params(hps__kserve_text_t *t, const struct hps__kserve_infer_req *r)
{
    hps__kserve_text_puts(t, ",\"parameters\":{\"shared_memory_region\":");
    hps__kserve_text_json_str(t, r->out_region, strlen(r->out_region));
    hps__kserve_text_puts(t, ",\"shared_memory_byte_size\":");
    hps__kserve_text_u64(t, r->out_shm_size);
    if (r->out_shm_offset) {
        hps__kserve_text_puts(t, ",\"shared_memory_offset\":");
        hps__kserve_text_u64(t, r->out_shm_offset);
    }
    hps__kserve_text_puts(t, "}}]}");
}

void hps__kserve_resp_infer(hps__kserve_text_t *t, const struct hps__kserve_kmodel *m,
                            const struct hps__kserve_infer_req *r, const float *out,
                            uint64_t version)
{
    /* Most floats print in at most 16 bytes ("-1.23456789e-05,"). */
    if (!r->binary_output && !r->out_shm && !hps__kserve_text_reserve(t, 256 + r->out_len * 16))
        return;
    hps__kserve_text_putc(t, '{');
    if (r->id && r->id_len) {
        key(t, "id");
        hps__kserve_text_json_str(t, r->id, r->id_len);
        hps__kserve_text_putc(t, ',');
    }
    str_field(t, "model_name", m->name);
    hps__kserve_text_putc(t, ',');
    key(t, "model_version");
    hps__kserve_text_version_num(t, version);
    hps__kserve_text_puts(t, ",\"parameters\":{\"NumSample\":");
    hps__kserve_text_u64(t, r->num_samples);
    hps__kserve_text_puts(t, ",\"DeviceID\":");
    hps__kserve_text_i64(t, m->device_id);
    hps__kserve_text_puts(t,
                          "},\"outputs\":[{\"name\":\"OUTPUT0\",\"datatype\":\"FP32\",\"shape\":[");
    hps__kserve_text_u64(t, r->out_len);
    hps__kserve_text_putc(t, ']');
    if (r->out_shm) {
        shm_output_params(t, r);
        return;
    }
    if (r->binary_output) {
        hps__kserve_text_puts(t, ",\"parameters\":{\"binary_data_size\":");
        hps__kserve_text_u64(t, r->out_len * sizeof(float));
        hps__kserve_text_puts(t, "}}]}");
        return;
    }
    hps__kserve_text_puts(t, ",\"data\":");
    float_array(t, out, r->out_len);
    hps__kserve_text_puts(t, "}]}");
}
