/*
 * test_forward.c — forward-only programs (pipit_options.forward_only) and
 * outputs (pipit_options.outputs, pipit_program_get_output): the forward
 * loss equals the training program's loss bit for bit (same params, same
 * feeds) on one rank and pipelined over two, no gradient memory exists,
 * update is refused, and the GPT-2 logits read back reproduce the loss.
 */
#include <math.h>
#include <stdint.h>

#include "pipit_gpt2.h"
#include "test.h"

static pipit_gpt2_config tiny(int stages) {
    pipit_gpt2_config c = {.vocab = 61, .max_ctx = 16, .ctx = 8, .layers = 2, .heads = 2, .dim = 16,
                           .batch = 2, .stages = stages, .dtype = PIPIT_F32};
    return c;
}

/* M microbatches of feeds (tokens, targets, positions), deterministic. */
typedef struct {
    int32_t *tok, *tgt, *pos;
    pipit_feed *f;
} feeds;

static void make_feeds(feeds *fd, const pipit_gpt2_config *c, int M) {
    int n = c->batch * c->ctx;
    fd->tok = malloc(sizeof(int32_t) * (size_t)(n * M));
    fd->tgt = malloc(sizeof(int32_t) * (size_t)(n * M));
    fd->pos = malloc(sizeof(int32_t) * (size_t)(n * M));
    fd->f = malloc(sizeof(pipit_feed) * (size_t)(3 * M));
    uint32_t s = 7;
    for (int i = 0; i < n * M; i++) {
        s = s * 1664525u + 1013904223u;
        fd->tok[i] = (int32_t)((s >> 16) % (uint32_t)c->vocab);
        s = s * 1664525u + 1013904223u;
        fd->tgt[i] = (int32_t)((s >> 16) % (uint32_t)c->vocab);
    }
    for (int m = 0; m < M; m++)
        pipit_gpt2_feeds(c, fd->tok + m * n, fd->tgt + m * n, fd->pos + m * n, fd->f + 3 * m);
}

static void free_feeds(feeds *fd) {
    free(fd->tok);
    free(fd->tgt);
    free(fd->pos);
    free(fd->f);
}

/* Copies every param of `from` into `to` by name. */
static int copy_params(const pipit_program *from, pipit_program *to) {
    for (int i = 0; i < pipit_program_num_params(from); i++) {
        const char *name = pipit_program_param_name(from, i);
        int64_t n = 0;
        if (pipit_program_param_numel(from, name, &n)) return 0;
        float *buf = malloc(sizeof(float) * (size_t)n);
        int ok = buf && !pipit_program_get_param(from, name, buf, sizeof(float) * (size_t)n) &&
                 !pipit_program_set_param(to, name, buf, sizeof(float) * (size_t)n);
        free(buf);
        if (!ok) return 0;
    }
    return 1;
}

/* The training loss (update = 0) and the forward-only loss of the same
 * graph, params and feeds, with P pipeline ranks (1: sequential). */
static void check_equal_loss(int P, int M) {
    pipit_gpt2_config c = tiny(P);
    feeds fd;
    make_feeds(&fd, &c, M);
    pipit_graph *g = pipit_graph_new();
    pipit_val logits;
    pipit_val loss = pipit_gpt2_build_logits(g, &c, &logits);
    ASSERT_TRUE(logits.id >= 0);
    pipit_schedule *s1 = NULL, *s2 = NULL;
    if (P > 1) {
        ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, P, 1, M, &s1));
        ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_GPIPE, P, 1, M, &s2));
    }
    /* forward-only first: it leaves the graph as it was */
    pipit_options fo = {.schedule = s2, .microbatches = M, .forward_only = 1};
    pipit_program *fwd = NULL, *train = NULL;
    ASSERT_OK(pipit_compile(g, loss, &fo, &fwd));
    ASSERT_TRUE(pipit_program_forward_only(fwd) == 1);
    pipit_options to = {.schedule = s1, .microbatches = M};
    ASSERT_OK(pipit_compile(g, loss, &to, &train));
    ASSERT_TRUE(pipit_program_forward_only(train) == 0);
    ASSERT_OK(pipit_gpt2_init(train, &c, 1234));
    ASSERT_TRUE(copy_params(train, fwd));
    pipit_metrics mt, mf;
    ASSERT_OK(pipit_step(train, fd.f, 3, 0, &mt));
    ASSERT_OK(pipit_step(fwd, fd.f, 3, 0, &mf));
    printf("P=%d M=%d train loss %.9g, forward-only %.9g\n", P, M, mt.loss, mf.loss);
    ASSERT_TRUE(memcmp(&mt.loss, &mf.loss, sizeof(double)) == 0);
    ASSERT_TRUE(mf.grad_norm == 0);
    /* a second compile on the already-trained graph works too */
    pipit_program *fwd2 = NULL;
    ASSERT_OK(pipit_compile(g, loss, &fo, &fwd2));
    ASSERT_TRUE(copy_params(train, fwd2));
    pipit_metrics m2;
    ASSERT_OK(pipit_step(fwd2, fd.f, 3, 0, &m2));
    ASSERT_TRUE(memcmp(&mt.loss, &m2.loss, sizeof(double)) == 0);
    /* the forward-only program plans less memory */
    ASSERT_TRUE(mf.peak_bytes <= mt.peak_bytes);
    pipit_program_free(fwd2);
    pipit_program_free(fwd);
    pipit_program_free(train);
    pipit_schedule_free(s1);
    pipit_schedule_free(s2);
    pipit_graph_free(g);
    free_feeds(&fd);
}

