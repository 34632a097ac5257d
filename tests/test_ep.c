/*
 * test_ep.c — expert parallelism (pipit_moe.h's pipit_graph_set_expert_
 * parallel, src/ir/ep.c, src/runtime/ep.c): a Mixtral-style Llama (4
 * experts, top-2, capacity 1.0 so tokens drop, a shared expert, the
 * balance loss, clipping on) trained with AdamW:
 *   - EP = 2 over D = 2, EP = 2 and 4 over D = 4: the losses and every
 *     parameter within 1e-6 of EP = 1 at the same D (the expert gradients
 *     are summed in another order: the all-to-all's backward brings the
 *     group's contributions to the owner before the replicas add theirs);
 *   - at a fixed EP, P = 2 at GPipe and 1F1B: the bits of P = 1;
 *   - the whole tensors read back at EP = 2 and set into an EP = 1 program
 *     (moments too) continue to the same losses: the layout is free;
 *   - ZeRO 1, 2, 3 at E = 2: the bits of ZeRO-0 (the expert params'
 *     state sharded over their holders);
 *   - overlapped pairs (pipit_options.no_a2a_overlap): every schedule at
 *     P = 2 and the sequential P = 1 give the bits of one rank without
 *     pairs; the pairs exist, interleave (a kernel of the other microbatch
 *     between an all-to-all's start and finish) and are refused where they
 *     would deadlock (GPipe's first rank);
 *   - the refusals by message.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipit.h"
#include "pipit_llama.h"
#include "pipit_moe.h"
#include "runtime/program.h"
#include "test.h"

static pipit_llama_config moe_cfg(void) {
    return (pipit_llama_config){.vocab = 40, .max_ctx = 16, .ctx = 8, .layers = 2, .heads = 4, .kv_heads = 2,
                                .dim = 16, .ffn_hidden = 24, .norm_eps = 1e-5, .rope_theta = 1e4, .tied = 0,
                                .batch = 2, .stages = 1, .dtype = PIPIT_F32, .experts = 4, .top_k = 2,
                                .capacity_factor = 1.0, .shared_experts = 1, .aux_loss = 0.01};
}

typedef struct {
    pipit_graph *g;
    pipit_program *p;
} model;

static int use_sgd; /* 1: SGD, linear in the gradient, so rounding stays rounding (AdamW's first steps are
                       about lr sign(g), which turns a last-bit difference of a near-zero g into lr) */

static int zero_stage; /* options.zero of the next make() */
static int no_overlap; /* options.no_a2a_overlap of the next make() */
static int remat_mode; /* options.remat of the next make() */

static pipit_status make(model *m, const pipit_llama_config *c, int M, int D, int E, pipit_schedule *sch) {
    m->g = pipit_graph_new();
    m->p = NULL;
    pipit_status s = pipit_graph_set_expert_parallel(m->g, E);
    if (s) return s;
    pipit_val loss = pipit_llama_build(m->g, c);
    if (loss.id < 0 && pipit_graph_status(m->g) == PIPIT_STATUS_OK) return PIPIT_STATUS_INVALID; /* refused: its message stands */
    s = pipit_compile(m->g, loss,
                      &(pipit_options){.microbatches = M, .data_parallel = D, .schedule = sch, .zero = zero_stage,
                                       .no_a2a_overlap = no_overlap, .remat = remat_mode,
                                       .optimizer = use_sgd ? pipit_sgd(0.05) : pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1),
                                       .clip_norm = 0.5},
                      &m->p);
    if (!s) s = pipit_llama_init(m->p, c, 7);
    return s;
}

static void drop(model *m) {
    pipit_program_free(m->p);
    pipit_graph_free(m->g);
}

