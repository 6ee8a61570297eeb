#!/usr/bin/env bash
# bench/gpu-carry.sh: what a call of bench/gpu-check.sh on a lent GPU machine
# carries there, made here without a GPU, in .gpu-carry/ (add `/.gpu-carry/` to
# .git/info/exclude; the device tool carries it as an ignored path):
#   - envgen: a stripped release build of this checkout;
#   - kernel-seed.tgz: the kernel cache of every envgen run gpu-check.sh makes,
#     compiled for the target GPU by `envgen warmup --target` (NVRTC, the
#     stand-in driver, ptxas), so the GPU's first step compiles nothing.
#
#   bash bench/gpu-carry.sh                 # TARGET=h100-sxm (a name from env/gpu_devices.toml)
#
# Needs NVRTC, the CUDA headers and ptxas (a toolkit, or NVIDIA's PyPI wheels:
# `pip install -r scripts/test-cuda-requirements.txt` and CUDA_PATH at their
# nvidia/cu13 folder). The warmups mirror gpu-check.sh's runs (same presets,
# precision, micro-batch and global batch: kernels depend on the shapes).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
cd "$ROOT"
TARGET=${TARGET:-h100-sxm}
GPT2_MB=${GPT2_MB:-16}; GPT2_GB=${GPT2_GB:-128}; HRM_MB=${HRM_MB:-384}
CARRY=$ROOT/.gpu-carry
mkdir -p "$CARRY"

cargo build --release --locked
strip -o "$CARRY/envgen" target/release/envgen
E=$CARRY/envgen

SEED=$(mktemp -d)
trap 'rm -rf "$SEED"' EXIT
export ENVGEN_CACHE_DIR=$SEED
time "$E" warmup gpt2 --preset tiny --target "$TARGET" --json
time "$E" warmup gpt2 --preset gpt2-124m --target "$TARGET" --precision bf16 \
  --micro-batch "$GPT2_MB" --set data.source=generated --set train.batch_size="$GPT2_GB" \
  --set train.eval_every=100000 --set train.checkpoint_every=100000 --json
time "$E" warmup hrm-sudoku --preset sudoku-extreme-1k --target "$TARGET" --precision bf16 \
  --micro-batch "$HRM_MB" --steps 1 --json
tar czf "$CARRY/kernel-seed.tgz" -C "$SEED" .
du -sh "$CARRY"/envgen "$CARRY"/kernel-seed.tgz
