/*
 * hw.c — hardware descriptions: the JSON format (docs/sim.md), the built-in
 * files of data/hw/ (compiled in by CMake as hw_builtin_data.c, so the CLI
 * finds them from any directory), and the efficiency and time formulas the
 * cost model asks of a machine.
 */
#include <cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "util/common.h"
#include "util/fileio.h"

/* generated from the JSON files of data/hw (CMakeLists.txt) */
extern const int pipit__hw_builtin_n;
extern const char *const pipit__hw_builtin_names[];
extern const char *const pipit__hw_builtin_texts[];

static const char *const DTYPES[HW_NDTYPES] = {"fp32", "tf32", "bf16", "fp16"};

int pipit__hw_dtype(const char *name) {
    for (int i = 0; name && i < HW_NDTYPES; i++)
        if (strcmp(name, DTYPES[i]) == 0) return i;
    return -1;
}

const char *pipit__hw_dtype_name(int d) { return d >= 0 && d < HW_NDTYPES ? DTYPES[d] : "?"; }

int pipit_hw_builtin_count(void) { return pipit__hw_builtin_n; }

const char *pipit_hw_builtin_name(int i) {
    if (i < 0 || i >= pipit__hw_builtin_n) {
        pipit__err(PIPIT_STATUS_INVALID, "pipit_hw_builtin_name: index %d out of range [0, %d)", i,
                   pipit__hw_builtin_n);
        return NULL;
    }
    return pipit__hw_builtin_names[i];
}

void pipit_hw_free(pipit_hw *hw) {
    if (!hw) return;
    pipit__free(hw->about);
    pipit__free(hw->sources_json);
    pipit__free(hw);
}

static int null_hw(const pipit_hw *hw, const char *fn) {
    if (!hw) pipit__err(PIPIT_STATUS_MISUSE, "%s: hardware is NULL", fn);
    return !hw;
}

const char *pipit_hw_name(const pipit_hw *hw) { return null_hw(hw, __func__) ? NULL : hw->name; }

double pipit_hw_mem_capacity(const pipit_hw *hw) { return null_hw(hw, __func__) ? 0.0 : hw->mem_cap; }

double pipit_hw_peak_flops(const pipit_hw *hw, const char *dtype) {
    if (null_hw(hw, __func__)) return 0.0;
    int d = dtype ? pipit__hw_dtype(dtype) : hw->train_dtype;
    if (d < 0) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: unknown dtype '%s' (expected fp32, tf32, bf16, fp16)", __func__, dtype);
        return 0.0;
    }
    return hw->peak[d];
}

/* ---------------------------------------------------------------- parse */

const char *pipit__json_dup_key(const cJSON *o, char *buf, size_t n) {
    if (!cJSON_IsObject(o) && !cJSON_IsArray(o)) return NULL;
    for (const cJSON *a = o->child; a; a = a->next) {
        for (const cJSON *b = a->next; cJSON_IsObject(o) && b; b = b->next)
            if (strcmp(a->string, b->string) == 0) {
                snprintf(buf, n, "%s", a->string);
                return buf;
            }
        char inner[256];
        if (pipit__json_dup_key(a, inner, sizeof inner)) {
            if (a->string) snprintf(buf, n, "%s.%s", a->string, inner);
            else snprintf(buf, n, "%s", inner);
            return buf;
        }
    }
    return NULL;
}

typedef struct {
    const char *what;
    pipit_status st;
} parse_ctx;

static int bad(parse_ctx *c, const char *key, const char *why) {
    if (!c->st) c->st = pipit__err(PIPIT_STATUS_FORMAT, "hardware file %s: \"%s\" %s", c->what, key, why);
    return 0;
}

/* A positive finite number under key (required unless dflt >= 0). */
static double num(parse_ctx *c, const cJSON *obj, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) {
        if (dflt < 0) bad(c, key, "is missing");
        return dflt;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0)
        return bad(c, key, "must be a non-negative number"), 0.0;
    return v->valuedouble;
}

static void parse_link(parse_ctx *c, const cJSON *root, const char *key, double *bw, double *lat) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsObject(o)) {
        bad(c, key, "must be an object {\"bandwidth\": bytes/s, \"latency\": s}");
        return;
    }
    *bw = num(c, o, "bandwidth", -1);
    *lat = num(c, o, "latency", 0);
    if (!c->st && !(*bw > 0)) bad(c, key, "needs a bandwidth > 0");
}

