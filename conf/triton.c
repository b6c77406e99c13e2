/*
 * triton.c -- what a Triton config.pbtxt of the `hps` (or older `hugectr`)
 * backend says about HPS, for `hps-conf import`: the model's name, its
 * instance_group devices and its `parameters`, each parameter classified
 * (an INI key of the model, or no meaning here and why).  Every other
 * setting is listed as a warning with the reason it is not imported.
 * The text is read by pbtxt.c; the mapping to INI values is import.c's.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "conf/internal.h"

/* A config.pbtxt `parameters` key: the INI key it sets, or why it is not imported. */
static const struct {
    const char *param;
    const char *ini; /* [model.<name>] key; "hps.supportlonglong" for the global one */
    const char *why;
} params[] = {
    {"gpucache", "gpucache", NULL},
    {"gpucacheper", "gpucacheper", NULL},
    {"hit_rate_threshold", "hit_rate_threshold", NULL},
    {"refresh_interval", "refresh_interval", NULL},
    {"refresh_delay", "refresh_delay", NULL},
    {"des_feature_num", "maxnum_des_feature_per_sample", NULL},
    {"embeddingkey_long_type", "hps.supportlonglong", NULL},
    {"config", NULL,
     "the hugectr backend's dense-model (network) file; HPS serves the embeddings, configured "
     "by the ps.json"},
    {"freeze_sparse", NULL,
     "a reload here (SIGHUP to hps-coordinator, or a load request for a loaded model) always "
     "rebuilds the model's databases from its files; to keep the loaded embeddings, do not "
     "reload the model (online updates come from Kafka)"},
    {"label_dim", NULL, "an output size of the hugectr backend's dense model"},
    {"slots", NULL, "an input layout of the hugectr backend's dense model"},
    {"cat_feature_num", NULL, "an input layout of the hugectr backend's dense model"},
    {"max_nnz", NULL, "an input layout of the hugectr backend's dense model"},
    {"embedding_vector_size", NULL,
     "the hugectr backend's single vector size; embedding_vecsize_per_table of the ps.json "
     "gives each table's"},
};

#define IO_WHY                                                                                     \
    "hps-worker's inputs are always KEYS (TYPE_INT64) and NUMKEYS (TYPE_INT32), its output "       \
    "OUTPUT0 (TYPE_FP32), each with dims [ -1 ]"

/* The tensors hps-worker serves: a config.pbtxt that declares exactly these
 * (HugeCTR's hps backend's own) is silent; any other input or output is
 * named in a warning, since it is not what a client of hps-worker gets. */
static const struct {
    const char *field, *name, *type;
} io_served[] = {
    {"input", "KEYS", "TYPE_INT64"},
    {"input", "NUMKEYS", "TYPE_INT32"},
    {"output", "OUTPUT0", "TYPE_FP32"},
};
#define NIO (sizeof(io_served) / sizeof(io_served[0]))

static void note(struct hps__conf_buf *warn, const char *file, uint32_t line, const char *what,
                 const char *why)
{
    hps__conf_buf_printf(warn, "%s:%u: %s: not imported: %s\n", file, line, what, why);
}

static hps_err_t bad(char *err, size_t err_len, const char *file, uint32_t line, const char *fmt,
                     const char *arg)
{
    int n = snprintf(err, err_len, "%s:%u: ", file, line);

    if (err && n >= 0 && (size_t)n < err_len)
        snprintf(err + n, err_len - (size_t)n, fmt, arg);
    return HPS_ECONFIG;
}

/* The model name when `name` is absent: Triton's, the directory's name. */
static char *dir_name(const char *path)
{
    char buf[PATH_MAX];

    if (!realpath(path, buf))
        return NULL;
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf)
        return NULL;
    *slash = '\0';
    return strdup(basename(buf));
}

static hps_err_t add_gpu(struct hps__conf_triton *t, const struct hps__conf_pb_field *f,
                         const char *file, char *err, size_t err_len)
{
    char *end;
    long long g = f->kind == HPS__CONF_PB_SCALAR ? strtoll(f->text, &end, 10) : -1;

    if (f->kind != HPS__CONF_PB_SCALAR || *end || g < 0 || g > INT32_MAX)
        return bad(err, err_len, file, f->value_line,
                   "instance_group gpus: %s is not a device number", f->text ? f->text : "{...}");
    for (size_t i = 0; i < t->ngpus; i++)
        if (t->gpus[i] == g)
            return 0;
    int64_t *n = realloc(t->gpus, (t->ngpus + 1) * sizeof(*n));
    if (!n)
        return -ENOMEM;
    t->gpus = n;
    t->gpus[t->ngpus++] = g;
    t->gpus_line = t->gpus_line ? t->gpus_line : f->value_line;
    return 0;
}

