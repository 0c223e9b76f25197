/*
 * tests/test_lsan_dtls.c's module: one __thread pointer in a library loaded with dlopen,
 * so glibc gives each thread its block on the thread's first touch, with malloc (glibc >=
 * 2.25), which the sanitizer's __tls_get_addr interceptor looks at.
 */
static __thread void *slot;

void **kf_dtls_slot(void);
__attribute__((visibility("default"))) void **kf_dtls_slot(void) { return &slot; }
