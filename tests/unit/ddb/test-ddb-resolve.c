/*
 * test-ddb-resolve.c -- a Redis node's host name is resolved within the
 * caller's deadline (coordinator/rcluster-resolve.c), whatever the DNS
 * server does.
 *
 * The test runs itself again inside new mount and network namespaces
 * (`unshare --mount --net`, with --user --map-root-user where plain
 * unshare is not permitted) and makes a DNS server that never answers
 * there: /etc/resolv.conf bind-mounted to one naming 127.0.0.1, where a
 * UDP socket is bound and never read.  Where no namespace can be made, the
 * cases that need it are skipped.
 *
 *  - an IP literal is used as it is, a name of /etc/hosts is resolved;
 *  - with the silent DNS server, a blocking getaddrinfo() takes the
 *    resolver's timeout (2 s, the baseline, printed), while the node's
 *    address call returns HPS_ETIMEDOUT at its 200 ms deadline, and a
 *    second call waits for the same resolution instead of starting one;
 *    hps_rcluster_create() with such a seed fails within its 200 ms
 *    connect timeout;
 *  - an address resolved before is used at once when it is stale and the
 *    new resolution hangs (the name left /etc/hosts for the silent DNS).
 */
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "coordinator/rcluster-internal.h"

static bool g_silent_dns; /* inside the namespaces, with the silent DNS server */
static char g_dir[] = "/tmp/hps-resolve-XXXXXX";

static node_t *node_new(const char *host)
{
    node_t *nd = calloc(1, sizeof(*nd));
    assert_non_null(nd);
    snprintf(nd->host, sizeof(nd->host), "%s", host);
    nd->port = 6379;
    hps__rcluster_addr_init(nd);
    return nd;
}

static void node_free(node_t *nd)
{
    hps__rcluster_addr_fini(nd);
    free(nd);
}

/* hps__rcluster_addr with a deadline ms from now; its duration in *ret_ms. */
static hps_err_t addr_within(node_t *nd, unsigned ms, char *out, uint64_t *ret_ms)
{
    char err[256] = "";
    uint64_t t0 = hps__rcluster_now_ms();
    hps_err_t rc = hps__rcluster_addr(nd, t0 + ms, out, INET6_ADDRSTRLEN, err, sizeof(err));
    *ret_ms = hps__rcluster_now_ms() - t0;
    if (rc)
        printf("# %s: %s (%d) after %llu ms\n", nd->host, err, (int)rc,
               (unsigned long long)*ret_ms);
    return rc;
}

/* Write text to g_dir/name and bind-mount it over target. */
static void bind_file(const char *name, const char *text, const char *target)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    if (mount(path, target, NULL, MS_BIND, NULL) != 0) {
        perror("bind mount");
        fail();
    }
}

static void test_literal_and_hosts(void **state)
{
    (void)state;
    char a[INET6_ADDRSTRLEN];
    uint64_t ms;
    const char *lits[] = {"127.0.0.1", "::1", "10.1.2.3"};
    for (size_t i = 0; i < 3; i++) {
        node_t *nd = node_new(lits[i]);
        assert_int_equal(addr_within(nd, 0, a, &ms), 0); /* no wait at all */
        assert_string_equal(a, lits[i]);
        assert_null(nd->gai);
        node_free(nd);
    }
    node_t *nd = node_new("localhost");
    assert_int_equal(addr_within(nd, 2000, a, &ms), 0);
    assert_true(strcmp(a, "127.0.0.1") == 0 || strcmp(a, "::1") == 0);
    node_free(nd);
}

static double getaddrinfo_s(const char *name)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    uint64_t t0 = hps__rcluster_now_ms();
    int e = getaddrinfo(name, "6379", &hints, &res);
    if (res)
        freeaddrinfo(res);
    double s = (double)(hps__rcluster_now_ms() - t0) / 1e3;
    printf("# baseline: a blocking getaddrinfo(\"%s\") took %.2f s (%s)\n", name, s,
           e ? gai_strerror(e) : "resolved");
    return s;
}

