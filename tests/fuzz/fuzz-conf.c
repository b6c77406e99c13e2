/*
 * fuzz-conf.c -- libFuzzer target: the INI parser and validation of the
 * configuration (conf/: hps_conf_load_string), then on a valid file every
 * key through hps_conf_get / hps_conf_is_set, hps_conf_show, and one edit
 * (hps_conf_edit_string).
 *
 * Input:  INI text [ NUL key [ NUL value ] ]
 *   The text up to the first NUL byte is the file.  When a key follows, it
 *   is set to value ("1" when absent) in the text with hps_conf_edit_string.
 * The keys come from conf/hps_conf.def itself, so a new key is covered
 * without touching this file.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/tools.h"

#define KEY_STR(sec, key, ...) #sec "." #key,
#define SECTION_KEYS(id, doc)  HPS_CONF_KEYS_##id(KEY_STR)
static const char *const global_keys[] = {HPS_CONF_GLOBAL_SECTIONS(SECTION_KEYS)};
#define MODEL_KEY(sec, key, ...) #key,
static const char *const model_keys[] = {HPS_CONF_KEYS_model(MODEL_KEY)};
#define NKEYS(a) (sizeof(a) / sizeof((a)[0]))

static FILE *devnull;

static void check_loaded(const hps_conf_t *conf)
{
    char buf[256], key[400];
    bool set;
    for (size_t i = 0; i < NKEYS(global_keys); i++) {
        hps_err_t rc = hps_conf_get(conf, global_keys[i], buf, sizeof(buf));
        if (rc != 0 && rc != -ERANGE)
            abort(); /* every key of the schema has a value */
        if (hps_conf_is_set(conf, global_keys[i], &set) != 0)
            abort();
    }
    for (size_t m = 0; m < conf->num_models; m++) {
        if (hps_conf_model_find(conf, conf->models[m].name) == NULL)
            abort();
        for (size_t i = 0; i < NKEYS(model_keys); i++) {
            snprintf(key, sizeof(key), "model.%s.%s", conf->models[m].name, model_keys[i]);
            hps_err_t rc = hps_conf_get(conf, key, buf, sizeof(buf));
            if (rc != 0 && rc != -ERANGE)
                abort();
            (void)hps_conf_is_set(conf, key, &set);
        }
    }
    (void)hps_conf_get(conf, "no_such.key", buf, sizeof(buf));
    (void)hps_conf_show(conf, devnull);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!devnull && !(devnull = fopen("/dev/null", "w")))
        abort();
    /* text NUL key NUL value: three NUL-terminated strings. */
    char *buf = malloc(size + 3);
    memcpy(buf, data, size);
    buf[size] = buf[size + 1] = buf[size + 2] = '\0';
    const char *text = buf;
    size_t tl = strlen(text);
    const char *key = tl < size ? buf + tl + 1 : NULL;
    const char *value = key ? key + strlen(key) + 1 : NULL;
    if (value && value > buf + size)
        value = NULL;

    char err[512];
    hps_conf_t *conf = NULL;
    hps_err_t rc = hps_conf_load_string(text, "fuzz.ini", &conf, err, sizeof(err));
    if (rc == 0) {
        check_loaded(conf);
        hps_conf_free(conf);
    } else if (strlen(err) >= sizeof(err)) {
        abort();
    }
    if (key && *key) {
        char *out = NULL;
        rc = hps_conf_edit_string(text, "fuzz.ini", key, value && *value ? value : "1", &out, err,
                                  sizeof(err));
        if (rc == 0) {
            /* An edit is returned only when the result is valid. */
            if (hps_conf_load_string(out, "edited.ini", &conf, err, sizeof(err)) != 0)
                abort();
            hps_conf_free(conf);
        }
        free(out);
    }
    free(buf);
    return 0;
}
