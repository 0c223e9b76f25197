kernel void math(
    device const float *x [[buffer(0)]],
    device float *y [[buffer(1)]],
    uint3 kf_gid [[thread_position_in_grid]]) {
    int i = (int)kf_gid.x;
    float v = x[i];
    float a = fabsf(v);
    device float *o = y + i * 20;
    o[0] = kf_expf(v);
    o[1] = kf_logf(a);
    o[2] = kf_tanhf(v);
    o[3] = kf_erff(v);
    o[4] = kf_sigmoidf(v);
    o[5] = kf_expm1f(v);
    o[6] = kf_log1pf(a);
    o[7] = kf_powf(a, 1.7f);
    o[8] = kf_sqrtf(a);
    o[9] = kf_rsqrtf(a);
    o[10] = kf_fabsf(v);
    o[11] = kf_fmaxf(v, 0.5f);
    o[12] = kf_fminf(v, 0.5f);
    o[13] = kf_clampf(v, -1.0f, 2.0f);
    o[14] = kf_floorf(v);
    o[15] = expf(v) + logf(a + 1.0f);
    o[16] = sqrtf(a) + tanhf(a) + powf(a, 0.5f);
    o[17] = fmaxf(v, 0.0f) + fminf(v, -1.0f) + floorf(v);
    o[18] = v > 0.0f ? KF_INF : (-INFINITY);
    o[19] = v > 0.0f ? KF_NAN : NAN;
}
