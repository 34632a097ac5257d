/*
 * test_device_sim.c — the runtime's device-memory paths without a GPU. A
 * simulated device backend ("simdev") runs the cpu backend's kernels on
 * memory it tracks, says host_memory = 0 and has two "devices", and checks
 * every call the runtime makes as a GPU would need it:
 *   - kernels and primitives only ever see simulated device memory (so no
 *     feed, loss or norm is read in place from the host);
 *   - upload / download always have the device side in device memory and
 *     the host side outside it (messages of the transports included: which
 *     tags carry device memory);
 *   - the calling thread is bound to the rank whose memory it touches, on
 *     device rank mod 2, with the program's tf32;
 *   - a rank's team is one thread.
 * Training on simdev (one rank, pipelined, data parallel with ZeRO-1,
 * forward-only with outputs, checkpoints) gives the cpu backend's bits.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "pipit_gpt2.h"
#include "pipit_io.h"
#include "test.h"
#include "util/common.h"

/* ---- the simulated device ---- */

enum { MAX_BLOCKS = 4096 };
static struct {
    pthread_mutex_t mu;
    const unsigned char *at[MAX_BLOCKS];
    size_t bytes[MAX_BLOCKS];
    int n;
    atomic_int violations, uploads, downloads, syncs, binds;
    char first[256];
    int tf32_seen;
} sim = {.mu = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int bound_rank = -1;

static void violation(const char *what) {
    pthread_mutex_lock(&sim.mu);
    if (!sim.first[0]) snprintf(sim.first, sizeof sim.first, "%s", what);
    pthread_mutex_unlock(&sim.mu);
    atomic_fetch_add(&sim.violations, 1);
}

/* Whether [p, p + n) lies in one simulated device block. */
static int on_device(const void *p, size_t n) {
    const unsigned char *q = p;
    int in = 0;
    pthread_mutex_lock(&sim.mu);
    for (int i = 0; i < sim.n && !in; i++) in = q >= sim.at[i] && q + n <= sim.at[i] + sim.bytes[i];
    pthread_mutex_unlock(&sim.mu);
    return in;
}

static void need_device(const void *p, size_t n, const char *what) {
    if (bound_rank < 0) violation("device memory touched by an unbound thread");
    if (p && !on_device(p, n)) violation(what);
}

static void *sim_reserve(size_t bytes) {
    void *p = pipit__backend_cpu.reserve(bytes);
    if (!p) return NULL;
    pthread_mutex_lock(&sim.mu);
    if (sim.n < MAX_BLOCKS) {
        sim.at[sim.n] = p;
        sim.bytes[sim.n++] = bytes < 64 ? 64 : bytes;
    }
    pthread_mutex_unlock(&sim.mu);
    return p;
}

static void *sim_alloc(size_t bytes) {
    void *p = sim_reserve(bytes);
    if (p) memset(p, 0, bytes < 64 ? 64 : bytes);
    return p;
}

static void sim_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&sim.mu);
    for (int i = 0; i < sim.n; i++)
        if (sim.at[i] == p) {
            sim.at[i] = sim.at[--sim.n];
            sim.bytes[i] = sim.bytes[sim.n];
            break;
        }
    pthread_mutex_unlock(&sim.mu);
    pipit__backend_cpu.free(p);
}

static void sim_zero(void *p, size_t n) {
    need_device(p, n, "zero: not device memory");
    pipit__backend_cpu.zero(p, n);
}

static void sim_upload(void *dst, const void *host, size_t n) {
    need_device(dst, n, "upload into host memory");
    if (n && on_device(host, n)) violation("upload from device memory");
    atomic_fetch_add(&sim.uploads, 1);
    pipit__backend_cpu.upload(dst, host, n);
}

static void sim_download(void *host, const void *src, size_t n) {
    need_device(src, n, "download from host memory");
    if (n && on_device(host, n)) violation("download into device memory");
    atomic_fetch_add(&sim.downloads, 1);
    pipit__backend_cpu.download(host, src, n);
}

static void sim_kernel(const pipit__kctx *k, int ith, int nth) {
    if (nth != 1) violation("a device rank's team has more than one thread");
    need_device(k->out, 1, "a kernel writes host memory");
    for (int j = 0; j < PIPIT_MAX_IN; j++) need_device(k->in[j], 1, "a kernel reads host memory (a feed in place?)");
    pipit__cpu_ops[k->node->op](k, ith, nth);
}

static pipit__op_kernel sim_ops[PIPIT_OP_COUNT];

