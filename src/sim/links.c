/*
 * links.c — a hardware description's links, read and set without editing
 * its JSON: the two links (inside a node, across nodes) and how many
 * devices share a node, from numbers or from one spec string such as
 * "inter=100Mbit:50us,intra=5GB,gpus-per-node=8" (pipit sim and plan
 * --search take them on the command line; --calibrate measures them).
 */
#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"
#include "util/common.h"

static pipit_status set_links(pipit_hw *hw, const pipit_hw_links *l);

pipit_status pipit_hw_get_links(const pipit_hw *hw, pipit_hw_links *out) {
    if (!hw || !out) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_hw_get_links: NULL %s", hw ? "out" : "hardware");
    *out = (pipit_hw_links){hw->intra_bw, hw->intra_lat, hw->inter_bw, hw->inter_lat, hw->gpus_per_node};
    return PIPIT_STATUS_OK;
}

static pipit_status hw_set_links_impl(pipit_hw *hw, const pipit_hw_links *l) {
    if (!hw || !l) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_hw_set_links: NULL %s", hw ? "links" : "hardware");
    return set_links(hw, l); /* its messages get the call's name in pipit_hw_set_links */
}

static pipit_status set_links(pipit_hw *hw, const pipit_hw_links *l) {
    const struct {
        const char *name;
        double v;
        int bandwidth;
    } f[] = {{"intra-node bandwidth", l->intra_bw, 1}, {"intra-node latency", l->intra_lat, 0},
             {"inter-node bandwidth", l->inter_bw, 1}, {"inter-node latency", l->inter_lat, 0}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!isfinite(f[i].v) || (f[i].bandwidth && f[i].v == 0)) /* NaN is no "keep" (< 0) */
            return pipit__err(PIPIT_STATUS_INVALID, "%s %g: must be a finite number %s", f[i].name, f[i].v,
                              f[i].bandwidth ? "> 0 (bytes/s)" : ">= 0 (seconds)");
    if (l->gpus_per_node > (1 << 20))
        return pipit__err(PIPIT_STATUS_INVALID, "gpus per node %d: at most %d", l->gpus_per_node, 1 << 20);
    if (l->intra_bw >= 0) hw->intra_bw = l->intra_bw;
    if (l->intra_lat >= 0) hw->intra_lat = l->intra_lat;
    if (l->inter_bw >= 0) hw->inter_bw = l->inter_bw;
    if (l->inter_lat >= 0) hw->inter_lat = l->inter_lat;
    if (l->gpus_per_node >= 1) hw->gpus_per_node = l->gpus_per_node;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_hw_set_links(pipit_hw *hw, const pipit_hw_links *l) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(hw_set_links_impl(hw, l), gen0, __func__);
}

/* A number with an optional unit: bandwidth in bytes/s ("12.5e6", "5GB",
 * "100Mbit"), latency in seconds ("2e-6", "50us", "1ms"). */
