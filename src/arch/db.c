/*
 * kforge architecture database: nominal per-device facts (memory hierarchy, unit counts,
 * vector width, peak rates per dtype, occupancy limits) read from a data file, and the
 * matching of a device name to its entry.
 *
 * Design note.
 *  - The facts live in data/arch.json, not in code: a device is never hard-coded in logic.
 *    Each entry cites its sources in the file; docs/arch-db.md describes the format.
 *  - Format (version 1):
 *      { "format": "kforge-arch", "version": 1, "about": [...],
 *        "entries": [ { "id", "name", "kind": "gpu"|"cpu", "vendor", "arch", "match": [...],
 *                       "units", "unit_name", "simd_width", "clock_mhz",
 *                       "memory": {...}, "peak_tflops": {...}, "limits": {...},
 *                       "source", "notes" }, ... ] }
 *    0 or an absent field means unknown.
 *  - Validation is strict, because an occupancy calculator and the roofline trust these
 *    numbers: unknown fields are rejected (a misspelt key would otherwise read as "unknown"
 *    silently), numbers must be finite and >= 0, integer fields integral, strings must fit
 *    their buffers (never truncated), ids unique, and a match string may belong to one
 *    entry only. A JSON syntax error names file:line:col (jansson's position); a semantic
 *    error names the file, the entry index and id, and the field ("memory.dram_gbs").
 *  - Matching picks the longest match string found in the device name, case-insensitively
 *    and only at word boundaries, so "Apple M3 Pro" beats "Apple M3" on an M3 Pro while a
 *    plain "Apple M3" cannot select the Pro, and "A100" is not found inside "RTX A1000".
 *    CPUs without an entry fall back to the generic entry of the machine's ISA (uname).
 *  - The db owns one array of entries; lookups hand out pointers into it.
 */
#include "kforge/arch.h"

#include <ctype.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/utsname.h>
#include <unistd.h>
#ifdef __APPLE__
#include <sys/sysctl.h>
#endif

#define DB_FORMAT "kforge-arch"
#define DB_VERSION 1
#define MAX_MATCH ((int)(sizeof((kf_arch_entry *)0)->match / sizeof((kf_arch_entry *)0)->match[0]))

struct kf_arch_db {
    kf_arch_entry *entries;
    int n;
    char path[1024];
};

/* Where a validation error is: the file, and the entry (index < 0: the top level). */
typedef struct where {
    const char *path;
    int index;
    const char *id;
    kf_error *err;
} where;

static kf_status invalid(const where *w, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static kf_status invalid(const where *w, const char *field, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (w->index < 0)
        return kf_error_set(w->err, KF_ERR_PARSE, w->path, 0, 0,
                            "invalid architecture database: field \"%s\": %s", field, detail);
    return kf_error_set(w->err, KF_ERR_PARSE, w->path, 0, 0,
                        "invalid architecture database: entry %d (\"%s\"): field \"%s\": %s",
                        w->index, w->id && w->id[0] ? w->id : "?", field, detail);
}

/* The dotted field name ("memory.dram_gbs") into buf. */
static const char *field_name(char *buf, size_t cap, const char *prefix, const char *key) {
    if (prefix && prefix[0]) snprintf(buf, cap, "%s.%s", prefix, key);
    else snprintf(buf, cap, "%s", key);
    return buf;
}

/* Reject keys of obj not in allowed (NULL-terminated). */
static kf_status check_keys(const where *w, json_t *obj, const char *prefix,
                            const char *const *allowed) {
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val) {
        int known = 0;
        for (int i = 0; allowed[i] && !known; i++) known = strcmp(key, allowed[i]) == 0;
        if (!known) {
            char f[128];
            return invalid(w, field_name(f, sizeof f, prefix, key),
                           "unknown field (misspelt? see docs/arch-db.md)");
        }
    }
    return KF_OK;
}

