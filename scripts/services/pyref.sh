# The Python reference venv for the tests (sourced by scripts/test.sh):
# transformers + torch (CPU use; PyPI's torch brings its CUDA libraries along),
# tensorboard and NVIDIA's CUDA 13.0 compiler wheels, pinned in
# scripts/test-requirements.txt. Created once under the cache directory and
# reused by every later run, clone or checkout: the first run downloads a few
# GB, the next ones nothing.
#
# Exports ENVGEN_TEST_PYTHON (the venv's python) and ENVGEN_TEST_CUDA_WHEELS
# (its site-packages/nvidia folder); the tests that need them fail, never skip,
# when these are missing.

pyref_start() {
  apt_install python3 python3-venv
  local req="$PWD/scripts/test-requirements.txt"
  local cache="${ENVGEN_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/envgen-test}"
  local key
  key="$(sha256sum "$req" | cut -c1-16)"
  local venv="$cache/venv-$key"
  if [ ! -f "$venv/.complete" ]; then
    log "pyref: creating $venv (first run: downloads torch, transformers, CUDA wheels)"
    rm -rf "$venv"
    mkdir -p "$cache"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      --retries 10 --timeout 120 -r "$req"
    touch "$venv/.complete"
  else
    log "pyref: reusing $venv"
  fi
  export ENVGEN_TEST_PYTHON="$venv/bin/python"
  ENVGEN_TEST_CUDA_WHEELS="$("$venv/bin/python" -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0] + "/x"))')"
  export ENVGEN_TEST_CUDA_WHEELS
}

pyref_stop() { :; }