static pipit_status parse_quantity(const char *key, const char *text, size_t len, int bandwidth, double *out) {
    static const struct {
        const char *unit;
        double scale;
    } bw[] = {{"", 1}, {"B", 1}, {"kB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"kbit", 1e3 / 8}, {"Mbit", 1e6 / 8},
              {"Gbit", 1e9 / 8}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}},
      lat[] = {{"", 1}, {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
    char buf[64];
    if (len == 0 || len >= sizeof buf) goto bad;
    memcpy(buf, text, len);
    buf[len] = 0;
    char *end;
    double v = strtod(buf, &end);
    if (end == buf || !isfinite(v) || v < 0) goto bad;
    size_t n = bandwidth ? sizeof bw / sizeof bw[0] : sizeof lat / sizeof lat[0];
    for (size_t i = 0; i < n; i++) {
        const char *u = bandwidth ? bw[i].unit : lat[i].unit;
        if (strcmp(end, u) == 0) {
            *out = v * (bandwidth ? bw[i].scale : lat[i].scale);
            if (bandwidth && *out == 0) goto bad;
            return PIPIT_STATUS_OK;
        }
    }
bad:
    return pipit__err(PIPIT_STATUS_INVALID,
                      bandwidth ? "link %s '%.*s': expected a bandwidth > 0 in bytes/s, e.g. 12.5e6, 5GB or 100Mbit"
                                : "link %s '%.*s': expected a latency >= 0 in seconds, e.g. 2e-6, 50us or 1ms",
                      key, (int)PIPIT_MIN(len, 60), text);
}

/* "BW" or "BW:LAT" into *bw and *lat. */
static pipit_status parse_pair(const char *key, const char *v, size_t len, double *bw, double *lat) {
    const char *colon = memchr(v, ':', len);
    pipit_status s = parse_quantity(key, v, colon ? (size_t)(colon - v) : len, 1, bw);
    if (!s && colon) s = parse_quantity(key, colon + 1, len - (size_t)(colon - v) - 1, 0, lat);
    return s;
}

static pipit_status parse_item(const char *key, size_t klen, const char *v, size_t vlen, pipit_hw_links *l) {
#define IS(name) (klen == strlen(name) && strncmp(key, name, klen) == 0)
    if (IS("inter")) return parse_pair("inter", v, vlen, &l->inter_bw, &l->inter_lat);
    if (IS("intra")) return parse_pair("intra", v, vlen, &l->intra_bw, &l->intra_lat);
    if (IS("inter-bw")) return parse_quantity("inter-bw", v, vlen, 1, &l->inter_bw);
    if (IS("intra-bw")) return parse_quantity("intra-bw", v, vlen, 1, &l->intra_bw);
    if (IS("inter-lat")) return parse_quantity("inter-lat", v, vlen, 0, &l->inter_lat);
    if (IS("intra-lat")) return parse_quantity("intra-lat", v, vlen, 0, &l->intra_lat);
    if (IS("gpus-per-node")) {
        char buf[32], *end;
        long n = 0;
        if (vlen > 0 && vlen < sizeof buf) {
            memcpy(buf, v, vlen), buf[vlen] = 0;
            n = strtol(buf, &end, 10);
            if (*end) n = 0;
        }
        if (n < 1 || n > (1 << 20))
            return pipit__err(PIPIT_STATUS_INVALID, "link gpus-per-node '%.*s': expected a whole number in 1..%d",
                              (int)PIPIT_MIN(vlen, 30), v, 1 << 20);
        l->gpus_per_node = (int)n;
        return PIPIT_STATUS_OK;
    }
#undef IS
    return pipit__err(PIPIT_STATUS_INVALID,
                      "link spec: unknown key '%.*s' (expected inter, intra, inter-bw, inter-lat, intra-bw, "
                      "intra-lat or gpus-per-node)",
                      (int)PIPIT_MIN(klen, 40), key);
}

static pipit_status parse_links(const char *spec, pipit_hw_links *out);

static pipit_status hw_parse_links_impl(const char *spec, pipit_hw_links *out) {
    if (!spec || !out) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_hw_parse_links: NULL %s", spec ? "out" : "spec");
    *out = (pipit_hw_links){-1, -1, -1, -1, 0};
    return parse_links(spec, out);
}

static pipit_status parse_links(const char *spec, pipit_hw_links *out) {
    for (const char *p = spec; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq)
            return pipit__err(PIPIT_STATUS_INVALID, "link spec '%s': '%.*s' is not key=value", spec,
                              (int)PIPIT_MIN(len, 40), p);
        pipit_status s = parse_item(p, (size_t)(eq - p), eq + 1, len - (size_t)(eq - p) - 1, out);
        if (s) return s;
        p += len + (comma != NULL);
    }
    return PIPIT_STATUS_OK;
}

pipit_status pipit_hw_parse_links(const char *spec, pipit_hw_links *out) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(hw_parse_links_impl(spec, out), gen0, __func__);
}

/* One more string in the description's "sources" array. */
static pipit_status add_source(pipit_hw *hw, const char *text) {
    cJSON *a = hw->sources_json ? cJSON_Parse(hw->sources_json) : cJSON_CreateArray();
    cJSON *item = cJSON_CreateString(text);
    char *out = NULL;
    if (a && item && cJSON_IsArray(a) && cJSON_AddItemToArray(a, item)) item = NULL, out = cJSON_PrintUnformatted(a);
    cJSON_Delete(item);
    cJSON_Delete(a);
    if (!out) return pipit__err(PIPIT_STATUS_NOMEM, "pipit_hw_apply_probe: out of memory");
    char *copy = pipit__strdup(out);
    cJSON_free(out);
    if (!copy) return pipit__err(PIPIT_STATUS_NOMEM, "pipit_hw_apply_probe: out of memory");
    pipit__free(hw->sources_json);
    hw->sources_json = copy;
    return PIPIT_STATUS_OK;
}

static pipit_status hw_apply_probe_impl(pipit_hw *hw, const pipit_link_probe *pr) {
    if (!hw || !pr) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_hw_apply_probe: NULL %s", hw ? "probe" : "hardware");
    pipit_hw_links l = {-1, -1, -1, -1, pr->processes > 1 ? pr->per_host : PIPIT_HW_THREADS_PER_NODE};
    if (pr->intra_bw > 0) l.intra_bw = pr->intra_bw, l.intra_lat = pr->intra_lat;
    if (pr->inter_bw > 0) l.inter_bw = pr->inter_bw, l.inter_lat = pr->inter_lat;
    pipit_status s = set_links(hw, &l);
    if (s) return s;
    char text[512];
    snprintf(text, sizeof text,
             "measured by pipit_probe_links (%d process%s on %d host%s): intra_node %s; inter_node %s; "
             "gpus_per_node = %s",
             pr->processes, pr->processes == 1 ? "" : "es", pr->hosts, pr->hosts == 1 ? "" : "s",
             pr->intra_bw > 0 ? (pr->processes > 1 ? "two processes of one host" : "two threads of one process")
                              : "not measured (assumed)",
             pr->inter_bw > 0 ? "two processes on two hosts" : "not measured (one host; assumed)",
             pr->processes > 1 ? "the most processes on one host" : "unbounded (ranks are threads of one process)");
    return add_source(hw, text);
}

pipit_status pipit_hw_apply_probe(pipit_hw *hw, const pipit_link_probe *pr) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(hw_apply_probe_impl(hw, pr), gen0, __func__);
}