/* Tokens and targets of n microbatches of [B, T], from seed. */
typedef struct {
    int32_t tok[8][16], tgt[8][16];
    pipit_feed f[16];
} feeds;
static void make_feeds(feeds *fd, const pipit_llama_config *c, int n, unsigned seed) {
    int k = c->batch * c->ctx;
    for (int mb = 0; mb < n; mb++) {
        for (int i = 0; i < k; i++) {
            seed = seed * 1103515245u + 12345u;
            fd->tok[mb][i] = (int32_t)((seed >> 16) % (unsigned)c->vocab);
            seed = seed * 1103515245u + 12345u;
            fd->tgt[mb][i] = (int32_t)((seed >> 16) % (unsigned)c->vocab);
        }
        fd->f[2 * mb] = (pipit_feed){PIPIT_LLAMA_TOKENS, fd->tok[mb], sizeof(int32_t) * (size_t)k};
        fd->f[2 * mb + 1] = (pipit_feed){PIPIT_LLAMA_TARGETS, fd->tgt[mb], sizeof(int32_t) * (size_t)k};
    }
}

/* The whole tensor `name` of program p (malloc'd), its numel in *n. */
static float *read_all(pipit_program *p, const char *name, int which, int64_t *n) {
    if (pipit_program_param_numel(p, name, n)) return NULL;
    float *x = malloc(sizeof(float) * (size_t)*n);
    pipit_status s = which < 0 ? pipit_program_get_param(p, name, x, sizeof(float) * (size_t)*n)
                               : pipit_program_get_opt_state(p, name, which, x, sizeof(float) * (size_t)*n);
    if (s) {
        free(x);
        return NULL;
    }
    return x;
}

/* The largest |x - y| relative to the largest |x| (x, y freed); -1 if
 * either is NULL or the sizes differ; *same whether the bits are equal. */
static double rel_diff(float *x, float *y, int64_t n, int64_t nb, int *same) {
    double worst = -1, scale = 0;
    if (x && y && n == nb) {
        worst = 0;
        for (int64_t i = 0; i < n; i++) {
            worst = fmax(worst, fabs((double)x[i] - (double)y[i]));
            scale = fmax(scale, fabs((double)x[i]));
        }
        worst /= scale > 0 ? scale : 1;
        *same = memcmp(x, y, sizeof(float) * (size_t)n) == 0;
    }
    free(x);
    free(y);
    return worst;
}

static double param_diff(pipit_program *a, pipit_program *b, const char *name, int *same) {
    int64_t n = 0, nb = 0;
    float *x = read_all(a, name, -1, &n), *y = read_all(b, name, -1, &nb);
    return rel_diff(x, y, n, nb, same);
}

/* The same for the gradients of the last step. */
static float *read_grad(pipit_program *p, const char *name, int64_t *n) {
    if (pipit_program_param_numel(p, name, n)) return NULL;
    float *x = malloc(sizeof(float) * (size_t)*n);
    if (pipit_program_get_grad(p, name, x, sizeof(float) * (size_t)*n)) {
        free(x);
        return NULL;
    }
    return x;
}
static double grad_diff(pipit_program *a, pipit_program *b, const char *name) {
    int64_t n = 0, nb = 0;
    int same = 0;
    float *x = read_grad(a, name, &n), *y = read_grad(b, name, &nb);
    return rel_diff(x, y, n, nb, &same);
}

enum { STEPS = 3 };

/* STEPS steps of M microbatches per replica; losses into out. */
static pipit_status run(model *m, const pipit_llama_config *c, int M, int D, double *out) {
    feeds fd;
    for (int step = 0; step < STEPS; step++) {
        make_feeds(&fd, c, M * D, 11u); /* one batch: the loss falls */
        pipit_metrics met;
        pipit_status s = pipit_step(m->p, fd.f, 2, 1, &met);
        if (s) return s;
        out[step] = met.loss;
    }
    return PIPIT_STATUS_OK;
}

/* AdamW: the losses of STEPS steps within 1e-6; SGD: the losses, every
 * gradient of the last step and every parameter within 1e-6. */
