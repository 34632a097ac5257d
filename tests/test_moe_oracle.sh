#!/usr/bin/env bash
# test_moe_oracle.sh — pipit's Hugging Face mixtures of experts (Mixtral,
# Qwen2-MoE) and Qwen2 against transformers.
#
# Usage: bash tests/test_moe_oracle.sh <pipit binary> <source dir>
#
# The oracle is tests/moe_torch.py: transformers' MixtralForCausalLM,
# Qwen2MoeForCausalLM and Qwen2ForCausalLM when the Python has them
# ($PIPIT_HF_PYTHON, default /tmp/venv-hf/bin/python), else the straight
# PyTorch models in that file (Debian's /usr/bin/python3 with torch: CI);
# the log says which ran. Tiny models (2 layers, GQA; 4 experts top-2,
# dropless as transformers computes; Qwen2-MoE with a gated shared expert,
# norm_topk_prob true, and false (its default) in the balance-loss case;
# Qwen2's q/k/v biases) are written as save_pretrained folders (by hand
# without transformers), then:
#   - `pipit eval --init DIR/model.safetensors` (config.json beside it) =
#     the oracle's loss within 1e-5 relative;
#   - 5 AdamW steps (weight decay, clipping) from the folder, pipit vs the
#     oracle: every loss and final parameter within tests/oracle_compare.py's
#     bounds (the Llama oracle's), with the balance loss off and on
#     (output_router_logits, router_aux_loss_coef 0.02; pipit's term is the
#     per-layer sum, which the oracle computes with transformers' own
#     load_balancing_loss_func one layer at a time);
#   - `pipit export --hf` of the trained weights loads in transformers with no
#     missing, unexpected or mismatched tensor, its loss = pipit eval's; the
#     same for pipit's own stacked experts (--experts --dropless, balance
#     loss on) exported under Mixtral's names (shared experts refused);
#   - what pipit lacks is refused naming it: a Qwen2 file without its
#     config.json, mlp_only_layers, router jitter, another model_type.
# Exits 77 when no Python can import torch. ORACLE_KEEP=1 keeps the work dir.
set -u

PIPIT=${1:?usage: test_moe_oracle.sh <pipit binary> <source dir>}
SRC=$(realpath -- "${2:?usage: test_moe_oracle.sh <pipit binary> <source dir>}")
ORACLE="$SRC/tests/moe_torch.py"

PY=${PIPIT_HF_PYTHON:-/tmp/venv-hf/bin/python}
HF=1
if ! [ -x "$PY" ] || ! "$PY" -c 'import torch, numpy, transformers' >/dev/null 2>&1; then
    HF=0
    PY=/usr/bin/python3
    if ! [ -x "$PY" ] || ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
        echo "SKIP: no python with torch and numpy (neither \$PIPIT_HF_PYTHON nor $PY)"
        exit 77
    fi