static hps_err_t do_instance_group(struct hps__conf_triton *t, const struct hps__conf_pb_msg *g,
                                   const char *file, struct hps__conf_buf *warn, char *err,
                                   size_t err_len)
{
    for (size_t i = 0; i < g->n; i++) {
        const struct hps__conf_pb_field *f = &g->fields[i];
        if (strcmp(f->name, "gpus") == 0) {
            hps_err_t rc = add_gpu(t, f, file, err, err_len);
            if (rc)
                return rc;
        } else if (strcmp(f->name, "kind") == 0 && f->text && strcmp(f->text, "KIND_GPU") == 0) {
            continue;
        } else if (strcmp(f->name, "count") == 0) {
            /* One instance per device is what one hps-worker per device is. */
            if (f->kind == HPS__CONF_PB_SCALAR && strcmp(f->text, "1") == 0)
                continue;
            note(warn, file, f->line, "instance_group.count",
                 "the number of hps-worker processes per device is the number started "
                 "(hps-worker --device N --instance K)");
        } else {
            hps__conf_buf_printf(warn, "%s:%u: instance_group.%s: not imported: %s\n", file,
                                 f->line, f->name,
                                 strcmp(f->name, "kind") == 0
                                     ? "hps-worker serves CUDA devices (KIND_GPU); for lookups "
                                       "without a GPU cache set gpucache = false"
                                     : "a Triton setting that hps-worker does not have");
        }
    }
    return 0;
}

/* One `parameters { key: "k" value: { string_value: "v" } }` entry. */
static hps_err_t do_parameter(struct hps__conf_triton *t, const struct hps__conf_pb_field *f,
                              const char *file, struct hps__conf_buf *warn, char *err,
                              size_t err_len)
{
    const struct hps__conf_pb_field *k = hps__conf_pb_find(f->msg, "key");
    const struct hps__conf_pb_field *v = hps__conf_pb_find(f->msg, "value");
    const struct hps__conf_pb_field *s =
        v && v->msg ? hps__conf_pb_find(v->msg, "string_value") : NULL;

    if (f->kind != HPS__CONF_PB_MESSAGE || !k || k->kind != HPS__CONF_PB_STRING || !s ||
        s->kind != HPS__CONF_PB_STRING)
        return bad(err, err_len, file, f->line,
                   "parameters: expected { key: \"...\" value: { string_value: \"...\" } }%s", "");
    for (size_t i = 0; i < sizeof(params) / sizeof(params[0]); i++) {
        if (strcmp(k->text, params[i].param) != 0)
            continue;
        if (!params[i].ini) {
            hps__conf_buf_printf(warn, "%s:%u: parameters %s: no meaning here, not imported: %s\n",
                                 file, k->line, k->text, params[i].why);
            return 0;
        }
        struct hps__conf_triton_param *n = realloc(t->params, (t->nparams + 1) * sizeof(*n));
        if (!n)
            return -ENOMEM;
        t->params = n;
        n = &t->params[t->nparams];
        n->key = strdup(k->text);
        n->value = strdup(s->text);
        n->ini = params[i].ini;
        n->line = s->value_line;
        if (!n->key || !n->value) {
            free(n->key);
            free(n->value);
            return -ENOMEM;
        }
        t->nparams++;
        return 0;
    }
    hps__conf_buf_printf(warn, "%s:%u: parameters %s: unknown parameter, not imported\n", file,
                         k->line, k->text);
    return 0;
}

/* Field f of a message (fields of the same name but f's are listed once). */
static hps_err_t do_top(struct hps__conf_triton *t, const struct hps__conf_pb_msg *m, size_t fi,
                        const char *file, struct hps__conf_buf *warn, char *err, size_t err_len)
{
    const struct hps__conf_pb_field *f = &m->fields[fi];

    bool str = f->kind == HPS__CONF_PB_STRING, msg = f->kind == HPS__CONF_PB_MESSAGE;

    if (strcmp(f->name, "name") == 0 || strcmp(f->name, "backend") == 0) {
        if (!str)
            return bad(err, err_len, file, f->line, "%s: expected a string", f->name);
        char **dst = f->name[0] == 'n' ? &t->name : &t->backend;
        free(*dst);
        *dst = strdup(f->text);
        if (f->name[0] == 'n')
            t->name_line = f->line;
        else
            t->backend_line = f->line;
        return *dst ? 0 : -ENOMEM;
    }
    if (strcmp(f->name, "max_batch_size") == 0) {
        if (f->kind != HPS__CONF_PB_SCALAR)
            return bad(err, err_len, file, f->line, "%s: expected a number", f->name);
        free(t->max_batch_size);
        t->max_batch_size = strdup(f->text);
        t->max_batch_size_line = f->line;
        return t->max_batch_size ? 0 : -ENOMEM;
    }
    if ((strcmp(f->name, "instance_group") == 0 || strcmp(f->name, "parameters") == 0) && !msg)
        return bad(err, err_len, file, f->line, "%s: expected a message { ... }", f->name);
    if (strcmp(f->name, "input") == 0 || strcmp(f->name, "output") == 0)
        return 0; /* check_io() */
    if (strcmp(f->name, "instance_group") == 0)
        return do_instance_group(t, f->msg, file, warn, err, err_len);
    if (strcmp(f->name, "parameters") == 0)
        return do_parameter(t, f, file, warn, err, err_len);
    for (size_t i = 0; i < fi; i++)
        if (strcmp(m->fields[i].name, f->name) == 0)
            return 0;
    note(warn, file, f->line, f->name, "a Triton setting that hps-worker does not have");
    return 0;
}

