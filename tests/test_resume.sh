#!/usr/bin/env bash
# test_resume.sh — one-file training checkpoints end to end: an interrupted
# and resumed run equals the uninterrupted one bit for bit (tensors and
# per-step losses), on P = 1, P = 2 and across a pipeline layout change;
# SIGINT saves and exits 130; SIGKILL at random moments never leaves a
# checkpoint that fails to load or whose params and optimizer state come
# from different steps, and stale temp files go with the next run; Hugging
# Face-layout files ("transformer." prefix, attention-mask buffers) load
# with --init; every new CLI error exits non-zero with a message.
# Usage: test_resume.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup resume "${1:-}"

# run LOG cmd...: stdout to LOG, stderr to LOG.err; a failure is reported.
run() {
    local log=$1
    shift
    "$@" >"$log" 2>"$log.err" || fail "exit $?: $*"$'\n'"$(cat "$log.err")"
}

$PY - <<'EOF' || { echo "cannot write test data"; exit 1; }
import random
r = random.Random(11)
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ", "to ", "park, ", "and ", "we ", "saw "]
open("text.txt", "w").write("".join(r.choice(words) for _ in range(4000)))
EOF

# same_tensors A B: every tensor of A is in B with the same dtype, shape and
# bytes, and vice versa.
cat >st.py <<'EOF'
import json, struct, sys
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    # a file rewritten here is no longer the one pipit wrote: without its checksums
    meta = {k: v for k, v in h.pop("__metadata__", {}).items() if not k.startswith("crc32c")}
    data = raw[8 + n:]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in h.items()}, meta
if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "same":
        a, _ = load(sys.argv[2]); b, _ = load(sys.argv[3])
        if set(a) != set(b):
            sys.exit(f"tensor names differ: {sorted(set(a) ^ set(b))[:5]}")
        bad = [k for k in a if a[k] != b[k]]
        if bad:
            sys.exit(f"{len(bad)} tensors differ, first {bad[0]}")
    elif cmd == "meta":
        print(load(sys.argv[2])[1].get(sys.argv[3], ""))
    elif cmd == "lines":  # every --json line's step, loss and val_loss, in order, over several logs
        for p in sys.argv[2:]:
            for l in open(p):
                if l.startswith("{"):
                    d = json.loads(l)
                    print(d["step"], repr(d.get("loss")), repr(d.get("val_loss")))
    elif cmd == "set":  # set FILE OUT KEY VALUE: a copy with one metadata value changed
        t, meta = load(sys.argv[2])
        if len(sys.argv) > 5: meta[sys.argv[4]] = sys.argv[5]
        else: meta.pop(sys.argv[4])  # set FILE OUT KEY: a copy without that key (an older file)
        hdr, off, blobs = {"__metadata__": meta}, 0, []
        for k, (dt, sh, b) in t.items():
            hdr[k] = {"dtype": dt, "shape": sh, "data_offsets": [off, off + len(b)]}; blobs.append(b); off += len(b)
        j = json.dumps(hdr).encode(); j += b" " * (-len(j) % 8)
        open(sys.argv[3], "wb").write(struct.pack("<Q", len(j)) + j + b"".join(blobs))
    elif cmd == "losses":  # losses of --json step lines, by step, over several logs
        out = {}
        for p in sys.argv[2:]:
            for l in open(p):
                if l.startswith("{"):
                    d = json.loads(l)
                    out[d["step"]] = d["loss"]
        print(" ".join(repr(out[k]) for k in sorted(out)))
    elif cmd == "hf":  # Hugging Face GPT2LMHeadModel layout from a pipit checkpoint
        src, dst, ctx = sys.argv[2], sys.argv[3], int(sys.argv[4])
        t, meta = load(src)
        t = {k: v for k, v in t.items() if not k.startswith("opt.")}  # weights only, as HF ships them
        L = 1 + max(int(k.split(".")[1]) for k in t if k.startswith("h."))
        tril = b"".join(struct.pack("<f", 1.0 if j <= i else 0.0) for i in range(ctx) for j in range(ctx))
        for l in range(L):
            t[f"h.{l}.attn.bias"] = ("F32", [1, 1, ctx, ctx], tril)
            t[f"h.{l}.attn.masked_bias"] = ("F32", [], struct.pack("<f", -1e4))
        hdr, blobs, off = {"__metadata__": meta}, [], 0
        for k, (dt, sh, b) in t.items():
            hdr["transformer." + k] = {"dtype": dt, "shape": sh, "data_offsets": [off, off + len(b)]}
            blobs.append(b); off += len(b)
        j = json.dumps(hdr).encode()
        j += b" " * (-len(j) % 8)
        open(dst, "wb").write(struct.pack("<Q", len(j)) + j + b"".join(blobs))
