/*
 * The HTML page of one run (`kforge report RUN --html FILE`): a single self-contained
 * file that opens anywhere, offline, years later. So: inline CSS, SVG drawn here in C, a
 * few lines of inline script, no fonts, images, scripts or styles fetched from anywhere.
 *
 * The page shows, top to bottom: a summary (device, ceilings, floor, best), the time per
 * iteration as a bar chart (failed candidates marked on the axis, the best highlighted,
 * the floor as a dashed line), a log-log roofline (memory roof, compute roof, ridge,
 * every verified candidate at its FLOP/byte and GFLOP/s), the best kernel's source, the
 * analysis agent's diagnoses per iteration and the iteration table.
 *
 * This file lays numbers out; it computes no metric. Every number comes in the page
 * struct (filled by the agent layer); the only arithmetic here maps values to pixels.
 *
 * Every string of the run (labels, sources, messages, the task name) is untrusted text
 * (a model wrote the source; a label holds whatever the task said) and goes out through
 * one escaper, in text and attribute context alike. The script never reads run text as
 * code: it reads numbers from data- attributes, so no string is ever inside <script>.
 *
 * The browser test (tests/test_report_html.c) loads the page in headless Chromium and
 * reads back two markers from the root element: data-kf-ready="1", set as the last act of
 * the main script, and data-kf-error, set by a window.onerror installed first thing in
 * <head>.
 */
#include "kforge/report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The first n bytes of s (or up to its NUL), escaped. */
static void escape_n(FILE *out, const char *s, size_t n) {
    for (size_t i = 0; i < n && s[i]; i++) {
        switch (s[i]) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        case '\'': fputs("&#39;", out); break;
        default: fputc(s[i], out);
        }
    }
}

/* See report.h. */
void kf_report_html_escape(FILE *out, const char *s) {
    if (s) escape_n(out, s, (size_t)-1);
}

#define E(s) kf_report_html_escape(out, (s))

static int num_ok(double v) { return isfinite(v) && v > 0; }

/* A compact number for axes: no exponent form, k/M suffixes from 10^4. */
static void fmt_num(double v, char *buf, size_t cap) {
    double a = fabs(v);
    if (a >= 1e6) snprintf(buf, cap, "%.3gM", v / 1e6);
    else if (a >= 1e4) snprintf(buf, cap, "%.3gk", v / 1e3);
    else if (a >= 1) snprintf(buf, cap, "%.4g", v);
    else snprintf(buf, cap, "%.3g", v);
}

/* ---- styles and the scripts ---- */

static const char *kStyle =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;"
    "color:#1d2733;background:#f6f7f9}\n"
    "main{max-width:1100px;margin:0 auto;padding:18px 24px 40px}\n"
    "h1{font-size:22px;margin:8px 0 4px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #d5dae1;"
    "padding-bottom:4px}\n"
    ".sub{color:#5b6673;margin:0 0 12px}\n"
    ".cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(200px,1fr));gap:10px}\n"
    ".card{background:#fff;border:1px solid #d5dae1;border-radius:6px;padding:8px 12px}\n"
    ".card b{display:block;font-size:12px;color:#5b6673;font-weight:600;text-transform:uppercase;"
    "letter-spacing:.03em}\n"
    ".card span{font-size:15px}\n"
    "figure{margin:0;background:#fff;border:1px solid #d5dae1;border-radius:6px;padding:8px}\n"
    "figcaption{color:#5b6673;font-size:13px;padding:4px 6px 0}\n"
    "svg{display:block;width:100%;height:auto}\n"
    "svg text{font:12px system-ui,sans-serif;fill:#1d2733}\n"
    "svg .axis{stroke:#5b6673;stroke-width:1}\n"
    "svg .grid{stroke:#e3e7ec;stroke-width:1}\n"
    "svg .bar{fill:#7aa6d8}svg .bar.cached{fill:#b9cfe8}svg .bar.best{fill:#e8891c}\n"
    "svg .fail{stroke:#c62828;stroke-width:2.5}\n"
    "svg .floor{stroke:#2e7d32;stroke-width:1.5;stroke-dasharray:6 4}\n"
    "svg .roof{stroke:#1d2733;stroke-width:2.5;fill:none}\n"
    "svg .ridge{stroke:#8a94a0;stroke-width:1;stroke-dasharray:4 4}\n"
    "svg .ai{stroke:#7aa6d8;stroke-width:1;stroke-dasharray:2 3}\n"
    "svg .pt{fill:#2f6db5;fill-opacity:.75;stroke:#fff;stroke-width:1}\n"
    "svg .pt.best{fill:#e8891c;fill-opacity:1;stroke:#1d2733;stroke-width:1.5}\n"
    "svg .hl{stroke:#c62828!important;stroke-width:3!important}\n"
    "svg .note{fill:#5b6673}\n"
    "svg .halo{paint-order:stroke;stroke:#fff;stroke-width:4px;stroke-linejoin:round}\n"
    "pre{background:#fff;border:1px solid #d5dae1;border-radius:6px;padding:10px 12px;overflow:auto;"
    "font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;max-height:380px}\n"
    "table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}\n"
    "th,td{border:1px solid #d5dae1;padding:4px 6px;text-align:left;vertical-align:top}\n"
    "th{background:#eef1f5;cursor:pointer;user-select:none;white-space:nowrap}\n"
    "th.sorted-asc::after{content:' \\25B2'}th.sorted-desc::after{content:' \\25BC'}\n"
    "td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\n"
    "td.lbl{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}\n"
    "tr.best td{background:#fdf0e0}tr.failed td{color:#8a1f1f}tr.hl td{outline:2px solid #c62828}\n"
    ".diag{background:#fff;border:1px solid #d5dae1;border-radius:6px;padding:6px 12px;margin:6px 0}\n"
    ".diag summary{cursor:pointer}\n"
    ".diag .lbl{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}\n"
    ".diag ul,.diag ol{margin:4px 0 6px 0}\n"
    ".tag{display:inline-block;font-size:11px;padding:0 6px;border-radius:8px;background:#eef1f5;"
    "margin-left:4px}\n"
    ".tag.best{background:#e8891c;color:#fff}.tag.fail{background:#c62828;color:#fff}\n"
    "#kf-errors{display:none;background:#ffebee;border:1px solid #c62828;padding:8px;margin:8px 0}\n"
    "footer{color:#5b6673;font-size:12px;margin-top:28px}\n";

