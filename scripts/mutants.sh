#!/usr/bin/env bash
# scripts/mutants.sh: mutation testing of envgen's pure modules with
# cargo-mutants (docs/testing.md, "Mutation testing"). Not part of the test
# command: a full pass takes hours on 2 cores, so it runs by hand, a shard
# at a time, within a time box.
#
#   scripts/mutants.sh AREA [SHARD] [-- extra cargo-mutants flags]
#     AREA   compat | render | manifest | config | sudoku
#     SHARD  k/n: mutant i runs in shard i mod n (default: all of them)
#   BUDGET=SECONDS (default 3600): stop after that long; rerun with
#   `-- --iterate` to go on where it stopped (caught mutants are skipped).
#   Give --iterate without SHARD: cargo-mutants shards what is left after
#   skipping, so `k/n -- --iterate` picks a different set of mutants.
#
# It never edits your checkout: the mutants are applied in a git worktree
# of HEAD at $WORK (default ../envgen-mutants), whose target/ starts as a
# copy of yours (without incremental data) so the first build is short.
# Results: $WORK/mutants-AREA/mutants.out/{caught,missed,timeout,unviable}.txt
set -euo pipefail
AREA=${1:?usage: scripts/mutants.sh compat|render|manifest|config|sudoku [k/n] [-- flags]}
shift
SHARD=()
if [ $# -gt 0 ] && [ "$1" != "--" ]; then SHARD=(--shard "$1" --sharding round-robin); shift; fi
[ "${1:-}" = "--" ] && shift
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${WORK:-$ROOT/../envgen-mutants}
BUDGET=${BUDGET:-3600}

command -v cargo-mutants > /dev/null || {
  echo "cargo-mutants is missing: cargo install cargo-mutants --locked" >&2; exit 2; }

# Each area: the files mutated, then the tests that judge them. Unit tests
# only: the integration binary would be rebuilt for every mutant. The
# exhaustive driver-branch sweep (17 s unoptimised) is left out of compat's
# runs; the rest of the verdict table runs.
case "$AREA" in
  compat) FILES=(-f 'src/compat/**/*.rs')
          TESTS=(--lib -- --skip compat::verdict::tests::edges::no_verdict_is_ok) ;;
  render) FILES=(-f src/launch/slurm/sbatch.rs -f src/image/render.rs)
          TESTS=(--lib) ;;
  manifest) FILES=(-f src/runs/manifest.rs)
          TESTS=(--lib) ;;
  config) FILES=(--package envgen-experiments -f experiments/src/engine/config.rs)
          TESTS=(--lib -- config) ;;
  sudoku) FILES=(--package envgen-experiments -f 'experiments/src/hrm/sudoku/*.rs')
          TESTS=(--lib -- hrm::sudoku) ;;
  *) echo "unknown area '$AREA' (compat, render, manifest, config, sudoku)" >&2; exit 2 ;;
esac

if [ ! -d "$WORK" ]; then
  git -C "$ROOT" worktree add --detach "$WORK" HEAD
  if [ -d "$ROOT/target" ]; then
    mkdir -p "$WORK/target"
    tar -C "$ROOT/target" --exclude=./debug/incremental --exclude=./release -cf - . |
      tar -C "$WORK/target" -xf -
  fi
else
  # A run killed outright (not by its budget) can leave a mutant applied:
  # drop it before moving to HEAD, or the unmutated baseline fails.
  git -C "$WORK" checkout --quiet -- .
  git -C "$WORK" checkout --quiet --detach "$(git -C "$ROOT" rev-parse HEAD)"
fi
cd "$WORK"
# No debug info: the builds per mutant are what the time goes to.
export CARGO_PROFILE_DEV_DEBUG=0
set +e
timeout --signal=INT "$BUDGET" cargo mutants --in-place "${FILES[@]}" "${SHARD[@]}" \
  --timeout 120 --build-timeout 900 -o "$WORK/mutants-$AREA" "$@" -- "${TESTS[@]}"
rc=$?
set -e
git checkout --quiet -- .   # an interrupted run can leave a mutant applied
out="$WORK/mutants-$AREA/mutants.out"
for kind in caught missed timeout unviable; do
  printf '%-9s %s\n' "$kind" "$(wc -l < "$out/$kind.txt" 2>/dev/null || echo 0)"
done
echo "missed mutants: $out/missed.txt"
exit "$rc"
