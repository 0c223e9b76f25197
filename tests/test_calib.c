/*
 * The calibration room's front (include/kforge/calib.h, src/arch/calib.c) and its device
 * probes (src/arch/calib_device.c): one key per device, shared by the host and a driver's
 * CPU device (PoCL); the modes read, measure or only read the cache; the probes compile
 * and measure on an OpenCL device (PoCL here; skipped without one).
 *
 * Each Criterion test runs in its own process, so setenv() in one does not leak into another.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch/calib_int.h"
#include "kforge/calib.h"

static char tmpdir[256];

static void private_cache(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kf_test_calib_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    cr_assert_eq(setenv("KFORGE_CACHE_DIR", tmpdir, 1), 0);
}

static void drop_cache(void) {
    char p[400];
    snprintf(p, sizeof p, "%s/calibration.json", tmpdir);
    unlink(p);
    snprintf(p, sizeof p, "%s/calibration.json.lock", tmpdir);
    unlink(p);
    rmdir(tmpdir);
}

static kf_backend *open_or_skip(const char *target) {
    kf_backend *b = NULL;
    kf_error err = {0};
    if (kf_backend_open(target, &b, &err) != KF_OK) cr_skip_test("no %s device: %s", target, err.msg);
    return b;
}

Test(calib, key_of_the_host, .init = private_cache, .fini = drop_cache) {
    kf_backend *b = open_or_skip("cpu");
    char key[160], want[160];
    kf_error err = {0};
    cr_assert_eq(kf_calib_key(b, 3, key, sizeof key, &err), KF_OK, "%s", err.msg);
    snprintf(want, sizeof want, "cpu|%s|3", b->info.name);
    cr_assert_str_eq(key, want);
    cr_assert_eq(kf_calib_key(b, 0, key, sizeof key, &err), KF_OK, "%s", err.msg);
    snprintf(want, sizeof want, "cpu|%s|%d", b->info.name, b->info.threads);
    cr_assert_str_eq(key, want, "0 threads means all usable");
    cr_assert_eq(kf_calib_key(NULL, 0, key, sizeof key, &err), KF_ERR_ARG);
    cr_assert_eq(kf_calib_key(b, 0, NULL, 0, &err), KF_ERR_ARG);
    kf_backend_close(b);
}

/* `kforge calibrate --cached --target opencl` on PoCL reads the entry the loop wrote: the
 * host's (it looked for an "opencl|..." key that nothing wrote before the room). */
