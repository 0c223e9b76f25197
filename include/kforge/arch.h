/*
 * kforge architecture data: the device's measured ceilings (streaming bandwidth, peak
 * FLOP/s) that the roofline floor is computed from. Measurements are cached per device
 * in a small JSON file so that every run does not re-measure.
 */
#ifndef KFORGE_ARCH_H
#define KFORGE_ARCH_H

#include "kforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a device is, as its backend's probe fills it (kf_backend_open) and every part reads
 * it: identity, parallelism, memory hierarchy, compiler; GPU-style fields are zero on the
 * cpu. The ceilings measured on it and the architecture database's entry are below. */
typedef struct kf_device_info {
    char platform[16];      /* "cpu", "opencl" */
    int index;              /* device index within the platform ("opencl:1" is 1) */
    char name[128];         /* e.g. "AMD EPYC" */
    char arch[64];          /* e.g. "x86_64 avx2 fma" */
    int cores;              /* physical cores usable by this process */
    int threads;            /* hardware threads usable by this process */
    int simd_bits;          /* widest float SIMD register the compiler may use (128/256/512) */
    int64_t l1d_bytes, l2_bytes, l3_bytes; /* per core for L1/L2, total for L3; 0 unknown */
    int64_t mem_bytes;      /* physical memory */
    char compiler[256];     /* compiler command and version used for candidates */
    char flags[256];        /* default compile flags for candidates */
    /* GPU-style devices (opencl, cuda, metal); zero elsewhere */
    char device_type[16];   /* "cpu", "gpu", "accelerator" (what the driver says) */
    char vendor[64];
    char driver[64];        /* driver version */
    char version[128];      /* e.g. "OpenCL 3.0 PoCL 3.1", "OpenCL C 1.2" in lang_version */
    char lang_version[64];
    char platform_name[128];/* OpenCL platform name */
    int compute_units;
    int max_wg;             /* max work-items per group */
    int max_wi[3];          /* max work-items per dim */
    int64_t local_mem_bytes;/* per group: static arrays (CUDA's 48 KiB) */
    int64_t local_mem_optin_bytes; /* per group with an opt-in (CUDA's dynamic shared memory,
                               a launch's smem=); 0 = no more than local_mem_bytes */
    int64_t global_mem_bytes;
    int64_t max_alloc_bytes;
    int subgroup_size;      /* 0 = no sub-group operations usable; else lanes (32 on NVIDIA) */
    int base_align_bytes;   /* sub-buffer offset alignment */
    int64_t clock_mhz;
    int fp64;               /* double precision supported */
} kf_device_info;

typedef struct kf_ceilings {
    char device_key[160];   /* identifies the device the numbers belong to */
    int measured;           /* 1 = measured on this machine, 0 = nominal guesses */
    int threads;            /* threads used for the measurement */
    double copy_gbs;        /* streaming copy, read+write bytes counted (GB/s, 1e9) */
    double read_gbs;        /* streaming read (sum) */
    double write_gbs;       /* streaming write (fill) */
    double peak_gflops_f32; /* FMA-bound peak, f32 */
    double peak_gflops_f64;
    double launch_us;       /* overhead of one launch: an empty kernel (devices) or an empty
                               OpenMP parallel region (cpu); 0 = not measured */
    double peak_gflops_mm16;/* dense f16/bf16 matrix peak (tensor cores, f32 accumulate):
                               the architecture database's datasheet figure for the device,
                               never measured nor cached; 0 = unknown. Used only for tasks
                               with 16-bit matmuls (kf_roofline_of) */
    double peak_gflops_tf32;/* dense TF32 matrix rate (tensor cores, f32 accumulate), the
                               datasheet's like mm16 (never measured nor cached; 0 = unknown):
                               an f32 contraction split into three TF32 products (3xTF32)
                               runs at up to a third of it, so f32 contractions are placed
                               against max(peak_gflops_f32, this / 3) (kf_roofline_of) */
    char when[32];          /* ISO date of the measurement */
    double busy;            /* CPU calibrations: the share of the machine's CPUs that other
                               processes (and the hypervisor: steal time) used while it
                               measured, 0..1; above KF_CALIB_BUSY_MAX the ceilings may read
                               low. 0 for devices and for entries cached before it existed */
} kf_ceilings;

/* Measured under more load than this (a tenth of the machine), a CPU calibration is said
 * to be taken on a busy machine: warned about, and re-measured by the next kf_arch_get_cpu. */
#define KF_CALIB_BUSY_MAX 0.10
/* ... but not before this many seconds have passed since the busy measurement (a machine
 * that stays busy would otherwise be measured again by every run). */
#define KF_CALIB_BUSY_RETRY_S 300

/* Measure the CPU's ceilings with `threads` threads (0 = all usable). Takes ~1-3 s. */
kf_status kf_arch_calibrate_cpu(int threads, kf_ceilings *out, kf_error *err);

/* Load the cached ceilings for device_key from the cache file (path: $KFORGE_CACHE_DIR or
 * $XDG_CACHE_HOME/kforge or ~/.cache/kforge, file calibration.json). KF_ERR_IO if absent. */