EOF
same_tensors() { $PY st.py same "$1" "$2" || fail "$3: tensors of $1 and $2 differ"; }
meta() { $PY st.py meta "$1" "$2"; }
losses() { $PY st.py losses "$@"; }

M=(--data text.txt --ctx 16 --layers 4 --heads 2 --dim 32 --micro-batch 2 --microbatches 4 --lr 1e-3 --seed 3)

# ---- resume equivalence: 6 uninterrupted steps == 3 + --resume for 3
run full.log "$PIPIT" train "${M[@]}" --steps 6 --save full.st --json
FULL=$(losses full.log)
[ "$(meta full.st step)" = 6 ] || fail "full.st: step metadata is '$(meta full.st step)', not 6"
grep -q "saved full.st (step 6)" full.log.err || fail "no 'saved FILE (step s)' line: $(cat full.log.err)"

# P = 1: the first run saves every 3 steps and keeps the last 2 as
# FILE.step<s>; resuming FILE.step3 takes nothing else on the command line
run a1.log "$PIPIT" train "${M[@]}" --steps 6 --save a1.st --save-every 3 --keep 2 --json
[ -f a1.st.step3 ] && [ -f a1.st.step6 ] || fail "--keep 2: expected a1.st.step3 and a1.st.step6: $(ls)"
same_tensors a1.st a1.st.step6 "--keep: newest copy"
[ "$(meta a1.st.step3 step)" = 3 ] || fail "a1.st.step3 is not at step 3"
head -3 a1.log >a1_first.log
run b1.log "$PIPIT" train --resume a1.st.step3 --json
same_tensors full.st a1.st.step3 "P=1 resume"
[ "$(losses a1_first.log b1.log)" = "$FULL" ] || fail "P=1 resume: losses $(losses a1_first.log b1.log) != $FULL"

# P = 2 (1F1B), and across layouts: saved under --pp 2, resumed under --pp 2,
# --pp 1 and --pp 4 --schedule gpipe
run a2.log "$PIPIT" train "${M[@]}" --steps 3 --save a2.st --pp 2 --schedule 1f1b --json
[ "$(meta a2.st steps)" = 3 ] || fail "a2.st: total steps metadata is not 3"
for layout in "--pp 2 --schedule 1f1b" "--pp 1" "--pp 4 --schedule gpipe"; do
    cp a2.st r.st
    # shellcheck disable=SC2086
    run r.log "$PIPIT" train --resume r.st --steps 6 $layout --json
    same_tensors full.st r.st "resume under $layout"
    [ "$(losses a2.log r.log)" = "$FULL" ] || fail "resume under $layout: losses $(losses a2.log r.log) != $FULL"
done
# a finished run resumed with nothing else does nothing and keeps the file's bits
cp full.st again.st
run again.log "$PIPIT" train --resume again.st
same_tensors full.st again.st "resume of a finished run"

# ---- SIGINT: finish the step, save, exit 130
"$PIPIT" train "${M[@]}" --steps 100000 --save int.st --json >int.log 2>int.err &
pid=$!
for _ in $(seq 1 2000); do
    [ "$(grep -c '^{' int.log 2>/dev/null)" -ge 3 ] && break
    sleep 0.01
