/* A backend's fill and copy_in_at (include/kforge/backend.h), checked on the device the
 * test opened: shared by the OpenCL and CUDA backend tests. */
#ifndef KF_TEST_FILL_CHECK_H
#define KF_TEST_FILL_CHECK_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/backend.h"

/* The runner poisons a device candidate's outputs on the device (issue 30): every pattern
 * size lands exactly on the bytes asked for, an 8-byte one with both halves in place, and
 * the bytes around are left alone; copy_in_at writes at its offset only. */
static void check_fill_and_copy_in_at(kf_backend *b) {
    cr_assert_not_null(b->iface->fill);
    cr_assert_not_null(b->iface->copy_in_at);
    const size_t total = 3 * 4096 + 64, off = 4096, len = 4096 + 40;
    unsigned char *host = malloc(total), *back = malloc(total);
    for (size_t i = 0; i < total; i++) host[i] = (unsigned char)(i * 7 + 3);
    void *d = kf_backend_alloc(b, total);
    cr_assert_not_null(d);
    const uint8_t pat[8] = {0xD1, 0x0D, 0xF0, 0xBA, 0xD0, 0xEA, 0xFD, 0x7F};
    for (size_t ps = 1; ps <= 8; ps *= 2) {
        cr_assert_eq(kf_backend_copy_in(b, d, host, total), KF_OK);
        cr_assert_eq(b->iface->fill(b->ctx, d, off, pat, ps, len), KF_OK, "pattern of %zu", ps);
        cr_assert_eq(kf_backend_copy_out(b, back, d, total), KF_OK);
        for (size_t i = 0; i < total; i++) {
            unsigned char want = i >= off && i < off + len ? pat[(i - off) % ps] : host[i];
            cr_assert_eq(back[i], want, "pattern of %zu: byte %zu is %#x, want %#x", ps, i, back[i], want);
        }
    }
    cr_assert_eq(b->iface->fill(b->ctx, d, off, pat, 8, 12), KF_ERR_ARG, "12 bytes of an 8-byte pattern");
    unsigned char mark[100];
    memset(mark, 0x5A, sizeof mark);
    cr_assert_eq(kf_backend_copy_in(b, d, host, total), KF_OK);
    cr_assert_eq(b->iface->copy_in_at(b->ctx, d, 4000, mark, sizeof mark), KF_OK);
    cr_assert_eq(kf_backend_copy_out(b, back, d, total), KF_OK);
    for (size_t i = 0; i < total; i++)
        cr_assert_eq(back[i], i >= 4000 && i < 4100 ? 0x5A : host[i], "byte %zu", i);
    kf_backend_free(b, d);
    free(host);
    free(back);
}


#endif