/* Installed before anything else runs, so an error anywhere (a syntax error in the main
 * script included) leaves its message on the root element for the browser test. */
static const char *kErrorHook =
    "window.kfErrors=[];\n"
    "window.onerror=function(m,src,line){\n"
    "  window.kfErrors.push(String(m)+' (line '+line+')');\n"
    "  document.documentElement.setAttribute('data-kf-error',window.kfErrors.join(' | '));\n"
    "  var e=document.getElementById('kf-errors');\n"
    "  if(e){e.style.display='block';e.textContent='script error: '+window.kfErrors.join(' | ');}\n"
    "};\n";

/* Sortable table (numbers from data-v, else the cell text) and click-to-highlight between
 * table rows and chart marks sharing data-iter. */
static const char *kMainScript =
    "(function(){\n"
    "  var table=document.getElementById('iters');\n"
    "  function key(td){var v=td.getAttribute('data-v');return v!==null?parseFloat(v):td.textContent;}\n"
    "  if(table){\n"
    "    var ths=table.querySelectorAll('th');\n"
    "    Array.prototype.forEach.call(ths,function(th,col){\n"
    "      th.addEventListener('click',function(){\n"
    "        var body=table.tBodies[0],rows=Array.prototype.slice.call(body.rows);\n"
    "        var asc=!th.classList.contains('sorted-asc');\n"
    "        Array.prototype.forEach.call(ths,function(o){o.classList.remove('sorted-asc','sorted-desc');});\n"
    "        th.classList.add(asc?'sorted-asc':'sorted-desc');\n"
    "        rows.sort(function(a,b){\n"
    "          var x=key(a.cells[col]),y=key(b.cells[col]);\n"
    "          if(typeof x==='number'&&typeof y==='number'){\n"
    "            if(isNaN(x))return 1;if(isNaN(y))return -1;return asc?x-y:y-x;}\n"
    "          return asc?String(x).localeCompare(String(y)):String(y).localeCompare(String(x));\n"
    "        });\n"
    "        rows.forEach(function(r){body.appendChild(r);});\n"
    "      });\n"
    "    });\n"
    "  }\n"
    "  function highlight(it){\n"
    "    Array.prototype.forEach.call(document.querySelectorAll('.hl'),function(e){e.classList.remove('hl');});\n"
    "    Array.prototype.forEach.call(document.querySelectorAll('[data-iter=\"'+it+'\"]'),function(e){\n"
    "      e.classList.add('hl');});\n"
    "  }\n"
    "  Array.prototype.forEach.call(document.querySelectorAll('[data-iter]'),function(e){\n"
    "    e.addEventListener('click',function(){highlight(e.getAttribute('data-iter'));});\n"
    "  });\n"
    "  document.documentElement.setAttribute('data-kf-ready','1');\n"
    "})();\n";