static void sim_accumulate(pipit_dtype dt, pipit_dtype xdt, void *acc, const void *x, int64_t n, int first, int ith,
                           int nth) {
    if (n > 0) {
        need_device(acc, (size_t)n * pipit__dtype_size(dt), "accumulate: host memory");
        need_device(x, (size_t)n * pipit__dtype_size(xdt), "accumulate: host memory");
    }
    pipit__backend_cpu.accumulate(dt, xdt, acc, x, n, first, ith, nth);
}

static void sim_copy(void *dst, const void *src, size_t n, int ith, int nth) {
    if (n) {
        need_device(dst, n, "copy: host memory");
        need_device(src, n, "copy: host memory");
    }
    pipit__backend_cpu.copy(dst, src, n, ith, nth);
}

static void sim_sum_uses(pipit_dtype dt, void *dst, void *const *srcs, int nsrcs, int64_t a, int64_t b) {
    size_t es = pipit__dtype_size(dt), n = (size_t)(b - a) * es;
    if (b > a) {
        need_device((char *)dst + a * es, n, "gradient sum: host memory");
        for (int u = 0; u < nsrcs; u++) need_device((const char *)srcs[u] + a * es, n, "gradient sum: host memory");
    }
    pipit__backend_cpu.sum_uses(dt, dst, srcs, nsrcs, a, b);
}

static double sim_sumsq(pipit_dtype dt, const void *x, int64_t a, int64_t b) {
    if (b > a) need_device((const char *)x + a * pipit__dtype_size(dt), (size_t)(b - a) * pipit__dtype_size(dt),
                           "sum of squares: host memory");
    return pipit__backend_cpu.sumsq(dt, x, a, b);
}

static void sim_sumsq_chunks(pipit_dtype dt, const void *x, int64_t n, int64_t chunk, int64_t c0, int64_t c1,
                             double *out) {
    if (on_device(out, sizeof *out)) violation("sumsq_chunks: partials into device memory");
    for (int64_t c = c0; c < c1; c++) out[c - c0] = sim_sumsq(dt, x, c * chunk, PIPIT_MIN((c + 1) * chunk, n));
}

static void sim_adamw(pipit_dtype dt, const pipit__adamw_coef *c, void *w, const void *g, void *m, void *v,
                      int64_t lo, int64_t hi) {
    size_t es = pipit__dtype_size(dt), n = (size_t)(hi - lo) * es;
    if (hi > lo) { /* an empty shard's pointers may sit at the end of a block */
        need_device((char *)w + lo * es, n, "adamw: host memory");
        need_device((const char *)g + lo * es, n, "adamw: host memory");
        need_device((char *)m + lo * es, n, "adamw: host memory");
        need_device((char *)v + lo * es, n, "adamw: host memory");
    }
    pipit__backend_cpu.adamw(dt, c, w, g, m, v, lo, hi);
}

static void sim_sgd(pipit_dtype dt, double lr, double clip, void *w, const void *g, int64_t lo, int64_t hi) {
    size_t es = pipit__dtype_size(dt), n = (size_t)(hi - lo) * es;
    if (hi > lo) {
        need_device((char *)w + lo * es, n, "sgd: host memory");
        need_device((const char *)g + lo * es, n, "sgd: host memory");
    }
    pipit__backend_cpu.sgd(dt, lr, clip, w, g, lo, hi);
}

static int sim_devices(void) { return 2; }

static void sim_bind(int rank, int device, int tf32) {
    if (device != rank % 2) violation("bind: rank not on device rank mod devices()");
    if (tf32) sim.tf32_seen = 1;
    bound_rank = rank;
    atomic_fetch_add(&sim.binds, 1);
}

static pipit_status sim_sync(int rank) {
    if (rank != bound_rank) violation("sync of a rank this thread is not bound to");
    atomic_fetch_add(&sim.syncs, 1);
    return PIPIT_STATUS_OK;
}

static pipit__backend simdev;

static void sim_install(void) {
    simdev = pipit__backend_cpu;
    simdev.name = "simdev";
    for (int op = 0; op < PIPIT_OP_COUNT; op++) sim_ops[op] = pipit__cpu_ops[op] ? sim_kernel : NULL;
    simdev.ops = sim_ops;
    simdev.alloc = sim_alloc;
    simdev.reserve = sim_reserve;
    simdev.zero = sim_zero;
    simdev.free = sim_free;
    simdev.upload = sim_upload;
    simdev.download = sim_download;
    simdev.accumulate = sim_accumulate;
    simdev.copy = sim_copy;
    simdev.sum_uses = sim_sum_uses;
    simdev.sumsq = sim_sumsq;
    simdev.sumsq_chunks = sim_sumsq_chunks;
    simdev.adamw = sim_adamw;
    simdev.sgd = sim_sgd;
    simdev.host_memory = 0;
    simdev.devices = sim_devices;
    simdev.bind = sim_bind;
    simdev.sync = sim_sync;
    pipit__backend_register(&simdev);
    atomic_store(&sim.violations, 0);
    sim.first[0] = 0;
}