fi
[ -x "$PIPIT" ] || { echo "FAIL: pipit binary '$PIPIT' is not executable"; exit 1; }
PIPIT=$(realpath -- "$PIPIT")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_moe_oracle.XXXXXX")
cleanup() { if [ "${ORACLE_KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
cd "$WORK" || exit 1
status=0
fail() { echo "FAIL: $*"; status=1; }

if [ $HF = 1 ]; then echo "oracle: transformers ($PY)"
else echo "oracle: the straight PyTorch models of tests/moe_torch.py ($PY: no transformers)"; fi
"$PY" "$ORACLE" --selftest > selftest.log 2>&1 || { cat selftest.log; echo "FAIL: oracle selftest"; exit 1; }
grep -h "^selftest" selftest.log
"$PY" "$SRC/tests/oracle_text.py" || { echo "FAIL: cannot write data"; exit 1; }

EVAL=(--data data.txt --ctx 16 --micro-batch 2 --batches 4)
TRAIN=(--data data.txt --ctx 16 --micro-batch 2 --microbatches 2 --steps 5 --lr 1e-3 --weight-decay 0.1 --clip 1.0)
CASES="mixtral qwen2_moe qwen2 mixtral_aux qwen2_moe_aux"

for c in $CASES; do
    aux=0; case $c in *_aux) aux=0.02 ;; esac
    norm=(); [ "$c" = qwen2_moe_aux ] && norm=(--no-norm-topk) # norm_topk_prob false: the k weights as they are
    "$PY" "$ORACLE" --make "${c%_aux}" "hf_$c" --aux $aux --seed 3 "${norm[@]}" > "make_$c.log" 2>&1 \
        || { cat "make_$c.log"; fail "could not write the $c folder"; continue; }
    "$PIPIT" train --init "hf_$c/model.safetensors" "${TRAIN[@]}" --data-order sequential --json \
        --save-weights-only --save "pipit_$c.st" > "pipit_$c.log" 2> "pipit_$c.err" \
        || { cat "pipit_$c.log" "pipit_$c.err"; fail "pipit train ($c)"; continue; }
    "$PY" "$ORACLE" --train "hf_$c" "${TRAIN[@]}" --json --save "torch_$c.st" > "torch_$c.log" 2> "torch_$c.err" \
        || { cat "torch_$c.log" "torch_$c.err"; fail "oracle train ($c)"; continue; }
    "$PY" "$SRC/tests/oracle_compare.py" adamw "pipit_$c.log" "torch_$c.log" "pipit_$c.st" "torch_$c.st" \
        | sed "s/^\[adamw\]/[adamw $c]/" || fail "$c: pipit's 5 steps differ from the oracle"
    "$PIPIT" export --hf "export_$c" --init "pipit_$c.st" > "export_$c.log" 2>&1 \
        || { cat "export_$c.log"; fail "export ($c)"; }
done

# pipit's own stacked experts (--experts, dropless, the balance loss on) exported under Mixtral's names
STACKED=(--model llama-tiny --ctx 16 --layers 2 --heads 4 --kv-heads 2 --dim 32 --ffn-hidden 24 --experts 4 --top-k 2
         --dropless --aux-loss 0.02 --micro-batch 2 --seed 5)
"$PIPIT" train --data data.txt "${STACKED[@]}" --steps 2 --save-weights-only --save stacked.st > stacked.log 2>&1 \
    || { cat stacked.log; fail "pipit train (stacked experts)"; }
"$PIPIT" export --hf export_stacked --init stacked.st > export_stacked.log 2>&1 \
    || { cat export_stacked.log; fail "export (stacked experts)"; }
grep -q '"model_type": "mixtral"' export_stacked/config.json || fail "stacked experts not exported as mixtral"

# the oracle's losses of the folders and of pipit's exports, in one run
targets="export_stacked"
for c in $CASES; do targets="$targets hf_$c export_$c"; done
# shellcheck disable=SC2086
"$PY" "$ORACLE" --eval $targets "${EVAL[@]}" > eval.log 2> eval.err || { cat eval.log eval.err; fail "oracle eval"; }
# same_loss NAME PIPIT_FILE TARGET: pipit eval of the file = the oracle's loss of TARGET within 1e-5 relative
same_loss() {
    local got
    got=$("$PIPIT" eval --init "$2" "${EVAL[@]}" --json 2> "eval_pipit.err") || { cat eval_pipit.err; return 1; }
    "$PY" - "$1" "$got" "$3" <<'EOF'
import json, sys
name, a, target = sys.argv[1], json.loads(sys.argv[2])["loss"], sys.argv[3]
got = [json.loads(l) for l in open("eval.log") if l.startswith("{")]
b = [g for g in got if g["eval"] == target]
if not b:
    sys.exit(f"[{name}] the oracle did not evaluate {target}")
b = b[0]
rel = abs(a - b["loss"]) / abs(b["loss"])
aux = f" (balance term: pipit's per-layer sum {b['aux_layers']:.6g}, transformers' own {b['aux_transformers']:.6g})" \
    if b["aux_layers"] else ""
print(f"[{name}] pipit {a:.9g} oracle {b['loss']:.9g} rel {rel:.2e} {'ok' if rel <= 1e-5 else 'MISMATCH'}{aux}")
sys.exit(rel > 1e-5)
EOF
}
for c in $CASES; do
    same_loss "$c folder, pipit eval vs oracle" "hf_$c/model.safetensors" "hf_$c" || fail "$c: pipit eval of the folder"
    [ -f "pipit_$c.st" ] || continue
    same_loss "$c pipit export --hf, oracle vs pipit eval" "pipit_$c.st" "export_$c" || fail "$c: the exported folder"
done
same_loss "pipit's stacked experts, export --hf as Mixtral, oracle vs pipit eval" stacked.st export_stacked \
    || fail "stacked experts: the exported folder"
grep -q '"architectures": \["Qwen2MoeForCausalLM"\]' export_qwen2_moe/config.json || fail "export of qwen2_moe is not Qwen2MoeForCausalLM"
grep -q '"model_type": "mixtral"' export_mixtral/config.json || fail "export of mixtral is not model_type mixtral"
grep -q '"output_router_logits": true' export_mixtral_aux/config.json || fail "export lost the balance loss"
grep -q '"norm_topk_prob": false' export_qwen2_moe_aux/config.json || fail "export lost norm_topk_prob false"
grep -q '"norm_topk_prob": true' export_qwen2_moe/config.json || fail "export lost norm_topk_prob true"

# refusals, each naming what pipit lacks
refused() { # NAME WORD FILE [pipit eval flags...]: pipit eval of FILE fails naming WORD
    local name=$1 word=$2 file=$3 out; shift 3
    if out=$("$PIPIT" eval --init "$file" "${EVAL[@]}" "$@" 2>&1); then fail "$name: accepted"; return; fi
    echo "$out" | grep -q -- "$word" && echo "[refused] $name: $(echo "$out" | grep -m1 -- "$word" | cut -c1-160)" \
        || fail "$name: the refusal does not name $word: $out"
}
mkdir -p lone && cp hf_qwen2/model.safetensors lone/qwen2.safetensors
refused "Qwen2 weights without config.json" "q_proj.bias" lone/qwen2.safetensors --heads 4
edit_config() { # SRC DST PYTHON-EXPR-ON-c
    rm -rf "$2" && cp -r "$1" "$2" && "$PY" - "$2/config.json" "$3" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(c, open(sys.argv[1], "w"))
EOF
}
edit_config hf_qwen2_moe q_only 'c["mlp_only_layers"] = [1]'
refused "Qwen2-MoE mlp_only_layers" mlp_only_layers q_only/model.safetensors
edit_config hf_mixtral m_jit 'c["router_jitter_noise"] = 0.1'
refused "Mixtral router jitter" router_jitter_noise m_jit/model.safetensors
edit_config hf_mixtral m_type 'c["model_type"] = "deepseek_v3"'
refused "another model type" model_type m_type/model.safetensors
"$PIPIT" train --data data.txt "${STACKED[@]}" --shared-experts 1 --steps 0 --save-weights-only --save shared.st \
    > shared.log 2>&1 || { cat shared.log; fail "pipit train (stacked, shared expert)"; }
if out=$("$PIPIT" export --hf export_shared --init shared.st 2>&1); then fail "export of stacked shared experts accepted"
else echo "$out" | grep -q "no Hugging Face model" && echo "[refused] export of stacked shared experts: $out" \
    || fail "export of stacked shared experts: $out"; fi

[ $status = 0 ] && echo "PASS: pipit's Mixtral, Qwen2-MoE and Qwen2 match the oracle" \
    || echo "FAIL: pipit's Hugging Face MoE models differ from the oracle"
exit $status