/* ---- chart 1: time per iteration ---- */

/* A "nice" step (1, 2 or 5 x 10^k) that divides span into about n intervals. */
static double nice_step(double span, int n) {
    double raw = span / n, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

static void time_chart(FILE *out, const kf_report_page *pg) {
    const double W = 960, H = 330, L = 72, R = 20, T = 28, B = 56;
    const double pw = W - L - R, ph = H - T - B;
    double tmax = 0, tmin = 0;
    int nver = 0;
    for (int i = 0; i < pg->niters; i++) {
        const kf_report_iter *it = &pg->iters[i];
        if (!it->verified || !num_ok(it->time_ms)) continue;
        if (!nver || it->time_ms > tmax) tmax = it->time_ms;
        if (!nver || it->time_ms < tmin) tmin = it->time_ms;
        nver++;
    }
    fprintf(out, "<figure id=\"time-chart\"><svg viewBox=\"0 0 %.0f %.0f\" role=\"img\" "
                 "aria-label=\"time per iteration\">\n", W, H);
    if (pg->niters == 0) {
        fprintf(out, "<text x=\"%.0f\" y=\"%.0f\" class=\"note\" text-anchor=\"middle\">no iterations "
                     "were stored for this run</text></svg></figure>\n", W / 2, H / 2);
        return;
    }
    /* a log axis when the times span more than 10x, so the fast ones stay comparable */
    int logy = nver >= 2 && tmax / tmin > 10;
    double y0, y1; /* axis range, in ms (log: decades) */
    if (!nver) tmax = num_ok(pg->floor_ms) ? pg->floor_ms * 2 : 1;
    if (logy) {
        y0 = pow(10, floor(log10(fmin(tmin, num_ok(pg->floor_ms) ? pg->floor_ms : tmin))));
        y1 = pow(10, ceil(log10(tmax * 1.05)));
    } else {
        y0 = 0;
        double step = nice_step(tmax * 1.08, 5);
        y1 = ceil(tmax * 1.08 / step) * step;
    }
#define TY(v) (logy ? T + ph * (1 - (log10(v) - log10(y0)) / (log10(y1) - log10(y0))) \
                    : T + ph * (1 - ((v) - y0) / (y1 - y0)))
    /* grid and y ticks */
    if (logy) {
        for (double d = y0; d <= y1 * 1.0001; d *= 10) {
            char b[32];
            fmt_num(d, b, sizeof b);
            fprintf(out, "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
                         "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                    L, L + pw, TY(d), TY(d), L - 6, TY(d) + 4, b);
        }
    } else {
        double step = nice_step(y1, 5);
        for (double v = 0; v <= y1 * 1.0001; v += step) {
            char b[32];
            fmt_num(v, b, sizeof b);
            fprintf(out, "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
                         "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                    L, L + pw, TY(v), TY(v), L - 6, TY(v) + 4, b);
        }
    }
    double band = pw / pg->niters, bw = fmin(band * 0.7, 60);
    int every = pg->niters <= 30 ? 1 : (pg->niters + 29) / 30;
    for (int i = 0; i < pg->niters; i++) {
        const kf_report_iter *it = &pg->iters[i];
        double cx = L + band * (i + 0.5);
        if (i % every == 0 || i == pg->niters - 1)
            fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", cx, T + ph + 16,
                    it->iter);
        if (it->verified && num_ok(it->time_ms)) {
            double top = TY(it->time_ms), base = logy ? T + ph : TY(0);
            if (base - top < 1) top = base - 1;
            fprintf(out, "<rect class=\"bar%s%s\" data-iter=\"%d\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                         "height=\"%.1f\"><title>iter %d: ",
                    i == pg->best ? " best" : "", it->cached ? " cached" : "", it->iter, cx - bw / 2, top, bw,
                    base - top, it->iter);
            E(it->label);
            fprintf(out, "\n%.4g ms, %.1f%% of floor%s%s</title></rect>\n", it->time_ms, it->pct_floor,
                    it->cached ? " (cached)" : "", i == pg->best ? " (best)" : "");
            if (i == pg->best)
                fprintf(out, "<text class=\"halo\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"600\">best "
                             "%.3g ms</text>\n",
                        cx, top - 6 < T + 10 ? T + 10 : top - 6, it->time_ms);
        } else {
            /* a failed candidate: a red cross on the axis, its status on hover */
            double y = T + ph - 9, s = fmin(6, bw / 2);
            fprintf(out, "<g class=\"fail\" data-iter=\"%d\"><title>iter %d failed: ", it->iter, it->iter);
            E(it->status);
            fputs(" - ", out);
            E(it->label);
            fprintf(out, "</title><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                         "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/></g>\n",
                    cx - s, y - s, cx + s, y + s, cx - s, y + s, cx + s, y - s);
        }
    }
    if (num_ok(pg->floor_ms) && pg->floor_ms >= y0 && pg->floor_ms <= y1) {
        double y = TY(pg->floor_ms);
        fprintf(out, "<line class=\"floor\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
                     "<text class=\"halo\" x=\"%.1f\" y=\"%.1f\" fill=\"#2e7d32\">roofline floor "
                     "%.3g ms</text>\n",
                L, L + pw, y, y, L + 6, y - 5, pg->floor_ms);
    }
    fprintf(out, "<line class=\"axis\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
                 "<line class=\"axis\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>\n",
            L, L + pw, T + ph, T + ph, L, L, T, T + ph);
    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">iteration</text>\n", L + pw / 2, H - 12);
    fprintf(out, "<text transform=\"translate(16 %.1f) rotate(-90)\" text-anchor=\"middle\">time per "
                 "call (ms%s)</text>\n", T + ph / 2, logy ? ", log scale" : "");
    /* legend */
    double lx = L + 8;
    fprintf(out, "<rect class=\"bar\" x=\"%.1f\" y=\"6\" width=\"12\" height=\"12\"/><text x=\"%.1f\" "
                 "y=\"16\">verified</text>\n", lx, lx + 16);
    fprintf(out, "<rect class=\"bar cached\" x=\"%.1f\" y=\"6\" width=\"12\" height=\"12\"/><text x=\"%.1f\" "
                 "y=\"16\">from the cache</text>\n", lx + 84, lx + 100);
    fprintf(out, "<rect class=\"bar best\" x=\"%.1f\" y=\"6\" width=\"12\" height=\"12\"/><text x=\"%.1f\" "
                 "y=\"16\">best</text>\n", lx + 204, lx + 220);
    fprintf(out, "<g class=\"fail\"><line x1=\"%.1f\" y1=\"7\" x2=\"%.1f\" y2=\"17\"/><line x1=\"%.1f\" "
                 "y1=\"17\" x2=\"%.1f\" y2=\"7\"/></g><text x=\"%.1f\" y=\"16\">failed (hover: why)</text>\n",
            lx + 262, lx + 272, lx + 262, lx + 272, lx + 278);
#undef TY
    fprintf(out, "</svg><figcaption>Median time of one call per candidate, in the order the loop "
                 "evaluated them (%d of %d verified). The dashed line is the roofline floor: no kernel "
                 "can beat it.</figcaption></figure>\n", nver, pg->niters);
}