kf_status kf_arch_load(const char *device_key, kf_ceilings *out, kf_error *err);
/* Store (replace) the entry for out->device_key in the cache file. */
kf_status kf_arch_save(const kf_ceilings *c, kf_error *err);
/* Cached value if present, else calibrate and save. A cached entry measured on a busy
 * machine (busy > KF_CALIB_BUSY_MAX) more than KF_CALIB_BUSY_RETRY_S ago is measured
 * again, and each ceiling becomes the
 * higher of the two measurements (load only ever lowers what a measurement sees); force
 * re-measures and replaces the entry whatever it holds. */
kf_status kf_arch_get_cpu(const char *device_key, int threads, int force, kf_ceilings *out,
                          kf_error *err);

/* ---- architecture database (src/arch/db.c; data/arch.json; docs/arch-db.md) ----
 * Nominal facts per device model: memory hierarchy, unit counts, vector width, peak rates
 * per dtype and the per-unit limits an occupancy calculator needs, each entry citing its
 * sources in the data file. 0 means unknown. Measured ceilings (kf_ceilings) take
 * precedence over the nominal bandwidth and peaks here. */
/* What an entry describes (its "kind" in the data file), and what kf_arch_db_match looks
 * for: the caller knows whether its device is GPU-style (kf_device_is_gpu). */
typedef enum kf_arch_kind { KF_ARCH_ANY = 0, KF_ARCH_CPU, KF_ARCH_GPU } kf_arch_kind;

typedef struct kf_arch_entry {
    char id[48], name[96], kind[8], vendor[24], unit_name[24]; /* kind: the file's word */
    char match[8][64]; int n_match;  /* case-insensitive substrings of a device name */
    int units, simd_width; double clock_mhz;   /* units: SMs / GPU cores / CPU cores */
    double dram_bytes, dram_gbs, l2_bytes, l1_bytes_per_unit, l3_bytes;
    /* dense TFLOP/s (int8: TOPS); each the highest rate any unit offers for that input
     * dtype (Tensor Cores included); f64_vector = non-tensor FP64 rate */
    double peak_tflops_f64, peak_tflops_f32, peak_tflops_tf32, peak_tflops_f16, peak_tflops_bf16,
           peak_tflops_int8, peak_tflops_fp8;
    int max_threads_per_group, max_threads_per_unit, max_groups_per_unit, regs_per_unit,
        max_regs_per_thread, reg_alloc_unit;   /* reg_alloc_unit: registers per warp granule */
    long smem_per_unit, smem_per_group, smem_alloc_unit;
    char source[512];
    /* additions beyond the brief's minimum */
    char arch[24];                  /* "sm_90", "apple9", "x86-64", ... ("" unknown) */
    double peak_tflops_f64_vector;  /* non-tensor FP64 (0 unknown) */
    long smem_reserved_per_group;   /* shared memory the system reserves per block */
    char notes[2048];
} kf_arch_entry;

typedef struct kf_arch_db kf_arch_db; /* opaque */

/* Load and validate an architecture database. path NULL = default: $KFORGE_ARCH_DB when set
 * (a missing file there is an error, not a fall-through), else KF_SOURCE_DIR
 * "/data/arch.json" when it exists, else "<dir of /proc/self/exe>/../share/kforge/arch.json".
 * Every entry is validated (id unique and [A-Za-z0-9._-]+, name, kind "gpu"|"cpu", source
 * non-empty, every number finite and >= 0, integers integral, units > 0, simd_width > 0,
 * no unknown fields, strings within their buffers, no match string in two entries).
 * KF_OK with *out (free with kf_arch_db_free); KF_ERR_IO when the file cannot be read;
 * KF_ERR_PARSE when it is malformed (err has line:col for JSON syntax) or invalid (the
 * message names the entry index and id and the field). *out is NULL on failure. */
kf_status kf_arch_db_load(const char *path, kf_arch_db **out, kf_error *err);
void kf_arch_db_free(kf_arch_db *db);
/* Number of entries, and entry i (0 <= i < count; NULL out of range). Entries live as long
 * as the db. The path the db was loaded from: kf_arch_db_path. */
int kf_arch_db_count(const kf_arch_db *db);
const kf_arch_entry *kf_arch_db_at(const kf_arch_db *db, int i);
const char *kf_arch_db_path(const kf_arch_db *db);
/* The entry with this id, or NULL. */
const kf_arch_entry *kf_arch_db_find(const kf_arch_db *db, const char *id);
/* Best entry for a device name of kind KF_ARCH_GPU/KF_ARCH_CPU (KF_ARCH_ANY = any): the entry whose match
 * string is the LONGEST case-insensitive substring of device_name (so "M3 Pro" beats "M3");
 * an occurrence counts only at word boundaries (no letter or digit touching it on either
 * side, so "A100" is not found in "A1000" nor "H200" in "GH200"); ties go to the earlier
 * entry. For KF_ARCH_CPU with no match, the generic entry for this machine (uname: x86_64 ->
 * "generic-x86-64", aarch64/arm64 -> "generic-arm64"). NULL if none. */
const kf_arch_entry *kf_arch_db_match(const kf_arch_db *db, const char *device_name,
                                      kf_arch_kind kind);
/* This machine's CPU model name (from /proc/cpuinfo "model name", or on arm "Hardware" /
 * "CPU implementer"+"CPU part", or sysctl machdep.cpu.brand_string on macOS), into buf.
 * Returns buf; "unknown cpu" if not found. */
const char *kf_arch_cpu_name(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
