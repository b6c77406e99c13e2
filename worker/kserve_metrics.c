/*
 * kserve_metrics.c -- per-model statistics and their Prometheus rendering
 * with Triton's family names, HELP texts and labels (model, version; the
 * failure counter adds reason, labels in alphabetical order).
 *
 * Semantics (Triton's): request counters count HTTP inference requests;
 * nv_inference_count counts inferences (HPS: NumSample); exec_count counts
 * backend executions; durations are cumulative microseconds.  A model that
 * is not loaded has no samples (Triton drops an unloaded model's metrics;
 * hps_kserve_model_unloaded starts its counters again at 0).
 */
#include <stdio.h>
#include <stdlib.h>

#include "worker/kserve_internal.h"

/* Every counter is independent; relaxed is enough (see struct hps__kserve_kstats). */
static void add(_Atomic uint64_t *p, uint64_t v)
{
    atomic_fetch_add_explicit(p, v, memory_order_relaxed);
}

static uint64_t load(const _Atomic uint64_t *p)
{
    return atomic_load_explicit(p, memory_order_relaxed);
}

static void dur_add(struct hps__kserve_kdur *d, uint64_t ns)
{
    add(&d->count, 1);
    add(&d->ns, ns);
}

void hps__kserve_stats_success(struct hps__kserve_kstats *s, const struct hps__kserve_ktimes *t,
                               uint64_t num_samples)
{
    dur_add(&s->success, t->total_ns);
    dur_add(&s->queue, t->queue_ns);
    dur_add(&s->compute_input, t->input_ns);
    dur_add(&s->compute_infer, t->infer_ns);
    dur_add(&s->compute_output, t->output_ns);
    add(&s->inference_count, num_samples);
    add(&s->execution_count, 1);
    atomic_store_explicit(&s->last_inference_ms, hps__kserve_epoch_ms(), memory_order_relaxed);
}

void hps__kserve_stats_failure(struct hps__kserve_kstats *s, uint64_t total_ns,
                               enum hps__kserve_fail_reason reason)
{
    dur_add(&s->fail, total_ns);
    add(&s->fail_reason[reason], 1);
    atomic_store_explicit(&s->last_inference_ms, hps__kserve_epoch_ms(), memory_order_relaxed);
}

void hps__kserve_stats_reset(struct hps__kserve_kstats *s)
{
    struct hps__kserve_kdur *d[] = {&s->success,       &s->fail,          &s->queue,
                                    &s->compute_input, &s->compute_infer, &s->compute_output};
    for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++) {
        atomic_store_explicit(&d[i]->count, 0, memory_order_relaxed);
        atomic_store_explicit(&d[i]->ns, 0, memory_order_relaxed);
    }
    atomic_store_explicit(&s->inference_count, 0, memory_order_relaxed);
    atomic_store_explicit(&s->execution_count, 0, memory_order_relaxed);
    atomic_store_explicit(&s->last_inference_ms, 0, memory_order_relaxed);
    for (int r = 0; r < HPS__KSERVE_FAIL_NREASONS; r++)
        atomic_store_explicit(&s->fail_reason[r], 0, memory_order_relaxed);
}

/** One metric family: how to read its value from a model's statistics. */
struct family {
    const char *name;
    const char *type;
    const char *help;
    uint64_t (*value)(const struct hps__kserve_kstats *s);
};

static uint64_t v_success(const struct hps__kserve_kstats *s)
{
    return load(&s->success.count);
}

static uint64_t v_count(const struct hps__kserve_kstats *s)
{
    return load(&s->inference_count);
}

static uint64_t v_exec(const struct hps__kserve_kstats *s)
{
    return load(&s->execution_count);
}

/* Successful requests only, as Triton (infer_stats.cc: a failure adds to
 * its count only); failures' time is in the statistics extension's "fail". */
static uint64_t v_request_us(const struct hps__kserve_kstats *s)
{
    return load(&s->success.ns) / 1000;
}

static uint64_t v_queue_us(const struct hps__kserve_kstats *s)
{
    return load(&s->queue.ns) / 1000;
}

static uint64_t v_input_us(const struct hps__kserve_kstats *s)
{
    return load(&s->compute_input.ns) / 1000;
}