/* ---- chart 2: the roofline ---- */

static void roofline_chart(FILE *out, const kf_report_page *pg) {
    const double W = 960, H = 440, L = 78, R = 24, T = 24, B = 56;
    const double pw = W - L - R, ph = H - T - B;
    fprintf(out, "<figure id=\"roofline\"><svg viewBox=\"0 0 %.0f %.0f\" role=\"img\" "
                 "aria-label=\"roofline\">\n", W, H);
    if (!num_ok(pg->bw_gbs) || !num_ok(pg->peak_gflops) || !num_ok(pg->ridge)) {
        fprintf(out, "<text x=\"%.0f\" y=\"%.0f\" class=\"note\" text-anchor=\"middle\">the run has no "
                     "device ceilings to draw a roofline from</text></svg></figure>\n", W / 2, H / 2);
        return;
    }
    /* x range: decades around the ridge and every candidate; y: up to the peak */
    double xlo = pg->ridge, xhi = pg->ridge, ylo = pg->peak_gflops, yhi = pg->peak_gflops;
    int npts = 0;
    for (int i = 0; i < pg->niters; i++) {
        const kf_report_iter *it = &pg->iters[i];
        if (!it->verified || !num_ok(it->intensity) || !num_ok(it->gflops)) continue;
        xlo = fmin(xlo, it->intensity), xhi = fmax(xhi, it->intensity);
        ylo = fmin(ylo, it->gflops), yhi = fmax(yhi, it->gflops);
        npts++;
    }
    double lx0 = floor(log10(xlo)) - 1, lx1 = ceil(log10(xhi)) + 1;
    if (lx1 - lx0 < 4) lx1 = lx0 + 4;
    double ly1 = ceil(log10(yhi * 1.5)), ly0 = floor(log10(ylo)) - 1;
    if (ly1 - ly0 < 4) ly0 = ly1 - 4;
    /* keep the memory roof on the plot from its left end */
    ly0 = fmin(ly0, floor(log10(pg->bw_gbs * pow(10, lx0))));
    if (ly1 - ly0 > 8) ly0 = ly1 - 8;
#define PX(x) (L + pw * (log10(x) - lx0) / (lx1 - lx0))
#define PY(y) (T + ph * (1 - (log10(y) - ly0) / (ly1 - ly0)))
    for (double d = lx0; d <= lx1 + 1e-9; d++) {
        char b[32];
        fmt_num(pow(10, d), b, sizeof b);
        double x = PX(pow(10, d));
        fprintf(out, "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
                     "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                x, x, T, T + ph, x, T + ph + 16, b);
    }
    for (double d = ly0; d <= ly1 + 1e-9; d++) {
        char b[32];
        fmt_num(pow(10, d), b, sizeof b);
        double y = PY(pow(10, d));
        fprintf(out, "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
                     "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                L, L + pw, y, y, L - 6, y + 4, b);
    }
    fprintf(out, "<line class=\"axis\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
                 "<line class=\"axis\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>\n",
            L, L + pw, T + ph, T + ph, L, L, T, T + ph);
    /* the roof: bandwidth x intensity up to the ridge, then the peak; clipped at the bottom */
    double xmin = pow(10, lx0), xmax = pow(10, lx1), ymin = pow(10, ly0);
    double xs = fmax(xmin, ymin / pg->bw_gbs);
    fprintf(out, "<polyline class=\"roof\" points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\"/>\n", PX(xs),
            PY(pg->bw_gbs * xs), PX(pg->ridge), PY(pg->peak_gflops), PX(xmax), PY(pg->peak_gflops));
    /* the memory roof's label along its slope (one decade per decade in pixels) */
    double ang = -atan2(ph / (ly1 - ly0), pw / (lx1 - lx0)) * 180 / M_PI;
    /* halfway along the slope, or along its longer side of the task's intensity, where the
     * candidates' points are */
    double mx = pow(10, (log10(xs) + log10(pg->ridge)) / 2);
    for (int i = 0; i < pg->niters; i++)
        if (pg->iters[i].verified && num_ok(pg->iters[i].intensity)) {
            double a = log10(pg->iters[i].intensity);
            if (a > log10(xs) && a < log10(pg->ridge))
                mx = a - log10(xs) > log10(pg->ridge) - a ? pow(10, (log10(xs) + a) / 2)
                                                          : pow(10, (a + log10(pg->ridge)) / 2);
            break;
        }
    fprintf(out, "<text transform=\"translate(%.1f %.1f) rotate(%.1f)\" text-anchor=\"middle\" "
                 "class=\"halo\" font-weight=\"600\">memory roof %.4g GB/s</text>\n",
            PX(mx), PY(pg->bw_gbs * mx) - 8, ang, pg->bw_gbs);
    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" class=\"halo\" font-weight=\"600\">compute roof %.4g "
                 "GFLOP/s",
            L + pw - 6, PY(pg->peak_gflops) - 8, pg->peak_gflops);
    if (pg->peak_what) {
        fputs(" (", out);
        E(pg->peak_what);
        fputs(")", out);
    }
    fputs("</text>\n", out);
    double rx = PX(pg->ridge);
    fprintf(out, "<line class=\"ridge\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
                 "<text x=\"%.1f\" y=\"%.1f\" class=\"note halo\">ridge %.3g FLOP/B</text>\n",
            rx, rx, PY(pg->peak_gflops), T + ph, rx + 4, T + ph - 6, pg->ridge);
    /* the task's intensity: every candidate moves at least the task's minimum bytes, so all of
     * them sit on this line, at the FLOP rate each reached */
    int have_ai = 0;
    for (int i = 0; i < pg->niters && !have_ai; i++)
        if (pg->iters[i].verified && num_ok(pg->iters[i].intensity)) {
            double ax = PX(pg->iters[i].intensity);
            fprintf(out, "<line class=\"ai\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
                         "<text x=\"%.1f\" y=\"%.1f\" class=\"note halo\" text-anchor=\"end\">task %.3g FLOP/B"
                         "</text>\n",
                    ax, ax, T, T + ph, ax - 4, T + 14, pg->iters[i].intensity);
            have_ai = 1;
        }
    for (int pass = 0; pass < 2; pass++) /* the best last, on top */
        for (int i = 0; i < pg->niters; i++) {
            const kf_report_iter *it = &pg->iters[i];
            if (!it->verified || !num_ok(it->intensity) || !num_ok(it->gflops)) continue;
            if ((i == pg->best) != (pass == 1)) continue;
            fprintf(out, "<circle class=\"pt%s\" data-iter=\"%d\" cx=\"%.1f\" cy=\"%.1f\" r=\"%d\"><title>"
                         "iter %d: ",
                    i == pg->best ? " best" : "", it->iter, PX(it->intensity), PY(it->gflops),
                    i == pg->best ? 7 : 5, it->iter);
            E(it->label);
            fprintf(out, "\n%.4g ms, %.4g GFLOP/s, %.4g GB/s, %.3g FLOP/B, %.1f%% of floor%s</title>"
                         "</circle>\n",
                    it->time_ms, it->gflops, it->gbs, it->intensity, it->pct_floor,
                    i == pg->best ? " (best)" : "");
            if (i == pg->best)
                fprintf(out, "<text class=\"halo\" x=\"%.1f\" y=\"%.1f\" font-weight=\"600\">best: iter %d, %.3g GFLOP/s"
                             "</text>\n",
                        PX(it->intensity) + 11, PY(it->gflops) + 4, it->iter, it->gflops);
        }
    if (!npts)
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" class=\"note\" text-anchor=\"middle\">%s</text>\n",
                L + pw / 2, T + ph / 2,
                pg->flops > 0 ? "no verified candidate to place"
                              : "this task counts no FLOPs: its candidates have no place on a FLOP-rate "
                                "roofline (see GB/s in the table)");
    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">arithmetic intensity (FLOP per byte "
                 "of the task's minimum traffic, log scale)</text>\n", L + pw / 2, H - 12);
    fprintf(out, "<text transform=\"translate(16 %.1f) rotate(-90)\" text-anchor=\"middle\">GFLOP/s "
                 "(log scale)</text>\n", T + ph / 2);