/* The io_served[] entry that the `input` or `output` element f declares
 * (name, data_type and dims [ -1 ] or no dims, nothing else), or -1. */
static int io_entry(const struct hps__conf_pb_field *f)
{
    const struct hps__conf_pb_field *name = f->msg ? hps__conf_pb_find(f->msg, "name") : NULL;
    const struct hps__conf_pb_field *type = f->msg ? hps__conf_pb_find(f->msg, "data_type") : NULL;
    int e = -1;

    if (!name || name->kind != HPS__CONF_PB_STRING || !type || type->kind != HPS__CONF_PB_SCALAR)
        return -1;
    for (size_t i = 0; i < NIO; i++)
        if (strcmp(f->name, io_served[i].field) == 0 &&
            strcmp(name->text, io_served[i].name) == 0 &&
            strcmp(type->text, io_served[i].type) == 0)
            e = (int)i;
    size_t ndims = 0;
    for (size_t i = 0; e >= 0 && i < f->msg->n; i++) {
        const struct hps__conf_pb_field *x = &f->msg->fields[i];
        if (strcmp(x->name, "dims") == 0 && x->kind == HPS__CONF_PB_SCALAR &&
            strcmp(x->text, "-1") == 0)
            ndims++;
        else if (x != name && x != type)
            return -1;
    }
    return ndims <= 1 ? e : -1;
}

/* The `input` and `output` elements: a warning for each one that is not a
 * tensor hps-worker serves (or declares one twice), and for a served tensor
 * missing where the file declares others of its kind. */
static void check_io(const struct hps__conf_pb_msg *m, const char *file, struct hps__conf_buf *warn)
{
    uint32_t seen[NIO] = {0}, first[2] = {0};

    for (size_t i = 0; i < m->n; i++) {
        const struct hps__conf_pb_field *f = &m->fields[i];
        int out = strcmp(f->name, "output") == 0;
        if (!out && strcmp(f->name, "input") != 0)
            continue;
        first[out] = first[out] ? first[out] : f->line;
        const struct hps__conf_pb_field *name = f->msg ? hps__conf_pb_find(f->msg, "name") : NULL;
        const char *what = name && name->kind == HPS__CONF_PB_STRING ? name->text : NULL;
        int e = io_entry(f);
        if (e >= 0 && !seen[e]) {
            seen[e] = f->line;
            continue;
        }
        hps__conf_buf_printf(warn, "%s:%u: %s%s%s%s: not imported: %s%s\n", file,
                             what ? name->line : f->line, f->name, what ? " \"" : "",
                             what ? what : "", what ? "\"" : "", e >= 0 ? "declared twice; " : "",
                             IO_WHY);
    }
    for (size_t i = 0; i < NIO; i++) {
        int out = strcmp(io_served[i].field, "output") == 0;
        if (first[out] && !seen[i])
            hps__conf_buf_printf(
                warn, "%s:%u: %s: no %s \"%s\" (%s): hps-worker serves it all the same: %s\n", file,
                first[out], io_served[i].field, io_served[i].field, io_served[i].name,
                io_served[i].type, IO_WHY);
    }
}

hps_err_t hps__conf_triton_read(const char *path, struct hps__conf_triton *t,
                                struct hps__conf_buf *warn, char *err, size_t err_len)
{
    struct hps__conf_pb_msg *m = NULL;
    char *text;
    size_t len;

    memset(t, 0, sizeof(*t));
    hps_err_t rc = hps__conf_read_file(path, &text, &len, err, err_len);
    if (rc)
        return rc;
    rc = hps__conf_pb_parse(text, len, path, &m, err, err_len);
    free(text);
    for (size_t i = 0; !rc && i < m->n; i++)
        rc = do_top(t, m, i, path, warn, err, err_len);
    if (!rc)
        check_io(m, path, warn);
    hps__conf_pb_free(m);
    if (!rc && !t->name && !(t->name = dir_name(path)))
        rc = bad(err, err_len, path, 1,
                 "no `name` field, and the model's name cannot be taken from the directory%s", "");
    if (!rc && t->backend && strcmp(t->backend, "hps") != 0 && strcmp(t->backend, "hugectr") != 0)
        rc = bad(err, err_len, path, t->backend_line,
                 "backend \"%s\": not a model of HugeCTR's hps (or hugectr) backend", t->backend);
    if (rc == -ENOMEM)
        hps__conf_msg(err, err_len, "%s: out of memory", path);
    if (rc)
        hps__conf_triton_fini(t);
    return rc;
}

void hps__conf_triton_fini(struct hps__conf_triton *t)
{
    for (size_t i = 0; i < t->nparams; i++) {
        free(t->params[i].key);
        free(t->params[i].value);
    }
    free(t->params);
    free(t->gpus);
    free(t->name);
    free(t->backend);
    free(t->max_batch_size);
    memset(t, 0, sizeof(*t));
}
