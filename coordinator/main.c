/*
 * hps-coordinator -- one per host: creates or re-attaches the shared-memory
 * segment, loads the models into the persistent and volatile databases,
 * answers the workers' miss queue, beats its heartbeat and reaps dead
 * workers.  SIGTERM / SIGINT shut it down cleanly.  SIGHUP reloads: the
 * INI is read again and its model files checked; if both are good the
 * coordinator stops cleanly and executes itself again with the same
 * arguments and HPS_RELOAD_ENV set, which builds a new segment beside the
 * serving one whatever initialize_after_startup says and publishes it in one
 * step (segment.c): added models load, removed ones are gone with the old
 * segment, changed ones (files, version, settings) are loaded anew, and the
 * workers keep answering from the old segment until they switch.  Kafka
 * updates produced meanwhile are applied to the new segment before it is
 * published (RELOAD_CATCH_UP_MS).  A bad INI
 * or a refused model file is logged and changes nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "conf/tools.h"
#include "coord.h"
#include "hps/log.h"
#include "hps/modelfile.h"
#include "kafka-coord.h"

/* Longest wait of a reloaded or restarted coordinator that replaces a
 * serving segment, before it publishes, for its Kafka consumers to apply the
 * updates produced while it stopped and loaded; after it the segment is
 * published anyway (serving first) and they catch up while serving. */
#define RELOAD_CATCH_UP_MS 30000

/* Written by the signal thread (signal_loop) and read by the main thread
 * and the Kafka consumers (through coord_t.stop): stop (SIGTERM, SIGINT, or
 * main itself when it shuts down), a stop asked for by a signal, and reload
 * (SIGHUP, cleared by run() when it takes it).  A SIGTERM or SIGINT also
 * stops a load under way (stop_signal: hps_modelfile_cancel): its next read
 * of a model file fails, the build is abandoned as a failed one (nothing is
 * published; a reload's serving segment stays as it was) and the process
 * exits 0 (main). */
static atomic_int g_stop, g_term, g_reload; /* C11 atomics: threads, and lock-free
                                             * in a signal handler too */
/* The signal thread; g_sig_quit (atomic) ends it. */
static pthread_t g_sig_thread;
static bool g_sig_running;
static int g_sig_quit;

static void usage(FILE *out)
{
    fprintf(out, "usage: hps-coordinator -c FILE [--log-level error|warn|info|debug]\n"
                 "       hps-coordinator -h | --help | -V | --version\n"
                 "\n"
                 "  -c, --config FILE      the INI\n"
                 "  -l, --log-level LEVEL  error, warn, info or debug; else [hps] log_level\n"
                 "  -h, --help             print this help and exit\n"
                 "  -V, --version          print the version and exit\n"
                 "\n"
                 "Creates or re-attaches the shared-memory volatile database of FILE's\n"
                 "[volatile_db], loads every [model.<name>] into the persistent and volatile\n"
                 "databases (model_control_mode = explicit: those of startup_models and those\n"
                 "the serving segment holds), then serves the workers' misses until SIGTERM\n"
                 "or SIGINT.  One during a load stops it at its next step (nothing is\n"
                 "published; a reload's serving segment stays as it was), exit status 0.\n"
                 "SIGHUP reloads: FILE and its model files are checked, then the models\n"
                 "are loaded again beside what serves (a bad FILE changes nothing).\n"
                 "\n"
                 "Exit status:\n"
                 "  0  clean shutdown          3  shared memory busy or unusable\n"
                 "  1  runtime failure         4  a model was refused or failed to load\n"
                 "  2  usage or configuration  5  persistent database unusable (cannot be opened,\n"
                 "                                or failed while loading: full disk, I/O error)\n"
                 "                             6  distributed database (Redis) unusable\n");
}

/* The pid holding RocksDB's LOCK file in dir (an fcntl record lock, so
 * F_GETLK names it), or 0 if none or unknown. */
static pid_t pdb_lock_holder(const char *dir)
{
    char path[4096];
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    int fd;

    if (snprintf(path, sizeof(path), "%s/LOCK", dir) >= (int)sizeof(path))
        return 0;
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    if (fcntl(fd, F_GETLK, &fl) != 0 || fl.l_type == F_UNLCK)
        fl.l_pid = 0;
    close(fd);
    return fl.l_pid;
}

