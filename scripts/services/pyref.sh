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

# pyref_install DIR REQUIREMENTS WHAT CMD...: run CMD (which installs
# REQUIREMENTS into DIR) unless DIR is complete from an earlier run.
pyref_install() {
  local dir="$1" req="$2" what="$3"
  shift 3
  if [ -f "$dir/.complete" ]; then
    log "pyref: reusing $dir"
    return 0
  fi
  log "pyref: $what into $dir (first run only)"
  rm -rf "$dir"
  "$@"
  touch "$dir/.complete"
}

pyref_key() { sha256sum "$1" | cut -c1-16; }

PYREF_PIP=(-m pip install --quiet --disable-pip-version-check --retries 10 --timeout 120)

# A venv at $1 with the packages of requirements file $2.
pyref_make_venv() { python3 -m venv "$1" && "$1/bin/python" "${PYREF_PIP[@]}" -r "$2"; }

# The wheels of requirements file $2 unpacked into folder $1 (pip of venv $3).
pyref_unpack_wheels() { "$3/bin/python" "${PYREF_PIP[@]}" --no-deps --target "$1" -r "$2"; }

pyref_start() {
  apt_install python3 python3-venv
  local cache req venv cuda
  cache="$(pyref_cache)"
  mkdir -p "$cache"
  # The tests keep other slow-to-make things here too (compiled CUDA kernels).
  export ENVGEN_TEST_CACHE="$cache"

  req="$PWD/scripts/test-requirements.txt"
  venv="$cache/venv-$(pyref_key "$req")"
  pyref_install "$venv" "$req" "installing torch, transformers, tensorboard" \
    pyref_make_venv "$venv" "$req"
  export ENVGEN_TEST_PYTHON="$venv/bin/python"

  req="$PWD/scripts/test-cuda-requirements.txt"
  cuda="$cache/cuda-$(pyref_key "$req")"
  pyref_install "$cuda" "$req" "unpacking NVIDIA's CUDA compiler wheels" \
    pyref_unpack_wheels "$cuda" "$req" "$venv"
  export ENVGEN_TEST_CUDA_WHEELS="$cuda"
}

pyref_stop() { :; }
