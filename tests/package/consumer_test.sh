#!/usr/bin/env bash
# The installed package as a user meets it (issue 18): `cmake --install` of this build into a fresh
# prefix; the examples, a separate project, configured with find_package(meganeura CONFIG REQUIRED)
# and nothing else, built and run; a C program built with pkg-config's flags alone; and the installed
# Python module imported from the prefix.
#   consumer_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/meganeura-package-XXXXXX")
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
# No path into the source or build tree: the package alone must be enough.
cmake -S "$source/examples" -B "$work/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/examples" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
"$work/examples/mlp_forward"
# The renderer that learns in its frame loop, for a handful of frames: correctness only, never timing.
"$work/examples/render_and_learn" --check

export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
pkg-config --exists --print-errors meganeura
test "$(pkg-config --modversion meganeura)" = "$("$work/prefix/bin/meganeura" --version | head -n 1 | cut -d' ' -f2)"
cc -std=c11 -Wall -Werror "$source/examples/mlp_forward.c" -o "$work/mlp_forward_c" $(pkg-config --cflags --libs meganeura) -lm
LD_LIBRARY_PATH="$(pkg-config --variable=libdir meganeura)" "$work/mlp_forward_c"

python=${PYTHON:-/usr/bin/python3}
site=$("$python" -c 'import sys; print(f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/dist-packages")')
PYTHONPATH="$work/prefix/$site" "$python" -c \
  "import meganeura as mn; assert mn.__file__.startswith('$work/prefix/'), mn.__file__; print('python module', mn.__version__, 'from the prefix')"