#undef PX
#undef PY
    fprintf(out, "</svg><figcaption>The device's ceilings (%s) and every verified candidate (%d) at the "
                 "FLOP rate it reached; a point's height under the roof is the headroom left. Hover a "
                 "point for its candidate; click it to find its row.</figcaption></figure>\n",
            pg->measured ? "measured on this device" : "nominal, not measured", npts);
}

/* ---- text sections ---- */

static void card(FILE *out, const char *title, const char *text) {
    fprintf(out, "<div class=\"card\"><b>%s</b><span>", title);
    E(text && text[0] ? text : "-");
    fputs("</span></div>\n", out);
}

static void summary(FILE *out, const kf_report_page *pg) {
    char b[512];
    card(out, "device", pg->device);
    card(out, "platform", pg->platform);
    snprintf(b, sizeof b, "%.4g GB/s, %.4g GFLOP/s%s%s", pg->bw_gbs, pg->peak_gflops,
             pg->measured ? " (measured" : " (nominal", pg->measured && pg->ceil_when && pg->ceil_when[0] ? " " : "");
    size_t n = strlen(b);
    snprintf(b + n, sizeof b - n, "%s)", pg->measured && pg->ceil_when ? pg->ceil_when : "");
    card(out, "ceilings", b);
    snprintf(b, sizeof b, "%.4g ms (%s-bound; %.4g MB, %.4g MFLOP)", pg->floor_ms,
             pg->floor_bound ? pg->floor_bound : "?", pg->bytes / 1e6, pg->flops / 1e6);
    card(out, "roofline floor", b);
    if (pg->best >= 0 && pg->best < pg->niters) {
        const kf_report_iter *it = &pg->iters[pg->best];
        snprintf(b, sizeof b, "iter %d: %.4g ms, %.1f%% of floor", it->iter, it->time_ms, it->pct_floor);
        if (pg->speedup_first > 0) {
            n = strlen(b);
            snprintf(b + n, sizeof b - n, ", %.2fx the first", pg->speedup_first);
        }
        card(out, "best", b);
    } else {
        card(out, "best", "no candidate verified");
    }
    int nver = 0, ncached = 0;
    for (int i = 0; i < pg->niters; i++) nver += pg->iters[i].verified, ncached += pg->iters[i].cached;
    snprintf(b, sizeof b, "%d run, %d verified, %d from the cache", pg->niters, nver, ncached);
    card(out, "iterations", b);
    if (pg->wall_s > 0) {
        snprintf(b, sizeof b, "%.1f s", pg->wall_s);
        card(out, "wall time", b);
    }
    if (pg->memcheck && pg->memcheck[0]) card(out, "memory check", pg->memcheck);
}

