/* tests/modules/branch_shrink.py's forward in the opencl contract, as a model would write it
 * (python/tests/test_module_gpu.py plays it as the scripted model's reply): one work-group
 * of 64 items, a local-memory tree sum of x for the sign of its mean, then softshrink(0.25)
 * of sign * x * scale. Args: x [6, 16], p_scale [16], out [6, 16]. */
// kforge:launch bshrink global=64 local=64 args=0,1,2
__kernel void bshrink(__global const float *x, __global const float *scale, __global float *y) {
    __local float part[64];
    int t = get_local_id(0);
    float s = 0.0f;
    for (int i = t; i < 96; i += 64) s += x[i];
    part[t] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = 32; h > 0; h /= 2) { if (t < h) part[t] += part[t + h]; barrier(CLK_LOCAL_MEM_FENCE); }
    float sign = part[0] / 96 > 0 ? 1.0f : -1.0f;
    for (int i = t; i < 96; i += 64) {
        float v = sign * x[i] * scale[i % 16];
        y[i] = v > 0.25f ? v - 0.25f : v < -0.25f ? v + 0.25f : 0.0f;
    }
}