/* ---- training on it ---- */

enum { TV = 48, TT = 8, TB = 2, STEPS = 3 };

typedef struct {
    int n;
    float *data[64];
    size_t bytes[64];
    double losses[STEPS];
} snap;

static void snap_free(snap *s) {
    for (int i = 0; i < s->n; i++) free(s->data[i]);
    s->n = 0;
}

static void feeds_for(int G, int step, int32_t *buf, pipit_feed *f, const pipit_gpt2_config *c) {
    int n = TB * TT;
    for (int m = 0; m < G; m++) {
        int32_t *tok = buf + (size_t)3 * n * m, *tgt = tok + n, *pos = tgt + n;
        for (int i = 0; i < n; i++) {
            tok[i] = (step * 31 + m * 7 + i * 5) % TV;
            tgt[i] = (tok[i] * 3 + 1) % TV;
        }
        pipit_gpt2_feeds(c, tok, tgt, pos, f + 3 * m);
    }
}

typedef struct {
    const char *device;
    int stages, P, M, D, zero1, threads, tf32;
} layout;

static int step_downloads; /* downloads during the last train()'s steps */

static pipit_status train(const layout *l, snap *out) {
    pipit_gpt2_config c = {TV, TT, TT, 4, 2, 16, TB, l->stages, PIPIT_F32, 0};
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_schedule *sch = NULL;
    if (l->P > 1) pipit_schedule_build(PIPIT_SCHED_1F1B, l->P, 1, l->M, &sch);
    pipit_options o = {.schedule = sch, .microbatches = l->M, .threads = l->threads, .data_parallel = l->D,
                       .zero1 = l->zero1, .optimizer = pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1), .clip_norm = 0.5,
                       .device = l->device, .tf32 = l->tf32};
    pipit_program *p = NULL;
    pipit_status s = pipit_compile(g, loss, &o, &p);
    if (!s) s = pipit_gpt2_init(p, &c, 11);
    int G = l->M * (l->D ? l->D : 1);
    int32_t *buf = malloc(sizeof(int32_t) * 3 * TB * TT * (size_t)G);
    pipit_feed *f = malloc(sizeof(pipit_feed) * 3 * (size_t)G);
    int down0 = atomic_load(&sim.downloads);
    for (int t = 0; t < STEPS && !s; t++) {
        feeds_for(G, t, buf, f, &c);
        pipit_metrics m;
        s = pipit_step(p, f, 3, 1, &m);
        out->losses[t] = m.loss;
    }
    step_downloads = atomic_load(&sim.downloads) - down0;
    out->n = 0;
    for (int i = 0; !s && i < pipit_program_num_params(p) && i < 64; i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t numel = 0;
        pipit_program_param_numel(p, name, &numel);
        out->bytes[i] = sizeof(float) * (size_t)numel;
        out->data[i] = malloc(out->bytes[i]);
        s = pipit_program_get_param(p, name, out->data[i], out->bytes[i]);
        out->n = i + 1;
    }
    free(buf), free(f);
    pipit_program_free(p);
    pipit_schedule_free(sch);
    pipit_graph_free(g);
    return s;
}

static int same(const snap *a, const snap *b) {
    if (a->n != b->n || memcmp(a->losses, b->losses, sizeof a->losses)) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->bytes[i] != b->bytes[i] || memcmp(a->data[i], b->data[i], a->bytes[i])) return 0;
    return 1;
}

#define ASSERT_NO_VIOLATION()                                                                          \
    do {                                                                                               \
        if (atomic_load(&sim.violations))                                                              \
            PIPIT_FAIL_("%d device-memory violations, the first: %s", atomic_load(&sim.violations), sim.first); \
    } while (0)