done
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 130 ] || fail "SIGINT: exit $rc, not 130: $(cat int.err)"
grep -q "interrupted at step [0-9]*; saved int.st; resume with: pipit train --resume int.st" int.err ||
    fail "SIGINT: message missing: $(cat int.err)"
[ -f int.st ] || fail "SIGINT: int.st not written"
S=$(meta int.st step)
N=$((S + 3))
[ "$(grep -c '^{' int.log)" -eq "$S" ] || fail "SIGINT: $S steps in the file but $(grep -c '^{' int.log) step lines"
run intr.log "$PIPIT" train --resume int.st --steps "$N" --json
run intref.log "$PIPIT" train "${M[@]}" --steps "$N" --save intref.st --json
same_tensors intref.st int.st "SIGINT + resume"
[ "$(losses int.log intr.log)" = "$(losses intref.log)" ] || fail "SIGINT + resume: losses differ"
# SIGTERM without --save: saved next to the data, exit 143
"$PIPIT" train "${M[@]}" --steps 100000 >term.log 2>term.err &
pid=$!
for _ in $(seq 1 2000); do
    [ "$(grep -c '^step' term.log 2>/dev/null)" -ge 2 ] && break
    sleep 0.01
done
kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 143 ] || fail "SIGTERM: exit $rc, not 143: $(cat term.err)"
[ -f text.txt.pipit.safetensors ] || fail "SIGTERM without --save: no text.txt.pipit.safetensors"
grep -q "resume with: pipit train --resume text.txt.pipit.safetensors" term.err || fail "SIGTERM: $(cat term.err)"

# ---- SIGKILL at random moments with --save-every 1
EVAL=(eval --data text.txt --ctx 16 --micro-batch 2 --batches 2 --json)
RANDOM=7
prev=
for try in $(seq 1 10); do
    "$PIPIT" train "${M[@]}" --steps 100000 --save kill.st --save-every 1 --json >kill.log 2>kill.err &
    pid=$!
    for _ in $(seq 1 2000); do
        [ "$(grep -c '^{' kill.log 2>/dev/null)" -ge 2 ] && break
        sleep 0.005
    done
    sleep "0.0$((RANDOM % 10))$((RANDOM % 10))"
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null
    [ -f kill.st ] || { fail "try $try: no kill.st"; continue; }
    "$PIPIT" "${EVAL[@]}" --init kill.st >/dev/null 2>&1 || fail "try $try: kill.st does not load: $("$PIPIT" "${EVAL[@]}" --init kill.st 2>&1)"
    st=$(meta kill.st step)
    ost=$(meta kill.st opt_steps)
    [ -n "$st" ] && [ "$st" = "$ost" ] || fail "try $try: step $st but $ost optimizer updates"
    for t in kill.st.tmp.*; do # only the run just killed may have left one
        [ -e "$t" ] || continue
        [ "$t" = "kill.st.tmp.$pid" ] || fail "try $try: stale temp file $t outlived the next run"
    done
    prev=$pid
done
: "$prev"
st=$(meta kill.st step)
run kr.log "$PIPIT" train --resume kill.st --steps $((st + 1)) --json
[ "$(meta kill.st step)" = $((st + 1)) ] || fail "resume after SIGKILL: step $(meta kill.st step), not $((st + 1))"
[ -z "$(ls kill.st.tmp.* 2>/dev/null)" ] || fail "temp files left after a resumed run: $(ls kill.st.tmp.*)"

# ---- Hugging Face layout: "transformer." prefix and attention-mask buffers
$PY st.py hf full.st hf.st 16 || fail "cannot write hf.st"
run ev_full.log "$PIPIT" "${EVAL[@]}" --init full.st
run ev_hf.log "$PIPIT" "${EVAL[@]}" --init hf.st
cmp -s ev_full.log ev_hf.log || fail "HF layout: eval $(cat ev_hf.log) != $(cat ev_full.log)"
grep -q "ignoring 8 attention-mask buffers" ev_hf.log.err || fail "HF layout: no note on the mask buffers: $(cat ev_hf.log.err)"

