"""pipit.Trainer: the step loop of `pipit train` (tools/cmd_train.c,
tools/session.c) through the public API, so that the same settings give
the same losses and the same checkpoint, bit for bit.

    t = pipit.Trainer(pipit.models.preset("tiny"), data="input.txt", pp=2, schedule="zb-h1")
    for _ in range(t.steps):
        loss = t.step()            # the next G = M x D microbatches of the data
        print(t.last)              # step, loss, grad_norm, lr, ms, tokens_per_s, peak_bytes, bubble
    t.save("model.safetensors")    # what `pipit train --save` writes

A custom graph trains the same way with feeds given per step:
    t = pipit.Trainer(graph, loss=loss, pp=2, schedule="zb-h1", microbatches=4)
    t.step([{"x": xs[m], "y": ys[m]} for m in range(4)])
"""
import array
import time
from ctypes import byref, c_int64, sizeof

from ._lib import C, S, InvalidError, check, cstr, cstr_array, lib
from .core import Checkpoint, Data, Graph, Program, Schedule, Value, _new_array, _buffer_ptr, adamw, agree, sgd
from .core import lr_schedule as _lr_schedule
from .core import metrics_dict, remat_code
from .models import Model


def _bias_name(layer):
    return "model.layers.%d.mlp.route_bias" % layer


def llama_with(model, **fields):
    """The same Llama with some keywords changed (checked as llama() checks them)."""
    from .models import llama
    f = dict(model.fields, **fields)
    return llama(steps=model.steps, lr=model.lr, **f)