static void source_section(FILE *out, const kf_report_page *pg) {
    fputs("<h2 id=\"source\">Best kernel</h2>\n", out);
    if (!pg->best_source || pg->best < 0) {
        fputs("<p class=\"sub\">No candidate verified, so there is no kernel to show.</p>\n", out);
        return;
    }
    fputs("<p class=\"sub\">", out);
    E(pg->best_file ? pg->best_file : "kernel");
    if (pg->best_flags && pg->best_flags[0]) {
        fputs(", compiled with <code>", out);
        E(pg->best_flags);
        fputs("</code>", out);
    }
    if (pg->best < pg->niters) {
        fprintf(out, ", iteration %d: <code>", pg->iters[pg->best].iter);
        E(pg->iters[pg->best].label);
        fputs("</code>", out);
    }
    fputs("</p>\n<pre><code id=\"best-source\">", out);
    E(pg->best_source);
    fputs("</code></pre>\n", out);
}

/* The first lines of a failure's detail: enough to see why, not a whole compiler log. */
static void detail_head(FILE *out, const char *s, int lines) {
    const char *p = s;
    for (int i = 0; i < lines && p && *p; i++) {
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : p + strlen(p);
    }
    fputs("<pre>", out);
    size_t len = (size_t)(p - s);
    escape_n(out, s, len > 1200 ? 1200 : len);
    if (*p || len > 1200) fputs("\n...", out);
    fputs("</pre>\n", out);
}