/* "pid N (COMM)" into buf, COMM from /proc where readable. */
static void pid_name(pid_t pid, char *buf, size_t len)
{
    char path[64], comm[32] = "";
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    f = fopen(path, "re");
    if (f) {
        if (fgets(comm, sizeof(comm), f))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
    }
    if (comm[0])
        snprintf(buf, len, "pid %d (%s)", (int)pid, comm);
    else
        snprintf(buf, len, "pid %d", (int)pid);
}

/* nftw callback of remove_fresh_pdb: one entry, children first. */
static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) == 0 ? 0 : -1;
}

/* A start that failed (a model refused, Redis unreachable ...) with a
 * persistent DB it created itself (open_pdb's fresh): its directory goes,
 * so that a refused start leaves nothing behind.  RocksDB held its lock on
 * it until shutdown_all closed it: no other process used it. */
static void remove_fresh_pdb(const char *path)
{
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        HPS_WARN("persistent DB %s: cannot remove the directory this failed start created: %s",
                 path, strerror(errno));
}

/* fresh: set when p->path did not exist before and this process created
 * it, holding RocksDB's lock on it (remove_fresh_pdb); not when the open
 * failed (another coordinator given the same new path may hold it). */
static int open_pdb(coord_t *c, bool *fresh)
{
    const hps_conf_persistent_db_t *p = &c->conf->persistent_db;
    if (p->type != HPS_CONF_PDB_ROCKS_DB)
        return 0;
    struct stat st;
    bool missing = !p->read_only && stat(p->path, &st) != 0 && errno == ENOENT;
    hps_pdb_opts_t o;
    hps_pdb_opts_init(&o);
    o.num_threads = (unsigned)p->num_threads;
    o.read_only = p->read_only;
    o.max_batch_size = (size_t)p->max_batch_size;
    char err[512];
    hps_err_t rc = hps_pdb_open(p->path, &o, &c->pdb, err, sizeof(err));
    if (rc == HPS_EBUSY) {
        /* This coordinator holds its segment's lock already: the holder is
         * another process, e.g. a coordinator of another segment given the
         * same path. */
        char who[64] = "another process";
        pid_t holder = pdb_lock_holder(p->path);
        if (holder > 0)
            pid_name(holder, who, sizeof(who));
        HPS_ERROR("persistent DB %s is held by %s (give each coordinator a [persistent_db] path "
                  "of its own): %s",
                  p->path, who, err);
        return HPS_EXIT_PDB;
    }
    if (rc < 0) {
        HPS_ERROR("persistent DB %s: %s", p->path, err);
        return HPS_EXIT_PDB;
    }
    *fresh = missing;
    HPS_INFO("persistent DB: RocksDB at %s%s", p->path, p->read_only ? " (read-only)" : "");
    if (coord_pdb_token(c) != 0)
        c->continues = true; /* it held this segment's rows before (kafka.c: legacy_group) */
    return 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The heartbeat runs on its own thread from the moment the segment is ours,
 * so that a long model load never looks like a dead coordinator. */
static void *beat_loop(void *arg)
{
    coord_t *c = arg;
    while (!__atomic_load_n(&c->beat_stop, __ATOMIC_ACQUIRE)) {
        hps_shmdb_t *db = __atomic_load_n(&c->beat_db, __ATOMIC_ACQUIRE);
        uint32_t timeout_ms = (uint32_t)c->conf->hps.worker_timeout_ms;
        if (db) {
            hps_shmdb_heartbeat(db);
            hps_shmdb_set_coord_timeout(db, timeout_ms);
        }
        pthread_mutex_lock(&c->serving_lock);
        if (c->serving) { /* a reload: its workers stay ready while the new one loads */
            hps_shmdb_heartbeat(c->serving);
            hps_shmdb_set_coord_timeout(c->serving, timeout_ms);
            if (!atomic_load(&c->prev_answering))
                hps_shmdb_miss_drop_pending(c->serving); /* nobody serves its misses */
        }
        pthread_mutex_unlock(&c->serving_lock);
        /* In slices: shutdown_all joins this thread on the way to a
         * reload's execv, while the serving segment's misses wait. */
        for (long left = (long)c->conf->hps.heartbeat_interval_ms;
             left > 0 && !__atomic_load_n(&c->beat_stop, __ATOMIC_ACQUIRE); left -= 10)
            sleep_ms(left < 10 ? left : 10);
    }
    return NULL;
}

static int start_beat_thread(coord_t *c)
{
    if (c->beating)
        return 0;
    if (pthread_create(&c->beat_thread, NULL, beat_loop, c) != 0) {
        HPS_ERROR("cannot start the heartbeat thread");
        return HPS_EXIT_RUNTIME;
    }
    c->beating = true;
    return 0;
}

/* A reload: the serving segment is held and beaten on from the first
 * moment (before RocksDB opens and the files are checked), so its workers
 * never see the coordinator gone. */
static int hold_serving(coord_t *c)
{
    coord_cpus_confine(c); /* workers serve while this image loads */
    int ex = coord_segment_hold_serving(c);
    return ex ? ex : start_beat_thread(c);
}

static int start_heartbeat(coord_t *c)
{
    hps_shmdb_heartbeat(c->db);
    /* Now, not at the heartbeat thread's next beat (up to a whole
     * heartbeat_interval_ms away when it already beats on a reload's
     * serving segment): a worker judges the heartbeat's age by it. */
    hps_shmdb_set_coord_timeout(c->db, (uint32_t)c->conf->hps.worker_timeout_ms);
    if (!c->adopt) /* the serving segment of a failed reload: its state stays */
        hps_shmdb_set_coord_state(c->db, HPS_COORD_LOADING);
    __atomic_store_n(&c->beat_db, c->db, __ATOMIC_RELEASE);
    int ex = start_beat_thread(c);
    if (ex)
        return ex;
    size_t n = c->conf->num_models;
    HPS_INFO("loading %zu model%s", n, n == 1 ? "" : "s"); /* the segment says LOADING */
    return 0;
}

/* SIGHUP: the INI at path read again and the files of the models it would
 * load checked as at start-up (nothing written): in explicit mode those
 * loaded now (a model of the INI that is not loaded does not stop it).
 * True when both are good; *ret_text is then the text read (what the next
 * image builds; the caller's to free). */
static bool reload_ok(const coord_t *c, const char *path, char **ret_text)
{
    hps_conf_t *conf = NULL;
    char err[1024], *text = NULL;
    if (hps_conf_read_file(path, &text, err, sizeof(err)) < 0 ||
        hps_conf_load_string(text, path, &conf, err, sizeof(err)) < 0) {
        HPS_ERROR("SIGHUP: %s; the running configuration stays", err);
        free(text);
        return false;
    }
    if (conf->hps.model_control_mode == HPS_CONF_MODEL_CONTROL_EXPLICIT) {
        bool keep[HPS_CONF_MAX_MODELS] = {false};
        for (size_t i = 0; i < conf->num_models; i++)
            keep[i] = hps_conf_model_find(c->conf, conf->models[i].name) != NULL;
        hps_conf_keep_models(conf, keep);
    }
    char why[1024];
    if (!coord_reload_check(c, conf, why, sizeof(why))) {
        HPS_ERROR("SIGHUP: %s; the running configuration stays", why);
        hps_conf_free(conf);
        free(text);
        return false;
    }
    /* pdb: identities are taken (coord_pdb_room); nothing is written */
    coord_t t = {.conf = conf,
                 .key_bytes = conf->hps.supportlonglong ? 8 : 4,
                 .stop = c->stop,
                 .pdb = c->pdb};
    int ex = coord_validate_models(&t);
    char room[512] = "";
    if (!ex)
        coord_pdb_room(c, &t, room, sizeof(room));
    free(t.idents);
    bool same_segment =
        strcmp(conf->volatile_db.shared_memory_name, c->conf->volatile_db.shared_memory_name) == 0;
    hps_conf_free(conf);
    if (ex)
        HPS_ERROR("SIGHUP: a model of %s was refused (above); the running configuration stays",
                  path);
    else if (*room || !coord_control_room(c, 0, room, sizeof(room)))
        HPS_ERROR("SIGHUP: %s", room);
    if (ex || *room) {
        free(text);
        return false;
    }
    if (!same_segment) /* no worker attached: coord_reload_check */
        HPS_WARN("SIGHUP: [volatile_db] shared_memory_name changed: the new segment gets the new "
                 "name; workers started with the old one would keep the old segment");
    *ret_text = text;
    return true;
}

/* Reap the dead processes of the segment and their miss-queue slots, and
 * say which (pid and role, as their rows said).  Called every half
 * worker_timeout_ms (at most once a second, at least every 50 ms), so a
 * dead worker is gone from the segment within worker_timeout_ms.  Death is
 * told by each row's liveness lock (shmdb), not by the worker's pid, which
 * names nobody here when the worker runs in another PID namespace. */
static void reap(coord_t *c)
{
    hps_proc_info_t before[HPS_SHMDB_MAX_PROCS], after[HPS_SHMDB_MAX_PROCS];
    size_t nb = 0, na = 0, slots = 0, dead = 0;
    char who[256] = "";
    hps_shmdb_procs(c->db, before, &nb, false);
    hps_shmdb_procs(c->db, after, &na, true);
    hps_shmdb_miss_reap(c->db, false, &slots);
    for (size_t i = 0; i < nb; i++) {
        bool kept = false;
        for (size_t j = 0; j < na && !kept; j++)
            kept = after[j].slot == before[i].slot;
        if (kept)
            continue;
        size_t at = strlen(who);
        if (dead++ < 8 && at < sizeof(who))
            snprintf(who + at, sizeof(who) - at, "%spid %d (%s)", at ? ", " : "",
                     (int)before[i].pid,
                     before[i].role == HPS_ROLE_WORKER        ? "worker or client"
                     : before[i].role != HPS_ROLE_COORDINATOR ? "tool"
                     : before[i].pid == getpid() ? "a previous image of this coordinator"
                                                 : "coordinator");
    }
    if (dead || slots)
        HPS_INFO("reaped %zu dead process%s%s%s%s and %zu of their miss-queue slot%s", dead,
                 dead == 1 ? "" : "es", dead ? ": " : "", who, dead > 8 ? ", ..." : "", slots,
                 slots == 1 ? "" : "s");
}

/* Reap dead workers and their miss-queue slots every half
 * worker_timeout_ms; handle SIGHUP (*ret_reload: stop and execute again).
 * At SIGHUP the Kafka consumers stop first (committing what was applied):
 * updates produced from then on are consumed by the reloaded coordinator and
 * applied to the new segment before it is published; if the reload is
 * refused they start again where they stopped. */
static void run(coord_t *c, const char *path, coord_kafka_t **kafka, bool *ret_reload)
{
    long period = (long)c->conf->hps.worker_timeout_ms / 2, since_reap = 0, since_publish = 0;
    period = period > 1000 ? 1000 : period < 50 ? 50 : period;
    long step = period < 100 ? period : 100;
    coord_ddb_publish(c); /* what loading wrote, before the first second */
    while (!atomic_load(&g_stop)) {
        sleep_ms(step);
        if ((since_publish += step) >= 1000) { /* Redis counters for /metrics, once a second */
            since_publish = 0;
            coord_ddb_publish(c);
        }
        if (atomic_exchange(&g_reload, 0)) {
            HPS_INFO("SIGHUP: reading %s again", path);
            coord_kafka_stop(*kafka);
            *kafka = NULL;
            char *text = NULL;
            if (reload_ok(c, path, &text) && coord_conf_pass(HPS_CONF_FD_ENV, text) &&
                coord_conf_pass(HPS_PREV_CONF_FD_ENV, c->text)) {
                free(text);
                coord_control_keep_loaded(c);
                *ret_reload = true;
                return;
            }
            free(text);
            coord_conf_unpass(HPS_CONF_FD_ENV);
            coord_conf_unpass(HPS_PREV_CONF_FD_ENV);
            if (coord_kafka_start(c, kafka) != 0)
                HPS_ERROR("SIGHUP: the Kafka consumers did not start again: online updates "
                          "stop until the next reload or restart");
        }
        if (coord_control_step(c, path)) { /* a load or unload: like SIGHUP */
            coord_kafka_stop(*kafka);
            *kafka = NULL;
            *ret_reload = true;
            return;
        }
        if ((since_reap += step) < period)
            continue;
        since_reap = 0;
        reap(c);
    }
}

/* HugeCTR's shared_memory_auto_remove: the last process out removes the
 * segment; with workers still attached it stays (they serve from it). */
static void release_segment(coord_t *c, bool reload)
{
    const char *name = c->conf->volatile_db.shared_memory_name;
    size_t others = hps_shmdb_other_procs(c->db);
    /* A reload: the next coordinator beats on it while it builds and its
     * rows serve.  With a persistent or distributed DB the next image
     * answers its misses from the column families it was built from and
     * from Redis (coord_prev_start): what is asked meanwhile waits for it
     * (within miss_timeout_ms); otherwise nothing is asked and what was
     * gets its defaults at once. */
    bool answered = reload && !c->staged &&
                    (c->conf->persistent_db.type == HPS_CONF_PDB_ROCKS_DB ||
                     c->conf->distributed_db.type == HPS_CONF_DDB_REDIS_CLUSTER);
    hps_shmdb_set_coord_state(c->db, answered ? HPS_COORD_RELOADING_SERVED
                                     : reload ? HPS_COORD_RELOADING
                                              : HPS_COORD_NONE);
    if (!answered) /* the miss service has stopped: defaults at once, not after miss_timeout_ms */
        hps_shmdb_miss_drop_pending(c->db);
    if (reload && !c->staged) {
        /* The serving segment: this process's liveness lock on it is kept
         * across execve() until the new image holds the segment, so that
         * its workers never see the coordinator gone. */
        int fd = hps_shmdb_detach_handover(c->db);
        char v[16];
        snprintf(v, sizeof(v), "%d", fd);
        if (fd >= 0)
            setenv(HPS_HANDOVER_ENV, v, 1);
        return;
    }
    hps_shmdb_detach(c->db); /* removes a segment never published */
    if (!c->conf->volatile_db.shared_memory_auto_remove || c->staged)
        return; /* staged: the name still holds the segment that serves */
    if (others) {
        HPS_INFO("kept /dev/shm/hps.%s: %zu processes still attached", name, others);
        return;
    }
    hps_shmdb_unlink(name);
    HPS_INFO("removed /dev/shm/hps.%s (shared_memory_auto_remove)", name);
}

static void shutdown_all(coord_t *c, bool reload)
{
    coord_serve_stop(c);
    if (!reload && c->db) { /* a stop: workers stop asking, what they asked is answered now */
        hps_shmdb_set_coord_state(c->db, HPS_COORD_NONE);
        hps_shmdb_miss_drop_pending(c->db);
    }
    coord_ddb_publish(c); /* the last lookups and inserts, for the workers still attached */
    coord_ddb_close(c);   /* flushes queued LFU/LRU access updates */
    char err[256];
    if (c->pdb && hps_pdb_close(c->pdb, err, sizeof(err)) < 0)
        HPS_WARN("closing the persistent DB: %s", err);
    /* The heartbeat goes on until here: closing RocksDB may take a while,
     * and a reload's workers must not see the coordinator gone meanwhile. */
    __atomic_store_n(&c->beat_stop, 1, __ATOMIC_RELEASE);
    if (c->beating)
        pthread_join(c->beat_thread, NULL);
    if (c->db)
        release_segment(c, reload);
    coord_segment_serving_release(c);
    coord_segment_unlock(c);
    free(c->tables);
    free(c->idents); /* when start-up stopped before coord_load_models() */
    free(c->prev_models);
    free(c->text);
    free(c->prev_text);
}

static int parse_args(int argc, char **argv, const char **ret_conf, const char **ret_level)
{
    static const struct option longs[] = {{"config", required_argument, NULL, 'c'},
                                          {"log-level", required_argument, NULL, 'l'},
                                          {"help", no_argument, NULL, 'h'},
                                          {"version", no_argument, NULL, 'V'},
                                          {NULL, 0, NULL, 0}};
    int ch;
    argv[0] = (char *)"hps-coordinator"; /* getopt's messages: the name, not the path */
    while ((ch = getopt_long(argc, argv, "c:l:hV", longs, NULL)) != -1) {
        switch (ch) {
        case 'c':
            *ret_conf = optarg;
            break;
        case 'l':
            *ret_level = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(HPS_EXIT_OK);
        case 'V':
            printf("hps-coordinator %s\n", hps_version());
            exit(HPS_EXIT_OK);
        default:
            usage(stderr);
            return HPS_EXIT_USAGE;
        }
    }
    if (!*ret_conf || optind != argc) {
        if (!*ret_conf)
            fprintf(stderr, "hps-coordinator: -c FILE is required\n");
        else
            fprintf(stderr, "hps-coordinator: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return HPS_EXIT_USAGE;
    }
    return 0;
}

static int apply_level(const hps_conf_t *conf, const char *cli)
{
    hps_log_level_t l = conf->hps.log_level;
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; cli && i < 4; i++)
        if (strcmp(cli, names[i]) == 0) {
            l = (hps_log_level_t)i;
            cli = NULL;
        }
    hps_log_init("hps-coordinator", l);
    if (cli) {
        HPS_ERROR("--log-level %s: use error, warn, info or debug", cli);
        return HPS_EXIT_USAGE;
    }
    return 0;
}

/*
 * Signals.  SIGHUP, SIGTERM and SIGINT are blocked in every thread (the mask
 * is set first thing, so every thread inherits it, and execv keeps it), and
 * one thread takes them with sigtimedwait.  A signal that comes while an
 * image hands over to the next (or while a failing build falls back) stays
 * pending across execv and the next image takes it: a SIGHUP reloads once
 * more, a SIGTERM stops it.  (With handlers, execv reset SIGHUP's to
 * terminate, and a signal taken by an image about to be replaced was lost.)
 */
static void signal_set(sigset_t *s)
{
    sigemptyset(s);
    sigaddset(s, SIGHUP);
    sigaddset(s, SIGTERM);
    sigaddset(s, SIGINT);
}

/* SIGTERM or SIGINT: stop, and cut a load short.  Async-signal-safe. */
static void stop_signal(void)
{
    atomic_store(&g_term, 1);
    atomic_store(&g_stop, 1);
    hps_modelfile_cancel();
}

static void *signal_loop(void *arg)
{
    sigset_t s;
    /* hand_signals_over() waits for a tick on the way to a reload's execv */
    const struct timespec tick = {.tv_nsec = 10 * 1000000L};
    (void)arg;
    signal_set(&s);
    while (!__atomic_load_n(&g_sig_quit, __ATOMIC_ACQUIRE)) {
        int sig = sigtimedwait(&s, NULL, &tick);
        if (sig == SIGHUP) {
            atomic_store(&g_reload, 1);
        } else if (sig == SIGTERM || sig == SIGINT) {
            stop_signal();
        }
    }
    return NULL;
}

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        atomic_store(&g_reload, 1);
    else
        stop_signal();
}