PIPIT_TEST(ep_matches_ep1) {
    const pipit_llama_config c = moe_cfg();
    const struct { int D, E; } cases[] = {{2, 2}, {4, 2}, {4, 4}};
    for (use_sgd = 0; use_sgd < 2; use_sgd++)
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            int D = cases[k].D, E = cases[k].E, M = 2;
            model ref, ep;
            double want[STEPS], got[STEPS];
            ASSERT_OK(make(&ref, &c, M, D, 1, NULL));
            ASSERT_OK(make(&ep, &c, M, D, E, NULL));
            ASSERT_OK(run(&ref, &c, M, D, want));
            ASSERT_OK(run(&ep, &c, M, D, got));
            double worst_loss = 0, worst = 0, worst_g = 0;
            for (int s = 0; s < STEPS; s++) worst_loss = fmax(worst_loss, fabs(got[s] - want[s]) / fabs(want[s]));
            int nexp = 0;
            for (int i = 0; i < pipit_program_num_params(ref.p); i++) {
                const char *name = pipit_program_param_name(ref.p, i);
                int same = 0;
                double d = param_diff(ref.p, ep.p, name, &same), dg = grad_diff(ref.p, ep.p, name);
                if (d < 0 || dg < 0) PIPIT_FAIL_("D %d EP %d: %s unreadable", D, E, name);
                worst = fmax(worst, d);
                worst_g = fmax(worst_g, dg);
                nexp += strstr(name, ".experts.") != NULL;
            }
            fprintf(stderr, "%s D %d EP %d vs EP 1 over %d steps: losses within %.3g, last gradients %.3g, params %.3g (relative)\n",
                    use_sgd ? "SGD  " : "AdamW", D, E, STEPS, worst_loss, worst_g, worst);
            ASSERT_EQ_I64(nexp, 3 * c.layers);
            ASSERT_TRUE(worst_loss <= 1e-6);
            if (use_sgd) ASSERT_TRUE(worst <= 1e-6 && worst_g <= 1e-6);
            if (!(isfinite(want[STEPS - 1]) && want[STEPS - 1] < want[0])) PIPIT_FAIL_("loss %g -> %g", want[0], want[STEPS - 1]);
            drop(&ref);
            drop(&ep);
        }
    use_sgd = 0;
}

PIPIT_TEST(ep_bitwise_schedules_and_p) {
    pipit_llama_config c = moe_cfg();
    const int M = 4, D = 2, E = 2;
    model ref;
    double want[STEPS], got[STEPS];
    ASSERT_OK(make(&ref, &c, M, D, E, NULL));
    ASSERT_OK(run(&ref, &c, M, D, want));
    const pipit_schedule_kind kinds[] = {PIPIT_SCHED_GPIPE, PIPIT_SCHED_1F1B};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        pipit_llama_config c2 = c;
        c2.stages = 2;
        pipit_schedule *sch = NULL;
        ASSERT_OK(pipit_schedule_build(kinds[k], 2, 1, M, &sch));
        model pp;
        ASSERT_OK(make(&pp, &c2, M, D, E, sch));
        ASSERT_OK(run(&pp, &c, M, D, got));
        for (int s = 0; s < STEPS; s++)
            if (memcmp(&got[s], &want[s], sizeof got[s]) != 0)
                PIPIT_FAIL_("%s step %d: loss %.17g, P = 1 %.17g", pipit_schedule_kind_name(kinds[k]), s, got[s], want[s]);
        for (int i = 0; i < pipit_program_num_params(ref.p); i++) {
            const char *name = pipit_program_param_name(ref.p, i);
            int same = 0;
            param_diff(ref.p, pp.p, name, &same);
            if (!same) PIPIT_FAIL_("%s: %s differs from P = 1", pipit_schedule_kind_name(kinds[k]), name);
        }
        drop(&pp);
        pipit_schedule_free(sch);
    }
    drop(&ref);
}

/* Overlapped pairs on rank q of p: how many, and how many all-to-alls
 * have a kernel of another microbatch between their start and finish. */
static int interleaved_a2a(const pipit_program *p, int q, int *pairs) {
    const pipit__rank_plan *r = &p->plan.ranks[q];
    int n = 0;
    *pairs = r->npairs;
    for (int32_t i = 0; i < r->n; i++) {
        if (r->ins[i].kind != INS_A2A_FINISH) continue;
        int other = 0;
        for (int32_t k = r->ins[i].use + 1; k < i; k++)
            other |= r->ins[k].kind == INS_RUN && r->ins[k].mb != r->ins[i].mb;
        n += other;
    }
    return n;
}