static void parse_peaks(parse_ctx *c, const cJSON *root, pipit_hw *hw) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "peak_flops");
    if (!cJSON_IsObject(o)) {
        bad(c, "peak_flops", "must be an object of dtype: FLOP/s (fp32, tf32, bf16, fp16)");
        return;
    }
    for (const cJSON *e = o->child; e && !c->st; e = e->next) {
        int d = pipit__hw_dtype(e->string);
        if (d < 0) {
            bad(c, "peak_flops", "has an unknown dtype (expected fp32, tf32, bf16, fp16)");
            return;
        }
        hw->peak[d] = num(c, o, e->string, -1);
    }
}

static void parse_curve(parse_ctx *c, const cJSON *root, pipit_hw *hw) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "gemm_efficiency");
    int n = cJSON_GetArraySize(a);
    if (!cJSON_IsArray(a) || n < 1 || n > PIPIT_HW_MAX_CURVE) {
        bad(c, "gemm_efficiency", "must be an array of 1 to 32 [dimension, fraction of peak] pairs");
        return;
    }
    for (int i = 0; i < n; i++) {
        const cJSON *p = cJSON_GetArrayItem(a, i);
        const cJSON *x = cJSON_GetArrayItem(p, 0), *y = cJSON_GetArrayItem(p, 1);
        if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 2 || !cJSON_IsNumber(x) || !cJSON_IsNumber(y) ||
            !(x->valuedouble >= 1) || !isfinite(x->valuedouble) || !(y->valuedouble > 0) || !(y->valuedouble <= 1) ||
            (i && !(x->valuedouble > hw->curve_dim[i - 1]))) {
            bad(c, "gemm_efficiency", "needs [dimension >= 1 (finite), 0 < fraction <= 1] pairs with increasing "
                                      "dimensions");
            return;
        }
        hw->curve_dim[i] = x->valuedouble;
        hw->curve_eff[i] = y->valuedouble;
    }
    hw->ncurve = n;
}

static char *dup_string(parse_ctx *c, const cJSON *root, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v) return NULL;
    if (!cJSON_IsString(v)) return bad(c, key, "must be a string"), NULL;
    char *s = pipit__strdup(v->valuestring);
    if (!s && !c->st) c->st = pipit__err(PIPIT_STATUS_NOMEM, "hardware file %s: out of memory", c->what);
    return s;
}

static void parse_fields(parse_ctx *c, const cJSON *root, pipit_hw *hw) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0] || strlen(name->valuestring) >= sizeof hw->name) {
        bad(c, "name", "must be a non-empty string of at most 63 characters");
        return;
    }
    for (const char *q = name->valuestring; *q; q++)
        if (!(isalnum((unsigned char)*q) || *q == '-' || *q == '_' || *q == '.')) {
            bad(c, "name", "may hold letters, digits, '-', '_' and '.' only");
            return;
        }
    snprintf(hw->name, sizeof hw->name, "%s", name->valuestring);
    hw->about = dup_string(c, root, "about");
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "sources");
    if (src && !c->st && !(hw->sources_json = cJSON_PrintUnformatted(src)))
        c->st = pipit__err(PIPIT_STATUS_NOMEM, "hardware file %s: out of memory", c->what);
    parse_peaks(c, root, hw);
    const cJSON *td = cJSON_GetObjectItemCaseSensitive(root, "train_dtype");
    hw->train_dtype = cJSON_IsString(td) ? pipit__hw_dtype(td->valuestring) : -1;
    if (!c->st && (hw->train_dtype < 0 || !(hw->peak[hw->train_dtype] > 0)))
        bad(c, "train_dtype", "must name a dtype with a peak in \"peak_flops\" (fp32, tf32, bf16, fp16)");
    parse_curve(c, root, hw);
    hw->mem_bw = num(c, root, "mem_bandwidth", -1);
    hw->mem_eff = num(c, root, "mem_efficiency", 1.0);
    hw->mem_cap = num(c, root, "mem_capacity", -1);
    double gpn = num(c, root, "gpus_per_node", 1);
    parse_link(c, root, "intra_node", &hw->intra_bw, &hw->intra_lat);
    parse_link(c, root, "inter_node", &hw->inter_bw, &hw->inter_lat);
    hw->kernel_overhead = num(c, root, "kernel_overhead", 0);
    if (c->st) return;
    if (!(hw->mem_bw > 0)) bad(c, "mem_bandwidth", "must be > 0");
    else if (!(hw->mem_eff > 0 && hw->mem_eff <= 1)) bad(c, "mem_efficiency", "must be in (0, 1]");
    else if (!(hw->mem_cap > 0)) bad(c, "mem_capacity", "must be > 0");
    else if (gpn < 1 || gpn > 1 << 20 || gpn != floor(gpn))
        bad(c, "gpus_per_node", "must be a whole number in 1 .. 2^20");
    else hw->gpus_per_node = (int)gpn; /* in range: the conversion is defined */
}

