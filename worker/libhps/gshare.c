/*
 * gshare.c -- descriptors of shared GPU caches over abstract Unix sockets
 * (see gshare.h).  Request: struct req; reply: one status byte, with the
 * descriptor attached (SCM_RIGHTS) when the status is 0.
 */
#include "gshare.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "hps/shmdb_gcache.h"

struct req {
    uint32_t index;
    uint32_t part;
    uint64_t generation;
};

struct offer {
    uint64_t generation; /* 0 = none */
    uint32_t num_fds;
    int fds[GSHARE_MAX_PARTS];
};

struct gshare {
    int sock;
    pthread_t thread;
    _Atomic bool stop;
    pthread_mutex_t mu;
    struct offer offers[HPS_SHMDB_MAX_GCACHES];
};

/* Abstract address "\0hps.<segment>.gcache.<pid>"; returns its length.  A
 * segment name too long for sun_path (108 bytes; names go to 200) is
 * written as its first 40 characters and the FNV-1a hash of the whole name
 * ("hps.<prefix>~<hash>.gcache.<pid>"): cutting the address instead lost
 * the pid, so every process of the segment had one address (their caches
 * were not shared), and segments of a common prefix shared addresses. */
static socklen_t addr_of(const char *segment, pid_t pid, struct sockaddr_un *a)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    size_t room = sizeof(a->sun_path) - 1;
    int n = snprintf(a->sun_path + 1, room, "hps.%s.gcache.%ld", segment, (long)pid);
    if (n < 0 || (size_t)n >= room) {
        uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, 64 bit */
        for (const char *p = segment; *p; p++)
            h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
        n = snprintf(a->sun_path + 1, room, "hps.%.40s~%016llx.gcache.%ld", segment,
                     (unsigned long long)h, (long)pid);
    }
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static bool same_user(int fd)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 && cr.uid == getuid();
}

/* Send status (and fd when status is 0). */
static void reply(int conn, uint8_t status, int fd)
{
    struct iovec iov = {.iov_base = &status, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (status == 0) {
        msg.msg_control = u.buf;
        msg.msg_controllen = sizeof(u.buf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    (void)sendmsg(conn, &msg, MSG_NOSIGNAL);
}

static void serve_one(gshare_t *s, int conn)
{
    struct req r;
    struct timeval tv = {.tv_sec = 0, .tv_usec = 200000}; /* a silent client holds up the others */
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (!same_user(conn) || recv(conn, &r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return;
    int fd = -1;
    pthread_mutex_lock(&s->mu);
    if (r.index < HPS_SHMDB_MAX_GCACHES && s->offers[r.index].generation == r.generation &&
        r.generation != 0 && r.part < s->offers[r.index].num_fds)
        fd = s->offers[r.index].fds[r.part];
    pthread_mutex_unlock(&s->mu);
    reply(conn, fd >= 0 ? 0 : 1, fd);
}

static void *serve(void *arg)
{
    gshare_t *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {.fd = s->sock, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int conn = accept4(s->sock, NULL, NULL, SOCK_CLOEXEC);
        if (conn < 0)
            continue;
        serve_one(s, conn);
        close(conn);
    }
    return NULL;
}

int gshare_start(const char *segment, gshare_t **ret)
{
    gshare_t *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    struct sockaddr_un a;
    socklen_t len = addr_of(segment, getpid(), &a);
    s->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    int rc = s->sock < 0 ? -errno : 0;
    if (rc == 0 && (bind(s->sock, (struct sockaddr *)&a, len) < 0 || listen(s->sock, 16) < 0))
        rc = -errno;
    pthread_mutex_init(&s->mu, NULL);
    if (rc == 0 && (rc = -pthread_create(&s->thread, NULL, serve, s)) == 0) {
        *ret = s;
        return 0;
    }
    if (s->sock >= 0)
        close(s->sock);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return rc;
}

int gshare_offer(gshare_t *s, uint32_t index, uint64_t generation, const int *fds, uint32_t num_fds)
{
    if (!s || index >= HPS_SHMDB_MAX_GCACHES || num_fds == 0 || num_fds > GSHARE_MAX_PARTS)
        return -ENOMEM;
    pthread_mutex_lock(&s->mu);
    s->offers[index].generation = generation;
    s->offers[index].num_fds = num_fds;
    memcpy(s->offers[index].fds, fds, num_fds * sizeof(int));
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void gshare_stop(gshare_t *s)
{
    if (!s)
        return;
    atomic_store(&s->stop, true);
    pthread_join(s->thread, NULL);
    close(s->sock);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Receive the status byte and the descriptor. */
static int receive(int sock, int *ret_fd)
{
    uint8_t status = 1;
    struct iovec iov = {.iov_base = &status, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? HPS_ETIMEDOUT : -errno;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    int fd = -1;
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(c), sizeof(int));
    if (n != 1 || status != 0 || fd < 0) {
        if (fd >= 0)
            close(fd);
        return HPS_ENOTFOUND;
    }
    *ret_fd = fd;
    return 0;
}

int gshare_fetch(const char *segment, pid_t pid, uint32_t index, uint32_t part, uint64_t generation,
                 int timeout_ms, int *ret_fd)
{
    struct sockaddr_un a;
    socklen_t len = addr_of(segment, pid, &a);
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return -errno;
    if (timeout_ms < 1) /* why: a zero socket timeout means "wait forever" */
        timeout_ms = 1;
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct req r = {.index = index, .part = part, .generation = generation};
    int rc = 0;
    if (connect(sock, (struct sockaddr *)&a, len) < 0)
        rc = errno == ECONNREFUSED || errno == ENOENT ? HPS_ENOTFOUND
             : errno == EAGAIN                        ? HPS_ETIMEDOUT /* backlog full */
                                                      : -errno;
    else if (send(sock, &r, sizeof(r), MSG_NOSIGNAL) != (ssize_t)sizeof(r))
        rc = -errno;
    else
        rc = receive(sock, ret_fd);
    close(sock);
    return rc;
}