static void install_signals(void)
{
    sigset_t s;
    signal_set(&s);
    signal(SIGPIPE, SIG_IGN);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    if (pthread_create(&g_sig_thread, NULL, signal_loop, NULL) == 0) {
        g_sig_running = true;
        return;
    }
    /* No thread: handlers, as a last resort (a SIGHUP across execv may be lost). */
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    pthread_sigmask(SIG_UNBLOCK, &s, NULL);
}

/* Before execv: the signal thread ends, so that a signal coming from now on
 * stays pending for the next image; a SIGHUP this image took but did not act
 * on is made pending again.  False when a SIGTERM or SIGINT came: stop
 * instead. */
static bool hand_signals_over(void)
{
    if (g_sig_running) {
        __atomic_store_n(&g_sig_quit, 1, __ATOMIC_RELEASE);
        pthread_join(g_sig_thread, NULL);
        g_sig_running = false;
    }
    if (atomic_load(&g_term))
        return false;
    if (atomic_load(&g_reload))
        kill(getpid(), SIGHUP); /* blocked in every thread: pending across execv */
    return true;
}

/* A start whose persistent DB's disk cannot take the tables it would
 * ingest stops before it builds a segment or writes a row (it would fail
 * with ENOSPC once the disk is full, after reading most of the model). */