/* String field into dst[cap]. Absent: "" (an error when required). Must fit, never cut. */
static kf_status get_string(const where *w, json_t *obj, const char *key, char *dst, size_t cap,
                            int required) {
    json_t *v = json_object_get(obj, key);
    dst[0] = 0;
    if (!v) return required ? invalid(w, key, "required string is missing") : KF_OK;
    if (!json_is_string(v)) return invalid(w, key, "must be a string");
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (strlen(s) != n) return invalid(w, key, "contains a NUL character");
    if (n >= cap) return invalid(w, key, "longer than %zu characters", cap - 1);
    if (required && n == 0) return invalid(w, key, "must not be empty");
    memcpy(dst, s, n + 1);
    return KF_OK;
}

/* Number field (absent: 0): finite and >= 0; when integral_max > 0 also an integer
 * <= integral_max. */
static kf_status get_number(const where *w, json_t *obj, const char *prefix, const char *key,
                            double integral_max, double *out) {
    char f[128];
    json_t *v = json_object_get(obj, key);
    *out = 0;
    if (!v) return KF_OK;
    if (!json_is_number(v))
        return invalid(w, field_name(f, sizeof f, prefix, key), "must be a number");
    double x = json_number_value(v);
    if (!isfinite(x) || x < 0)
        return invalid(w, field_name(f, sizeof f, prefix, key),
                       "must be a finite number >= 0 (0 = unknown), not %g", x);
    if (integral_max > 0 && (x != floor(x) || x > integral_max))
        return invalid(w, field_name(f, sizeof f, prefix, key),
                       "must be a whole number <= %.0f, not %g", integral_max, x);
    *out = x;
    return KF_OK;
}

static kf_status get_int(const where *w, json_t *obj, const char *prefix, const char *key,
                         int *out) {
    double x;
    kf_status st = get_number(w, obj, prefix, key, (double)INT_MAX, &x);
    *out = (int)x;
    return st;
}

static kf_status get_long(const where *w, json_t *obj, const char *prefix, const char *key,
                          long *out) {
    double x;
    /* 2^53: the largest range in which every whole double is exact */
    kf_status st = get_number(w, obj, prefix, key, 9007199254740992.0, &x);
    *out = (long)x;
    return st;
}

/* An optional sub-object: NULL when absent, an error when not an object. */
static kf_status get_object(const where *w, json_t *obj, const char *key, json_t **out) {
    *out = json_object_get(obj, key);
    if (*out && !json_is_object(*out)) return invalid(w, key, "must be an object");
    return KF_OK;
}