# ---- errors
run w.log "$PIPIT" train "${M[@]}" --steps 1 --save-weights-only --save weights.st
expect_fail "not a training checkpoint" "$PIPIT" train --resume weights.st
expect_fail "--layers 3 contradicts checkpoint 'full.st' (layers 4)" "$PIPIT" train --resume full.st --layers 3
expect_fail "--optimizer sgd contradicts checkpoint 'full.st' (optimizer adamw)" "$PIPIT" train --resume full.st --optimizer sgd
expect_fail "--lr 0.5 contradicts" "$PIPIT" train --resume full.st --lr 0.5
expect_fail "at step 6 already" "$PIPIT" train --resume full.st --steps 2
expect_fail "takes no --init" "$PIPIT" train --resume full.st --init weights.st
expect_fail "no-such-file" "$PIPIT" train --resume no-such-file.st
expect_fail "needs --save" "$PIPIT" train "${M[@]}" --steps 2 --save-every 1
expect_fail "does not combine" "$PIPIT" train "${M[@]}" --steps 2 --save x.st --save-every 1 --save-weights-only
expect_fail "cannot create a file there" "$PIPIT" train "${M[@]}" --steps 2 --save "$TMP/no-such-dir/x.st"
out=$("$PIPIT" train "${M[@]}" --steps 2 --json --save "$TMP/no-such-dir/x.st" 2>/dev/null)
[ -z "$out" ] || fail "an unwritable --save path is found only after training: $out"
expect_fail "resume:.*not a number" bash -c "$PY - <<'EOF'
import sys; sys.path.insert(0, '.')
import st, json, struct
t, meta = st.load('full.st'); meta['lr'] = 'fast'
hdr, off, blobs = {'__metadata__': meta}, 0, []
for k, (dt, sh, b) in t.items():
    hdr[k] = {'dtype': dt, 'shape': sh, 'data_offsets': [off, off + len(b)]}; blobs.append(b); off += len(b)
j = json.dumps(hdr).encode(); j += b' ' * (-len(j) % 8)
open('badmeta.st', 'wb').write(struct.pack('<Q', len(j)) + j + b''.join(blobs))
EOF
'$PIPIT' train --resume badmeta.st"

# ---- a cosine schedule with warm-up resumes on the same curve (the file
# records the resolved schedule: decay_steps does not follow a new --steps)
C=(--lr-schedule cosine --warmup 2)
run cos.log "$PIPIT" train "${M[@]}" "${C[@]}" --steps 6 --save cos.st --json
run cos1.log "$PIPIT" train "${M[@]}" "${C[@]}" --steps 6 --save cosp.st --save-every 3 --keep 2 --json
head -3 cos1.log >cos_first.log
run cos2.log "$PIPIT" train --resume cosp.st.step3 --json
same_tensors cos.st cosp.st.step3 "cosine resume"
[ "$(losses cos_first.log cos2.log)" = "$(losses cos.log)" ] || fail "cosine resume: losses differ"

# ---- validation and logging settings live in the checkpoint: --resume
# alone validates (held-out tail, cadence, batches) and logs as the
# uninterrupted run, bit for bit
V=(--val-split 0.1 --eval-every 2 --eval-batches 2 --log-every 2)
run vfull.log "$PIPIT" train "${M[@]}" "${V[@]}" --steps 6 --save vfull.st --json
run va.log "$PIPIT" train "${M[@]}" "${V[@]}" --steps 6 --save va.st --save-every 3 --keep 2 --json
$PY st.py lines va.log | awk '$1 < 3' >va_first.txt
run vb.log "$PIPIT" train --resume va.st.step3 --json
$PY st.py lines vb.log >vb.txt
[ "$(cat va_first.txt vb.txt)" = "$($PY st.py lines vfull.log)" ] ||
    fail "--resume alone: step and validation lines differ from the uninterrupted run:"$'\n'"$(cat va_first.txt vb.txt)"$'\n'"vs"$'\n'"$($PY st.py lines vfull.log)"
