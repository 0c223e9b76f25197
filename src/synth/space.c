/*
 * Schedule spaces: named integer parameters, each with its candidate values and a
 * default. Templates add their parameters under a stage prefix ("s0."); the search
 * moves between points (one value index per parameter).
 */
#include "tpl.h"
#include "synth_int.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void kf_tpl_add_param(kf_space *sp, const char *prefix, const char *name, kf_role role,
                      const long *values, int n, int dflt) {
    assert(n > 0 && n <= KF_MAX_PARAM_VALUES);
    if (sp->nparams >= KF_MAX_PARAMS) { /* a task of many stages; kf_synth_plan says so */
        sp->overflow = 1;
        return;
    }
    assert(dflt >= 0 && dflt < n);
    kf_param *p = &sp->p[sp->nparams++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s%s", prefix ? prefix : "", name);
    p->nvalues = n;
    memcpy(p->values, values, (size_t)n * sizeof *values);
    p->dflt = dflt;
    p->role = role;
}

static int find_param(const kf_space *sp, const char *full) {
    for (int i = 0; i < sp->nparams; i++)
        if (strcmp(sp->p[i].name, full) == 0) return i;
    return -1;
}

long kf_tpl_get(const kf_space *sp, const kf_point *p, const char *prefix, const char *name) {
    char full[64];
    snprintf(full, sizeof full, "%s%s", prefix ? prefix : "", name);
    int i = find_param(sp, full);
    assert(i >= 0 && "template asked for a parameter it did not declare");
    return sp->p[i].values[p->idx[i]];
}

long kf_point_get(const kf_space *sp, const kf_point *p, const char *name, long def) {
    int i = find_param(sp, name);
    return i < 0 ? def : sp->p[i].values[p->idx[i]];
}

int kf_param_active(const kf_space *sp, const kf_point *p, int i) {
    const kf_param *q = &sp->p[i];
    if (q->gate <= 0) return 1;
    int g = q->gate - 1;
    return sp->p[g].values[p->idx[g]] == q->gate_value && kf_param_active(sp, p, g);
}

void kf_point_canonical(const kf_space *sp, const kf_point *p, kf_point *out) {
    kf_point q = *p;
    for (int i = 0; i < sp->nparams; i++)
        if (!kf_param_active(sp, p, i)) q.idx[i] = sp->p[i].dflt;
    *out = q;
}

void kf_point_format(const kf_space *sp, const kf_point *p, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < sp->nparams && used + 1 < cap; i++) {
        if (!kf_param_active(sp, p, i)) continue; /* another template's parameter */
        const char *nm = sp->p[i].name;
        /* single-stage graphs read better without the stage prefix */
        const char *dot = strchr(nm, '.');
        if (dot && strncmp(nm, "s0.", 3) == 0) nm = dot + 1;
        long v = sp->p[i].values[p->idx[i]];
        const char *tn = sp->p[i].role == KF_ROLE_TEMPLATE ? kf_synth_template_name(v) : NULL;
        int w = tn ? snprintf(buf + used, cap - used, "%s%s=%s", used ? " " : "", nm, tn)
                   : snprintf(buf + used, cap - used, "%s%s=%ld", used ? " " : "", nm, v);
        if (w < 0) break;
        used += (size_t)w;
    }
}

void kf_tpl_vput_named(kf_buf *out, const char *name, const char *fmt, va_list ap) {
    kf_buf tmp = {0};
    kf_buf_vprintf(&tmp, fmt, ap);
    const char *s = tmp.data ? tmp.data : "";
    for (const char *at; (at = strchr(s, '@')) != NULL; s = at + 1) {
        kf_buf_putn(out, s, (size_t)(at - s));
        kf_buf_puts(out, name);
    }
    kf_buf_puts(out, s);
    kf_buf_free(&tmp);
}

int kf_tpl_cpu_vl(const kf_device_info *dev) {
    int bits = dev && dev->simd_bits > 0 ? dev->simd_bits : 128;
    return bits >= 512 ? 16 : bits >= 256 ? 8 : 4;
}

int kf_tpl_thread_values(const kf_device_info *dev, long *tv) {
    int nthreads = dev && dev->threads > 0 ? dev->threads : 1, nt = 0;
    if (nthreads <= KF_MAX_PARAM_VALUES) {
        for (int t = 1; t <= nthreads; t++) tv[nt++] = t;
    } else {
        for (long t = 1; t < nthreads && nt < KF_MAX_PARAM_VALUES - 1; t *= 2) tv[nt++] = t;
        tv[nt++] = nthreads;
    }
    return nt;
}