static int valid_id(const char *id) {
    for (const char *p = id; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') return 0;
    return id[0] != 0;
}

static kf_status parse_match(const where *w, json_t *e, kf_arch_entry *out) {
    json_t *m = json_object_get(e, "match");
    out->n_match = 0;
    if (!m) return KF_OK;
    if (!json_is_array(m)) return invalid(w, "match", "must be an array of strings");
    if ((int)json_array_size(m) > MAX_MATCH)
        return invalid(w, "match", "more than %d strings", MAX_MATCH);
    size_t i;
    json_t *s;
    json_array_foreach(m, i, s) {
        char f[32];
        snprintf(f, sizeof f, "match[%zu]", i);
        if (!json_is_string(s) || json_string_length(s) == 0)
            return invalid(w, f, "must be a non-empty string");
        if (json_string_length(s) >= sizeof out->match[0])
            return invalid(w, f, "longer than %zu characters", sizeof out->match[0] - 1);
        if (strlen(json_string_value(s)) != json_string_length(s))
            return invalid(w, f, "contains a NUL character");
        snprintf(out->match[out->n_match++], sizeof out->match[0], "%s", json_string_value(s));
    }
    return KF_OK;
}

static kf_status parse_memory(const where *w, json_t *e, kf_arch_entry *out) {
    static const char *const keys[] = {"dram_bytes", "dram_gbs", "l2_bytes",
                                       "l1_bytes_per_unit", "l3_bytes", NULL};
    json_t *m;
    kf_status st = get_object(w, e, "memory", &m);
    if (st || !m) return st;
    if ((st = check_keys(w, m, "memory", keys))) return st;
    if ((st = get_number(w, m, "memory", "dram_bytes", 0, &out->dram_bytes))) return st;
    if ((st = get_number(w, m, "memory", "dram_gbs", 0, &out->dram_gbs))) return st;
    if ((st = get_number(w, m, "memory", "l2_bytes", 0, &out->l2_bytes))) return st;
    if ((st = get_number(w, m, "memory", "l1_bytes_per_unit", 0, &out->l1_bytes_per_unit)))
        return st;
    return get_number(w, m, "memory", "l3_bytes", 0, &out->l3_bytes);
}

static kf_status parse_peaks(const where *w, json_t *e, kf_arch_entry *out) {
    static const char *const keys[] = {"f64", "f64_vector", "f32", "tf32", "f16",
                                       "bf16", "int8", "fp8", NULL};
    double *const dst[] = {&out->peak_tflops_f64,  &out->peak_tflops_f64_vector,
                           &out->peak_tflops_f32,  &out->peak_tflops_tf32,
                           &out->peak_tflops_f16,  &out->peak_tflops_bf16,
                           &out->peak_tflops_int8, &out->peak_tflops_fp8};
    json_t *p;
    kf_status st = get_object(w, e, "peak_tflops", &p);
    if (st || !p) return st;
    if ((st = check_keys(w, p, "peak_tflops", keys))) return st;
    for (int i = 0; keys[i]; i++)
        if ((st = get_number(w, p, "peak_tflops", keys[i], 0, dst[i]))) return st;
    return KF_OK;
}

static kf_status parse_limits(const where *w, json_t *e, kf_arch_entry *out) {
    static const char *const ints[] = {"max_threads_per_group", "max_threads_per_unit",
                                       "max_groups_per_unit",   "regs_per_unit",
                                       "max_regs_per_thread",   "reg_alloc_unit"};
    static const char *const longs[] = {"smem_per_unit", "smem_per_group", "smem_alloc_unit",
                                        "smem_reserved_per_group"};
    static const char *const keys[] = {"max_threads_per_group", "max_threads_per_unit",
                                       "max_groups_per_unit",   "regs_per_unit",
                                       "max_regs_per_thread",   "reg_alloc_unit",
                                       "smem_per_unit",         "smem_per_group",
                                       "smem_alloc_unit",       "smem_reserved_per_group",
                                       NULL};
    int *const idst[] = {&out->max_threads_per_group, &out->max_threads_per_unit,
                         &out->max_groups_per_unit,   &out->regs_per_unit,
                         &out->max_regs_per_thread,   &out->reg_alloc_unit};
    long *const ldst[] = {&out->smem_per_unit, &out->smem_per_group, &out->smem_alloc_unit,
                          &out->smem_reserved_per_group};
    json_t *l;
    kf_status st = get_object(w, e, "limits", &l);
    if (st || !l) return st;
    if ((st = check_keys(w, l, "limits", keys))) return st;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if ((st = get_int(w, l, "limits", ints[i], idst[i]))) return st;
    for (size_t i = 0; i < sizeof longs / sizeof longs[0]; i++)
        if ((st = get_long(w, l, "limits", longs[i], ldst[i]))) return st;
    if (out->smem_per_group > 0 && out->smem_per_unit > 0 &&
        out->smem_per_group > out->smem_per_unit)
        return invalid(w, "limits.smem_per_group", "%ld exceeds limits.smem_per_unit %ld",
                       out->smem_per_group, out->smem_per_unit);
    if (out->max_threads_per_group > 0 && out->max_threads_per_unit > 0 &&
        out->max_threads_per_group > out->max_threads_per_unit)
        return invalid(w, "limits.max_threads_per_group", "%d exceeds "
                       "limits.max_threads_per_unit %d", out->max_threads_per_group,
                       out->max_threads_per_unit);
    return KF_OK;
}

/* The data file's word for each kind (kf_arch_entry.kind). */
static const char *const kind_words[] = {[KF_ARCH_CPU] = "cpu", [KF_ARCH_GPU] = "gpu"};

/* The kind a data file's word names; KF_ARCH_ANY for no kind. */
static kf_arch_kind kind_of(const char *word) {
    for (int k = KF_ARCH_CPU; k <= KF_ARCH_GPU; k++)
        if (strcmp(word, kind_words[k]) == 0) return (kf_arch_kind)k;
    return KF_ARCH_ANY;
}

/* One entry object into *out. w->id is pointed at out->id once it is read. */
static kf_status parse_entry(where *w, json_t *e, kf_arch_entry *out) {
    static const char *const keys[] = {"id",    "name",       "kind",        "vendor",
                                       "arch",  "match",      "units",       "unit_name",
                                       "simd_width", "clock_mhz", "memory", "peak_tflops",
                                       "limits", "source",    "notes",       NULL};
    memset(out, 0, sizeof *out);
    w->id = NULL;
    if (!json_is_object(e)) return invalid(w, "(entry)", "must be an object");
    kf_status st = get_string(w, e, "id", out->id, sizeof out->id, 1);
    if (st) return st;
    w->id = out->id;
    if (!valid_id(out->id)) return invalid(w, "id", "must be letters, digits, '-', '_' or '.'");
    if ((st = check_keys(w, e, "", keys))) return st;
    if ((st = get_string(w, e, "name", out->name, sizeof out->name, 1))) return st;
    if ((st = get_string(w, e, "kind", out->kind, sizeof out->kind, 1))) return st;
    if (kind_of(out->kind) == KF_ARCH_ANY)
        return invalid(w, "kind", "must be \"gpu\" or \"cpu\", not \"%s\"", out->kind);
    if ((st = get_string(w, e, "vendor", out->vendor, sizeof out->vendor, 0))) return st;
    if ((st = get_string(w, e, "arch", out->arch, sizeof out->arch, 0))) return st;
    if ((st = get_string(w, e, "unit_name", out->unit_name, sizeof out->unit_name, 0)))
        return st;
    if ((st = parse_match(w, e, out))) return st;
    if (!json_object_get(e, "units")) return invalid(w, "units", "required number is missing");
    if ((st = get_int(w, e, "", "units", &out->units))) return st;
    if (out->units <= 0) return invalid(w, "units", "must be > 0");
    if (!json_object_get(e, "simd_width"))
        return invalid(w, "simd_width", "required number is missing");
    if ((st = get_int(w, e, "", "simd_width", &out->simd_width))) return st;
    if (out->simd_width <= 0) return invalid(w, "simd_width", "must be > 0");
    if ((st = get_number(w, e, "", "clock_mhz", 0, &out->clock_mhz))) return st;
    if ((st = parse_memory(w, e, out))) return st;
    if ((st = parse_peaks(w, e, out))) return st;
    if ((st = parse_limits(w, e, out))) return st;
    if ((st = get_string(w, e, "source", out->source, sizeof out->source, 1))) return st;
    return get_string(w, e, "notes", out->notes, sizeof out->notes, 0);
}

/* Ids unique, and no match string (case-insensitively) in two entries. */
static kf_status check_unique(where *w, const kf_arch_entry *es, int n) {
    for (int i = 0; i < n; i++) {
        w->index = i;
        w->id = es[i].id;
        for (int j = 0; j < i; j++) {
            if (strcasecmp(es[i].id, es[j].id) == 0)
                return invalid(w, "id", "duplicate id: entry %d has the same id", j);
            for (int a = 0; a < es[i].n_match; a++)
                for (int b = 0; b < es[j].n_match; b++)
                    if (strcasecmp(es[i].match[a], es[j].match[b]) == 0)
                        return invalid(w, "match", "\"%s\" is also a match string of entry %d "
                                       "(\"%s\")", es[i].match[a], j, es[j].id);
        }
    }
    return KF_OK;
}

/* The whole document into db. */
static kf_status parse_db(const char *path, json_t *root, kf_arch_db *db, kf_error *err) {
    static const char *const keys[] = {"format", "version", "about", "entries", NULL};
    where w = {path, -1, NULL, err};
    if (!json_is_object(root)) return invalid(&w, "(top level)", "must be a JSON object");
    json_t *fmt = json_object_get(root, "format");
    json_t *ver = json_object_get(root, "version");
    json_t *entries = json_object_get(root, "entries");
    json_t *about = json_object_get(root, "about");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), DB_FORMAT) != 0)
        return invalid(&w, "format", "must be \"" DB_FORMAT "\" (not a kforge architecture "
                       "database?)");
    if (!json_is_integer(ver) || json_integer_value(ver) != DB_VERSION)
        return invalid(&w, "version", "unsupported version (this kforge reads version %d)",
                       DB_VERSION);
    kf_status st = check_keys(&w, root, "", keys);
    if (st) return st;
    if (about && !json_is_string(about) && !json_is_array(about))
        return invalid(&w, "about", "must be a string or an array of strings");
    if (!json_is_array(entries) || json_array_size(entries) == 0)
        return invalid(&w, "entries", "must be a non-empty array");
    if (json_array_size(entries) > INT_MAX / 2)
        return invalid(&w, "entries", "too many entries");
    db->n = (int)json_array_size(entries);
    db->entries = kf_calloc((size_t)db->n, sizeof *db->entries);
    for (int i = 0; i < db->n; i++) {
        w.index = i;
        if ((st = parse_entry(&w, json_array_get(entries, (size_t)i), &db->entries[i])))
            return st;
    }
    return check_unique(&w, db->entries, db->n);
}

