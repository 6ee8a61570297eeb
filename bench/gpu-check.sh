#!/usr/bin/env bash
# bench/gpu-check.sh: envgen on one NVIDIA GPU in one call, within $BUDGET seconds
# (default 530: under 9 minutes). Made for an H100 with driver 580, CUDA 13.0 and
# PyTorch in /opt/torch/.venv (or $PY). Run from anywhere inside the repository:
#
#   bash bench/gpu-check.sh                  # OUT=/some/dir BUDGET=530 ONLY=all|gpt2|hrm
#   CHECK_ONLY=1 bash bench/gpu-check.sh     # or --dry-run: no GPU needed (see below)
#
# Steps, each under `timeout` (a failure or a timeout loses only that step):
#   1. cuda_check: an independent ctypes check (libcuda, NVRTC, headers, a bf16
#      wmma kernel), nvidia-smi, `envgen doctor --json` (envgen's own verdict)
#   2. envgen_cuda_tiny: a 1-step `envgen run gpt2 --preset tiny --backend cuda`
#      (envgen's readiness check, then its smallest real training step; warm
#      kernel cache only: cold, its compilation would eat the gpt2-124m budget)
#   3. gpt2-124m bf16 on envgen's generated corpus: with a cold kernel cache
#      first a 2-step run that compiles (its first step is the compile time),
#      then fixed steps, then its PyTorch twin (bench/pytorch_gpt2_bench.py)
#      eager at the same micro-batch, its last step under torch.profiler, then
#      3 envgen steps with CubeCL's per-kernel profiling (bench/gpu_check/
#      cubecl_kernels.py sums it): where each side's GPU time goes
#   4. HRM sudoku-extreme-1k bf16 (--stop-after N), then its twin
#   5. the gpt2 twin under torch.compile, then `envgen tune` (micro-batch tuner)
#      with the time left
# Output: one JSON object per line in $OUT/results.jsonl (the last: envgen/PyTorch
# ratios), every command's stdout/stderr in $OUT/logs/, the small files of each
# run directory in $OUT/logs/<step>/, the kernel breakdowns in
# $OUT/logs/{cubecl_kernels,torch_gpt2_124m_profile}.txt. At the end logs/ is
# packed into $OUT/logs.tgz (BUNDLE=0 keeps the folder): a machine lent by a
# tool that returns only a few files gives back all of it. Run directories
# (checkpoints: ~2 GB for gpt2-124m) go to $RUNS, outside $OUT.
#
# envgen finds NVRTC and the CUDA headers itself ($CUDA_PATH, /usr/local/cuda*, the
# nvidia/cu13 folders of Python environments): this script sets no CUDA paths. It
# sets ENVGEN_CACHE_DIR to $OUT/../envgen-cache, so a second call reuses the
# compiled kernels and autotune results (a cold first run compiles ~300-400
# kernels with NVRTC on one thread: minutes).
#
# CHECK_ONLY=1 (or --dry-run): `bash -n` of this script, a syntax check of the Python
# it runs, and every envgen command it would run with `--dry-run` (doctor: for
# real), printing `ok NAME` or `FAILED NAME`; exit 1 if any failed. The test
# tests/it/gpu/gpu_check.rs runs this mode.
#
# With an empty kernel cache and ONLY unset, only the gpt2 steps run (a cold
# cache leaves no time for hrm; see below): call again with ONLY=hrm.
#
# SEED=DIR (default: .gpu-carry/kernel-seed.tgz unpacked, when it exists): a kernel cache made
# without the GPU by `envgen warmup --target` (bench/gpu-carry.sh makes it). An
# empty ENVGEN_CACHE_DIR is then seeded from it (ENVGEN_KERNEL_SEED), the cache
# counts as warm, and the first gpt2-124m run comes first, on its own: its
# summary's kernel_cache says how many kernels this GPU found there (hits) and
# how many it still compiled (the kernel-id parity of the stand-in), and
# first_step_s the seconds to its first training step. The autotune results
# this call's runs record are packed into $OUT/autotune.tgz, to be committed
# under env/autotune/ (docs/running.md).
#
# Knobs (env): ONLY BUNDLE=1 PROFILE=1 GPT2_MB=16 GPT2_GB=128 GPT2_STEPS=6 HRM_MB=384 HRM_STEPS=8
#   PT_STEPS=6 PT_WARMUP=2 SKIP_FIRST=2 (envgen steps left out of medians: compile
#   and autotune) BUDGET OUT RUNS ENVGEN PY ENVGEN_CACHE_DIR SEED
set -u
T0=$(date +%s)
CHECK_ONLY=${CHECK_ONLY:-0}
[ "${1:-}" = "--dry-run" ] && CHECK_ONLY=1
BUDGET=${BUDGET:-530}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
cd "$ROOT" || exit 1
OUT=${OUT:-$ROOT/gpu-check-out}
RUNS=${RUNS:-$(dirname "$OUT")/gpu-check-runs}
export ENVGEN_CACHE_DIR=${ENVGEN_CACHE_DIR:-$(dirname "$OUT")/envgen-cache}
# envgen tune writes its profile file here, not into the user's ~/.config.
export ENVGEN_CONFIG_DIR=${ENVGEN_CONFIG_DIR:-$OUT/config}
mkdir -p "$OUT/logs"
[ "$CHECK_ONLY" = 1 ] || mkdir -p "$RUNS" "$ENVGEN_CACHE_DIR"
RES="$OUT/results.jsonl"
: > "$RES"
GPT2_MB=${GPT2_MB:-16}; GPT2_GB=${GPT2_GB:-128}; GPT2_STEPS=${GPT2_STEPS:-6}
HRM_MB=${HRM_MB:-384}; HRM_STEPS=${HRM_STEPS:-8}
PT_STEPS=${PT_STEPS:-6}; PT_WARMUP=${PT_WARMUP:-2}; SKIP_FIRST=${SKIP_FIRST:-2}
RECORD="$HERE/gpu_check/record.py"

