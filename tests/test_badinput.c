/*
 * Bad input and faults (issue 28): what a fuzzer or a careless user feeds kforge must end
 * in a located message and the documented exit code, never a crash, a hang, a silently
 * changed number or a lost file. The parser's limits are tested through the library; the
 * flags, paths and writes through the real binary (tests/store_cli.h runs it).
 *
 * No test here asserts a time: the parser tests that once took minutes (quadratic work)
 * only need to finish, and the suite's timeout is a hang guard a hundred times their cost.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "kforge/ir.h"
#include "kforge/verify.h"
#include "store_cli.h"

/* ------------------------------------------------------------ helpers */

/* text repeated n times, then tail (malloc'd). */
static char *repeat(const char *head, const char *unit, int n, const char *tail) {
    kf_buf b = {0};
    kf_buf_puts(&b, head);
    for (int i = 0; i < n; i++) kf_buf_puts(&b, unit);
    kf_buf_puts(&b, tail);
    return kf_buf_take(&b);
}

/* Parse text expecting failure with code; returns the error. */
static kf_error parse_fails(const char *text, kf_status code) {
    kf_error err = {0};
    kf_graph *g = NULL;
    kf_status st = kf_parse_string(text, "t.kf", &g, &err);
    cr_assert_eq(st, code, "expected status %d, got %d (%s)", code, st, err.msg);
    cr_assert_null(g);
    return err;
}

static kf_graph *parse_ok(const char *text) {
    kf_error err = {0};
    kf_graph *g = NULL;
    kf_status st = kf_parse_string(text, "t.kf", &g, &err);
    cr_assert_eq(st, KF_OK, "parse failed: %d:%d: %s", err.line, err.col, err.msg);
    return g;
}

/* ------------------------------------------------------------ 1: nesting depth */

TestSuite(parse_limits, .timeout = 120);

Test(parse_limits, deep_calls_are_a_located_error) {
    char *t = repeat("input x: f32[4]\noutput y = ", "relu(", 5000, "x");
    char *t2 = repeat(t, ")", 5000, "\n");
    kf_error e = parse_fails(t2, KF_ERR_PARSE);
    cr_assert_eq(e.line, 2);
    cr_assert_gt(e.col, 1);
    cr_assert_not_null(strstr(e.msg, "nested too deeply"), "%s", e.msg);
    free(t);
    free(t2);
}

Test(parse_limits, deep_parentheses_are_a_located_error) {
    char *t = repeat("input x: f32[4]\noutput y = x * ", "(", 20000, "x");
    char *t2 = repeat(t, ")", 20000, "\n");
    kf_error e = parse_fails(t2, KF_ERR_PARSE);
    cr_assert_eq(e.line, 2);
    cr_assert_not_null(strstr(e.msg, "nested too deeply"), "%s", e.msg);
    free(t);
    free(t2);
}

/* A real nesting well inside the limit still parses. */
Test(parse_limits, moderate_nesting_parses) {
    char *t = repeat("input x: f32[4]\noutput y = ", "relu(", 100, "x");
    char *t2 = repeat(t, ")", 100, "\n");
    kf_graph *g = parse_ok(t2);
    cr_assert_eq(g->nnodes, 100);
    kf_graph_free(g);
    free(t);
    free(t2);
}

/* ------------------------------------------------------------ 5: linear parse */

/* A run of minus signs is a loop, not a nesting: 200,000 of them parse. */
Test(parse_limits, many_unary_minus_signs) {
    char *t = repeat("input x: f32[4]\noutput y = ", "-", 200000, "x\n");
    kf_graph *g = parse_ok(t);
    cr_assert_eq(g->nnodes, 200000);
    kf_graph_free(g);
    free(t);
}

Test(parse_limits, long_flat_expression) {
    char *t = repeat("input x: f32[4]\noutput y = x", " + x", 200000, "\n");
    kf_graph *g = parse_ok(t);
    cr_assert_eq(g->nnodes, 200000);
    kf_graph_free(g);
    free(t);
}

Test(parse_limits, many_chained_statements) {
    kf_buf b = {0};
    kf_buf_puts(&b, "input v0: f32[4]\n");
    int n = 100000;
    for (int i = 1; i < n; i++) kf_buf_printf(&b, "v%d = relu(v%d) * 2\n", i, i - 1);
    kf_buf_printf(&b, "output y = v%d + 1\n", n - 1);
    kf_graph *g = parse_ok(b.data);
    cr_assert_eq(g->nnodes, 2 * (n - 1) + 1);
    /* the names are found, and temporaries keep their "%N" names */
    cr_assert_eq(kf_graph_find(g, "v99999"), g->nodes[g->nnodes - 2].out);
    cr_assert_eq(kf_graph_find(g, "v1"), g->nodes[1].out);
    cr_assert_eq(kf_graph_find(g, "nosuch"), -1);
    cr_assert_str_eq(g->values[g->nodes[0].out].name, "%1");
    kf_graph_free(g);
    kf_buf_free(&b);
}