static int readable(const char *p) { return access(p, R_OK) == 0; }

/* The default database path into buf (see kf_arch_db_load). */
static kf_status default_path(char *buf, size_t cap, kf_error *err) {
    const char *env = getenv("KFORGE_ARCH_DB");
    if (env && env[0]) {
        if (strlen(env) >= cap)
            return kf_error_set(err, KF_ERR_IO, NULL, 0, 0, "KFORGE_ARCH_DB path too long");
        snprintf(buf, cap, "%s", env);
        return KF_OK;
    }
    char tried[2][1100] = {"", ""};
#ifdef KF_SOURCE_DIR
    snprintf(tried[0], sizeof tried[0], "%s", KF_SOURCE_DIR "/data/arch.json");
    if (readable(tried[0]) && strlen(tried[0]) < cap) {
        snprintf(buf, cap, "%s", tried[0]);
        return KF_OK;
    }
#endif
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(tried[1], sizeof tried[1], "%s/../share/kforge/arch.json", exe);
        if (readable(tried[1]) && strlen(tried[1]) < cap) {
            snprintf(buf, cap, "%s", tried[1]);
            return KF_OK;
        }
    }
    return kf_error_set(err, KF_ERR_IO, NULL, 0, 0,
                        "no architecture database found (tried \"%s\" and \"%s\"); set "
                        "KFORGE_ARCH_DB to the path of arch.json", tried[0], tried[1]);
}