PIPIT_TEST(forward_only_loss_equals_training_p1) { check_equal_loss(1, 1); }
PIPIT_TEST(forward_only_loss_equals_training_p1_m3) { check_equal_loss(1, 3); }
PIPIT_TEST(forward_only_loss_equals_training_p2) { check_equal_loss(2, 4); }

PIPIT_TEST(forward_only_has_no_gradients) {
    pipit_gpt2_config c = tiny(1);
    feeds fd;
    make_feeds(&fd, &c, 1);
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_options fo = {.forward_only = 1};
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, &fo, &p));
    ASSERT_OK(pipit_gpt2_init(p, &c, 1));
    int64_t n = 0;
    ASSERT_OK(pipit_program_param_numel(p, "wte.weight", &n));
    float *buf = malloc(sizeof(float) * (size_t)n);
    ASSERT_STATUS(pipit_program_get_grad(p, "wte.weight", buf, sizeof(float) * (size_t)n), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("forward-only");
    ASSERT_STATUS(pipit_program_get_opt_state(p, "wte.weight", 0, buf, sizeof(float) * (size_t)n),
                  PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("forward-only");
    ASSERT_STATUS(pipit_step(p, fd.f, 3, 1, NULL), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("forward-only");
    ASSERT_OK(pipit_step(p, fd.f, 3, 0, NULL));
    /* the graph got no backward nodes: a training compile still works */
    pipit_program *t = NULL;
    ASSERT_OK(pipit_compile(g, loss, NULL, &t));
    free(buf);
    pipit_program_free(t);
    pipit_program_free(p);
    pipit_graph_free(g);
    free_feeds(&fd);
}

/* The logits read back give the program's loss again (log-sum-exp in
 * double), for each microbatch; outputs in a training program too. */
static void check_logits(int forward_only, int P) {
    const int M = 2;
    pipit_gpt2_config c = tiny(P);
    feeds fd;
    make_feeds(&fd, &c, M);
    pipit_graph *g = pipit_graph_new();
    pipit_val logits;
    pipit_val loss = pipit_gpt2_build_logits(g, &c, &logits);
    pipit_schedule *s = NULL;
    if (P > 1) ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, P, 1, M, &s));
    pipit_options o = {.schedule = s, .microbatches = M, .forward_only = forward_only, .outputs = &logits,
                       .noutputs = 1};
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, &o, &p));
    ASSERT_OK(pipit_gpt2_init(p, &c, 99));
    size_t n = (size_t)c.batch * (size_t)c.ctx * (size_t)c.vocab;
    float *lg = malloc(sizeof(float) * n);
    ASSERT_STATUS(pipit_program_get_output(p, logits, 0, lg, sizeof(float) * n), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("no step");
    pipit_metrics m;
    ASSERT_OK(pipit_step(p, fd.f, 3, 0, &m));
    double total = 0;
    for (int mb = 0; mb < M; mb++) {
        ASSERT_OK(pipit_program_get_output(p, logits, mb, lg, sizeof(float) * n));
        double sum = 0;
        for (int r = 0; r < c.batch * c.ctx; r++) {
            const float *row = lg + (size_t)r * (size_t)c.vocab;
            double mx = row[0], z = 0;
            for (int v = 1; v < c.vocab; v++) mx = fmax(mx, row[v]);
            for (int v = 0; v < c.vocab; v++) z += exp((double)row[v] - mx);
            sum += mx + log(z) - row[fd.tgt[mb * c.batch * c.ctx + r]];
        }
        total += sum / (c.batch * c.ctx);
    }
    total /= M;
    printf("forward_only=%d P=%d loss %.9g, from logits %.9g\n", forward_only, P, m.loss, total);
    ASSERT_NEAR_F64(total, m.loss, 1e-6);
    /* errors */
    ASSERT_STATUS(pipit_program_get_output(p, logits, M, lg, sizeof(float) * n), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_program_get_output(p, logits, 0, lg, 4), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_program_get_output(p, loss, 0, lg, 4), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("not one of");
    free(lg);
    pipit_program_free(p);
    pipit_schedule_free(s);
    pipit_graph_free(g);
    free_feeds(&fd);
}

PIPIT_TEST(forward_logits_output_matches_loss) { check_logits(1, 1); }
PIPIT_TEST(forward_logits_output_matches_loss_p2) { check_logits(1, 2); }
PIPIT_TEST(training_program_logits_output) { check_logits(0, 1); }

PIPIT_TEST(forward_outputs_refused) {
    pipit_gpt2_config c = tiny(1);
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_program *p = NULL;
    pipit_val bad = {g, 3}; /* a param (wte): not a per-microbatch value */
    pipit_options o = {.forward_only = 1, .outputs = &bad, .noutputs = 1};
    ASSERT_STATUS(pipit_compile(g, loss, &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("outputs[0]");
    o.outputs = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("outputs");
    pipit_graph_free(g);
}