/* Every schedule kind at P = 2 (its own V), and P = 1 (the sequential
 * list F0 B0 F1 B1 ...: B(m) pairs with F(m+1)), with each remat mode (full
 * remat runs the forward's all-to-alls again in a backward, so a pair may
 * have one node's all-to-all in flight twice: the pair slot in the tags
 * tells them apart): with overlapped pairs the losses and every parameter
 * are the bits of one rank running the same model without them. */
PIPIT_TEST(ep_overlap_pairs_bitwise) {
    pipit_llama_config c = moe_cfg();
    const int M = 4, D = 2, E = 2;
    int ran = 0, with_pairs = 0;
    for (int kk = -1; kk < 3 * PIPIT_SCHED_COUNT; kk++) {
        int kind = kk < 0 ? -1 : kk % PIPIT_SCHED_COUNT;
        remat_mode = kk < 0 ? 0 : kk / PIPIT_SCHED_COUNT;
        pipit_schedule *sch = NULL;
        pipit_llama_config c2 = c;
        if (kind >= 0) {
            if (pipit_schedule_build((pipit_schedule_kind)kind, 2, 0, M, &sch)) continue;
            c2.stages = pipit_schedule_stages(sch);
            c2.layers = c2.stages > c2.layers ? c2.stages : c2.layers; /* whole blocks per stage */
        }
        const char *name = kind >= 0 ? pipit_schedule_kind_name((pipit_schedule_kind)kind) : "sequential";
        model ser, ov;
        double want[STEPS], got[STEPS];
        pipit_llama_config one = c2;
        one.stages = 1;
        no_overlap = 1;
        ASSERT_OK(make(&ser, &one, M, D, E, NULL));
        no_overlap = 0;
        ASSERT_OK(make(&ov, &c2, M, D, E, sch));
        ASSERT_OK(run(&ser, &c, M, D, want));
        ASSERT_OK(run(&ov, &c, M, D, got));
        int pairs = 0, inter = 0, none = 0;
        for (int q = 0; q < ov.p->plan.nranks; q++) {
            int np = 0;
            inter += interleaved_a2a(ov.p, q, &np);
            pairs += np;
        }
        interleaved_a2a(ser.p, 0, &none);
        fprintf(stderr, "%-17s remat %d P %d: %d overlapped pairs, %d all-to-alls with the other microbatch's "
                "kernels inside\n", name, remat_mode, ov.p->plan.nranks, pairs, inter);
        ASSERT_EQ_I64(none, 0);
        ASSERT_TRUE(pairs == 0 || inter > 0);
        with_pairs += pairs > 0;
        for (int s = 0; s < STEPS; s++)
            if (memcmp(&got[s], &want[s], sizeof got[s]) != 0)
                PIPIT_FAIL_("%s remat %d step %d: loss %.17g, one rank without pairs %.17g", name, remat_mode, s,
                            got[s], want[s]);
        for (int i = 0; i < pipit_program_num_params(ser.p); i++) {
            const char *pn = pipit_program_param_name(ser.p, i);
            int same = 0;
            param_diff(ser.p, ov.p, pn, &same);
            if (!same) PIPIT_FAIL_("%s remat %d: %s differs from one rank without pairs", name, remat_mode, pn);
        }
        ran++;
        drop(&ser);
        drop(&ov);
        pipit_schedule_free(sch);
    }
    remat_mode = 0;
    ASSERT_TRUE(ran >= 3 * 8);
    ASSERT_TRUE(with_pairs >= 3 * 4);
}

/* GPipe at P = 2, M = 2: rank 0 runs F0 F1 B0 B1 and rank 1 the same.
 * Rank 0 pairing F1 with B0 would wait for B1.0, which rank 1 reaches only
 * after F1.1, which needs rank 0's F0.1 from inside the pair: refused. Rank
 * 1's pair (F1.1, B1.0) is kept. */