class Trainer:
    """Trains a Model (a preset or pipit.models.gpt2/llama) on `data`, or a
    Graph with its `loss` on the feeds given to step(). Keywords as
    `pipit train`'s flags: schedule (a name or a file; default 1f1b, or
    interleaved-1f1b with virtual > 1, when pp > 1 or virtual > 1), pp, tp,
    dp, virtual, microbatches, dtype ("f32", "bf16"), bf16_policy, zero1,
    zero (the ZeRO stage 0..3 over dp; zero1=True is zero=1), threads,
    remat (False, True = "full", "none", "full", "pointwise"), lr (default: the preset's), optimizer ("adamw", "sgd"),
    beta1, beta2, eps, weight_decay, clip, lr_schedule ("constant",
    "cosine", "linear"), warmup, decay_steps, min_lr, steps (default: the
    preset's), seed, data_order ("random", "sequential"), data_format,
    device, init (a checkpoint's weights), resume (a training checkpoint),
    doc_sep (packed documents: token id doc_sep ends a document, as
    --doc-sep; -1 none), doc_pos_reset (with doc_sep: GPT-2's positions
    restart per document) and balance_bias (an MoE Llama's auxiliary-loss-free
    balance, --balance-bias COEF: the model's balance_bias keyword, given
    here or there). An MoE model's steps also report "moe_counts" (tokens
    per expert of each MoE layer, the step's microbatches and replicas
    summed) and "moe_imbalance" (max / mean), as `pipit train --json`.
    reshard_after_forward=True is --reshard-after-forward (with zero=3:
    each param gathered per task that reads it, memory over speed).
    sp=True is --sp: sequence parallelism over the tp ranks (tp >= 2
    dividing the model's ctx; not with a mixture of experts). ep=E is
    --ep: a mixture of experts' experts split over E consecutive
    data-parallel replicas (E divides dp and the experts);
    no_a2a_overlap=True is --no-a2a-overlap."""

    def __init__(self, model, loss=None, data=None, schedule=None, pp=1, tp=1, dp=1, virtual=0, microbatches=1,
                 dtype="f32", bf16_policy="autocast", zero1=False, zero=0, threads=1, remat=False, lr=None,
                 optimizer="adamw", beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, clip=0.0,
                 lr_schedule="constant", warmup=0, decay_steps=None, min_lr=None, steps=None, seed=1,
                 data_order="random", data_format="auto", device=None, init=None, resume=None, doc_sep=-1,
                 doc_pos_reset=False, balance_bias=None, reshard_after_forward=False, sp=False, ep=1,
                 no_a2a_overlap=False):
        self._handles = []
        self.model = model if isinstance(model, Model) else None
        if balance_bias is not None:
            if self.model is None or not self.model.moe:
                raise InvalidError("balance_bias applies to mixture-of-experts models: pass experts=N (or "
                                   "preset('moe-tiny'))", C.PIPIT_STATUS_INVALID)
            self.model = model = llama_with(self.model, balance_bias=balance_bias)
        steps = steps if steps is not None else (self.model.steps if self.model and self.model.steps else 100)
        lr = lr if lr is not None else (self.model.lr if self.model and self.model.lr else 3e-4)
        self.o = dict(lr=lr, optimizer=optimizer, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay,
                      clip=clip, lr_schedule=lr_schedule, warmup=warmup, decay_steps=decay_steps, min_lr=min_lr,
                      steps=steps, seed=seed, data=data, data_order=data_order, data_format=data_format,
                      dtype=dtype, bf16_policy=bf16_policy, microbatches=microbatches, dp=dp, tp=tp, pp=pp,
                      doc_sep=int(doc_sep), doc_pos_reset=int(bool(doc_pos_reset)))
        self.steps, self.seed = int(steps), seed
        self._sp = bool(sp)
        self._ep, self._no_a2a_overlap = ep, int(bool(no_a2a_overlap))
        self._reshard = int(bool(reshard_after_forward))  # options.reshard_after_forward (the library refuses it
        # without zero 3, as the CLI)
        try:
            self._check_zero(zero1, zero, dp)
            self._open(model, loss, schedule, pp, tp, dp, virtual, microbatches, dtype, bf16_policy, zero1, threads,
                       remat, clip, device, init, resume, int(zero))
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ opening
    def _check_ep(self, m, dp, tp):
        """The CLI's refusals of --ep (tools/session.c check_ep)."""
        E, experts, bad = self._ep, m.fields.get("experts", 0) if m.arch == "llama" else 0, None
        if not isinstance(E, int) or E < 1 or E > 64:
            bad = "ep must be in 1..64 (expert-parallel ranks; got %r)" % (E,)
        elif E == 1:
            return
        elif not experts:
            bad = "ep %d splits the experts of mixture-of-experts layers: pass experts=N" % E
        elif dp % E:
            bad = "ep %d does not divide dp %d" % (E, dp)
        elif experts % E:
            bad = "ep %d does not divide experts %d" % (E, experts)
        elif tp > 1:
            bad = "ep with tp %d: expert and tensor parallelism together are not built (use one)" % tp
        elif self._reshard:
            bad = "ep with reshard_after_forward: ZeRO-3's per-task gathers of the expert params are not built yet"
        if bad:
            raise InvalidError("Trainer: " + bad, C.PIPIT_STATUS_INVALID)

    @staticmethod
    def _check_zero(zero1, zero, dp):
        """The CLI's refusals of --zero1 / --zero (tools/session.c)."""
        bad = None
        if zero1 and dp < 2:
            bad = "zero1 shards the optimizer state over data-parallel replicas: it needs dp 2 or more"
        elif not isinstance(zero, int) or zero < 0 or zero > 3:
            bad = "zero must be a ZeRO stage in 0..3 (got %r)" % (zero,)
        elif zero1 and zero > 1:
            bad = "zero1 is zero=1: it contradicts zero=%d (give one of them)" % zero
        elif zero > 0 and dp < 2:
            bad = "zero=%d shards state over data-parallel replicas: it needs dp 2 or more" % zero
        if bad:
            raise InvalidError("Trainer: " + bad, C.PIPIT_STATUS_INVALID)

    def _open(self, model, loss, schedule, pp, tp, dp, virtual, M, dtype, bf16_policy, zero1, threads, remat, clip,
              device, init, resume, zero):
        self.schedule = None
        self._moe, self._bias = [], None  # MoE layers' (layer, router choices); the balance biases (float32)
        self.first_step = self.step_count = self.data_pos = 0
        self.lr_sched = self._lr_schedule()
        if isinstance(schedule, Schedule):
            self.schedule = schedule
        elif schedule is not None or pp > 1 or virtual > 1:
            name = schedule or ("interleaved-1f1b" if virtual > 1 else "1f1b")
            if lib.pipit_schedule_kind_from_name(cstr(name)) >= 0:
                self.schedule = self._own(Schedule(name, pp, virtual, M))
            else:
                self.schedule = self._own(Schedule.load(name))
        self.stages = self.schedule.stages if self.schedule else pp * (virtual or 1)
        self.G = M * dp
        self.ckpt = None
        if resume:
            self.ckpt = self._own(Checkpoint(resume))
        if self.model is not None:
            m = self.model
            self.B, self.T = m.micro_batch, m.ctx
            if self.o["data"] is None:
                raise InvalidError("Trainer: a model needs data (a text file, token shards or a spec)",
                                   C.PIPIT_STATUS_INVALID)
            m.check(self.stages)
            ds, dpr = self.o["doc_sep"], self.o["doc_pos_reset"]
            if ds != -1 and not 0 <= ds < m.vocab:  # the CLI's refusals (tools/session.c)
                raise InvalidError("doc_sep %d is outside the vocabulary: the separator is a token id in 0..%d "
                                   "(vocab %d)" % (ds, m.vocab - 1, m.vocab), C.PIPIT_STATUS_INVALID)
            if dpr and ds < 0:
                raise InvalidError("doc_pos_reset restarts positions per document: it needs doc_sep",
                                   C.PIPIT_STATUS_INVALID)
            self.data = self._own(Data(self.o["data"], m.ctx, self.o["data_order"], self.o["seed"],
                                       self.o["data_format"]))
            if self.data.max_token >= m.vocab:
                raise InvalidError("data '%s' holds token %d but the vocabulary has %d entries (raise vocab)" %
                                   (self.o["data"], self.data.max_token, m.vocab), C.PIPIT_STATUS_INVALID)
            # in an MPI job (mpirun python3 ...): every process the same run, or none (pipit_agree)
            agree("pipit.Trainer", [(k, v) for k, v in self.meta() if k not in ("steps", "data_pos")] +
                  [("pp", str(pp)), ("virtual", str(virtual)), ("schedule", str(schedule)),
                   ("data (its tokens)", "%d tokens, crc32c %08x" % (self.data.tokens, self.data.checksum))])
            if self._sp and (tp < 2 or m.ctx % tp or m.moe):  # the CLI's refusals (tools/session.c)
                raise InvalidError("sp cuts the sequence over a stage's tensor-parallel ranks: " +
                                   ("it needs tp 2 or more (got tp %d)" % tp if tp < 2 else
                                    "tp %d does not divide ctx %d" % (tp, m.ctx) if m.ctx % tp else
                                    "mixture-of-experts layers are not built with it yet"), C.PIPIT_STATUS_INVALID)
            self._check_ep(m, dp, tp)
            self.graph = self._own(Graph(tensor_parallel=tp))
            if self._ep > 1:  # expert parallelism: the graph setting before the build
                check(lib.pipit_graph_set_expert_parallel(self.graph.ptr, self._ep))
            if self._sp:  # sequence parallelism: the graph setting before the build
                check(lib.pipit_graph_set_sequence_parallel(self.graph.ptr, 1))
            if self.docs:  # packed documents: the graph setting before the build (input 'documents')
                check(lib.pipit_graph_set_documents(self.graph.ptr, 1))
            if m.moe:  # the router choices as outputs: tokens per expert, the balance bias
                self.loss, self._moe = m.build_moe(self.graph, self.stages)
            else:
                self.loss = m.build(self.graph, self.stages)
        else:
            if not isinstance(model, Graph) or not isinstance(loss, Value):
                raise TypeError("Trainer(model): a pipit.models Model, or a Graph with loss=Value")
            if self._sp:
                raise InvalidError("Trainer: sp applies to a model trained on data (a Graph sets its own: "
                                   "pipit_graph_set_sequence_parallel before building)", C.PIPIT_STATUS_INVALID)
            if self._ep != 1:
                raise InvalidError("Trainer: ep applies to a model trained on data (a Graph sets its own: "
                                   "pipit_graph_set_expert_parallel before building)", C.PIPIT_STATUS_INVALID)
            if self.o["doc_sep"] != -1 or self.o["doc_pos_reset"]:
                raise InvalidError("Trainer: doc_sep and doc_pos_reset apply to a model trained on data (a Graph "
                                   "declares and feeds its own inputs)", C.PIPIT_STATUS_INVALID)
            self.graph, self.loss, self.data = model, loss, None
        opt = (adamw(self.o["lr"], self.o["beta1"], self.o["beta2"], self.o["eps"], self.o["weight_decay"])
               if self.o["optimizer"] == "adamw" else sgd(self.o["lr"]))
        if self.o["optimizer"] not in ("adamw", "sgd"):
            raise InvalidError("bad optimizer %r: expected adamw or sgd" % self.o["optimizer"], C.PIPIT_STATUS_INVALID)
        self.opts = dict(schedule=self.schedule, microbatches=M, threads=threads, remat=remat_code(remat),
                         optimizer=opt, clip_norm=float(clip), data_parallel=dp, zero1=int(bool(zero1)), zero=zero,
                         tensor_parallel=tp, lr_schedule=self.lr_sched, dtype=dtype, bf16_policy=bf16_policy,
                         device=device, reshard_after_forward=self._reshard, no_a2a_overlap=self._no_a2a_overlap)
        self.program = self._own(Program(self.graph, self.loss, outputs=[v for _, v in self._moe], **self.opts))
        self.eval_program = None
        self.first_step = self.step_count = 0
        self.data_pos = 0
        if resume:
            nxt = c_int64()
            check(lib.pipit_checkpoint_load_train(self.program.ptr, self.ckpt.ptr, byref(nxt)))
            self.first_step = self.step_count = nxt.value
            self.data_pos = int(self.ckpt.meta("data_pos") or 0)
        elif init:
            ck = self._own(Checkpoint(init))
            check(lib.pipit_checkpoint_load_into(self.program.ptr, ck.ptr))
        elif self.model is not None:
            self.model.init(self.program, self.seed, self.stages)
        if self.model is not None:
            n = self.B * self.T
            self._bufs = [tuple(_new_array(C.PIPIT_I32, (n,)) for _ in range(4)) for _ in range(self.G)]
            self._feeds = (S.pipit_feed * (self.G * self.nfeeds))()
        self.history, self.last = [], None

    @property
    def docs(self):
        """Packed documents (doc_sep given): the model's feeds plus 'documents'."""
        return self.o["doc_sep"] >= 0

    @property
    def nfeeds(self):
        return self.model.nfeeds + int(self.docs)

    def _own(self, h):
        self._handles.append(h)
        return h

    def _lr_schedule(self):
        o = self.o
        kind = o["lr_schedule"]
        if kind == "constant":
            if o["decay_steps"] is not None or o["min_lr"] is not None:
                raise InvalidError("decay_steps and min_lr apply to lr_schedule cosine or linear",
                                   C.PIPIT_STATUS_INVALID)
            return _lr_schedule("constant", o["warmup"])
        min_lr = o["min_lr"] if o["min_lr"] is not None else o["lr"] / 10
        if o["decay_steps"] is not None:
            ds = o["decay_steps"]
        elif o["steps"] > o["warmup"]:
            ds = o["steps"]
        else:
            ds = o["warmup"] + 1
        return _lr_schedule(kind, o["warmup"], ds, min_lr)

    # ---------------------------------------------------------- stepping
    def _fill(self, pos, data, feeds):
        nf = self.nfeeds
        cfg = self.model.config(self.stages)
        fn = getattr(lib, "pipit_%s_feeds" % self.model.arch)
        for m in range(self.G):
            tok, tgt, posb, doc = self._bufs[m]
            pt, pg, pp = _buffer_ptr(tok)[0], _buffer_ptr(tgt)[0], _buffer_ptr(posb)[0]
            check(lib.pipit_data_batch(data.ptr, pos + m * self.B, self.B, pt, pg))
            out = byref(feeds, m * nf * sizeof(S.pipit_feed))
            if self.model.arch == "gpt2":
                check(fn(byref(cfg), pt, pg, pp, out))
            else:
                check(fn(byref(cfg), pt, pg, out))
            if self.docs:
                self._documents(tok, posb, doc)
                addr, nbytes = _buffer_ptr(doc)
                feeds[m * nf + self.model.nfeeds] = S.pipit_feed(b"documents", addr, nbytes)
        return nf

    def _documents(self, tok, posb, doc):
        """Document ids of each sequence (tools/model.c cli_model_feeds): a
        new document after each doc_sep token (the separator ends its
        document); with doc_pos_reset GPT-2's positions restart in each."""
        sep, T = self.o["doc_sep"], self.T
        reset = self.o["doc_pos_reset"] and self.model.arch == "gpt2"
        toks = tok.tolist()
        ids, posl = [0] * len(toks), (posb.tolist() if reset else None)
        for b in range(0, len(toks), T):
            i = start = 0
            for t in range(T):
                ids[b + t] = i
                if reset:
                    posl[b + t] = t - start
                if toks[b + t] == sep:
                    i, start = i + 1, t + 1
        doc[:] = ids if not isinstance(doc, array.array) else array.array(doc.typecode, ids)
        if reset:
            posb[:] = posl if not isinstance(posb, array.array) else array.array(posb.typecode, posl)

    def step(self, feeds=None):
        """One training step; returns the loss. The step's fields (as the
        CLI's --json line) are in self.last and appended to self.history."""
        t0 = time.perf_counter()
        coef = self.model.fields.get("balance_bias", 0.0) if self.model is not None else 0.0
        if coef > 0 and self._bias is None:  # the first time: init's or the file's (tools/moe_counts.c)
            self._bias = [list(self.program.get_param(_bias_name(l))) for l, _ in self._moe]
        if self.model is not None and feeds is None:
            nf = self._fill(self.data_pos, self.data, self._feeds)
            m = S.pipit_metrics()
            check(lib.pipit_step_feeds(self.program.ptr, self._feeds, self.G * nf, nf, 1, byref(m)),
                  self.program._err)
            met = metrics_dict(m)
            tokens = self.B * self.T * self.G
        else:
            met = self.program.step(feeds)
            tokens = 0
        if self._moe:
            counts = self._moe_counts()
            met["moe_counts"] = counts
            met["moe_imbalance"] = [max(c) * len(c) / sum(c) if sum(c) else 0.0 for c in counts]
            if coef > 0:
                self._balance(counts, coef)
        met["step"] = self.step_count
        met["python_ms"] = (time.perf_counter() - t0) * 1e3
        if tokens:
            met["tokens_per_s"] = tokens / (met["ms"] / 1e3) if met["ms"] > 0 else 0.0
            met["gflops"] = self.model.flops_per_token() * tokens / (met["ms"] / 1e3) / 1e9 if met["ms"] > 0 else 0.0
        self.step_count += 1
        if self.model is not None:
            self.data_pos += self.G * self.B
        self.last = met
        self.history.append(met)
        return met["loss"]

    def _moe_counts(self):
        """Tokens per expert of each MoE layer over the step's G
        microbatches (tools/moe_counts.c cli_moe_count): integer sums."""
        E, out = self.model.experts, []
        for l, v in self._moe:
            c = [0] * E
            for m in range(self.G):
                a = self.program.get_output(v, m)
                ids = a.ravel().tolist() if hasattr(a, "ravel") else a
                for e in ids:
                    if not 0 <= e < E:
                        raise InvalidError("MoE layer %d chose expert %d of %d" % (l, e, E), C.PIPIT_STATUS_INVALID)
                    c[e] += 1
            out.append(c)
        return out

    def _balance(self, counts, coef):
        """The balance bias's update (tools/moe_counts.c cli_moe_balance):
        bias += coef sign(mean - count), less its mean, rounded to f32."""
        for i, (l, _) in enumerate(self._moe):
            c, b, E = counts[i], self._bias[i], len(counts[i])
            total = sum(c)
            nb = [b[e] + coef * ((total > E * c[e]) - (total < E * c[e])) for e in range(E)]
            mean = 0.0
            for x in nb:  # in order, as the C loop
                mean += x
            mean /= E
            f = array.array("f", [x - mean for x in nb])
            self._bias[i] = list(f)
            self.program.set_param(_bias_name(l), f)

    def train(self, steps=None, log=None):
        """Runs to `steps` (default: the configured total); log(fields) after each."""
        end = self.steps if steps is None else self.step_count + steps
        while self.step_count < end:
            self.step()
            if log:
                log(self.last)
        return self.history

    # ----------------------------------------------------------- evaluation
    def eval(self, data, batches=None):
        """Mean loss over `batches` (default: up to 4) batches of G x B
        sequential sequences of data (a Data, or a spec opened sequential)
        with a forward-only program holding the training params."""
        if self.model is None:
            raise InvalidError("Trainer.eval needs a model trained on data", C.PIPIT_STATUS_INVALID)
        if not isinstance(data, Data):
            data = self._own(Data(data, self.T, "sequential", 0, self.o["data_format"]))
        per = self.G * self.B
        K = batches if batches is not None else min(4, data.windows // per)
        if K < 1 or K * per > data.windows:
            raise InvalidError("eval: %d batches of %d sequences, but the data has %d distinct sequences" %
                               (max(K, 1), per, data.windows), C.PIPIT_STATUS_INVALID)
        if self.eval_program is None:
            self.eval_program = self._own(Program(self.graph, self.loss, forward_only=1, **self.opts))
        for name in self.program.params:
            self.eval_program.set_param(name, self.program.get_param(name))
        feeds = (S.pipit_feed * (self.G * self.nfeeds))()
        total = 0.0
        for k in range(K):
            nf = self._fill(k * per, data, feeds)
            m = S.pipit_metrics()
            check(lib.pipit_step_feeds(self.eval_program.ptr, feeds, self.G * nf, nf, 0, byref(m)),
                  self.eval_program._err)
            total += m.loss
        return total / K

    # -------------------------------------------------------- checkpoints
    def meta(self, save_step=None):
        """The metadata `pipit train --save` writes (tools/train_save.c)."""
        o = self.o
        constant = o["lr_schedule"] == "constant"
        ls = self.lr_sched
        m = [("format", "pt")] + (self.model.meta() if self.model else [])
        m += [("lr_schedule", o["lr_schedule"]), ("warmup", "%d" % o["warmup"]),
              ("decay_steps", "%d" % (-1 if constant else ls.decay_steps)),
              ("min_lr", "%.17g" % (-1.0 if constant else ls.min_lr)), ("optimizer", o["optimizer"]),
              ("lr", "%.17g" % o["lr"]), ("beta1", "%.17g" % o["beta1"]), ("beta2", "%.17g" % o["beta2"]),
              ("eps", "%.17g" % o["eps"]), ("weight_decay", "%.17g" % o["weight_decay"]),
              ("clip", "%.17g" % o["clip"]), ("micro_batch", "%d" % (self.B if self.model else 0)),
              ("microbatches", "%d" % o["microbatches"]), ("dp", "%d" % o["dp"]), ("tp", "%d" % o["tp"]),
              ("seed", "%d" % o["seed"]), ("data", str(o["data"] or "")), ("data_order", o["data_order"]),
              ("dtype", o["dtype"]), ("bf16_policy", o["bf16_policy"]),
              ("fused_head", "%d" % int(bool(self.model.fields.get("fused_head")) if self.model else 0)),
              ("doc_sep", "%d" % o["doc_sep"]), ("doc_pos_reset", "%d" % o["doc_pos_reset"]),
              ("steps", "%d" % max(self.steps, self.step_count)), ("data_pos", "%d" % self.data_pos),
              ("save_every", "0"), ("keep", "0"), ("data_format", o["data_format"]), ("val_data", ""),
              ("val_split", "0"), ("eval_every", "0"), ("eval_batches", "0"), ("log_every", "1")]
        return m

    def save(self, path):
        """A training checkpoint (params, AdamW moments, the step, the data
        position, the run's settings): `pipit eval --init` and `pipit train
        --resume` read it."""
        kv = []
        for k, v in self.meta():
            kv += [k, v]
        check(lib.pipit_checkpoint_save_train(self.program.ptr, cstr(path), self.step_count, cstr_array(kv)))

    def load(self, path):
        """The weights of a checkpoint (the optimizer state is kept)."""
        self.program.load(path)

    def close(self):
        for h in reversed(self._handles):
            h.close()
        self._handles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


__all__ = ["Trainer"]
