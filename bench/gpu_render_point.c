/* The source kforge's builtin generator renders for a task on a GPU-like device that need
 * not be here (a CUDA sm_90 device of 132 SMs, 227 KiB of opt-in shared memory, as the
 * tests' gpu_like), at the default point with "name=value ..." applied over the stage
 * parameters' suffixes: for ptxas' registers and spills of a template change without a GPU
 * (bench/ptxas_points.sh). Prints the source on stdout, the plan and point on stderr.
 * build: cc -O1 -std=c11 -Iinclude bench/gpu_render_point.c build/libkforge.a -o render_point \
 *          $(pkg-config --libs jansson libcurl sqlite3 openblas) -fopenmp -lm -ldl -lOpenCL
 * usage: render_point TASK.kf ["name=value ..."] [platform]   (exit 1 on any failure)
 *   "random=K" sets every parameter to a value drawn from seed K (then later assignments) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kforge/candidate.h"
#include "kforge/ir.h"
#include "kforge/synth.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: render_point TASK.kf [\"name=value ...\"] [platform]\n");
        return 1;
    }
    const char *assign = argc > 2 ? argv[2] : "", *platform = argc > 3 ? argv[3] : "cuda";
    static char text[1 << 16];
    FILE *fp = fopen(argv[1], "r");
    if (!fp) {
        perror(argv[1]);
        return 1;
    }
    size_t n = fread(text, 1, sizeof text - 1, fp);
    text[n] = 0;
    fclose(fp);
    kf_error err = {0};
    kf_graph *g = NULL;
    if (kf_parse_string(text, argv[1], &g, &err) != KF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    kf_device_info d;
    memset(&d, 0, sizeof d);
    snprintf(d.platform, sizeof d.platform, "%s", platform);
    snprintf(d.device_type, sizeof d.device_type, "gpu");
    d.max_wg = 1024;
    d.max_wi[0] = d.max_wi[1] = d.max_wi[2] = 1024;
    d.local_mem_bytes = 48 * 1024;
    d.subgroup_size = 32;
    d.compute_units = 132;
    snprintf(d.arch, sizeof d.arch, "sm_90");
    d.local_mem_optin_bytes = 227 * 1024;
    kf_synth *s = NULL;
    if (kf_synth_plan(g, platform, &d, &s, &err) != KF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const kf_space *sp = kf_synth_space(s);
    kf_point p;
    kf_synth_default_point(s, &p);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", assign);
    for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char name[32];
        long v;
        int hit = 0;
        if (sscanf(tok, "%31[^=]=%ld", name, &v) != 2) {
            fprintf(stderr, "bad assignment '%s'\n", tok);
            return 1;
        }
        if (strcmp(name, "random") == 0) {
            /* random=K: every parameter at a value drawn from seed K (the render makes the
             * point valid), then the assignments after it */
            unsigned long long r = 0x9e3779b97f4a7c15ull * (unsigned long long)(v + 1);
            for (int i = 0; i < sp->nparams; i++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                p.idx[i] = (int)((r >> 33) % (unsigned long long)sp->p[i].nvalues);
            }
            continue;
        }
        for (int i = 0; i < sp->nparams; i++) {
            const char *dot = strrchr(sp->p[i].name, '.');
            if (!dot || strcmp(dot + 1, name) != 0) continue;
            for (int j = 0; j < sp->p[i].nvalues; j++)
                if (sp->p[i].values[j] == v) p.idx[i] = j, hit = 1;
        }
        if (!hit) {
            fprintf(stderr, "no parameter takes '%s'\n", tok);
            return 1;
        }
    }
    kf_candidate c;
    if (kf_synth_render(s, &p, &c, &err) != KF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    fputs(c.source, stdout);
    fprintf(stderr, "%s | %s\n", kf_synth_describe(s), c.label);
    kf_candidate_clear(&c);
    kf_synth_free(s);
    kf_graph_free(g);
    return 0;
}