static void diagnoses_section(FILE *out, const kf_report_page *pg) {
    fputs("<h2 id=\"diagnoses\">Diagnoses, iteration by iteration</h2>\n"
          "<p class=\"sub\">What the performance analysis agent read in each candidate's measurements, "
          "what it recommended next, and which recommendation the next candidate followed.</p>\n",
          out);
    if (!pg->niters) fputs("<p>No iterations.</p>\n", out);
    for (int i = 0; i < pg->niters; i++) {
        const kf_report_iter *it = &pg->iters[i];
        fprintf(out, "<details class=\"diag\" data-iter=\"%d\"%s><summary><b>iter %d</b> <span class=\"lbl\">",
                it->iter, i == pg->best ? " open" : "", it->iter);
        E(it->label);
        fputs("</span>", out);
        if (i == pg->best) fputs("<span class=\"tag best\">best</span>", out);
        if (!it->verified) {
            fputs("<span class=\"tag fail\">", out);
            E(it->status);
            fputs("</span>", out);
        }
        if (it->cached) fputs("<span class=\"tag\">cached</span>", out);
        if (it->diagnosis) {
            fputs(" &mdash; ", out);
            E(it->bound);
            fputs("-bound", out);
        }
        fputs("</summary>\n", out);
        if (it->followed && it->followed[0]) {
            fputs("<p>chosen by: ", out);
            E(it->followed);
            fputs("</p>\n", out);
        }
        if (!it->verified && it->detail && it->detail[0]) detail_head(out, it->detail, 6);
        if (it->diagnosis) {
            fputs("<p>", out);
            E(it->diagnosis);
            fputs("</p>\n", out);
            if (it->nevidence) {
                fputs("<b>evidence</b><ul>\n", out);
                for (int k = 0; k < it->nevidence; k++) {
                    fputs("<li>", out);
                    E(it->evidence[k]);
                    fputs("</li>\n", out);
                }
                fputs("</ul>\n", out);
            }
            if (it->nrecs) {
                fputs("<b>recommended next</b><ol>\n", out);
                for (int k = 0; k < it->nrecs; k++) {
                    fputs("<li>", out);
                    E(it->recs[k]);
                    fputs("</li>\n", out);
                }
                fputs("</ol>\n", out);
            }
        } else if (it->verified) {
            fputs("<p class=\"sub\">not analysed</p>\n", out);
        }
        if (it->memcheck && it->memcheck[0]) {
            fputs("<p>memory check: ", out);
            E(it->memcheck);
            fputs("</p>\n", out);
        }
        fputs("</details>\n", out);
    }
}

static void num_cell(FILE *out, int valid, double v, const char *fmt) {
    if (!valid || !isfinite(v)) {
        fputs("<td class=\"n\" data-v=\"NaN\">-</td>", out);
        return;
    }
    fprintf(out, "<td class=\"n\" data-v=\"%.17g\">", v);
    fprintf(out, fmt, v);
    fputs("</td>", out);
}