static pipit_status hw_parse_impl(const char *json, const char *what, pipit_hw **out) {
    if (!json || !out) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_hw_parse: NULL %s", json ? "out" : "text");
    *out = NULL;
    parse_ctx c = {what ? what : "(text)", PIPIT_STATUS_OK};
    cJSON *root = cJSON_ParseWithOpts(json, NULL, 1); /* 1: nothing may follow the object */
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pipit__err(PIPIT_STATUS_FORMAT, "hardware file %s: not a JSON object (or text follows it)", c.what);
    }
    char dup[256];
    if (pipit__json_dup_key(root, dup, sizeof dup)) {
        cJSON_Delete(root);
        return pipit__err(PIPIT_STATUS_FORMAT, "hardware file %s: key \"%s\" appears twice (which one was meant?)",
                          c.what, dup);
    }
    pipit_hw *hw = pipit__calloc(1, sizeof *hw);
    if (!hw) {
        cJSON_Delete(root);
        return pipit__err(PIPIT_STATUS_NOMEM, "hardware file %s: out of memory", c.what);
    }
    parse_fields(&c, root, hw);
    cJSON_Delete(root);
    if (c.st) {
        pipit_hw_free(hw);
        return c.st;
    }
    *out = hw;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_hw_parse(const char *json, const char *what, pipit_hw **out) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(hw_parse_impl(json, what, out), gen0, __func__);
}

static pipit_status hw_load_impl(const char *name_or_path, pipit_hw **out) {
    if (!name_or_path || !out)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_hw_load: NULL %s", out ? "name" : "out");
    *out = NULL;
    for (int i = 0; i < pipit__hw_builtin_n; i++)
        if (strcmp(name_or_path, pipit__hw_builtin_names[i]) == 0)
            return pipit_hw_parse(pipit__hw_builtin_texts[i], name_or_path, out);
    FILE *probe = fopen(name_or_path, "rb");
    if (!probe) {
        char names[256] = "";
        for (int i = 0; i < pipit__hw_builtin_n; i++) {
            size_t u = strlen(names);
            snprintf(names + u, sizeof names - u, "%s%s", i ? ", " : "", pipit__hw_builtin_names[i]);
        }
        return pipit__err(PIPIT_STATUS_INVALID, "unknown hardware '%s': expected one of %s, or a JSON file (%s)",
                          name_or_path, names, strerror(errno));
    }
    fclose(probe);
    char *text = NULL;
    pipit_status st = pipit__read_text(name_or_path, "hardware file", &text);
    if (!st) st = pipit_hw_parse(text, name_or_path, out);
    pipit__free(text);
    return st;
}

pipit_status pipit_hw_load(const char *name_or_path, pipit_hw **out) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(hw_load_impl(name_or_path, out), gen0, __func__);
}

/* ---------------------------------------------------------------- write */

/* A number as the shortest of %.15g / %.17g that reads back to the same
 * double: cJSON's own printing accepts 15 digits within a relative
 * epsilon, so a written description would come back one ulp off. */
static cJSON *exact_num(double v) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, sizeof buf, "%.17g", v);
    return cJSON_CreateRaw(buf);
}

static int add_num(cJSON *o, const char *k, double v) {
    cJSON *n = exact_num(v);
    return n && cJSON_AddItemToObject(o, k, n) ? 1 : (cJSON_Delete(n), 0);
}

static cJSON *link_json(double bw, double lat) {
    cJSON *o = cJSON_CreateObject();
    if (o && (!add_num(o, "bandwidth", bw) || !add_num(o, "latency", lat))) cJSON_Delete(o), o = NULL;
    return o;
}