grep -q '"val_loss"' vb.log || fail "--resume alone did not validate: $(cat vb.log)"
same_tensors vfull.st va.st.step3 "resume with validation"
[ "$(meta vfull.st val_split)" = 0.10000000000000001 ] || fail "val_split metadata: '$(meta vfull.st val_split)'"
expect_fail "--val-split 0.2[0-9]* contradicts checkpoint" "$PIPIT" train --resume vfull.st --val-split 0.2
expect_ok "$PIPIT" train --resume vfull.st --steps 7 --eval-every 1 --log-every 1 --json # cadence may change
[ "$(grep -c val_loss <<<"$OUT")" -eq 1 ] || fail "--eval-every 1 on resume: $OUT"

# ---- eval and sample take the window and the micro-batch from the checkpoint (flags override)
expect_ok "$PIPIT" eval --init full.st --data text.txt --json
dflt=$OUT
expect_ok "$PIPIT" eval --init full.st --data text.txt --ctx 16 --micro-batch 2 --batches 8 --json
[ "$dflt" = "$OUT" ] || fail "eval defaults ($dflt) are not ctx 16, micro-batch 2, 8 batches ($OUT)"
expect_ok "$PIPIT" eval --init full.st --data text.txt --batches 2 --json
grep -q '"tokens":64}' <<<"$OUT" || fail "eval --batches 2 with the checkpoint's ctx 16 x micro-batch 2: $OUT"
run long.log "$PIPIT" train "${M[@]}" --max-ctx 32 --steps 2 --save long.st
a=$("$PIPIT" sample --init long.st --prompt "the cat " --tokens 12 --seed 3 | od -An -tx1)
b=$("$PIPIT" sample --init long.st --prompt "the cat " --tokens 12 --seed 3 --ctx 16 | od -An -tx1)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "sample does not default to the checkpoint's training ctx 16: '$a' vs '$b'"

# ---- metadata numbers are parsed strictly, naming the key and the value
for kv in "seed -1" "seed 18446744073709551616" "layers 1e3" "layers 4x" "step abc" "data_pos -5" \
          "microbatches 0" "lr 0x" "eval_every -2"; do
    set -- $kv
    $PY st.py set full.st bad.st "$1" "$2"
    expect_fail "metadata '$1' is '$2'" "$PIPIT" train --resume bad.st --steps 8
done

# ---- another --dp keeps the global batch (issue 22): M x D microbatches
# per step, the data positions of the uninterrupted run; the first resumed
# step's loss is bitwise the uninterrupted one (equal weights, the same
# microbatches summed in the global order), later ones within rounding
# (D replicas add their gradients in another order: docs/architecture.md §9)
run dfull.log "$PIPIT" train "${M[@]}" --steps 6 --save dfull.st --save-every 1 --keep 6 --json
cp dfull.st.step3 d3.st
run d2.log "$PIPIT" train --resume d3.st --dp 2 --save d2.st --save-every 1 --keep 6 --json
grep -q "resuming 'd3.st' at step 3 of 6; --dp 2 x --microbatches 2 keeps its global batch of 4 microbatches (it ran --dp 1 x --microbatches 4)" d2.log.err ||
    fail "the resume line does not say how --dp 2 keeps the batch: $(cat d2.log.err)"
for s in 4 5 6; do
    [ "$(meta d2.st.step$s data_pos)" = "$(meta dfull.st.step$s data_pos)" ] ||
        fail "--dp 2 resume: data_pos at step $s is $(meta d2.st.step$s data_pos), not $(meta dfull.st.step$s data_pos)"