E=${ENVGEN:-}
if [ -z "$E" ]; then
  for c in ./envgen .gpu-carry/envgen target/release/envgen target/debug/envgen; do
    [ -x "$c" ] && { E=$c; break; }
  done
fi
PY=${PY:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3 || echo python3)

# --- helpers -----------------------------------------------------------------------
FAILED=0
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
emit() { "$PY" "$RECORD" "$@" >> "$RES" 2>> "$OUT/logs/record.err"; tail -n 1 "$RES" | cut -c1-400; }
skip() { # skip NAME REASON
  : > "$OUT/logs/$1.out"; : > "$OUT/logs/$1.err"
  emit skip "$1" 0 0 "$OUT/logs/$1.out" "$OUT/logs/$1.err" "{\"reason\": \"$2\"}"
}
# check_only NAME -- CMD...: CHECK_ONLY's version of a step (envgen run/tune get --dry-run).
check_only() {
  local name=$1; shift 2
  local cmd=("$@")
  case "${cmd[0]}" in
    "$E") case "${cmd[1]}" in run|tune|probe) cmd+=(--dry-run) ;; esac ;;
    *) echo "skip $name (not envgen: ${cmd[*]:0:2})"; return 0 ;;
  esac
  if timeout 60 "${cmd[@]}" > "$OUT/logs/$name.out" 2> "$OUT/logs/$name.err"; then
    echo "ok $name: ${cmd[*]:1}"
  else
    echo "FAILED $name (exit $?): ${cmd[*]:1}"; cat "$OUT/logs/$name.err"; FAILED=1
  fi
}
# step KIND NAME CAP RESERVE EXTRA_JSON -- CMD...: run CMD under timeout
# min(CAP, time left - RESERVE), RESERVE being what the later steps need.
step() {
  local kind=$1 name=$2 cap=$3 reserve=$4 extra=$5; shift 5
  if [ "$CHECK_ONLY" = 1 ]; then check_only "$name" "$@"; return 0; fi
  shift
  local l allowed s e rc d
  l=$(left); allowed=$(( l - reserve )); [ "$allowed" -gt "$cap" ] && allowed=$cap
  if [ "$allowed" -lt 10 ]; then
    skip "$name" "no time left ($l s, $reserve s kept for later steps)"; return 99
  fi
  echo "== $name (timeout ${allowed}s, $l s left): $*" | cut -c1-300
  s=$(date +%s%N)
  timeout -k 10 "$allowed" "$@" > "$OUT/logs/$name.out" 2> "$OUT/logs/$name.err"; rc=$?
  e=$(date +%s%N)
  emit "$kind" "$name" "$rc" "$(( (e - s) / 1000000 ))" "$OUT/logs/$name.out" "$OUT/logs/$name.err" "$extra"
  d=$(sed -n 's/^envgen: run directory //p' "$OUT/logs/$name.err" | head -1)
  if [ -n "$d" ] && [ -d "$d" ]; then
    mkdir -p "$OUT/logs/$name"
    cp "$d"/metrics.jsonl "$d"/manifest.json "$d"/summary.json "$d"/config.toml "$OUT/logs/$name/" 2>/dev/null
  fi
  return $rc
}

