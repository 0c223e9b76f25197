/*
 * kforge calibration cache: measured ceilings per device, kept in one small JSON file so
 * that a run does not re-measure what an earlier one already did.
 *
 * Design note.
 *  - Where: $KFORGE_CACHE_DIR, else $XDG_CACHE_HOME/kforge, else $HOME/.cache/kforge; the
 *    file is calibration.json. The directory is created on save.
 *  - Format (version 1):
 *      { "format": "kforge-calibration", "version": 1,
 *        "devices": { "<device_key>": { "measured": 1, "threads": 2, "copy_gbs": 31.2,
 *                     "read_gbs": ..., "write_gbs": ..., "peak_gflops_f32": ...,
 *                     "peak_gflops_f64": ..., "launch_us": 4.1 (optional), "busy": 0.4 (optional,
 *                     CPU: others' share of the machine while measuring),
 *                     "when": "2025-01-01T00:00:00Z" }, ... } }
 *  - A missing file or entry is KF_ERR_IO (nothing cached); a file that is not valid JSON
 *    or not of this shape, or an entry with a missing/invalid field, is KF_ERR_PARSE naming
 *    the file (with line and column when the JSON itself is broken).
 *  - Save is read-modify-write under an exclusive flock on calibration.json.lock (two
 *    processes calibrating two devices do not lose each other's entry), and the new text
 *    goes to a temporary file in the same directory, fsync'd, then renamed over the old one:
 *    a reader sees the old file or the new one, never half of one. A corrupt file is
 *    replaced whole.
 */
#include "kforge/arch.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CACHE_FILE "calibration.json"
#define CACHE_FORMAT "kforge-calibration"
#define CACHE_VERSION 1

/* The cache directory into dir (without trailing file name). */
static kf_status cache_dir(char *dir, size_t cap, kf_error *err) {
    const char *d = getenv("KFORGE_CACHE_DIR");
    int n;
    if (d && *d) n = snprintf(dir, cap, "%s", d);
    else if ((d = getenv("XDG_CACHE_HOME")) && *d == '/')
        n = snprintf(dir, cap, "%s/kforge", d);
    else if ((d = getenv("HOME")) && *d) n = snprintf(dir, cap, "%s/.cache/kforge", d);
    else
        return kf_error_set(err, KF_ERR_IO, NULL, 0, 0,
                            "no cache directory: set KFORGE_CACHE_DIR or HOME");
    if (n < 0 || (size_t)n >= cap)
        return kf_error_set(err, KF_ERR_IO, NULL, 0, 0, "cache directory path too long: %s", d);
    return KF_OK;
}

static kf_status cache_path(char *dir, size_t dcap, char *path, size_t pcap, kf_error *err) {
    kf_status st = cache_dir(dir, dcap, err);
    if (st) return st;
    int n = snprintf(path, pcap, "%s/" CACHE_FILE, dir);
    if (n < 0 || (size_t)n >= pcap)
        return kf_error_set(err, KF_ERR_IO, NULL, 0, 0, "cache path too long: %s", dir);
    return KF_OK;
}

static kf_status check_key(const char *key, kf_error *err) {
    if (!key || !*key) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "empty device key");
    if (strlen(key) >= sizeof ((kf_ceilings *)0)->device_key)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "device key longer than %zu bytes",
                            sizeof ((kf_ceilings *)0)->device_key - 1);
    return KF_OK;
}

/* Read and check the file's outer shape. KF_OK with *root (a new reference) and its
 * "devices" object in *devices; KF_ERR_IO when the file does not exist or cannot be read;
 * KF_ERR_PARSE when it is not a calibration cache. */
static kf_status load_root(const char *path, json_t **root, json_t **devices, kf_error *err) {
    *root = NULL;
    *devices = NULL;
    char *text = NULL;
    size_t len = 0;
    kf_status st = kf_read_file(path, &text, &len, err);
    if (st) return st;
    json_error_t je;
    json_t *r = json_loadb(text, len, 0, &je);
    free(text);
    if (!r)
        return kf_error_set(err, KF_ERR_PARSE, path, je.line > 0 ? je.line : 0,
                            je.column > 0 ? je.column : 0, "corrupt calibration cache: %s",
                            je.text);
    json_t *fmt = json_object_get(r, "format");
    json_t *ver = json_object_get(r, "version");
    json_t *dev = json_object_get(r, "devices");
    const char *why = NULL;
    if (!json_is_object(r)) why = "top level is not an object";
    else if (!json_is_string(fmt) || strcmp(json_string_value(fmt), CACHE_FORMAT) != 0)
        why = "\"format\" is not \"" CACHE_FORMAT "\"";
    else if (!json_is_integer(ver) || json_integer_value(ver) != CACHE_VERSION)
        why = "unsupported \"version\" (expected 1)";
    else if (!json_is_object(dev)) why = "\"devices\" is not an object";
    if (why) {
        json_decref(r);
        return kf_error_set(err, KF_ERR_PARSE, path, 0, 0, "corrupt calibration cache: %s",
                            why);
    }
    *root = r;
    *devices = dev;
    return KF_OK;
}