static uint64_t v_infer_us(const struct hps__kserve_kstats *s)
{
    return load(&s->compute_infer.ns) / 1000;
}

static uint64_t v_output_us(const struct hps__kserve_kstats *s)
{
    return load(&s->compute_output.ns) / 1000;
}

static uint64_t v_pending(const struct hps__kserve_kstats *s)
{
    int64_t p = atomic_load_explicit(&s->pending, memory_order_relaxed);
    return p > 0 ? (uint64_t)p : 0;
}

/* HELP texts are Triton's (core/src/metrics.cc). */
static const struct family families[] = {
    {"nv_inference_request_success", "counter",
     "Number of successful inference requests, all batch sizes", v_success},
    {"nv_inference_request_failure", "counter",
     "Number of failed inference requests, all batch sizes", NULL},
    {"nv_inference_count", "counter",
     "Number of inferences performed (does not include cached requests)", v_count},
    {"nv_inference_exec_count", "counter",
     "Number of model executions performed (does not include cached requests)", v_exec},
    {"nv_inference_request_duration_us", "counter",
     "Cumulative inference request duration in microseconds (includes cached requests)",
     v_request_us},
    {"nv_inference_queue_duration_us", "counter",
     "Cumulative inference queuing duration in microseconds (includes cached requests)",
     v_queue_us},
    {"nv_inference_compute_input_duration_us", "counter",
     "Cumulative compute input duration in microseconds (does not include cached requests)",
     v_input_us},
    {"nv_inference_compute_infer_duration_us", "counter",
     "Cumulative compute inference duration in microseconds (does not include cached requests)",
     v_infer_us},
    {"nv_inference_compute_output_duration_us", "counter",
     "Cumulative inference compute output duration in microseconds (does not include cached "
     "requests)",
     v_output_us},
    {"nv_inference_pending_request_count", "gauge",
     "Instantaneous number of pending requests awaiting execution per-model.", v_pending},
};

static const char *const reasons[HPS__KSERVE_FAIL_NREASONS] = {"REJECTED", "CANCELED", "BACKEND",
                                                               "OTHER"};

/* name{model="m"[,reason="r"],version="v"} value */
static void sample(hps__kserve_text_t *t, const char *name, const struct hps__kserve_kmodel *m,
                   const char *reason, uint64_t v)
{
    hps__kserve_text_puts(t, name);
    hps__kserve_text_puts(t, "{model=\"");
    hps__kserve_text_label(t, m->name);
    if (reason) {
        hps__kserve_text_puts(t, "\",reason=\"");
        hps__kserve_text_puts(t, reason);
    }
    hps__kserve_text_puts(t, "\",version=\"");
    char vb[24];
    snprintf(vb, sizeof(vb), "%llu", (unsigned long long)hps__kserve_kmodel_version(m));
    hps__kserve_text_label(t, vb);
    hps__kserve_text_puts(t, "\"} ");
    hps__kserve_text_u64(t, v);
    hps__kserve_text_putc(t, '\n');
}

static void render_family(hps__kserve_text_t *t, const struct family *f,
                          const struct hps__kserve_kmodel *models, const bool *shown,
                          size_t num_models)
{
    hps__kserve_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, f->type);
    for (size_t i = 0; i < num_models; i++) {
        if (!shown[i])
            continue;
        const struct hps__kserve_kstats *s = &models[i].stats;
        if (f->value) {
            sample(t, f->name, &models[i], NULL, f->value(s));
            continue;
        }
        for (int r = 0; r < HPS__KSERVE_FAIL_NREASONS; r++)
            sample(t, f->name, &models[i], reasons[r], load(&s->fail_reason[r]));
    }
}

void hps__kserve_metrics_render(hps__kserve_text_t *t, const struct hps__kserve_kmodel *models,
                                size_t num_models, const hps_kserve_backend_t *b)
{
    /* Which models have samples, asked once so that every family of the
     * scrape lists the same ones. */
    bool *shown = malloc(num_models ? num_models : 1);
    if (!shown) {
        t->oom = true;
        return;
    }
    for (size_t i = 0; i < num_models; i++)
        shown[i] = !b->model_loaded || b->model_loaded(b->ctx, i);
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
        render_family(t, &families[i], models, shown, num_models);
    free(shown);
}
