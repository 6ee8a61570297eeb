#!/bin/sh
# rustc's linker for scripts/portable.sh's portable_relink_dev: zig's C
# compiler driver for $PORTABLE_ZIG_TARGET (ARCH-linux-gnu.GLIBC), whose
# stub libraries carry that glibc's symbol versions, run by the python that
# has zig's wheel. cargo-zigbuild writes a wrapper of the same kind for its
# own builds (with its argument filtering, which a plain link does not need).
exec "$PORTABLE_ZIG_PYTHON" -m ziglang cc -target "$PORTABLE_ZIG_TARGET" "$@"
