/*
 * zero_reshard.c — ZeRO-3's reshard_after_forward (options.reshard_after_forward,
 * `pipit train --reshard-after-forward`; docs/architecture.md §9): memory
 * over speed. Without it a ZeRO-3 rank all-gathers its stage's parameters
 * once per step, before the microbatch loop, and holds them through the
 * loop. With it each param is gathered right before the first instruction
 * of a task that reads it and released right after the task's last read:
 *
 *   A task is the stretch between two task marks (INS_MARK: one
 *   microbatch's F, B, W or BW; the pre-loop before the first mark is one
 *   too). For each task and each param it reads (or a zero-copy send of it
 *   reads until its fence), the window [first read, last read]; a window
 *   that overlaps the param's previous one is merged with it. Before the
 *   window: this replica's shard is copied from the shard block into the
 *   full block, sent to the other replicas (copies) and theirs received;
 *   after it: the param's whole pages in the full block are given back to
 *   the system (madvise MADV_DONTNEED: host memory only, so the option is
 *   refused on device backends, runtime/program.c).
 *
 * The full block keeps its address through the step (the kernels'
 * pointers are resolved once per step), reserved but not touched, so what
 * is resident is the params of the windows open at the time: one layer's
 * during its F or B, none between tasks. Under dtype bf16 the loop reads
 * the pre-loop's bf16 copies (arena), so the fp32 params are gathered once
 * for the casts and released before the loop starts.
 *
 * The loop never writes a param, so the shard block stays this replica's
 * truth: the block is freed without copying back when the loop ends, and a
 * post-loop that reads params (a gradient transform) first gets every
 * param gathered again (then as without the option). Every replica runs
 * the same instruction list, so their gathers pair up in the same order,
 * and the values are the gathered bits: the results are ZeRO-3's (and so
 * ZeRO-1's) bit for bit (tests/test_zero.c).
 */
#include <string.h>
#include <unistd.h>
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#endif

#include "runtime/program.h"
#include "util/checked.h"

int pipit__zero_reshard(const pipit_program *p) { return pipit__zero_params(p) && p->plan.reshard; }

static int is_send(int k) { return k == INS_SEND || k == INS_ACC_SEND; }

void pipit__reshard_free(pipit__reshard *z) {
    if (!z) return;
    pipit__free(z->gat_off);
    pipit__free(z->gat);
    pipit__free(z->rel_off);
    pipit__free(z->rel);
    pipit__free(z->present);
    pipit__free(z);
}

/* The windows of rank plan r (see above), as the two CSR lists. NULL:
 * out of memory (message set). */