static int start_pdb_room(coord_t *c)
{
    char msg[768];
    if (coord_pdb_room(c, c, msg, sizeof(msg)))
        return 0;
    HPS_ERROR("%s", msg);
    return HPS_EXIT_PDB;
}

/* Consecutive fallbacks that failed themselves before they adopted the
 * serving segment (HPS_FALLBACKS_ENV, across execve; cleared once one
 * serves).  A fallback reads no model file it could refuse (load-check.c:
 * adopt_unread), but one may still fail there (opening the persistent DB,
 * holding the serving segment): the next one waits 1, 2, 4 ... up to 60 s
 * instead of starting again at once, without end, at full CPU.  One that
 * fails after it adopted the segment stops, as before (coord_control_failed
 * no longer sees a serving segment to go back to).  Returns early on
 * SIGTERM or SIGINT. */
static void fallback_backoff(coord_t *c)
{
    /* Nobody answers the serving segment's misses while this waits (this
     * image could not open its layers): its workers say not ready, as
     * between a coordinator's stop and its successor's takeover, instead of
     * ready with the defaults for every key outside shared memory.  The
     * next image says RELOADING, then SERVING, once it holds the segment. */
    pthread_mutex_lock(&c->serving_lock);
    if (c->serving)
        hps_shmdb_set_coord_state(c->serving, HPS_COORD_LOADING);
    pthread_mutex_unlock(&c->serving_lock);
    int64_t n = 0;
    const char *v = getenv(HPS_FALLBACKS_ENV);
    if (!v || !hps_parse_int(v, 0, 1 << 20, &n))
        n = 0;
    n++;
    char b[24];
    snprintf(b, sizeof(b), "%lld", (long long)n);
    setenv(HPS_FALLBACKS_ENV, b, 1);
    unsigned s = n >= 7 ? 60u : 1u << (n - 1);
    HPS_ERROR("the fallback failed too (%lld in a row): starting it again in %u s", (long long)n,
              s);
    const struct timespec tick = {.tv_nsec = 100 * 1000000L};
    for (unsigned i = 0; i < s * 10 && !atomic_load(&g_term); i++)
        nanosleep(&tick, NULL);
}

