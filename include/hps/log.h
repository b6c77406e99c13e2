/*
 * log.h -- logging for the executables (hps-coordinator, hps-worker, tools)
 * and for libhps, whose clients run in users' processes.
 *
 * Other libraries never log (house style); they return codes and messages.
 * The executables and libhps log one line per event to stderr:
 *   2026-11-22T04:40:00.123Z hps-coordinator[1234] INFO  loaded model wdl ...
 * The level is process-wide (the one global the house style allows besides
 * the stop flag) and set once at start; hps_log() is thread-safe (one
 * fprintf per line, stderr is unbuffered).
 */
#ifndef HPS_LOG_H
#define HPS_LOG_H

#include <stdarg.h>
#include <stddef.h>

#include "hps/hps.h" /* hps_log_level_t */

/** @brief Set the program name shown in each line and the level (not thread-safe: call first). */
void hps_log_init(const char *prog, hps_log_level_t level);

/**
 * @brief The level for a process whose program never called hps_log_init():
 *        libhps in a user's process (C API, Python) takes its INI's
 *        [hps] log_level this way at each hps_client_open, while an
 *        executable's own choice stays.  Thread-safe.
 */
void hps_log_default_level(hps_log_level_t level);

/** @brief Current level. */
hps_log_level_t hps_log_level(void);

/** Longest log line in bytes, its text cut there: room for a message that
 *  names a path of PATH_MAX bytes (model files, RocksDB), and more. */
#define HPS_LOG_LINE_MAX 8192

/** @brief Log one line at level (dropped when above the configured level). Thread-safe. */
__attribute__((format(printf, 2, 3))) void hps_log(hps_log_level_t level, const char *fmt, ...);

/**
 * @brief Keep the calling thread's next ERROR message (without the line's
 *        time and program prefix) in buf, as well as logging it: the first
 *        one after this call, NUL-terminated, truncated to len - 1 bytes.
 *        buf is set to "" now.  hps_log_capture(NULL, 0) stops it.  For
 *        answers that must say why (hps-coordinator's model control).
 * @param[out] buf  Host buffer of len bytes, owned by the caller; must
 *                  outlive the capture.
 */
void hps_log_capture(char *buf, size_t len);

#define HPS_ERROR(...) hps_log(HPS_LOG_ERROR, __VA_ARGS__)
#define HPS_WARN(...)  hps_log(HPS_LOG_WARN, __VA_ARGS__)
#define HPS_INFO(...)  hps_log(HPS_LOG_INFO, __VA_ARGS__)
#define HPS_DEBUG(...) hps_log(HPS_LOG_DEBUG, __VA_ARGS__)

#endif