Test(calib, a_driver_cpu_device_shares_the_host_key, .init = private_cache, .fini = drop_cache) {
    kf_backend *ocl = open_or_skip("opencl");
    if (kf_device_is_gpu(&ocl->info)) {
        kf_backend_close(ocl);
        cr_skip_test("opencl:0 is a GPU, not a driver's CPU device");
    }
    kf_backend *cpu = open_or_skip("cpu");
    char a[160], b[160];
    kf_error err = {0};
    cr_assert_eq(kf_calib_key(ocl, 2, a, sizeof a, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_calib_key(cpu, 2, b, sizeof b, &err), KF_OK, "%s", err.msg);
    cr_assert_str_eq(a, b);
    kf_backend_close(cpu);
    kf_backend_close(ocl);
}

Test(calib, modes_read_and_measure, .init = private_cache, .fini = drop_cache) {
    kf_backend *b = open_or_skip("cpu");
    kf_ceilings c;
    kf_error err = {0};
    cr_assert_eq(kf_calib_ceilings(b, 1, KF_CALIB_CACHED_ONLY, &c, &err), KF_ERR_IO,
                 "nothing cached, nothing measured: %s", err.msg);
    /* a planted entry under the room's key is what every mode but MEASURE returns */
    kf_ceilings planted;
    memset(&planted, 0, sizeof planted);
    cr_assert_eq(kf_calib_key(b, 1, planted.device_key, sizeof planted.device_key, &err), KF_OK);
    planted.measured = 1;
    planted.threads = 1;
    planted.copy_gbs = planted.read_gbs = planted.write_gbs = 1234.5;
    planted.peak_gflops_f32 = planted.peak_gflops_f64 = 42;
    snprintf(planted.when, sizeof planted.when, "2026-01-01T00:00:00Z");
    cr_assert_eq(kf_arch_save(&planted, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(kf_calib_ceilings(b, 1, KF_CALIB_CACHED_ONLY, &c, &err), KF_OK, "%s", err.msg);
    cr_assert_float_eq(c.copy_gbs, 1234.5, 1e-9);
    cr_assert_str_eq(c.device_key, planted.device_key);
    cr_assert_eq(kf_calib_ceilings(b, 1, KF_CALIB_CACHED_OR_MEASURE, &c, &err), KF_OK, "%s", err.msg);
    cr_assert_float_eq(c.copy_gbs, 1234.5, 1e-9, "a cached entry is not measured again");
    /* another thread count is another entry, and CACHED_ONLY does not measure it */
    cr_assert_eq(kf_calib_ceilings(b, 2, KF_CALIB_CACHED_ONLY, &c, &err), KF_ERR_IO);
    cr_assert(strstr(err.msg, "no calibration cached"), "%s", err.msg);
    /* MEASURE replaces it with what this machine does, and caches that */
    cr_assert_eq(kf_calib_ceilings(b, 1, KF_CALIB_MEASURE, &c, &err), KF_OK, "%s", err.msg);
    cr_assert(c.copy_gbs > 0 && c.copy_gbs != 1234.5, "measured %g", c.copy_gbs);
    kf_ceilings again;
    cr_assert_eq(kf_calib_ceilings(b, 1, KF_CALIB_CACHED_ONLY, &again, &err), KF_OK, "%s", err.msg);
    cr_assert_float_eq(again.copy_gbs, c.copy_gbs, 1e-9);
    kf_backend_close(b);
}

/* The device probes compile, run and give positive ceilings on target's device. The
 * device's max_alloc is lowered so the probes' buffers are 64 MiB, not 4x the LLC. */
static void probes_measure(const char *target) {
    kf_backend *b = open_or_skip(target);
    b->info.max_alloc_bytes = 256ll << 20;
    kf_ceilings c;
    memset(&c, 0, sizeof c);
    snprintf(c.device_key, sizeof c.device_key, "test");
    kf_error err = {0};
    cr_assert_eq(kf_calib_measure_device(b, &c, &err), KF_OK, "%s", err.msg);
    cr_assert_eq(c.measured, 1);
    cr_assert(c.copy_gbs > 0 && c.write_gbs > 0 && c.peak_gflops_f32 > 0 && c.launch_us > 0,
              "copy %g write %g f32 %g launch %g", c.copy_gbs, c.write_gbs, c.peak_gflops_f32,
              c.launch_us);
    cr_assert_eq(c.read_gbs, c.copy_gbs);
    cr_assert(c.when[0]);
    fprintf(stderr, "%s probes (64 MiB): copy %.1f GB/s, write %.1f GB/s, f32 %.1f GFLOP/s, launch %.2f us\n",
            target, c.copy_gbs, c.write_gbs, c.peak_gflops_f32, c.launch_us);
    kf_backend_close(b);
}

/* the OpenCL spelling (PoCL here) */
Test(calib, device_probes_measure_an_opencl_device, .init = private_cache, .fini = drop_cache) {
    probes_measure("opencl");
}

/* the CUDA spelling (NVRTC); skipped without a CUDA device */
Test(calib, device_probes_measure_a_cuda_device, .init = private_cache, .fini = drop_cache) {
    probes_measure("cuda");
}

/* The TF32 rate comes from the architecture database's datasheet entry; the line says
 * "tf32/3" where a third of it is above the f32 peak (H200), the f32 peak where it is not,
 * and why there is none for a device no entry matches. */
Test(calib, tf32_rate_from_the_architecture_database) {
    kf_device_info dev;
    memset(&dev, 0, sizeof dev);
    snprintf(dev.platform, sizeof dev.platform, "cuda");
    snprintf(dev.device_type, sizeof dev.device_type, "gpu");
    snprintf(dev.name, sizeof dev.name, "NVIDIA H200");
    kf_ceilings c;
    memset(&c, 0, sizeof c);
    c.peak_gflops_f32 = 60e3;
    char said[512];
    cr_assert_eq(kf_calib_tf32(&dev, &c, said, sizeof said), 1, "%s", said);
    cr_assert_gt(c.peak_gflops_tf32 / 3, c.peak_gflops_f32, "H200 dense TF32 rate: %g GFLOP/s", c.peak_gflops_tf32);
    cr_assert(strstr(said, "tf32/3") && strstr(said, "H200") && strstr(said, "not measured"), "%s", said);
    c.peak_gflops_f32 = 1e6; /* a peak above tf32 / 3: said so */
    cr_assert_eq(kf_calib_tf32(&dev, &c, said, sizeof said), 1, "%s", said);
    cr_assert(strstr(said, "is not above it"), "%s", said);
    snprintf(dev.name, sizeof dev.name, "Imaginary GPU 9000");
    cr_assert_eq(kf_calib_tf32(&dev, &c, said, sizeof said), 0);
    cr_assert_eq(c.peak_gflops_tf32, 0.0);
    cr_assert(strstr(said, "Imaginary GPU 9000") && strstr(said, "no TF32 rate"), "%s", said);
}

/* The 16-bit matmul ceiling comes from the architecture database's datasheet rate (the
 * same for synth's floor and verify's); a device no entry matches has none, and says why. */
Test(calib, mm16_rate_from_the_architecture_database) {
    kf_device_info dev;
    memset(&dev, 0, sizeof dev);
    snprintf(dev.platform, sizeof dev.platform, "cuda");
    snprintf(dev.device_type, sizeof dev.device_type, "gpu");
    snprintf(dev.name, sizeof dev.name, "NVIDIA H200");
    kf_ceilings c;
    memset(&c, 0, sizeof c);
    char said[512];
    cr_assert_eq(kf_calib_mm16(&dev, &c, said, sizeof said), 1, "%s", said);
    cr_assert_gt(c.peak_gflops_mm16, 100e3, "H200 dense 16-bit rate: %g GFLOP/s", c.peak_gflops_mm16);
    cr_assert(strstr(said, "H200") && strstr(said, "not measured"), "%s", said);
    snprintf(dev.name, sizeof dev.name, "Imaginary GPU 9000");
    cr_assert_eq(kf_calib_mm16(&dev, &c, said, sizeof said), 0);
    cr_assert_eq(c.peak_gflops_mm16, 0.0);
    cr_assert(strstr(said, "Imaginary GPU 9000") && strstr(said, "memory floor alone"), "%s", said);
}