PIPIT_TEST(device_sim_training_equals_cpu) {
    sim_install();
    const layout layouts[] = {
        {.stages = 1, .P = 1, .M = 2},                        /* one rank */
        {.stages = 2, .P = 2, .M = 4},                        /* pipelined: values and per-use sums as messages */
        {.stages = 1, .P = 1, .M = 2, .D = 2, .zero1 = 1},    /* data parallel, ZeRO-1: shards, partials */
        {.stages = 2, .P = 2, .M = 2, .D = 2},                /* P x D: the gradient all-gather */
        {.stages = 1, .P = 1, .M = 2, .threads = 3},          /* --threads is ignored on a device */
    };
    for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
        layout cpu = layouts[k], dev = layouts[k];
        cpu.device = "cpu";
        dev.device = "simdev";
        snap a = {0}, b = {0};
        int up0 = atomic_load(&sim.uploads), sync0 = atomic_load(&sim.syncs);
        ASSERT_OK(train(&cpu, &a));
        ASSERT_OK(train(&dev, &b));
        ASSERT_NO_VIOLATION();
        if (!same(&a, &b)) PIPIT_FAIL_("layout %zu: simdev differs from cpu (loss %.9g vs %.9g)", k, b.losses[0], a.losses[0]);
        int G = dev.M * (dev.D ? dev.D : 1);
        /* every step uploads every microbatch's 3 inputs (to the ranks that read them), and syncs every rank */
        ASSERT_TRUE(atomic_load(&sim.uploads) - up0 >= STEPS * G * 3);
        ASSERT_TRUE(atomic_load(&sim.syncs) - sync0 >= STEPS * dev.P * (dev.D ? dev.D : 1));
        /* pipelined: each microbatch's activation and its gradient cross the boundary as downloads
         * into the transport's messages, besides the losses (M per replica and step) */
        int D = dev.D ? dev.D : 1;
        if (dev.P > 1 && step_downloads < STEPS * D * (dev.M + 2 * dev.M))
            PIPIT_FAIL_("layout %zu: %d downloads in %d steps: messages of device memory were not downloaded", k,
                        step_downloads, STEPS);
        snap_free(&a), snap_free(&b);
    }
    pipit__backend_register(NULL);
}

PIPIT_TEST(device_sim_forward_outputs_checkpoint) {
    sim_install();
    pipit_gpt2_config c = {TV, TT, TT, 2, 2, 16, TB, 1, PIPIT_F32, 0};
    pipit_graph *g1 = pipit_graph_new(), *g2 = pipit_graph_new();
    pipit_val l1, l2, lg1, lg2;
    l1 = pipit_gpt2_build_logits(g1, &c, &lg1);
    l2 = pipit_gpt2_build_logits(g2, &c, &lg2);
    pipit_program *dev = NULL, *cpu = NULL;
    ASSERT_OK(pipit_compile(g1, l1, &(pipit_options){.device = "simdev", .forward_only = 1, .outputs = &lg1,
                                                      .noutputs = 1, .tf32 = 1},
                            &dev));
    ASSERT_TRUE(sim.tf32_seen); /* a device backend takes options.tf32 and gets it at bind */
    ASSERT_OK(pipit_compile(g2, l2, &(pipit_options){.forward_only = 1, .outputs = &lg2, .noutputs = 1}, &cpu));
    ASSERT_OK(pipit_gpt2_init(cpu, &c, 4));
    char path[512];
    snprintf(path, sizeof path, "%s/simdev.safetensors", pipit_test_tmpdir());
    ASSERT_OK(pipit_checkpoint_save(cpu, path, NULL));
    ASSERT_OK(pipit_checkpoint_load(dev, path)); /* params through upload */
    int32_t buf[3 * TB * TT];
    pipit_feed f[3];
    feeds_for(1, 0, buf, f, &c);
    pipit_metrics md, mc;
    ASSERT_OK(pipit_step(dev, f, 3, 0, &md));
    ASSERT_OK(pipit_step(cpu, f, 3, 0, &mc));
    ASSERT_TRUE(md.loss == mc.loss);
    float a[TB * TT * TV], b[TB * TT * TV];
    ASSERT_OK(pipit_program_get_output(dev, lg1, 0, a, sizeof a)); /* through download */
    ASSERT_OK(pipit_program_get_output(cpu, lg2, 0, b, sizeof b));
    ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
    snprintf(path, sizeof path, "%s/simdev2.safetensors", pipit_test_tmpdir());
    ASSERT_OK(pipit_checkpoint_save(dev, path, NULL)); /* and back out */
    pipit_checkpoint *ck = NULL;
    ASSERT_OK(pipit_checkpoint_open(path, &ck));
    ASSERT_OK(pipit_checkpoint_load_into(cpu, ck));
    pipit_checkpoint_free(ck);
    ASSERT_NO_VIOLATION();
    pipit_program_free(dev);
    pipit_program_free(cpu);
    pipit_graph_free(g1);
    pipit_graph_free(g2);
    /* once unregistered, the name is unknown again */
    pipit__backend_register(NULL);
    ASSERT_TRUE(pipit__backend_find("simdev") == NULL);
}