pipit__reshard *pipit__reshard_build(const pipit__rank_plan *r, int nparams) {
    int32_t n = r->post_at;
    pipit__reshard *z = pipit__calloc(1, sizeof *z);
    int32_t *first = pipit__calloc((size_t)nparams + 1, sizeof *first);
    int32_t *last = pipit__calloc((size_t)nparams + 1, sizeof *last);
    int32_t *seg = pipit__calloc((size_t)nparams + 1, sizeof *seg);
    int32_t *fence_at = pipit__calloc((size_t)n + 1, sizeof *fence_at);
    /* windows as (param, first, last): at most one per param per read */
    size_t cap = 64, nw = 0;
    int32_t(*w)[3] = pipit__malloc(cap * sizeof *w);
    int ok = z && first && last && seg && fence_at && w;
    if (ok) {
        z->n = n;
        z->gat_off = pipit__calloc((size_t)n + 2, sizeof(int32_t));
        z->rel_off = pipit__calloc((size_t)n + 2, sizeof(int32_t));
        z->present = pipit__calloc((size_t)nparams + 1, 1);
        ok = z->gat_off && z->rel_off && z->present;
    }
    for (int32_t i = 0; ok && i < n; i++) fence_at[i] = i;
    for (int32_t k = 0; ok && k < r->nfences; k++)
        if (r->fences[k].send < n) fence_at[r->fences[k].send] = PIPIT_MIN(r->fences[k].at - 1, n - 1);
    for (int j = 0; ok && j < nparams; j++) first[j] = -1;
    int32_t segment = 0;
    for (int32_t i = 0; ok && i < n; i++) {
        const pipit__instr *in = &r->ins[i];
        if (in->kind == INS_MARK) {
            segment++;
            continue;
        }
        for (int j = -1; ok && j < PIPIT_MAX_IN; j++) {
            const pipit__loc *l = j < 0 ? &in->out : &in->in[j];
            if (l->kind != LOC_PARAM || l->idx < 0 || l->idx >= nparams) continue;
            int32_t q = l->idx, end = is_send(in->kind) && in->zc && j >= 0 ? PIPIT_MAX(fence_at[i], i) : i;
            if (first[q] >= 0 && (seg[q] == segment || i <= last[q])) { /* the same window */
                last[q] = PIPIT_MAX(last[q], end);
                continue;
            }
            if (first[q] >= 0) { /* close the previous one */
                if (nw == cap) {
                    int32_t(*w2)[3] = pipit__realloc(w, 2 * cap * sizeof *w);
                    if (!(ok = w2 != NULL)) break;
                    w = w2, cap *= 2;
                }
                w[nw][0] = q, w[nw][1] = first[q], w[nw][2] = last[q], nw++;
            }
            first[q] = i, last[q] = end, seg[q] = segment;
        }
    }
    for (int j = 0; ok && j < nparams; j++)
        if (first[j] >= 0) {
            if (nw == cap) {
                int32_t(*w2)[3] = pipit__realloc(w, 2 * cap * sizeof *w);
                if (!(ok = w2 != NULL)) break;
                w = w2, cap *= 2;
            }
            w[nw][0] = j, w[nw][1] = first[j], w[nw][2] = last[j], nw++;
        }
    if (ok) {
        z->gat = pipit__malloc((nw + 1) * sizeof(int32_t)); /* nw <= reads of the list: no overflow */
        z->rel = pipit__malloc((nw + 1) * sizeof(int32_t));
        ok = z->gat && z->rel;
    }
    int32_t *gfill = ok ? pipit__calloc((size_t)n + 1, sizeof *gfill) : NULL;
    int32_t *rfill = ok ? pipit__calloc((size_t)n + 1, sizeof *rfill) : NULL;
    if (ok && (ok = gfill && rfill)) { /* counting sort by instruction, in the order found */
        for (size_t k = 0; k < nw; k++) z->gat_off[w[k][1] + 1]++, z->rel_off[w[k][2] + 1]++;
        for (int32_t i = 0; i < n; i++) z->gat_off[i + 1] += z->gat_off[i], z->rel_off[i + 1] += z->rel_off[i];
        for (int32_t i = 0; i < n; i++) gfill[i] = z->gat_off[i], rfill[i] = z->rel_off[i];
        for (size_t k = 0; k < nw; k++) z->gat[gfill[w[k][1]]++] = w[k][0], z->rel[rfill[w[k][2]]++] = w[k][0];
    }
    pipit__free(gfill);
    pipit__free(rfill);
    pipit__free(first);
    pipit__free(last);
    pipit__free(seg);
    pipit__free(fence_at);
    pipit__free(w);
    if (!ok) {
        pipit__reshard_free(z);
        pipit__err(PIPIT_STATUS_NOMEM, "out of memory for ZeRO-3's reshard_after_forward windows");
        return NULL;
    }
    return z;
}

static size_t param_bytes(const pipit_program *p, int i) {
    return (size_t)p->plan.params[i].numel * pipit__dtype_size(p->plan.params[i].dtype);
}

size_t pipit__reshard_peak(const pipit_program *p, int prank) {
    const pipit__rank_plan *rp = &p->plan.ranks[prank];
    pipit__reshard *z = pipit__reshard_build(rp, p->plan.nparams);
    if (!z) return rp->param_bytes; /* as without the option */
    size_t live = 0, peak = 0;
    for (int32_t i = 0; i < z->n; i++) {
        for (int32_t k = z->gat_off[i]; k < z->gat_off[i + 1]; k++) live += param_bytes(p, z->gat[k]);
        peak = PIPIT_MAX(peak, live);
        for (int32_t k = z->rel_off[i]; k < z->rel_off[i + 1]; k++) live -= param_bytes(p, z->rel[k]);
    }
    pipit__reshard_free(z);
    return peak;
}

