#!/usr/bin/env bash
# test_cli_config_roundtrip.sh — `pipit train --print-config` prints every
# option train accepts, and `--config` reads it back to the same settings.
# The flags come from `pipit train --help` (so a flag added later is
# tested, or this test fails naming it); for each one, given a value other
# than its default (with the flags it needs beside it: a Llama preset for
# the Llama flags, --auto-stages for --stage-costs, ...):
#   - the printed config holds the flag's key, and differs from the one
#     printed without the flag (the option is represented, not dropped);
#   - that output, as a --config file, prints the same config again.
# --config and --print-config themselves are the machinery.
# Usage: test_cli_config_roundtrip.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_config_roundtrip "${1:-}"

$PY -c 'open("text.txt", "w").write("the cat sat on the mat. " * 200)' || { echo "cannot write test data"; exit 1; }
# --resume takes its settings from a training checkpoint: one step writes it
expect_ok "$PIPIT" train --data text.txt --ctx 16 --layers 1 --heads 2 --dim 16 --micro-batch 2 --steps 1 \
    --save ck.st || exit 1

# flag -> "VALUE|CONTEXT": the value given, and the flags it needs beside it
# (also given to the run without it)
declare -A CASE=(
    [data]="b.txt|" [data-format]="text|" [val-data]="v.txt|" [val-split]="0.1|"
    [eval-every]="5|--val-split 0.1" [eval-batches]="2|--val-split 0.1"
    [ctx]="32|" [max-ctx]="128|" [vocab]="300|" [layers]="2|" [heads]="2|" [dim]="64|"
    [kv-heads]="1|--model llama-tiny" [ffn-hidden]="128|--model llama-tiny"
    [multiple-of]="64|--model llama-tiny --ffn-hidden 0" [ffn-dim-multiplier]="1.5|--model llama-tiny --ffn-hidden 0"
    [norm-eps]="1e-6|--model llama-tiny" [rope-theta]="500000|--model llama-tiny"
    [tied]="|--model llama-tiny" [untied]="|--model llama-100m"
    [experts]="4|--model llama-tiny" [top-k]="1|--model moe-tiny" [capacity-factor]="2|--model moe-tiny"
    [dropless]="|--model moe-tiny" [shared-experts]="1|--model moe-tiny" [moe-every]="2|--model moe-tiny"
    [router]="sigmoid|--model moe-tiny" [aux-loss]="0.01|--model moe-tiny" [balance-bias]="0.001|--model moe-tiny"
    [micro-batch]="2|" [microbatches]="4|" [steps]="7|" [lr]="0.002|" [lr-schedule]="cosine|" [warmup]="3|"
    [decay-steps]="50|--lr-schedule cosine" [min-lr]="1e-5|--lr-schedule cosine" [log-every]="10|"
    [model]="llama-tiny|" [weight-decay]="0.1|" [beta1]="0.8|" [beta2]="0.99|" [eps]="1e-6|" [clip]="1|"
    [optimizer]="sgd|" [seed]="7|" [data-order]="sequential|" [init]="x.st|" [save]="out.st|"
    [save-every]="5|--save s.st" [keep]="2|" [save-weights-only]="|" [resume]="ck.st|"
    [save-optimizer]="o.st|" [init-optimizer]="o.st|--init x.st" [threads]="2|" [device]="cuda|"
    [tf32]="|--device cuda" [dtype]="bf16|" [bf16-policy]="all|--dtype bf16" [fused-head]="|" [doc-sep]="46|" [doc-pos-reset]="|--doc-sep 46" [pp]="2|" [dp]="2|" [zero1]="|--dp 2" [zero]="2|--dp 2" [reshard-after-forward]="|--dp 2 --zero 3" [tp]="2|" [sp]="|--tp 2" [cp]="2|--dp 2" [ep]="2|--model moe-tiny --dp 2" [no-a2a-overlap]="|--model moe-tiny --dp 2 --ep 2"
    [virtual]="2|--pp 2" [schedule]="zb-h1|" [remat]="|" [recompute]="pointwise|" [auto-stages]="|" [stage-costs]="measured|--auto-stages"
    [stage-mem-limit]="1e9|--auto-stages" [no-mem-check]="|" [mem-limit]="1e9|" [json]="|" [trace]="t.json|"
    [profile]="|" [peak-flops]="1e12|" [profile-out]="p.json|" [json-summary]="|--json"
)
SKIP=" config print-config help "

expect_ok "$PIPIT" train --help || exit 1
mapfile -t FLAGS < <(sed -n 's/^  --\([a-z0-9-]*\) .*/\1/p' <<<"$OUT")
[ "${#FLAGS[@]}" -ge 60 ] || fail "only ${#FLAGS[@]} flags in pipit train --help: $OUT"

key_of() { # key_of KEY JSON: the key's value as JSON, or nothing
    $PY -c 'import json,sys; d=json.loads(sys.argv[2]); print(json.dumps(d[sys.argv[1]]) if sys.argv[1] in d else "")' "$1" "$2"
}
n=0
for f in "${FLAGS[@]}"; do
    [[ $SKIP == *" $f "* ]] && continue
    if [ -z "${CASE[$f]+x}" ]; then
        fail "--$f: no test value here; add it to CASE (and make --print-config print it)"
        continue
    fi
    value=${CASE[$f]%%|*} context=${CASE[$f]#*|}
    given=(--"$f")
    [ -n "$value" ] && given+=("$value")
    # shellcheck disable=SC2206
    ctx=($context)
    expect_ok "$PIPIT" train "${ctx[@]}" --print-config || continue
    without=$OUT
    expect_ok "$PIPIT" train "${ctx[@]}" "${given[@]}" --print-config || continue
    printed=$OUT
    [ -n "$(key_of "$f" "$printed")" ] || fail "--$f ${value}: no \"$f\" in --print-config: $printed"
    [ "$printed" != "$without" ] || fail "--$f ${value}: --print-config is the same as without it: $printed"
    printf '%s\n' "$printed" >printed.json
    expect_ok "$PIPIT" train --config printed.json --print-config || continue
    [ "$OUT" = "$printed" ] || fail "--$f ${value}: --config of the printed config prints another:"$'\n'"  $printed"$'\n'"  $OUT"
    n=$((n + 1))
done
echo "$n flags printed and read back"

if [ "$failures" -ne 0 ]; then
    echo "test_cli_config_roundtrip: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli_config_roundtrip: ok"