static void test_silent_dns_bounded(void **state)
{
    (void)state;
    if (!g_silent_dns)
        skip();
    assert_true(getaddrinfo_s("redis-b.hps-test") >= 1.5);
    node_t *nd = node_new("redis-b.hps-test");
    char a[INET6_ADDRSTRLEN];
    uint64_t ms;
    assert_int_equal(addr_within(nd, 200, a, &ms), HPS_ETIMEDOUT);
    printf("# the node's address call returned after %llu ms (deadline 200 ms)\n",
           (unsigned long long)ms);
    assert_true(ms >= 200 && ms < 500);
    const void *inflight = nd->gai;
    assert_non_null(inflight);
    assert_int_equal(addr_within(nd, 100, a, &ms), HPS_ETIMEDOUT);
    assert_true(ms >= 100 && ms < 400);
    assert_ptr_equal(nd->gai, inflight); /* the same resolution, not a new one */
    node_free(nd);                       /* with the resolution in flight */

    /* Through the public API: a seed named by such a name fails within
     * the connect timeout (hiredis's own resolving took the 2 s). */
    hps_rcluster_opts_t o;
    hps_rcluster_opts_init(&o);
    o.address = "redis-b.hps-test:7000";
    o.connect_timeout_ms = 200;
    hps_rcluster_t *rc = NULL;
    char err[512] = "";
    uint64_t t0 = hps__rcluster_now_ms();
    hps_err_t e = hps_rcluster_create(&o, &rc, err, sizeof(err));
    ms = hps__rcluster_now_ms() - t0;
    printf("# hps_rcluster_create: %s after %llu ms (connect timeout 200 ms)\n", err,
           (unsigned long long)ms);
    assert_int_not_equal(e, 0);
    assert_null(rc);
    assert_true(ms < 1000);
}

static void test_stale_address_kept(void **state)
{
    (void)state;
    if (!g_silent_dns)
        skip();
    bind_file("hosts1", "127.0.0.1 localhost\n10.9.8.7 redis-a.hps-test\n", "/etc/hosts");
    node_t *nd = node_new("redis-a.hps-test");
    char a[INET6_ADDRSTRLEN];
    uint64_t ms;
    assert_int_equal(addr_within(nd, 2000, a, &ms), 0);
    assert_string_equal(a, "10.9.8.7");
    /* The name moves to the silent DNS server; a refused connect marks
     * the address stale: the old one is answered at once meanwhile. */
    bind_file("hosts2", "127.0.0.1 localhost\n", "/etc/hosts");
    hps__rcluster_addr_stale(nd);
    memset(a, 0, sizeof(a));
    assert_int_equal(addr_within(nd, 200, a, &ms), 0);
    assert_string_equal(a, "10.9.8.7");
    printf("# stale address answered after %llu ms while its resolution hangs\n",
           (unsigned long long)ms);
    assert_true(ms < 100);
    assert_non_null(nd->gai); /* the refresh runs */
    node_free(nd);
}

/* Inside the namespaces: loopback up, a UDP socket on 127.0.0.1:53 that
 * never answers, and resolv.conf naming it. */
static bool make_silent_dns(void)
{
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0)
        return false;
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0)
        return false;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(53)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        return false; /* kept open, never read, for the process's life */
    if (!mkdtemp(g_dir))
        return false;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/resolv.conf", g_dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    fputs("nameserver 127.0.0.1\noptions timeout:2 attempts:1\n", f);
    fclose(f);
    return mount(path, "/etc/resolv.conf", NULL, MS_BIND, NULL) == 0;
}

static bool unshare_works(bool userns)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "unshare %s--mount --net true >/dev/null 2>&1",
             userns ? "--user --map-root-user " : "");
    return system(cmd) == 0;
}

/* Remove g_dir and what the cases wrote there. hosts2 was mounted over
 * hosts1's mount of /etc/hosts, which makes hosts1 a mount point that unlink
 * refuses (EBUSY): the binds are undone first. */
static void cleanup(void)
{
    const char *names[] = {"resolv.conf", "hosts1", "hosts2"};
    char path[PATH_MAX];
    while (umount2("/etc/hosts", MNT_DETACH) == 0)
        ;
    while (umount2("/etc/resolv.conf", MNT_DETACH) == 0)
        ;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", g_dir, names[i]);
        unlink(path);
    }
    rmdir(g_dir);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--in-namespaces") == 0) {
        g_silent_dns = make_silent_dns();
        if (!g_silent_dns)
            printf("# no silent DNS server could be made in the namespaces\n");
    } else {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n > 0) {
            exe[n] = 0;
            char *plain[] = {"unshare", "--mount", "--net", exe, "--in-namespaces", NULL};
            char *userns[] = {"unshare", "--user", "--map-root-user", "--mount",
                              "--net",   exe,      "--in-namespaces", NULL};
            fflush(stdout);
            if (unshare_works(false))
                execvp("unshare", plain);
            else if (unshare_works(true))
                execvp("unshare", userns);
        }
        printf("# unshare --mount --net is not permitted here: the silent-DNS cases skip\n");
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literal_and_hosts),
        cmocka_unit_test(test_silent_dns_bounded),
        cmocka_unit_test(test_stale_address_kept),
    };
    int rc = cmocka_run_group_tests_name("ddb-resolve", tests, NULL, NULL);
    if (g_silent_dns)
        cleanup();
    return rc;
}