done
[ "$(meta d2.st microbatches)" = 2 ] && [ "$(meta d2.st dp)" = 2 ] || fail "d2.st: not saved as --dp 2 x --microbatches 2"
$PY - dfull.log d2.log <<'EOF' || fail "--dp 2 resume: losses differ from the uninterrupted run"
import json, sys
full = {d["step"]: d["loss"] for d in map(json.loads, filter(lambda l: l.startswith("{"), open(sys.argv[1])))}
res = {d["step"]: d["loss"] for d in map(json.loads, filter(lambda l: l.startswith("{"), open(sys.argv[2])))}
assert sorted(res) == [3, 4, 5], sorted(res)
assert res[3] == full[3], (res[3], full[3])
assert all(abs(res[k] - full[k]) <= 1e-5 * abs(full[k]) for k in res), (res, full)
EOF
# and back: resumed under --dp 1 it runs --microbatches 4 again
run d1.log "$PIPIT" train --resume d2.st.step4 --dp 1 --steps 5 --json
grep -q -- "--dp 1 x --microbatches 4 keeps its global batch of 4 microbatches (it ran --dp 2 x --microbatches 2)" d1.log.err ||
    fail "resume back to --dp 1: $(cat d1.log.err)"
expect_fail "--dp 3 x --microbatches 4 is not the global batch of checkpoint 'd3.st' (--dp 1 x --microbatches 4 = 4 microbatches of --micro-batch 2): pick a --dp that divides it" \
    "$PIPIT" train --resume d3.st --dp 3
expect_fail "--dp 2 x --microbatches 4 is not the global batch" "$PIPIT" train --resume d3.st --dp 2 --microbatches 4

# ---- T is in the checkpoint (issue 25 item 9): a --tp 2 run resumed with
# --resume alone continues at T = 2, bit for bit; another --tp is a layout
# change the resume line names; a file without the key (written before
# pipit recorded T) resumes at --tp as given, as it did then
run tfull.log "$PIPIT" train "${M[@]}" --tp 2 --steps 6 --save tfull.st --json
run ta.log "$PIPIT" train "${M[@]}" --tp 2 --steps 6 --save ta.st --save-every 3 --keep 2 --json
[ "$(meta ta.st.step3 tp)" = 2 ] || fail "--tp 2 checkpoint: tp metadata is '$(meta ta.st.step3 tp)', not 2"
head -3 ta.log >ta_first.log
cp ta.st.step3 tb.st
run tb.log "$PIPIT" train --resume tb.st --json
same_tensors tfull.st tb.st "--tp 2 resumed without --tp"
[ "$(losses ta_first.log tb.log)" = "$(losses tfull.log)" ] ||
    fail "--tp 2 resumed without --tp: losses $(losses ta_first.log tb.log) != $(losses tfull.log)"
grep -q "layout changed" tb.log.err && fail "--tp 2 resumed as it ran: the resume line says the layout changed: $(cat tb.log.err)"
cp ta.st.step3 tc.st
run tc.log "$PIPIT" train --resume tc.st --tp 1 --json
grep -q "resuming 'tc.st' at step 3 of 6; the layout changed: --tp 1 (it ran --tp 2)" tc.log.err ||
    fail "--tp 1 on a --tp 2 checkpoint: the resume line does not name the layout change: $(cat tc.log.err)"
[ "$(meta tc.st tp)" = 1 ] || fail "resumed under --tp 1: saved with tp '$(meta tc.st tp)'"
$PY st.py set ta.st.step3 told.st tp # an older file: no 'tp' key
run told.log "$PIPIT" train --resume told.st --json
[ "$(meta told.st tp)" = 1 ] || fail "a file without 'tp' resumed alone: ran at tp '$(meta told.st tp)', not 1"
grep -q "layout changed" told.log.err && fail "a file without 'tp': the resume line claims a layout change: $(cat told.log.err)"
$PY st.py set ta.st.step3 told2.st tp
run told2.log "$PIPIT" train --resume told2.st --tp 2 --json
same_tensors tfull.st told2.st "a file without 'tp' resumed with --tp 2"
$PY st.py set ta.st.step3 tbad.st tp 0
expect_fail "metadata 'tp' is '0'" "$PIPIT" train --resume tbad.st

if [ "$failures" -ne 0 ]; then
    echo "test_resume: $failures failure(s)" >&2
    exit 1
fi
echo "test_resume: ok"
exit 0