PIPIT_TEST(ep_overlap_refuses_a_deadlocking_pair) {
    pipit_llama_config c = moe_cfg();
    c.stages = 2;
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_GPIPE, 2, 1, 2, &sch));
    model m;
    ASSERT_OK(make(&m, &c, 2, 2, 2, sch));
    ASSERT_EQ_I64(m.p->plan.ranks[0].npairs, 0);
    ASSERT_EQ_I64(m.p->plan.ranks[1].npairs, 1);
    double loss[STEPS];
    ASSERT_OK(run(&m, &c, 2, 2, loss)); /* and it runs: no deadlock */
    drop(&m);
    pipit_schedule_free(sch);
}

/* A rank that fails between an overlapped all-to-all's start and finish
 * (the injected-failure hook) leaves that all-to-all's host staging to the
 * rank (the transport may still touch it) instead of freeing it under the
 * transport; the next step releases it and runs normally (ASan: no leak,
 * no use after free). */
PIPIT_TEST(ep_overlap_failed_step_recovers) {
    pipit_llama_config c = moe_cfg();
    model m;
    ASSERT_OK(make(&m, &c, 4, 2, 2, NULL));
    const pipit__rank_plan *r = &m.p->plan.ranks[0];
    int32_t at = -1;
    for (int32_t i = 0; i < r->n && at < 0; i++)
        if (r->ins[i].kind == INS_A2A_FINISH && r->ins[i].first && i > r->ins[i].use + 1) at = r->ins[i].use + 1;
    ASSERT_TRUE(at >= 0); /* an instruction of the other microbatch inside a paired all-to-all */
    feeds fd;
    make_feeds(&fd, &c, 8, 11u);
    pipit_metrics met;
    m.p->fail_rank = 0;
    m.p->fail_instr = at;
    ASSERT_STATUS(pipit_step(m.p, fd.f, 2, 1, &met), PIPIT_STATUS_RUNTIME);
    ASSERT_TRUE(strstr(pipit_program_errmsg(m.p), "injected failure") != NULL);
    int left = 0;
    for (int32_t i = 0; i < r->n; i++) left += m.p->rs[0].a2a_host[i] != NULL;
    ASSERT_TRUE(left > 0);
    m.p->fail_rank = -1;
    ASSERT_OK(pipit_step(m.p, fd.f, 2, 1, &met));
    ASSERT_TRUE(isfinite(met.loss));
    for (int32_t i = 0; i < r->n; i++) ASSERT_TRUE(m.p->rs[0].a2a_host[i] == NULL);
    drop(&m);
}

PIPIT_TEST(ep_overlap_option_checked) {
    pipit_llama_config c = moe_cfg();
    pipit_graph *g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_expert_parallel(g, 2));
    pipit_val loss = pipit_llama_build(g, &c);
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = 2, .no_a2a_overlap = 2}, &p),
                  PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.no_a2a_overlap must be 0");
    pipit_graph_free(g);
}

/* Params and moments read whole at EP = 2 and set into EP = 1 at the same
 * D: the next step's loss is the EP = 2 run's within 1e-6. */
PIPIT_TEST(ep_layout_free_state) {
    const pipit_llama_config c = moe_cfg();
    const int M = 2, D = 2;
    model a, b;
    double la[STEPS], lb[STEPS];
    ASSERT_OK(make(&a, &c, M, D, 2, NULL));
    ASSERT_OK(make(&b, &c, M, D, 1, NULL));
    ASSERT_OK(run(&a, &c, M, D, la));
    for (int i = 0; i < pipit_program_num_params(a.p); i++) {
        const char *name = pipit_program_param_name(a.p, i);
        for (int which = -1; which < 2; which++) {
            int64_t n = 0;
            float *x = read_all(a.p, name, which, &n);
            ASSERT_TRUE(x != NULL);
            size_t nb = sizeof(float) * (size_t)n;
            ASSERT_OK(which < 0 ? pipit_program_set_param(b.p, name, x, nb) : pipit_program_set_opt_state(b.p, name, which, x, nb));
            free(x);
        }
    }
    ASSERT_OK(pipit_program_set_opt_steps(b.p, pipit_program_opt_steps(a.p)));
    ASSERT_OK(run(&a, &c, M, D, la));
    ASSERT_OK(run(&b, &c, M, D, lb));
    for (int s = 0; s < STEPS; s++) ASSERT_TRUE(fabs(la[s] - lb[s]) <= 1e-6 * fabs(la[s]));
    drop(&a);
    drop(&b);
}