/* Contract: see arch.h. On failure *out is NULL and nothing is left allocated. */
kf_status kf_arch_db_load(const char *path, kf_arch_db **out, kf_error *err) {
    if (!out) return kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "kf_arch_db_load: out is NULL");
    *out = NULL;
    kf_arch_db *db = kf_calloc(1, sizeof *db);
    char *text = NULL;
    json_t *root = NULL;
    kf_status st = KF_OK;
    if (path) {
        if (strlen(path) >= sizeof db->path)
            st = kf_error_set(err, KF_ERR_ARG, NULL, 0, 0, "architecture database path too "
                              "long");
        else snprintf(db->path, sizeof db->path, "%s", path);
    } else {
        st = default_path(db->path, sizeof db->path, err);
    }
    size_t len = 0;
    if (!st) st = kf_read_file(db->path, &text, &len, err);
    if (!st) {
        json_error_t je;
        root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
        if (!root)
            st = kf_error_set(err, KF_ERR_PARSE, db->path, je.line > 0 ? je.line : 0,
                              je.column > 0 ? je.column : 0,
                              "malformed architecture database: %s", je.text);
    }
    if (!st) st = parse_db(db->path, root, db, err);
    json_decref(root);
    free(text);
    if (st) kf_arch_db_free(db);
    else *out = db;
    return st;
}