static int get_number(json_t *o, const char *name, double *v) {
    json_t *x = json_object_get(o, name);
    if (!json_is_number(x)) return 0;
    *v = json_number_value(x);
    return isfinite(*v) && *v >= 0;
}

/* One entry into out (device_key set to key). KF_ERR_PARSE naming path and field. */
static kf_status parse_entry(const char *path, const char *key, json_t *e, kf_ceilings *out,
                             kf_error *err) {
    kf_ceilings c;
    memset(&c, 0, sizeof c);
    snprintf(c.device_key, sizeof c.device_key, "%s", key);
    const char *bad = NULL;
    double measured = 0, threads = 0;
    json_t *when = json_object_get(e, "when");
    if (!json_is_object(e)) bad = "(entry is not an object)";
    else if (!get_number(e, "measured", &measured) || (measured != 0 && measured != 1))
        bad = "measured";
    else if (!get_number(e, "threads", &threads) || threads < 1 || threads > 1e6 ||
             threads != floor(threads))
        bad = "threads";
    else if (!get_number(e, "copy_gbs", &c.copy_gbs)) bad = "copy_gbs";
    else if (!get_number(e, "read_gbs", &c.read_gbs)) bad = "read_gbs";
    else if (!get_number(e, "write_gbs", &c.write_gbs)) bad = "write_gbs";
    else if (!get_number(e, "peak_gflops_f32", &c.peak_gflops_f32)) bad = "peak_gflops_f32";
    else if (!get_number(e, "peak_gflops_f64", &c.peak_gflops_f64)) bad = "peak_gflops_f64";
    else if (!json_is_string(when) || strlen(json_string_value(when)) >= sizeof c.when)
        bad = "when";
    if (bad)
        return kf_error_set(err, KF_ERR_PARSE, path, 0, 0,
                            "corrupt calibration cache: entry \"%s\": field %s missing or "
                            "invalid", key, bad);
    /* optional (entries written before it was measured lack it): 0 = not measured */
    json_t *lu = json_object_get(e, "launch_us");
    if (lu && (!json_is_number(lu) || !(json_number_value(lu) >= 0) || !isfinite(json_number_value(lu))))
        return kf_error_set(err, KF_ERR_PARSE, path, 0, 0,
                            "corrupt calibration cache: entry \"%s\": field launch_us invalid", key);
    c.launch_us = lu ? json_number_value(lu) : 0;
    json_t *bz = json_object_get(e, "busy"); /* optional too: 0 = idle or not measured */
    if (bz && (!json_is_number(bz) || !(json_number_value(bz) >= 0) || json_number_value(bz) > 1))
        return kf_error_set(err, KF_ERR_PARSE, path, 0, 0,
                            "corrupt calibration cache: entry \"%s\": field busy invalid", key);
    c.busy = bz ? json_number_value(bz) : 0;
    c.measured = (int)measured;
    c.threads = (int)threads;
    snprintf(c.when, sizeof c.when, "%s", json_string_value(when));
    *out = c;
    return KF_OK;
}

/* Contract: load the cached ceilings of device_key into *out. KF_ERR_ARG for an empty or
 * over-long key; KF_ERR_IO when the cache file or the entry does not exist (err says
 * which); KF_ERR_PARSE, naming the file, when the file or the entry is corrupt. *out is
 * written only on success. */
kf_status kf_arch_load(const char *device_key, kf_ceilings *out, kf_error *err) {
    kf_status st = check_key(device_key, err);
    if (st) return st;
    char dir[1024], path[1100];
    if ((st = cache_path(dir, sizeof dir, path, sizeof path, err))) return st;
    json_t *root, *devices;
    if ((st = load_root(path, &root, &devices, err))) return st;
    json_t *e = json_object_get(devices, device_key);
    if (!e) st = kf_error_set(err, KF_ERR_IO, path, 0, 0, "no calibration cached for \"%s\"",
                              device_key);
    else st = parse_entry(path, device_key, e, out, err);
    json_decref(root);
    return st;
}

static kf_status check_ceilings(const kf_ceilings *c, kf_error *err) {
    if (memchr(c->device_key, 0, sizeof c->device_key) == NULL)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "device key is not terminated");
    kf_status st = check_key(c->device_key, err);
    if (st) return st;
    const double v[] = {c->copy_gbs, c->read_gbs, c->write_gbs, c->peak_gflops_f32,
                        c->peak_gflops_f64, c->launch_us, c->busy, 1 - c->busy};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (!isfinite(v[i]) || v[i] < 0)
            return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                                "ceilings of \"%s\" hold a negative or non-finite number",
                                c->device_key);
    if (c->threads < 1 || (c->measured != 0 && c->measured != 1) ||
        memchr(c->when, 0, sizeof c->when) == NULL)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0,
                            "ceilings of \"%s\": bad threads, measured or when", c->device_key);
    return KF_OK;
}