/* ZeRO 1, 2 and 3 at E = 2: the expert params' moments (and gradients,
 * and parameters) shard over their D/E = 2 holders (experts of 4 x 256 x
 * 64: each EP rank's 2 x 256 x 64 block is 2 sum-of-squares chunks, one
 * per holder), the rest over all D = 4; the params, moments and losses
 * are ZeRO-0's bit for bit, and so are D = 2's (one holder per block). */
PIPIT_TEST(ep_zero_equals_zero0) {
    pipit_llama_config c = moe_cfg();
    c.dim = 64, c.ffn_hidden = 256;
    for (int D = 2; D <= 4; D += 2) {
      for (int stage = 1; stage <= 3; stage++) {
        model z0, z1;
        double l0[STEPS], l1[STEPS];
        zero_stage = 0;
        ASSERT_OK(make(&z0, &c, 1, D, 2, NULL));
        zero_stage = stage;
        ASSERT_OK(make(&z1, &c, 1, D, 2, NULL));
        zero_stage = 0;
        ASSERT_OK(run(&z0, &c, 1, D, l0));
        ASSERT_OK(run(&z1, &c, 1, D, l1));
        ASSERT_TRUE(memcmp(l0, l1, sizeof l0) == 0);
        for (int i = 0; i < pipit_program_num_params(z0.p); i++) {
            const char *name = pipit_program_param_name(z0.p, i);
            for (int which = -1; which < 2; which++) {
                int64_t n = 0, nb = 0;
                int same = 0;
                float *x = read_all(z0.p, name, which, &n), *y = read_all(z1.p, name, which, &nb);
                ASSERT_TRUE(rel_diff(x, y, n, nb, &same) >= 0);
                if (!same)
                    PIPIT_FAIL_("D %d: %s (%s) differs between ZeRO %d and 0", D, name, which < 0 ? "param" : "moment",
                                stage);
            }
        }
        drop(&z0);
        drop(&z1);
      }
    }
}

PIPIT_TEST(ep_refusals) {
    pipit_llama_config c = moe_cfg();
    model m;
    ASSERT_EQ_I64(make(&m, &c, 2, 3, 2, NULL), PIPIT_STATUS_INVALID); /* E does not divide D */
    ASSERT_MSG_HAS("must divide options.data_parallel (3)");
    drop(&m);
    c.experts = 3;
    ASSERT_TRUE(make(&m, &c, 2, 2, 2, NULL) != PIPIT_STATUS_OK); /* E does not divide the experts */
    ASSERT_MSG_HAS("does not split over 2 expert-parallel ranks");
    drop(&m);
    c = moe_cfg();
    c.moe_layout = PIPIT_LLAMA_MOE_MIXTRAL, c.shared_experts = 0; /* Hugging Face's per-expert params */
    ASSERT_TRUE(make(&m, &c, 2, 2, 2, NULL) != PIPIT_STATUS_OK);
    ASSERT_MSG_HAS("expert parallelism with Hugging Face's per-expert weights (moe_layout 1) is not built");
    drop(&m);
    c = moe_cfg();
    m.g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_expert_parallel(m.g, 2));
    pipit_val loss = pipit_llama_build(m.g, &c);
    ASSERT_EQ_I64(pipit_compile(m.g, loss,
                                &(pipit_options){.microbatches = 1, .data_parallel = 2, .zero = 3, .reshard_after_forward = 1},
                                &m.p),
                  PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("with options.reshard_after_forward is not built yet");
    ASSERT_EQ_I64(pipit_graph_set_expert_parallel(m.g, 4), PIPIT_STATUS_INVALID); /* it holds expert params */
    ASSERT_MSG_HAS("set E = 4 before the first of them");
    ASSERT_EQ_I64(pipit_graph_set_expert_parallel(m.g, 0), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("E = 0 expert-parallel ranks (1 to 64)");
    ASSERT_EQ_I64(pipit_graph_expert_parallel(m.g), 2);
    pipit_graph_free(m.g);
}