void kf_arch_db_free(kf_arch_db *db) {
    if (!db) return;
    free(db->entries);
    free(db);
}

int kf_arch_db_count(const kf_arch_db *db) { return db ? db->n : 0; }

const kf_arch_entry *kf_arch_db_at(const kf_arch_db *db, int i) {
    return db && i >= 0 && i < db->n ? &db->entries[i] : NULL;
}

const char *kf_arch_db_path(const kf_arch_db *db) { return db ? db->path : ""; }

const kf_arch_entry *kf_arch_db_find(const kf_arch_db *db, const char *id) {
    if (!db || !id) return NULL;
    for (int i = 0; i < db->n; i++)
        if (strcmp(db->entries[i].id, id) == 0) return &db->entries[i];
    return NULL;
}

/* Length of m when it occurs in name case-insensitively with no letter or digit touching
 * it on either side (where m itself starts/ends with one), else 0. */
static size_t word_match(const char *name, const char *m) {
    size_t n = strlen(name), k = strlen(m);
    if (k == 0 || k > n) return 0;
    int m_left = isalnum((unsigned char)m[0]), m_right = isalnum((unsigned char)m[k - 1]);
    for (size_t i = 0; i + k <= n; i++) {
        if (strncasecmp(name + i, m, k) != 0) continue;
        int left_ok = !m_left || i == 0 || !isalnum((unsigned char)name[i - 1]);
        int right_ok = !m_right || i + k == n || !isalnum((unsigned char)name[i + k]);
        if (left_ok && right_ok) return k;
    }
    return 0;
}

/* The generic CPU entry id for this machine's ISA, or NULL. */
static const char *generic_cpu_id(void) {
    struct utsname u;
    if (uname(&u) != 0) return NULL;
    if (strcmp(u.machine, "x86_64") == 0 || strcmp(u.machine, "amd64") == 0)
        return "generic-x86-64";
    if (strcmp(u.machine, "aarch64") == 0 || strcmp(u.machine, "arm64") == 0)
        return "generic-arm64";
    return NULL;
}

const kf_arch_entry *kf_arch_db_match(const kf_arch_db *db, const char *device_name,
                                      kf_arch_kind kind) {
    if (!db) return NULL;
    const char *name = device_name ? device_name : "";
    const kf_arch_entry *best = NULL;
    size_t best_len = 0;
    for (int i = 0; i < db->n; i++) {
        const kf_arch_entry *e = &db->entries[i];
        if (kind != KF_ARCH_ANY && kind_of(e->kind) != kind) continue;
        for (int j = 0; j < e->n_match; j++) {
            size_t k = word_match(name, e->match[j]);
            if (k > best_len) {
                best_len = k;
                best = e;
            }
        }
    }
    if (!best && kind == KF_ARCH_CPU) {
        const char *gid = generic_cpu_id();
        if (gid) best = kf_arch_db_find(db, gid);
    }
    return best;
}


const char *kf_arch_cpu_name(char *buf, size_t cap) {
    if (!buf || cap == 0) return buf;
    buf[0] = 0;
#ifdef __APPLE__
    size_t n = cap;
    if (sysctlbyname("machdep.cpu.brand_string", buf, &n, NULL, 0) == 0 && buf[0]) return buf;
    buf[0] = 0;
#endif
    char v[256], part[64];
    kf_cpuinfo_value("model name", v, sizeof v);
    if (!v[0]) kf_cpuinfo_value("Hardware", v, sizeof v);
    if (!v[0]) {
        char impl[64];
        kf_cpuinfo_value("CPU implementer", impl, sizeof impl);
        kf_cpuinfo_value("CPU part", part, sizeof part);
        if (impl[0] && part[0])
            snprintf(v, sizeof v, "arm64 CPU implementer %s part %s", impl, part);
    }
    snprintf(buf, cap, "%s", v[0] ? v : "unknown cpu");
    return buf;
}
