# The Python references for the tests (sourced by scripts/test.sh), created
# once under the cache directory and reused by every later run, clone or
# checkout (each is named by the hash of its pin file, so a new pin makes a
# new one): the first run downloads a few GB, the next ones nothing.
#
# - a venv with transformers + torch (used on the CPU; PyPI's torch brings
#   its CUDA libraries along) and tensorboard: scripts/test-requirements.txt;
# - NVIDIA's CUDA 13.0 compiler wheels, unpacked into a folder of their own:
#   scripts/test-cuda-requirements.txt.
#
# Exports ENVGEN_TEST_PYTHON (the venv's python) and ENVGEN_TEST_CUDA_WHEELS
# (the folder holding nvidia/cu13/{bin,include,lib}); the tests that need
# them fail, never skip, when these are missing.

pyref_cache() {
  echo "${ENVGEN_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/envgen-test}"
}

pyref_start() {
  apt_install python3 python3-venv
  local cache req key venv cuda
  cache="$(pyref_cache)"
  mkdir -p "$cache"
  # The tests keep other slow-to-make things here too (compiled CUDA kernels).
  export ENVGEN_TEST_CACHE="$cache"

  req="$PWD/scripts/test-requirements.txt"
  key="$(sha256sum "$req" | cut -c1-16)"
  venv="$cache/venv-$key"
  if [ ! -f "$venv/.complete" ]; then
    log "pyref: creating $venv (first run: downloads torch, transformers, tensorboard)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      --retries 10 --timeout 120 -r "$req"
    touch "$venv/.complete"
  else
    log "pyref: reusing $venv"
  fi
  export ENVGEN_TEST_PYTHON="$venv/bin/python"

  req="$PWD/scripts/test-cuda-requirements.txt"
  key="$(sha256sum "$req" | cut -c1-16)"
  cuda="$cache/cuda-$key"
  if [ ! -f "$cuda/.complete" ]; then
    log "pyref: unpacking NVIDIA's CUDA compiler wheels into $cuda"
    rm -rf "$cuda"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      --retries 10 --timeout 120 --no-deps --target "$cuda" -r "$req"
    touch "$cuda/.complete"
  else
    log "pyref: reusing $cuda"
  fi
  export ENVGEN_TEST_CUDA_WHEELS="$cuda"
}

pyref_stop() { :; }
