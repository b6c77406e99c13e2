/*
 * kserve-test-server.c -- a standalone HTTP front end with the fake backend
 * of kstest.h, for tests written in other languages.
 *
 * Listens on 127.0.0.1, free ports; prints "PORTS <http> <metrics>" on
 * stdout, then reads commands from stdin, one per line, answering "OK":
 *   ready 0|1    backend readiness (degraded when 0)
 *   fail <code>  lookup result (0, or an hps_err_t such as -20010)
 * and stops gracefully at end of input.  Options: --max-body BYTES,
 * --max-keys N, --threads N.
 */
#include "kstest.h"

static void usage(void)
{
    fprintf(stderr, "usage: kserve-test-server [--max-body BYTES] [--max-keys N] [--threads N]\n");
    exit(2);
}

static void parse_args(int argc, char **argv, hps_kserve_options_t *o)
{
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc)
            usage();
        unsigned long long v = strtoull(argv[i + 1], NULL, 0);
        if (strcmp(argv[i], "--max-body") == 0)
            o->max_body_bytes = (size_t)v;
        else if (strcmp(argv[i], "--max-keys") == 0)
            o->max_keys_per_request = (size_t)v;
        else if (strcmp(argv[i], "--threads") == 0)
            o->threads = (unsigned)v;
        else
            usage();
    }
}

static void serve_commands(struct ks_backend *be)
{
    char line[256];
    while (fgets(line, sizeof(line), stdin)) {
        int v;
        if (sscanf(line, "ready %d", &v) == 1)
            atomic_store(&be->ready, v != 0);
        else if (sscanf(line, "fail %d", &v) == 1)
            atomic_store(&be->fail, v);
        else
            continue;
        printf("OK\n");
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    static struct ks_backend be;
    atomic_store(&be.ready, true);
    hps_kserve_options_t o;
    hps_kserve_options_init(&o);
    o.http_port = 0;
    o.metrics_port = 0;
    parse_args(argc, argv, &o);
    hps_kserve_backend_t vt = ks_vtable(&be);
    hps_kserve_t *s;
    uint16_t port, mport;
    hps_err_t rc = hps_kserve_create(&o, ks_models, KS_NUM_MODELS, &vt, &s);
    if (rc == 0 && (rc = hps_kserve_start(s)) == 0)
        rc = hps_kserve_ports(s, &port, &mport);
    if (rc) {
        fprintf(stderr, "kserve-test-server: %s\n", hps_strerror(rc));
        return 1;
    }
    printf("PORTS %u %u\n", port, mport);
    fflush(stdout);
    serve_commands(&be);
    hps_kserve_destroy(s);
    return 0;
}