int main(int argc, char **argv)
{
    const char *path = NULL, *level = NULL;
    install_signals();
    int ex = parse_args(argc, argv, &path, &level);
    if (ex)
        return ex;
    hps_log_init("hps-coordinator", HPS_LOG_INFO);
    hps_conf_t *conf;
    char *text = NULL, *prev_text = NULL;
    if ((ex = coord_conf_load(path, &conf, &text, &prev_text)))
        return ex;
    if ((ex = apply_level(conf, level))) {
        hps_conf_free(conf);
        free(text);
        free(prev_text);
        return ex;
    }
    coord_t c = {.conf = conf,
                 .key_bytes = conf->hps.supportlonglong ? 8 : 4,
                 .stop = &g_stop,
                 .serving_lock = PTHREAD_MUTEX_INITIALIZER,
                 .kafka_mu = PTHREAD_MUTEX_INITIALIZER,
                 .text = text,
                 .prev_text = prev_text};
    bool reloaded = getenv(HPS_RELOAD_ENV) != NULL;
    char why[HPS_SHMDB_CTL_MSG_MAX]; /* a reload's first error: the request's answer */
    if (reloaded)
        hps_log_capture(why, sizeof(why));
    else
        why[0] = 0;
    if (coord_control_init(&c, conf) != 0) {
        hps_conf_free(conf);
        free(text);
        free(prev_text);
        return HPS_EXIT_RUNTIME;
    }
    coord_kafka_t *kafka = NULL; /* online updates (kafka.c), when configured */
    bool reused = false, pdb_fresh = false;
    ex = reloaded ? hold_serving(&c) : 0; /* a fallback's too (adopt: coord_prev_adopt) */
    if (!ex)
        ex = coord_segment_lock(&c); /* a second coordinator stops here, having opened nothing */
    if (!ex)
        ex = open_pdb(&c, &pdb_fresh); /* RocksDB's lock: two segments on one path */
    if (!ex)
        ex = coord_ddb_open(&c); /* Redis errors stop start-up before the segment exists */
    if (!ex)
        ex = coord_prev_start(&c); /* a reload: the serving version's misses, answered */
    if (!ex)
        ex = coord_segment_take_over(&c); /* a restart: likewise, from RocksDB or Redis */
    if (!ex)
        ex = coord_validate_models(&c); /* a bad model file stops start-up before the segment */
    if (!ex && !reloaded)
        ex = start_pdb_room(&c); /* a reload's was checked before its SIGHUP was taken */
    if (!ex)
        ex = coord_segment_open(&c, &reused);
    if (!ex && hps_shmdb_ctl_abandon(c.db, "the coordinator stopped while working on it"))
        HPS_WARN("model control: answered the requests a stopped coordinator left as failed");
    if (!ex)
        ex = start_heartbeat(&c);
    if (!ex)
        ex = coord_load_models(&c, reused);
    if (!ex)
        ex = coord_serve_start(&c);
    if (!ex)
        ex = coord_kafka_start(&c, &kafka);
    /* The updates produced since the old consumers stopped (a reload), or
     * all a restart's consumers read again (its volatile DB may be filled
     * from a persistent DB that applied fewer): the workers move only once
     * the new segment holds what the one they serve from held. */
    if (!ex && (reloaded || c.replacing))
        coord_kafka_catch_up(kafka, RELOAD_CATCH_UP_MS);
    if (!ex && atomic_load(&g_term)) {
        /* Asked to stop after the last load step (or during the catch-up):
         * not published either, as a stop during a load (stop_signal). */
        HPS_INFO("SIGTERM or SIGINT before the new segment was published: not publishing it");
        ex = HPS_EXIT_RUNTIME;
    }
    if (!ex) {
        coord_pdb_token_record(&c); /* what a later restart or reload checks */
        /* The text the models were built from: a lookup process takes a
         * model's new shape from it (worker/libhps/shape.c).  Without the
         * Redis password: the segment's mode may let others read it. */
        char *pub = NULL, cerr[256];
        hps_err_t trc =
            c.text ? hps_conf_strip_secrets(c.text, conf->source, &pub, cerr, sizeof(cerr)) : 0;
        if (pub)
            trc = hps_shmdb_set_conf_text(c.db, pub, strlen(pub));
        free(pub);
        if (trc < 0)
            HPS_WARN("cannot record the INI text in the segment (%s): workers whose INI has "
                     "another shape of a model than this one do not serve it",
                     hps_strerror(trc));
        hps_shmdb_set_coord_state(c.db, HPS_COORD_SERVING);
        coord_control_before_publish(&c);
        ex = coord_segment_publish(&c);
    }
    hps_log_capture(NULL, 0);
    if (ex && atomic_load(&g_term)) /* a model control request's answer */
        snprintf(why, sizeof(why),
                 "hps-coordinator was stopped (SIGTERM or SIGINT) before the "
                 "new segment was published; what serves stays as it was");
    bool fallback = ex && coord_control_failed(&c, ex, why);
    if (!ex) {
        coord_prev_drain(&c);              /* its misses answered until they have moved */
        coord_segment_serving_release(&c); /* published: the workers move to the new one */
        coord_cpus_restore(&c);
        coord_control_after_publish(&c);
    }
    bool reload = false;
    if (!ex) {
        unsetenv(HPS_FALLBACKS_ENV); /* serving: a later failure starts counting anew */
        HPS_INFO("ready: %zu model%s, %u table%s; serving misses", conf->num_models,
                 conf->num_models == 1 ? "" : "s", c.num_tables, c.num_tables == 1 ? "" : "s");
        run(&c, path, &kafka, &reload);
        if (reload)
            HPS_INFO("reloading: stopping, then starting again on %s", path);
        else
            HPS_INFO("shutting down");
    }
    atomic_store(&g_stop, 1);
    coord_kafka_stop(kafka); /* commits what was applied: the new one goes on from there */
    if (fallback && c.adopt)
        fallback_backoff(&c);
    /* Decided before the segment is released: handed over for a next
     * image (its misses left pending for it), or released as on a stop. */
    bool again = (reload || fallback) && hand_signals_over();
    /* A fallback holds the serving segment from its start and answers its
     * misses (from the persistent DB, whose rows are still the serving
     * version's unless this build replaced them: load-stage.c, STAGING; else
     * once it has ingested them again): requests wait for it (within
     * miss_timeout_ms), as across a reload's execve(), instead of getting
     * their defaults at once, while their workers say ready.  So does one
     * that failed before it answered them (its persistent DB would not
     * open), where its predecessor handed them over (prev_answering). */
    c.fallback_handover = fallback && again && (c.prev != NULL || atomic_load(&c.prev_answering));
    shutdown_all(&c, again);
    if (ex && !reloaded && pdb_fresh && !again)
        remove_fresh_pdb(conf->persistent_db.path);
    hps_conf_free(conf);
    if ((reload || fallback) && !again) {
        HPS_INFO("SIGTERM or SIGINT during the %s: stopping instead of starting again",
                 fallback && c.adopt ? "fallback"
                 : ex                ? "reload's build (nothing was published)"
                                     : "reload");
        return HPS_EXIT_OK;
    }
    if (fallback)
        HPS_ERROR("reload failed (exit status %d): starting again on the serving segment with "
                  "the models it serves",
                  ex);
    if (ex && atomic_load(&g_term)) {
        /* A stop asked for during start-up, a load cut short by it
         * included (stop_signal): what it left is gone, as after a clean
         * stop (a fresh persistent DB removed above, the unpublished
         * segment by release_segment). */
        HPS_INFO("SIGTERM or SIGINT during start-up: stopped before serving");
        return HPS_EXIT_OK;
    }
    if (again) {
        /* /proc/self/exe: the binary this process runs, even if its path moved */
        setenv(HPS_RELOAD_ENV, "1", 1);
        coord_cpus_restore(&c); /* execve keeps this thread's CPUs */
        execv("/proc/self/exe", argv);
        HPS_ERROR("reload: cannot execute /proc/self/exe again: %s; workers keep serving the "
                  "segment; start hps-coordinator again",
                  strerror(errno));
        return HPS_EXIT_RUNTIME;
    }
    return ex;
}