# --- 0. what is here -----------------------------------------------------------------
if [ "$CHECK_ONLY" = 1 ]; then
  [ -n "$E" ] || { echo "FAILED: no envgen binary (set ENVGEN)"; exit 1; }
  if bash -n "$0"; then echo "ok bash -n"; else echo "FAILED bash -n"; FAILED=1; fi
  for f in "$HERE"/gpu_check/*.py "$HERE"/pytorch_gpt2_bench.py "$HERE"/pytorch_hrm_bench.py; do
    if "$PY" -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$f" 2> "$OUT/logs/syntax.err"
    then echo "ok python syntax $(basename "$f")"
    else echo "FAILED python syntax $f"; cat "$OUT/logs/syntax.err"; FAILED=1; fi
  done
else
  {
    echo "root=$ROOT envgen=$E python=$PY ENVGEN_CACHE_DIR=$ENVGEN_CACHE_DIR"
    echo "CUDA_PATH=${CUDA_PATH:-} LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    ls -d /usr/local/cuda* 2>/dev/null
    ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc|libnvidia-ml\.so' | head -20
    [ -n "$E" ] && { ls -la "$E"; "$E" --version; }
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1
    du -sh "$ENVGEN_CACHE_DIR" 2>/dev/null && echo "(kernel cache above: warm if not empty)"
  } > "$OUT/logs/env.txt" 2>&1
  "$PY" -c 'import json, sys; print(json.dumps({"name": "env", "kind": "env", "budget_s": int(sys.argv[2]), "lines": open(sys.argv[1], errors="replace").read().splitlines()[:40]}))' \
    "$OUT/logs/env.txt" "$BUDGET" >> "$RES"
  cat "$OUT/logs/env.txt"
  [ -n "$E" ] || echo "WARNING: no envgen binary found (set ENVGEN); envgen steps will fail" >&2
fi

# What runs, and the least time each later step needs (an earlier step's timeout
# leaves them that much). The envgen-vs-eager pairs come first; torch.compile and
# the tuner get what is left.
ONLY=${ONLY:-all}
# A cold kernel cache does not leave time for both models: on an H200
# (2026-11-26) every envgen step of a cold ONLY=all call ran out of time
# while NVRTC compiled, one kernel at a time, with the GPU idle
# (docs/benchmarks.md, "First contact with a real GPU"). Cold, the default
# becomes gpt2 alone; the next call on the same machine (warm cache) can run hrm.
COLD=0
SEED=${SEED:-}
if [ -z "$SEED" ] && [ -f "$ROOT/.gpu-carry/kernel-seed.tgz" ] && [ "$CHECK_ONLY" != 1 ]; then
  SEED=$(dirname "$OUT")/kernel-seed
  mkdir -p "$SEED" && tar xzf "$ROOT/.gpu-carry/kernel-seed.tgz" -C "$SEED"
fi
SEEDED=0
if [ "$CHECK_ONLY" != 1 ] && [ -z "$(ls -A "$ENVGEN_CACHE_DIR" 2>/dev/null)" ]; then
  if [ -n "$SEED" ]; then export ENVGEN_KERNEL_SEED=$SEED; SEEDED=1; else COLD=1; fi
fi
if [ "$ONLY" = all ] && [ "$COLD" = 1 ]; then
  echo "cold kernel cache ($ENVGEN_CACHE_DIR is empty): gpt2 only in this call; call again with ONLY=hrm"
  ONLY=gpt2
fi
PROFILE=${PROFILE:-1}
G=0; H=0
case "$ONLY" in gpt2) G=1 ;; hrm) H=1 ;; *) G=1; H=1 ;; esac
# Cold, gpt2-124m's compiling run took 271 s on an H100 (2026-11-26: 110 s for
# the step-0 evaluation's kernels, 147 s for the first training step's).
M_G2C=$((G*COLD*300)) M_G2=$((G*120)) M_PTE=$((G*45)) M_HRM=$((H*120)) M_PTH=$((H*40))
M_ALL=$((M_G2C + M_G2 + M_PTE + M_HRM + M_PTH))

# --- 1. the stack: ctypes second opinion, nvidia-smi, envgen doctor ------------------
step check cuda_check 30 $((M_ALL + 60)) '{}' -- "$PY" "$HERE/gpu_check/cuda_check.py"
step smi nvidia_smi 15 $((M_ALL + 50)) '{}' -- \
  nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version,pstate,power.limit --format=csv,noheader,nounits
step doctor envgen_doctor 30 $((M_ALL + 40)) '{}' -- "$E" doctor --json
[ "$CHECK_ONLY" = 1 ] || timeout 30 "$E" doctor > "$OUT/logs/envgen_doctor_human.txt" 2>&1

# --- 2. envgen's readiness check and one real step (tiny gpt2) ------------------------
if [ "$COLD" = 1 ]; then
  skip envgen_cuda_tiny "cold kernel cache: its compilation would eat gpt2-124m's time"
else
  step envgen envgen_cuda_tiny 150 $M_ALL '{"skip_first": 0}' -- \
    "$E" run gpt2 --preset tiny --backend cuda --set train.steps=1 --out "$RUNS" --json
fi

# --- 3. GPT-2 124M, bf16: envgen, then the PyTorch twin (eager) -----------------------
# Same model, micro-batch and global batch on both sides. The preset trains on
# FineWeb shards ([data].path); here envgen's generated corpus stands in
# (data.source=generated: throughput does not depend on the tokens; the twin draws
# random tokens). SKIP_FIRST steps (NVRTC compile, autotune) stay out of the median.
GPT2_124M=(run gpt2 --preset gpt2-124m --backend cuda --precision bf16 --micro-batch "$GPT2_MB"
  --set data.source=generated --set train.batch_size="$GPT2_GB"
  --set train.eval_every=100000 --set train.checkpoint_every=100000 --out "$RUNS" --json)
if [ "$G" = 1 ]; then
  if [ "$SEEDED" = 1 ]; then
    # The first run on the seeded cache, on its own: hits, compiled, first_step_s.
    step envgen envgen_gpt2_124m_seeded 330 $((M_G2 + M_PTE + M_HRM + M_PTH)) \
      "{\"skip_first\": 0, \"micro_batch\": $GPT2_MB, \"global_batch\": $GPT2_GB, \"seed\": \"$SEED\"}" -- \
      "$E" "${GPT2_124M[@]}" --set train.steps=2
  fi
  if [ "$COLD" = 1 ] || [ "$CHECK_ONLY" = 1 ]; then
    # Its step 1 is the compile time (kernels and autotune), on its own.
    step envgen envgen_gpt2_124m_cold 330 $((M_G2 + M_PTE + M_HRM + M_PTH)) \
      "{\"skip_first\": 0, \"micro_batch\": $GPT2_MB, \"global_batch\": $GPT2_GB}" -- \
      "$E" "${GPT2_124M[@]}" --set train.steps=2
  fi
  step envgen envgen_gpt2_124m 300 $((M_PTE + M_HRM + M_PTH)) \
    "{\"skip_first\": $SKIP_FIRST, \"micro_batch\": $GPT2_MB, \"global_batch\": $GPT2_GB}" -- \
    "$E" run gpt2 --preset gpt2-124m --backend cuda --precision bf16 --micro-batch "$GPT2_MB" \
    --set data.source=generated --set train.batch_size="$GPT2_GB" --set train.steps="$GPT2_STEPS" \
    --set train.eval_every=100000 --set train.checkpoint_every=100000 --out "$RUNS" --json
  step torch torch_gpt2_124m_eager 90 $((M_HRM + M_PTH)) '{}' -- \
    "$PY" bench/pytorch_gpt2_bench.py --preset gpt2-124m --device cuda --dtype bf16 \
    --micro-batch "$GPT2_MB" --global-batch "$GPT2_GB" --fused-adamw --steps "$PT_STEPS" --warmup "$PT_WARMUP" \
    --profile "$OUT/logs/torch_gpt2_124m_profile.txt"
  # CubeCL times every launch on its own here (slower than the run above):
  # the shares are the point. The environment overrides are CubeCL's own.
  if [ "$PROFILE" = 1 ] && { [ "$CHECK_ONLY" = 1 ] || [ "$(left)" -ge $((M_HRM + M_PTH + 60)) ]; }; then
    CUBECL_DEBUG_LOG="$OUT/logs/cubecl.log" CUBECL_DEBUG_OPTION=profile \
      step envgen envgen_gpt2_124m_kernels 90 $((M_HRM + M_PTH)) \
      "{\"skip_first\": 1, \"micro_batch\": $GPT2_MB, \"profiled\": true}" -- \
      "$E" "${GPT2_124M[@]}" --set train.steps=3
    [ "$CHECK_ONLY" = 1 ] || "$PY" "$HERE/gpu_check/cubecl_kernels.py" "$OUT/logs/cubecl.log" \
      > "$OUT/logs/cubecl_kernels.txt" 2>&1
    [ -f "$OUT/logs/cubecl.log" ] && gzip -f "$OUT/logs/cubecl.log"
  fi
fi

# --- 4. HRM on sudoku-extreme-1k, bf16: envgen, then the PyTorch twin -----------------
# The HRM config has no train.steps (train.epochs sets the length): --stop-after N
# ends the run after N steps (checkpoint, exit 130), before the final evaluation.
if [ "$H" = 1 ]; then
  step envgen envgen_hrm_sudoku_extreme_1k 300 $M_PTH \
    "{\"skip_first\": $SKIP_FIRST, \"micro_batch\": $HRM_MB}" -- \
    "$E" run hrm-sudoku --preset sudoku-extreme-1k --backend cuda --precision bf16 \
    --micro-batch "$HRM_MB" --stop-after "$HRM_STEPS" --out "$RUNS" --json
  step torch torch_hrm_sudoku_extreme_1k_eager 90 0 '{}' -- \
    "$PY" bench/pytorch_hrm_bench.py --preset sudoku-extreme-1k --device cuda --dtype bf16 \
    --micro-batch "$HRM_MB" --steps "$HRM_STEPS" --warmup 3
fi

# --- 5. with the time left: the torch.compile twin, then the tuner --------------------
if [ "$G" = 1 ]; then
  if [ "$CHECK_ONLY" = 1 ] || [ "$(left)" -ge 90 ]; then
    step torch torch_gpt2_124m_compile 240 0 '{}' -- \
      "$PY" bench/pytorch_gpt2_bench.py --preset gpt2-124m --device cuda --dtype bf16 \
      --micro-batch "$GPT2_MB" --global-batch "$GPT2_GB" --fused-adamw --steps "$PT_STEPS" \
      --warmup "$PT_WARMUP" --compile
  else
    skip torch_gpt2_124m_compile "under 90 s left; rerun with ONLY=gpt2"
  fi
  # The micro-batch tuner: a few trial runs (child envgens) at the global batch
  # above; it writes its profile into $ENVGEN_CONFIG_DIR.
  if [ "$CHECK_ONLY" = 1 ] || [ "$(left)" -ge 60 ]; then
    # (Kind `probe` and name envgen_probe_gpt2_124m are results.jsonl keys, kept
    # from before `envgen probe` was renamed `envgen tune`.)
    step probe envgen_probe_gpt2_124m 240 0 '{}' -- \
      "$E" tune gpt2 --preset gpt2-124m --backend cuda --precision bf16 \
      --set data.source=generated --set train.batch_size="$GPT2_GB" \
      --set train.eval_every=100000 --micro-batches 8,16,32 --steps 2 --json
  else
    skip envgen_probe_gpt2_124m "under 60 s left; rerun with ONLY=gpt2 (kernels are cached now)"
  fi
fi

if [ "$CHECK_ONLY" = 1 ]; then
  [ "$FAILED" = 0 ] && echo "all commands valid" || echo "FAILED: some commands are invalid"
  exit "$FAILED"
fi

# --- 6. ratios ---------------------------------------------------------------------------
"$PY" "$RECORD" compare "$RES" >> "$RES"
tail -n 1 "$RES"
head -n 12 "$OUT/logs/cubecl_kernels.txt" 2>/dev/null | cut -c1-160
# The autotune results this GPU recorded, for env/autotune/ (see SEED above).
( cd "$ENVGEN_CACHE_DIR" && ls -d cubecl/*/autotune >/dev/null 2>&1 \
  && tar czf "$OUT/autotune.tgz" cubecl/*/autotune cubecl/*/envgen-warmup.json 2>/dev/null )
if [ "${BUNDLE:-1}" = 1 ]; then
  tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs" && echo "logs: $OUT/logs.tgz"
fi
echo "results: $RES ($(wc -l < "$RES") lines, $(( $(date +%s) - T0 )) s)"