/* The entry object, or NULL when c->when is not valid UTF-8. */
static json_t *entry_json(const kf_ceilings *c) {
    json_t *when = json_string(c->when);
    if (!when) return NULL;
    json_t *e = json_object();
    json_object_set_new(e, "measured", json_integer(c->measured));
    json_object_set_new(e, "threads", json_integer(c->threads));
    json_object_set_new(e, "copy_gbs", json_real(c->copy_gbs));
    json_object_set_new(e, "read_gbs", json_real(c->read_gbs));
    json_object_set_new(e, "write_gbs", json_real(c->write_gbs));
    json_object_set_new(e, "peak_gflops_f32", json_real(c->peak_gflops_f32));
    json_object_set_new(e, "peak_gflops_f64", json_real(c->peak_gflops_f64));
    if (c->launch_us > 0) json_object_set_new(e, "launch_us", json_real(c->launch_us));
    if (c->busy > 0) json_object_set_new(e, "busy", json_real(c->busy));
    json_object_set_new(e, "when", when);
    return e;
}

/* Write text to path atomically: a temporary file in dir, fsync, rename. */
static kf_status write_atomic(const char *dir, const char *path, const char *text,
                              kf_error *err) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s/." CACHE_FILE ".XXXXXX", dir);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return kf_error_set(err, KF_ERR_IO, path, 0, 0,
                            "cannot create a temporary file in %s: %s", dir, strerror(errno));
    size_t len = strlen(text), done = 0;
    int bad = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            bad = errno ? errno : EIO;
            break;
        }
        done += (size_t)w;
    }
    if (!bad && fchmod(fd, 0644) != 0) bad = errno;
    if (!bad && fsync(fd) != 0) bad = errno;
    if (close(fd) != 0 && !bad) bad = errno;
    if (!bad && rename(tmp, path) != 0) bad = errno;
    if (bad) {
        unlink(tmp);
        return kf_error_set(err, KF_ERR_IO, path, 0, 0, "cannot write: %s", strerror(bad));
    }
    return KF_OK;
}

/* kf_arch_save's body; warn_corrupt says whether replacing a corrupt file is logged (the
 * caller may already have said so). */
static kf_status save_entry(const kf_ceilings *c, int warn_corrupt, kf_error *err) {
    kf_status st = check_ceilings(c, err);
    if (st) return st;
    char dir[1024], path[1100], lock[1100];
    if ((st = cache_path(dir, sizeof dir, path, sizeof path, err))) return st;
    if ((st = kf_mkdirs(dir, err))) return st;
    snprintf(lock, sizeof lock, "%s/" CACHE_FILE ".lock", dir);
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lfd < 0)
        return kf_error_set(err, KF_ERR_IO, lock, 0, 0, "cannot open lock file: %s",
                            strerror(errno));
    while (flock(lfd, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        st = kf_error_set(err, KF_ERR_IO, lock, 0, 0, "cannot lock: %s", strerror(errno));
        close(lfd);
        return st;
    }

    json_t *root = NULL, *devices = NULL;
    kf_error lerr;
    memset(&lerr, 0, sizeof lerr);
    kf_status ls = load_root(path, &root, &devices, &lerr);
    if (ls == KF_ERR_PARSE && warn_corrupt) {
        char msg[1400];
        kf_error_format(&lerr, msg, sizeof msg);
        kf_log(1, "warning: %s; replacing it", msg);
    }
    struct stat sb;
    if (ls == KF_ERR_IO && stat(path, &sb) == 0) {
        /* there but unreadable: replacing it would lose every other device's entry */
        if (err) *err = lerr;
        flock(lfd, LOCK_UN);
        close(lfd);
        return ls;
    }
    if (ls != KF_OK) { /* absent or corrupt: start afresh */
        root = json_object();
        json_object_set_new(root, "format", json_string(CACHE_FORMAT));
        json_object_set_new(root, "version", json_integer(CACHE_VERSION));
        devices = json_object();
        json_object_set_new(root, "devices", devices);
    }
    char *text = NULL;
    if (json_object_set_new(devices, c->device_key, entry_json(c)) != 0)
        st = kf_error_set(err, KF_ERR_ARG, path, 0, 0,
                          "device key or date is not valid UTF-8: \"%s\"", c->device_key);
    else if (!(text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS)))
        st = kf_error_set(err, KF_ERR_INTERNAL, path, 0, 0, "cannot encode the cache");
    json_decref(root);
    if (text) {
        size_t n = strlen(text);
        char *full = kf_malloc(n + 2);
        memcpy(full, text, n);
        full[n] = '\n';
        full[n + 1] = 0;
        free(text);
        st = write_atomic(dir, path, full, err);
        free(full);
    }
    flock(lfd, LOCK_UN);
    close(lfd);
    return st;
}

