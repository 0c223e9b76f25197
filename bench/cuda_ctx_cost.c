/* What a CUDA context costs a fresh process, and what each way of getting a clean one
 * costs inside a process that already has one (issue 30: the sandbox start of a CUDA
 * candidate, ~1 s each on the H100). Prints milliseconds per step, each measured by
 * CLOCK_MONOTONIC around the driver call:
 *   init          cuInit(0) in this fresh process
 *   retain        cuDevicePrimaryCtxRetain (first: creates the primary context)
 *   alloc+free    cuMemAlloc/cuMemFree of 64 MiB
 *   reset+retain  cuDevicePrimaryCtxReset then Retain (a clean primary context; N times)
 *   create+destroy cuCtxCreate/cuCtxDestroy of a second context (N times)
 * build: cc -O2 -I/usr/local/cuda/include bench/cuda_ctx_cost.c -o cuda_ctx_cost \
 *          -L/usr/local/cuda/lib64/stubs -lcuda
 * usage: cuda_ctx_cost [N]   (run it several times: the first start of a GPU costs more) */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

#define CK(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { \
    fprintf(stderr, "%s failed: %d\n", #call, (int)r_); exit(1); } } while (0)

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 5;
    double t0 = now_ms();
    CK(cuInit(0));
    double t1 = now_ms();
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    double t2 = now_ms();
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 64u << 20));
    CK(cuMemFree(p));
    double t3 = now_ms();
    printf("init %.1f ms, retain %.1f ms, alloc+free %.1f ms\n", t1 - t0, t2 - t1, t3 - t2);
    for (int i = 0; i < n; i++) {
        double a = now_ms();
        CK(cuDevicePrimaryCtxRelease(dev));
        CK(cuDevicePrimaryCtxReset(dev));
        CK(cuDevicePrimaryCtxRetain(&ctx, dev));
        CK(cuCtxSetCurrent(ctx));
        CK(cuMemAlloc(&p, 64u << 20));
        CK(cuMemFree(p));
        double b = now_ms();
        CUcontext c2;
        CK(cuCtxCreate(&c2, NULL, 0, dev)); /* v4: params may be NULL */
        CK(cuMemAlloc(&p, 64u << 20));
        CK(cuMemFree(p));
        CK(cuCtxDestroy(c2));
        CK(cuCtxSetCurrent(ctx));
        double c = now_ms();
        printf("reset+retain+alloc %.1f ms, create+alloc+destroy %.1f ms\n", b - a, c - b);
    }
    return 0;
}