static cJSON *hw_json(const pipit_hw *hw) {
    cJSON *o = cJSON_CreateObject(), *peaks = cJSON_CreateObject(), *curve = cJSON_CreateArray();
    int ok = o && peaks && curve && cJSON_AddStringToObject(o, "name", hw->name);
    if (ok && hw->about) ok = cJSON_AddStringToObject(o, "about", hw->about) != NULL;
    if (ok && hw->sources_json) {
        cJSON *src = cJSON_Parse(hw->sources_json);
        ok = src && cJSON_AddItemToObject(o, "sources", src);
    }
    for (int d = 0; ok && d < HW_NDTYPES; d++)
        if (hw->peak[d] > 0) ok = add_num(peaks, DTYPES[d], hw->peak[d]);
    ok = ok && cJSON_AddItemToObject(o, "peak_flops", peaks);
    if (!ok) cJSON_Delete(peaks);
    peaks = NULL;
    ok = ok && cJSON_AddStringToObject(o, "train_dtype", DTYPES[hw->train_dtype]);
    for (int i = 0; ok && i < hw->ncurve; i++) {
        cJSON *p = cJSON_CreateArray();
        ok = p && cJSON_AddItemToArray(curve, p); /* curve owns p, p owns what is added to it */
        if (!ok) cJSON_Delete(p);
        const double pt[2] = {hw->curve_dim[i], hw->curve_eff[i]};
        for (int k = 0; ok && k < 2; k++) {
            cJSON *x = exact_num(pt[k]);
            ok = x && cJSON_AddItemToArray(p, x);
            if (!ok) cJSON_Delete(x);
        }
    }
    ok = ok && cJSON_AddItemToObject(o, "gemm_efficiency", curve);
    if (!ok) cJSON_Delete(curve);
    ok = ok && add_num(o, "mem_bandwidth", hw->mem_bw) && add_num(o, "mem_efficiency", hw->mem_eff) &&
         add_num(o, "mem_capacity", hw->mem_cap) && add_num(o, "gpus_per_node", hw->gpus_per_node);
    cJSON *intra = ok ? link_json(hw->intra_bw, hw->intra_lat) : NULL;
    ok = intra && cJSON_AddItemToObject(o, "intra_node", intra);
    cJSON *inter = ok ? link_json(hw->inter_bw, hw->inter_lat) : NULL;
    ok = inter && cJSON_AddItemToObject(o, "inter_node", inter);
    ok = ok && add_num(o, "kernel_overhead", hw->kernel_overhead);
    if (!ok) cJSON_Delete(o);
    return ok ? o : NULL;
}

static pipit_status hw_write_impl(FILE *f, const pipit_hw *hw) {
    if (!f || !hw) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_hw_write: NULL %s", f ? "hardware" : "file");
    cJSON *o = hw_json(hw);
    char *text = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text) return pipit__err(PIPIT_STATUS_NOMEM, "pipit_hw_write: out of memory");
    /* what pipit writes, pipit reads: a description the reader would refuse
     * (a bandwidth of 0, an infinity printed as null) is not written */
    pipit_hw *back = NULL;
    pipit_status st = pipit_hw_parse(text, hw->name, &back);
    pipit_hw_free(back);
    if (st) {
        cJSON_free(text);
        pipit__err_prefix("pipit_hw_write: refusing to write a description pipit_hw_load would not read");
        return st == PIPIT_STATUS_NOMEM ? st : PIPIT_STATUS_INVALID;
    }
    int bad_write = fprintf(f, "%s\n", text) < 0 || ferror(f);
    cJSON_free(text);
    return bad_write ? pipit__err(PIPIT_STATUS_IO, "pipit_hw_write: write failed") : PIPIT_STATUS_OK;
}

pipit_status pipit_hw_write(FILE *f, const pipit_hw *hw) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(hw_write_impl(f, hw), gen0, __func__);
}

/* ------------------------------------------------------------- formulas */

double pipit__hw_gemm_eff(const pipit_hw *hw, double dim) {
    int n = hw->ncurve;
    if (dim <= hw->curve_dim[0]) return hw->curve_eff[0] * PIPIT_MAX(dim, 1.0) / hw->curve_dim[0];
    if (dim >= hw->curve_dim[n - 1]) return hw->curve_eff[n - 1];
    int i = 1;
    while (hw->curve_dim[i] < dim) i++;
    double t = log(dim / hw->curve_dim[i - 1]) / log(hw->curve_dim[i] / hw->curve_dim[i - 1]);
    return hw->curve_eff[i - 1] + t * (hw->curve_eff[i] - hw->curve_eff[i - 1]);
}

double pipit__hw_gemm_time(const pipit_hw *hw, int d, double batch, double m, double n, double k) {
    double dim = PIPIT_MIN(m, PIPIT_MIN(n, k));
    double flops = 2.0 * batch * m * n * k;
    return flops / (hw->peak[d] * pipit__hw_gemm_eff(hw, dim)) + hw->kernel_overhead;
}

double pipit__hw_mem_time(const pipit_hw *hw, double bytes) { return bytes / (hw->mem_bw * hw->mem_eff); }

double pipit__hw_allreduce_time(double bytes, int n, double bw, double lat) {
    if (n <= 1) return 0.0;
    return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * lat;
}

double pipit__hw_allgather_time(double bytes, int n, double bw, double lat) {
    if (n <= 1) return 0.0;
    return (double)(n - 1) / n * bytes / bw + (double)(n - 1) * lat;
}