static void text_cell(FILE *out, const char *cls, const char *s) {
    fprintf(out, "<td%s%s%s>", cls ? " class=\"" : "", cls ? cls : "", cls ? "\"" : "");
    E(s && s[0] ? s : "-");
    fputs("</td>", out);
}

static void table_section(FILE *out, const kf_report_page *pg) {
    fputs("<h2 id=\"table\">Iterations</h2>\n<p class=\"sub\">Click a column to sort; click a row to "
          "find its candidate in the charts.</p>\n"
          "<table id=\"iters\"><thead><tr><th>iter</th><th>candidate</th><th>agent</th><th>status</th>"
          "<th>time ms</th><th>GB/s</th><th>GFLOP/s</th><th>FLOP/B</th><th>% floor</th><th>bound</th>"
          "<th>cached</th><th>followed</th></tr></thead><tbody>\n",
          out);
    for (int i = 0; i < pg->niters; i++) {
        const kf_report_iter *it = &pg->iters[i];
        fprintf(out, "<tr data-iter=\"%d\"%s>", it->iter,
                i == pg->best ? " class=\"best\"" : !it->verified ? " class=\"failed\"" : "");
        fprintf(out, "<td class=\"n\" data-v=\"%d\">%d</td>", it->iter, it->iter);
        text_cell(out, "lbl", it->label);
        text_cell(out, NULL, it->agent);
        text_cell(out, NULL, it->status);
        num_cell(out, it->verified, it->time_ms, "%.4f");
        num_cell(out, it->verified, it->gbs, "%.2f");
        num_cell(out, it->verified, it->gflops, "%.2f");
        num_cell(out, it->verified && it->intensity > 0, it->intensity, "%.3g");
        num_cell(out, it->verified, it->pct_floor, "%.1f%%");
        text_cell(out, NULL, it->bound);
        text_cell(out, NULL, it->cached ? "yes" : "");
        text_cell(out, NULL, it->followed);
        fputs("</tr>\n", out);
    }
    fputs("</tbody></table>\n", out);
}

/* See report.h. */
int kf_report_html(FILE *out, const kf_report_page *pg) {
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          "<meta name=\"generator\" content=\"kforge report\">\n<title>kforge report: ",
          out);
    E(pg->task);
    fprintf(out, "</title>\n<script>\n%s</script>\n<style>\n%s</style>\n</head>\n<body>\n<main>\n",
            kErrorHook, kStyle);
    fputs("<div id=\"kf-errors\"></div>\n<h1>", out);
    E(pg->task);
    fputs("</h1>\n<p class=\"sub\">kforge run ", out);
    E(pg->run_id && pg->run_id[0] ? pg->run_id : "(not stored)");
    if (pg->plan && pg->plan[0]) {
        fputs(" &middot; plan <code>", out);
        E(pg->plan);
        fputs("</code>", out);
    }
    if (pg->stop_reason && pg->stop_reason[0]) {
        fputs(" &middot; stopped early: ", out);
        E(pg->stop_reason);
    }
    fputs("</p>\n", out);
    if (pg->result_from && pg->result_from[0]) {
        /* which agent wrote the result, or why there is none (a module task's uncovered nodes) */
        fputs("<p class=\"sub\" id=\"result\">result from <code>", out);
        E(pg->result_from);
        fputs("</code>", out);
        if (pg->result_detail && pg->result_detail[0]) {
            fputs(": ", out);
            E(pg->result_detail);
        }
        fputs("</p>\n", out);
    }
    fputs("<div class=\"cards\">\n", out);
    summary(out, pg);
    fputs("</div>\n<h2 id=\"time\">Time per iteration</h2>\n", out);
    time_chart(out, pg);
    fputs("<h2 id=\"roof\">Roofline</h2>\n", out);
    roofline_chart(out, pg);
    source_section(out, pg);
    diagnoses_section(out, pg);
    table_section(out, pg);
    fputs("<footer>Written by <code>kforge report</code>", out);
    if (pg->generated && pg->generated[0]) {
        fputs(" on ", out);
        E(pg->generated);
    }
    fprintf(out, ". Self-contained: no file, font or script is loaded from elsewhere.</footer>\n"
                 "</main>\n<script>\n%s</script>\n</body>\n</html>\n",
            kMainScript);
    fflush(out);
    return ferror(out) ? -1 : 0;
}
