/* kforge Metal Shading Language prelude */
#include <metal_stdlib>
using namespace metal;
#define KF_INF INFINITY
#define KF_NAN NAN
#define KF_UNORD(a, b) (isnan(a) || isnan(b))
#define expf(x) precise::exp(x)
#define logf(x) precise::log(x)
#define tanhf(x) precise::tanh(x)
#define powf(x, y) precise::pow(x, y)
#define sqrtf(x) precise::sqrt(x)
#define fabsf(x) fabs(x)
#define fmaxf(x, y) fmax(x, y)
#define fminf(x, y) fmin(x, y)
#define floorf(x) floor(x)
static inline float kf_expf(float x) { return precise::exp(x); }
static inline float kf_logf(float x) { return precise::log(x); }
static inline float kf_tanhf(float x) { return precise::tanh(x); }
static inline float kf_sqrtf(float x) { return precise::sqrt(x); }
static inline float kf_fabsf(float x) { return fabs(x); }
static inline float kf_floorf(float x) { return floor(x); }
static inline float kf_powf(float a, float b) { return precise::pow(a, b); }
static inline float kf_fmaxf(float a, float b) { return fmax(a, b); }
static inline float kf_fminf(float a, float b) { return fmin(a, b); }
static inline float kf_rsqrtf(float x) { return 1.0f / precise::sqrt(x); }
static inline float kf_sigmoidf(float x) { return 1.0f / (1.0f + precise::exp(-x)); }
static inline float kf_tanh_softplusf(float x) { const float n = precise::exp(x), t = n * (n + 2.0f); return t / (t + 2.0f); }
static inline float kf_clampf(float x, float lo, float hi) { x = x < lo ? lo : x; return x > hi ? hi : x; }
static inline float kf_erff(float x) {
    float t = kf_fabsf(x);
    if (t < 0.5f) {
        float s = x * x;
        float p = 0.00012055333f;
        p = p * s - 0.000854832702f;
        p = p * s + 0.00522397763f;
        p = p * s - 0.0268661706f;
        p = p * s + 0.112837917f;
        p = p * s - 0.376126389f;
        p = p * s + 1.12837917f;
        return x * p;
    }
    float h = 4.53585926e-05f;
    h = h * t - 0.000445507641f;
    h = h * t + 0.00148944173f;
    h = h * t + 0.000774629472f;
    h = h * t - 0.0282536801f;
    h = h * t + 0.148481622f;
    h = h * t + 0.918416381f;
    h = h * t + 1.62790859f;
    float y = 1.0f - kf_expf(-(t * h) * 0.693147181f);
    y = t >= 3.95f ? 1.0f : y;
    return x < 0.0f ? -y : y;
}
static inline float kf_expm1f(float x) {
    float u = kf_expf(x);
    if (u == 1.0f) return x;
    float um1 = u - 1.0f;
    if (um1 == -1.0f) return -1.0f;
    if (u == KF_INF) return u;
    return um1 * (x / kf_logf(u));
}
static inline float kf_log1pf(float x) {
    float u = 1.0f + x;
    if (u == 1.0f) return x;
    if (u == KF_INF) return u;
    return kf_logf(u) * (x / (u - 1.0f));
}
static inline float2 kf_vload2(device const float *p) { return *(device const float2 *)p; }
static inline void kf_vstore2(device float *p, float2 v) { *(device float2 *)p = v; }
static inline float2 kf_vload2(threadgroup const float *p) { return *(threadgroup const float2 *)p; }
static inline void kf_vstore2(threadgroup float *p, float2 v) { *(threadgroup float2 *)p = v; }
static inline float4 kf_vload4(device const float *p) { return *(device const float4 *)p; }
static inline void kf_vstore4(device float *p, float4 v) { *(device float4 *)p = v; }
static inline float4 kf_vload4(threadgroup const float *p) { return *(threadgroup const float4 *)p; }
static inline void kf_vstore4(threadgroup float *p, float4 v) { *(threadgroup float4 *)p = v; }
static inline int2 kf_vload2(device const int *p) { return *(device const int2 *)p; }
static inline void kf_vstore2(device int *p, int2 v) { *(device int2 *)p = v; }
static inline int2 kf_vload2(threadgroup const int *p) { return *(threadgroup const int2 *)p; }
static inline void kf_vstore2(threadgroup int *p, int2 v) { *(threadgroup int2 *)p = v; }
static inline int4 kf_vload4(device const int *p) { return *(device const int4 *)p; }
static inline void kf_vstore4(device int *p, int4 v) { *(device int4 *)p = v; }
static inline int4 kf_vload4(threadgroup const int *p) { return *(threadgroup const int4 *)p; }
static inline void kf_vstore4(threadgroup int *p, int4 v) { *(threadgroup int4 *)p = v; }