size_t pipit__reshard_max_shard(const pipit_program *p, int prank) {
    size_t most = 0;
    for (int i = 0; i < p->plan.nparams; i++) {
        if (p->plan.ranks[prank].param_off[i] == SIZE_MAX) continue;
        int64_t a, b;
        pipit__dp_shard(p->plan.params[i].numel, p->plan.D, 0, &a, &b); /* shard 0 is never smaller */
        most = PIPIT_MAX(most, (size_t)(b - a) * pipit__dtype_size(p->plan.params[i].dtype));
    }
    return most;
}

/* Gives the whole pages of [a, a + n) back to the system: they read as
 * zeros when touched again (host memory only). */
void pipit__discard_pages(uint8_t *a, size_t n) {
#if defined(MADV_DONTNEED)
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = ((uintptr_t)a + page - 1) / page * page,
              hi = ((uintptr_t)a + n) / page * page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
#else
    (void)a, (void)n;
#endif
}

pipit_status pipit__reshard_begin(pipit_program *p, int w) {
    pipit__rank_state *rs = &p->rs[w];
    if (!rs->reshard && !(rs->reshard = pipit__reshard_build(&p->plan.ranks[rs->prank], p->plan.nparams)))
        return PIPIT_STATUS_NOMEM;
    memset(rs->reshard->present, 0, (size_t)p->plan.nparams);
    pipit__discard_pages(rs->param_block, p->plan.ranks[rs->prank].param_bytes); /* a reused block's pages too */
    return PIPIT_STATUS_OK;
}

static pipit_status gather_one(pipit_program *p, int w, int i) {
    pipit__rank_state *rs = &p->rs[w];
    const pipit__rank_plan *rp = &p->plan.ranks[rs->prank];
    if (rs->reshard->present[i] || rp->param_off[i] == SIZE_MAX) return PIPIT_STATUS_OK;
    const pipit__param *pp = &p->plan.params[i];
    size_t es = pipit__dtype_size(pp->dtype);
    int64_t a, b;
    pipit__dp_shard(pp->numel, p->plan.D, rs->replica, &a, &b);
    uint8_t *full = rs->param_block + rp->param_off[i];
    if (b > a) p->be->copy(full + (size_t)a * es, rs->pshard_block + rs->opt_off[i], (size_t)(b - a) * es, 0, 1);
    pipit_status s = p->be->sync(w);
    if (!s) s = pipit__dp_param_gather(p, w, i, full, 1);
    if (!s) s = pipit__dp_param_gather(p, w, i, full, 0);
    if (!s) rs->reshard->present[i] = 1;
    return s;
}

int pipit__reshard_gathers_at(const pipit_program *p, int w, int32_t i) {
    const pipit__reshard *z = p->rs[w].reshard;
    return z && i < z->n && z->gat_off[i + 1] > z->gat_off[i];
}

pipit_status pipit__reshard_gather_at(pipit_program *p, int w, int32_t i) {
    const pipit__reshard *z = p->rs[w].reshard;
    pipit_status s = PIPIT_STATUS_OK;
    for (int32_t k = z->gat_off[i]; !s && k < z->gat_off[i + 1]; k++) s = gather_one(p, w, z->gat[k]);
    return s;
}

void pipit__reshard_release_at(pipit_program *p, int w, int32_t i) {
    pipit__rank_state *rs = &p->rs[w];
    const pipit__reshard *z = rs->reshard;
    if (!z || i >= z->n) return;
    for (int32_t k = z->rel_off[i]; k < z->rel_off[i + 1]; k++) {
        int q = z->rel[k];
        if (!z->present[q]) continue;
        pipit__discard_pages(rs->param_block + p->plan.ranks[rs->prank].param_off[q], param_bytes(p, q));
        z->present[q] = 0;
    }
}

pipit_status pipit__reshard_gather_all(pipit_program *p, int w) {
    pipit_status s = PIPIT_STATUS_OK;
    for (int i = 0; !s && i < p->plan.nparams; i++) s = gather_one(p, w, i);
    return s;
}

int pipit__reshard_present(const pipit_program *p, int w, int i) {
    const pipit__reshard *z = p->rs[w].reshard;
    return !z || !pipit__zero_reshard(p) || z->present[i];
}