/* ------------------------------------------------------------ 2: sizes that overflow */

Test(parse_limits, input_bytes_overflow_is_refused_at_the_shape) {
    kf_error e = parse_fails("task t\ninput x: f32[2147483648, 2147483648]\noutput y = relu(x)\n",
                             KF_ERR_PARSE);
    cr_assert_eq(e.line, 2);
    cr_assert_eq(e.col, 13, "col %d: %s", e.col, e.msg); /* the '[' */
    cr_assert_not_null(strstr(e.msg, "f32[2147483648, 2147483648]"), "%s", e.msg);
    cr_assert_not_null(strstr(e.msg, "TiB"), "%s", e.msg);
    /* numel fits in 64 bits, bytes do not: i64 (8 bytes) at 2^61 elements */
    parse_fails("input x: i64[2305843009213693952]\noutput y = x + 1\n", KF_ERR_PARSE);
}

/* Broadcasting two small inputs into one that is too big is refused where the op is. */
Test(parse_limits, broadcast_result_overflow_is_refused_at_the_op) {
    kf_error e = parse_fails("input a: f32[4294967296, 1]\ninput b: f32[1, 4294967296]\n"
                             "output y = a * b\n", KF_ERR_TYPE);
    cr_assert_eq(e.line, 3);
    cr_assert_eq(e.col, 14, "col %d: %s", e.col, e.msg);
    cr_assert_not_null(strstr(e.msg, "TiB"), "%s", e.msg);
}

/* ------------------------------------------------------------ 7: literals */

Test(parse_limits, huge_integer_axis_shows_the_number_written) {
    kf_error e = parse_fails("input x: f32[4, 4]\noutput y = sum(x, axes=[9223372036854775807])\n",
                             KF_ERR_PARSE);
    cr_assert_eq(e.line, 2);
    cr_assert_eq(e.col, 25);
    cr_assert_not_null(strstr(e.msg, "9223372036854775807"), "%s", e.msg);
    e = parse_fails("input x: f32[4, 4]\noutput y = sum(x, axes=[-99999999999999999999])\n",
                    KF_ERR_PARSE);
    cr_assert_not_null(strstr(e.msg, "99999999999999999999"), "%s", e.msg);
    e = parse_fails("input x: f32[4, 4]\noutput y = x * 1e400\n", KF_ERR_PARSE);
    cr_assert_not_null(strstr(e.msg, "1e400"), "%s", e.msg);
    cr_assert_eq(e.col, 16);
    /* the largest exact integer is still an integer, and reported exactly when out of range */
    e = parse_fails("input x: f32[4, 4]\noutput y = sum(x, axes=[9007199254740992])\n", KF_ERR_TYPE);
    cr_assert_not_null(strstr(e.msg, "9007199254740992"), "%s", e.msg);
    /* 1e20 as an axis is no integer */
    parse_fails("input x: f32[4, 4]\noutput y = sum(x, axes=1e20)\n", KF_ERR_PARSE);
}

/* ------------------------------------------------------------ 3: file size, memory */

static void limit_memory(void) {
#ifndef __SANITIZE_ADDRESS__ /* ASan's shadow memory cannot live under an address-space limit */
    struct rlimit r = {(rlim_t)2 << 30, (rlim_t)2 << 30};
    setrlimit(RLIMIT_AS, &r); /* a reader without a cap fails here, not on the machine */
#endif
}

Test(parse_limits, endless_file_is_refused, .init = limit_memory) {
    kf_error err = {0};
    kf_graph *g = NULL;
    cr_assert_eq(kf_parse_file("/dev/zero", &g, &err), KF_ERR_IO, "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "larger than"), "%s", err.msg);
}

Test(parse_limits, nul_byte_is_located) {
    char path[] = "/tmp/kf_badinput_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    static const char text[] = "input x: f32[4]\noutput y = relu(x)\n\0# more";
    cr_assert_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    kf_error err = {0};
    kf_graph *g = NULL;
    kf_status st = kf_parse_file(path, &g, &err);
    unlink(path);
    cr_assert_eq(st, KF_ERR_PARSE, "%s", err.msg);
    cr_assert_eq(err.line, 3);
    cr_assert_eq(err.col, 1);
}

/* A task whose inputs fit the parser's limit but no machine's memory is refused before
 * anything is allocated (it used to abort in malloc or meet the OOM killer). */
Test(parse_limits, inputs_larger_than_memory_are_refused) {
    kf_graph *g = parse_ok("input x: f32[1099511627776]\noutput y = relu(x)\n"); /* 4 TiB */
    kf_verify_ctx *c = NULL;
    kf_error err = {0};
    kf_status st = kf_verify_ctx_new(g, NULL, &c, &err);
    cr_assert_eq(st, KF_ERR_UNSUPPORTED, "%d: %s", st, err.msg);
    cr_assert_null(c);
    cr_assert_not_null(strstr(err.msg, "memory"), "%s", err.msg);
    kf_graph_free(g);
}