/* Contract: store c under c->device_key in the cache file, replacing an older entry for
 * the same key and keeping the others; creates the directory and the file as needed; a
 * corrupt file is replaced whole (with a warning). The write is atomic. KF_ERR_ARG for an
 * empty key or invalid numbers, KF_ERR_IO when the directory or file cannot be written. */
kf_status kf_arch_save(const kf_ceilings *c, kf_error *err) {
    if (!c) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "save: ceilings are NULL");
    return save_entry(c, 1, err);
}

/* Seconds since an ISO "YYYY-MM-DDTHH:MM:SSZ" time; a large number when it does not parse. */
static double age_s(const char *when) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (!end || *end) return 1e18;
    return difftime(time(NULL), timegm(&tm));
}

static void save_or_warn(const kf_ceilings *c) {
    kf_error serr;
    memset(&serr, 0, sizeof serr);
    if (save_entry(c, 0, &serr) != KF_OK) {
        char msg[1400];
        kf_error_format(&serr, msg, sizeof msg);
        kf_log(1, "warning: calibration not cached: %s", msg);
    }
}

/* old was measured on a busy machine: measure again (with its thread count) and keep the
 * higher of each ceiling (load lowers a measurement, never raises it); the less loaded
 * measurement's busy and date go with it. */
static kf_status remeasure_busy(const char *device_key, const kf_ceilings *old, kf_ceilings *out,
                                kf_error *err) {
    kf_ceilings c;
    kf_status st = kf_arch_calibrate_cpu(old->threads, &c, err);
    if (st) return st;
    snprintf(c.device_key, sizeof c.device_key, "%s", device_key);
    if (c.busy > KF_CALIB_BUSY_MAX) {
        c.copy_gbs = fmax(c.copy_gbs, old->copy_gbs);
        c.read_gbs = fmax(c.read_gbs, old->read_gbs);
        c.write_gbs = fmax(c.write_gbs, old->write_gbs);
        c.peak_gflops_f32 = fmax(c.peak_gflops_f32, old->peak_gflops_f32);
        c.peak_gflops_f64 = fmax(c.peak_gflops_f64, old->peak_gflops_f64);
        c.busy = fmin(c.busy, old->busy); /* when stays the new one: the retry clock */
    }
    save_or_warn(&c);
    *out = c;
    return KF_OK;
}

/* Contract: the ceilings of device_key: the cached entry when there is one, force == 0 and
 * it was measured with `threads` threads (threads == 0 accepts any entry); otherwise
 * calibrate with `threads` threads and save the result under device_key. A corrupt cache
 * is logged as a warning and overwritten. Failing to save is a warning too (the measured
 * numbers are still returned). Errors: KF_ERR_ARG (key), or the calibration's error. */
kf_status kf_arch_get_cpu(const char *device_key, int threads, int force, kf_ceilings *out,
                          kf_error *err) {
    kf_status st = check_key(device_key, err);
    if (st) return st;
    if (!out) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "get_cpu: out is NULL");
    if (threads < 0)
        return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "get_cpu: threads must be >= 0");
    if (!force) {
        kf_error lerr;
        memset(&lerr, 0, sizeof lerr);
        kf_ceilings cached;
        kf_status ls = kf_arch_load(device_key, &cached, &lerr);
        if (ls == KF_OK && (threads == 0 || cached.threads == threads)) {
            if (cached.busy <= KF_CALIB_BUSY_MAX || age_s(cached.when) < KF_CALIB_BUSY_RETRY_S) {
                *out = cached;
                return KF_OK;
            }
            kf_log(1, "calibration of \"%s\" was taken while other processes used %.0f%% of the "
                      "machine (%s); measuring again", device_key, 100 * cached.busy, cached.when);
            return remeasure_busy(device_key, &cached, out, err);
        }
        char msg[1400];
        kf_error_format(&lerr, msg, sizeof msg);
        if (ls == KF_ERR_PARSE) kf_log(1, "warning: %s; re-measuring and overwriting it", msg);
        else if (ls == KF_OK)
            kf_log(2, "calibration of \"%s\" was cached for %d threads, not %d; re-measuring",
                   device_key, cached.threads, threads);
        else kf_log(2, "%s; measuring", msg);
    }
    kf_ceilings c;
    if ((st = kf_arch_calibrate_cpu(threads, &c, err))) return st;
    snprintf(c.device_key, sizeof c.device_key, "%s", device_key);
    save_or_warn(&c);
    *out = c;
    return KF_OK;
}
