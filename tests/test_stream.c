/*
 * The writes between a CPU candidate's calls (src/verify/stream.c, issue 30): a set's inputs
 * copied and the outputs' poison filled with streaming stores over a few joined threads.
 * Every byte must be what memcpy or an element-by-element fill would write, at every size
 * (below the streaming threshold, around the 16- and 64-byte steps, several threads' worth)
 * and every alignment of the destination, and nothing outside [dst, dst + n) may change.
 * The poison through kf_verify_poison (par 0, the timing run's path) is checked against
 * kf_verify_is_poison for every dtype.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "verify/verify_int.h"

#define CANARY 0xA5

static const size_t sizes[] = {0, 1, 15, 16, 17, 63, 64, 65, 1000, (1u << 20) - 1, 1u << 20,
                               (1u << 20) + 17, (9u << 20) + 3, (40u << 20) + 13};
static const size_t offsets[] = {0, 1, 2, 4, 8, 13};

static unsigned char *fresh(size_t n) {
    unsigned char *b = malloc(n + 128);
    cr_assert_not_null(b);
    memset(b, CANARY, n + 128);
    return b;
}

static void no_spill(const unsigned char *b, size_t off, size_t n) {
    for (size_t i = 0; i < off; i++) cr_assert_eq(b[i], CANARY, "byte %zu before the write changed", i);
    for (size_t i = off + n; i < off + n + 64; i++)
        cr_assert_eq(b[i], CANARY, "byte %zu after the write (n %zu, offset %zu) changed", i - off - n, n, off);
}

Test(stream, copy_is_memcpy_at_every_size_and_alignment) {
    size_t big = (40u << 20) + 13 + 64;
    unsigned char *src = malloc(big);
    cr_assert_not_null(src);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < big; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        src[i] = (unsigned char)x;
    }
    for (size_t a = 0; a < sizeof sizes / sizeof sizes[0]; a++)
        for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++) {
            size_t n = sizes[a], off = offsets[o];
            if (n > (2u << 20) && off != 0 && off != 13) continue; /* the big ones at two offsets */
            unsigned char *b = fresh(off + n);
            kf_verify_stream_copy(b + off, src + o, n);
            cr_assert(memcmp(b + off, src + o, n) == 0, "copy of %zu bytes at offset %zu differs", n, off);
            no_spill(b, off, n);
            free(b);
        }
    free(src);
}

Test(stream, fill_repeats_the_element_at_every_size_and_alignment) {
    const unsigned char elem[8] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
    static const size_t ess[] = {1, 2, 4, 8};
    for (size_t e = 0; e < 4; e++)
        for (size_t a = 0; a < sizeof sizes / sizeof sizes[0]; a++)
            for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++) {
                size_t es = ess[e], n = sizes[a] / es * es, off = offsets[o]; /* (any alignment) */
                if (n > (2u << 20) && off != 0 && offsets[o] != 8) continue;
                unsigned char *b = fresh(off + n);
                kf_verify_stream_fill(b + off, elem, es, n);
                for (size_t i = 0; i < n; i++)
                    if (b[off + i] != elem[i % es])
                        cr_assert_fail("fill (element %zu bytes, %zu bytes at offset %zu): byte %zu is %#x, not %#x", es,
                                       n, off, i, b[off + i], elem[i % es]);
                no_spill(b, off, n);
                free(b);
            }
}

Test(stream, timing_runs_poison_is_the_poison_of_every_dtype) {
    static const kf_dtype dts[] = {KF_F32, KF_F64, KF_F16, KF_BF16, KF_I64, KF_BOOL};
    int64_t n = (int64_t)(5u << 20) + 7; /* several threads' worth for every element size */
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        size_t es = kf_dtype_size(dts[d]);
        unsigned char *b = fresh((size_t)n * es);
        kf_verify_poison(dts[d], b, n, 0);
        for (int64_t i = 0; i < n; i++)
            if (!kf_verify_is_poison(dts[d], b, i))
                cr_assert_fail("%s element %lld of %lld is not the poison", kf_dtype_name(dts[d]), (long long)i,
                               (long long)n);
        no_spill(b, 0, (size_t)n * es);
        free(b);
    }
}
