#!/bin/sh
# Header-only discipline: every header compiles alone as C11 and C++17 with -Werror, with and
# without its implementation, also after a system header came first, under GCC and (when
# installed: make deps) Clang, whose warnings differ; all modules link from one implementation
# TU; two SK_STATIC copies link together. The headers that need a library beyond libc get its
# flags: sk_mpi.h Open MPI's, sk_json.h jansson's (pkg-config); each is skipped when its library
# is missing. The umbrella links without either, which keeps shardkit.h free of both.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
W="-Wall -Wextra -Werror -pedantic -Iinclude"
fail=0; n=0
try() { # description, compiler command...
  desc=$1; shift; n=$((n + 1))
  if ! "$@" >"$tmp/log" 2>&1; then echo "FAIL: $desc"; sed 's/^/    /' "$tmp/log" | head -20; fail=$((fail + 1)); fi
}
compilers="gcc:g++"
if command -v clang >/dev/null 2>&1 && command -v clang++ >/dev/null 2>&1; then compilers="$compilers clang:clang++"
else echo "skip the Clang header checks (no clang: make deps)"; fi
for h in include/*.h; do
  name=${h#include/}
  extra=""
  if grep -q '<mpi.h>' "$h"; then
    extra=$(mpicc.openmpi --showme:compile 2>/dev/null) || { echo "skip $name (no Open MPI)"; continue; }
  fi
  if grep -q '<jansson.h>' "$h"; then
    extra=$(pkg-config --cflags jansson 2>/dev/null) || { echo "skip $name (no jansson: make deps)"; continue; }
  fi
  printf '#include "%s"\nint sk_check_dummy;\n' "$name" >"$tmp/decl.c"
  printf '#define SK_IMPL\n#include "%s"\nint sk_check_dummy;\n' "$name" >"$tmp/impl.c"
  printf '#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#define SK_IMPL\n#include "%s"\nint sk_check_dummy;\n' "$name" >"$tmp/late.c"
  cp "$tmp/decl.c" "$tmp/decl.cc"; cp "$tmp/impl.c" "$tmp/impl.cc"
  for pair in $compilers; do
    cc=${pair%:*}; cxx=${pair#*:}
    try "$name as C11 ($cc), declarations"        $cc -std=c11 $W $extra -c "$tmp/decl.c" -o "$tmp/o"
    try "$name as C11 ($cc), SK_IMPL"             $cc -std=c11 $W $extra -c "$tmp/impl.c" -o "$tmp/o"
    try "$name as C11 ($cc), SK_IMPL after <stdio.h>" $cc -std=c11 $W $extra -c "$tmp/late.c" -o "$tmp/o"
    try "$name as C++17 ($cxx), declarations"     $cxx -std=c++17 $W $extra -c "$tmp/decl.cc" -o "$tmp/o"
    try "$name as C++17 ($cxx), SK_IMPL"          $cxx -std=c++17 $W $extra -c "$tmp/impl.cc" -o "$tmp/o"
  done
done
# Implementation in one TU, declarations in another, linked into one program.
printf '#define SK_IMPL\n#include "shardkit.h"\n' >"$tmp/a.c"
printf '#include "shardkit.h"\nint main(void) { return sk_dtype_size(SK_F32) == 4 ? 0 : 1; }\n' >"$tmp/b.c"
try "implementation TU + user TU link" gcc -std=c11 $W "$tmp/a.c" "$tmp/b.c" -o "$tmp/ab" -lpthread -lm
# Checkpoint planning (sk_ckpt_plan.h, in the umbrella) links without zlib or liburing, and runs.
printf '#include "shardkit.h"\nint main(void) {\n  sk_layout l;\n  sk_slice box;\n  int ranks[8], n = 0;\n  bool as_saved = true;\n  const int64_t shape[1] = {8};\n  const int cut[1] = {8};\n  if (sk_layout_from_strategy(&l, 8, 1, shape, cut, SK_REPEAT_RIGHT, NULL)) return 1;\n  if (sk_ckpt_box(&l, 0, 3, &box, NULL) || box.start[0] != 3) return 2;\n  if (sk_ckpt_infer_rank_list(&l, NULL, 0, ranks, 8, &n, &as_saved, NULL) || n != 8 || as_saved) return 3;\n  return 0;\n}\n' >"$tmp/p.c"
try "checkpoint planning links without zlib and runs" sh -c "gcc -std=c11 $W '$tmp/a.c' '$tmp/p.c' -o '$tmp/pp' -lpthread -lm && '$tmp/pp'"
# Two private SK_STATIC copies in one program.
printf '#define SK_STATIC\n#define SK_IMPL\n#include "shardkit.h"\nint f1(void) { return (int)sk_dtype_size(SK_F64); }\n' >"$tmp/s1.c"
printf '#define SK_STATIC\n#define SK_IMPL\n#include "shardkit.h"\nint f1(void);\nint main(void) { return f1() == 8 ? 0 : 1; }\n' >"$tmp/s2.c"
try "two SK_STATIC copies link" gcc -std=c11 $W "$tmp/s1.c" "$tmp/s2.c" -o "$tmp/ss" -lpthread -lm
cp "$tmp/a.c" "$tmp/a.cc"
try "umbrella with SK_IMPL as C++17" g++ -std=c++17 $W -c "$tmp/a.cc" -o "$tmp/o"
# The MPI backend with the umbrella, implementation and user TUs linked by Open MPI's wrapper.
if command -v mpicc.openmpi >/dev/null 2>&1; then
  printf '#define SK_IMPL\n#include "shardkit.h"\n#include "sk_mpi.h"\n' >"$tmp/m1.c"
  printf '#include "shardkit.h"\n#include "sk_mpi.h"\nint main(void) { return sk_mpi_backend() != 0 ? 0 : 1; }\n' >"$tmp/m2.c"
  try "sk_mpi.h implementation TU + user TU link (mpicc.openmpi)" mpicc.openmpi -std=c11 $W "$tmp/m1.c" "$tmp/m2.c" -o "$tmp/mm" -lpthread -lm
fi
# The JSON reader and writer with the umbrella, implementation and user TUs linked with jansson.
if jansson=$(pkg-config --cflags --libs jansson 2>/dev/null); then
  printf '#define SK_IMPL\n#include "shardkit.h"\n#include "sk_json.h"\n' >"$tmp/j1.c"
  printf '#include <stdlib.h>\n#include "shardkit.h"\n#include "sk_json.h"\nint main(void) {\n  sk_graph g;\n  char *t;\n  sk_graph_init(&g);\n  if (sk_json_format_network(&g, &t, NULL)) return 1;\n  free(t);\n  return 0;\n}\n' >"$tmp/j2.c"
  try "sk_json.h implementation TU + user TU link (-ljansson)" gcc -std=c11 $W "$tmp/j1.c" "$tmp/j2.c" -o "$tmp/jj" $jansson -lpthread -lm
fi
# The checkpoints with io_uring (SK_USE_URING: liburing.h wants POSIX declarations, so the TU
# defines _POSIX_C_SOURCE first), as C11 and C++17 under each compiler, and linked with -luring -lz.
if [ -f /usr/include/liburing.h ] && [ -f /usr/include/zlib.h ]; then
  printf '#define _POSIX_C_SOURCE 200809L\n#define SK_USE_URING\n#define SK_IMPL\n#include "sk_ckpt.h"\nint sk_check_dummy;\n' >"$tmp/u.c"
  cp "$tmp/u.c" "$tmp/u.cc"
  for pair in $compilers; do
    cc=${pair%:*}; cxx=${pair#*:}
    try "sk_ckpt.h with SK_USE_URING as C11 ($cc)" $cc -std=c11 $W -c "$tmp/u.c" -o "$tmp/o"
    try "sk_ckpt.h with SK_USE_URING as C++17 ($cxx)" $cxx -std=c++17 $W -c "$tmp/u.cc" -o "$tmp/o"
  done
  printf '#define _POSIX_C_SOURCE 200809L\n#define SK_USE_URING\n#define SK_IMPL\n#include "shardkit.h"\n#include "sk_ckpt.h"\n' >"$tmp/c1.c"
  printf '#include "sk_ckpt.h"\nint main(void) { return sk_ckpt_kind_name(SK_CKPT_STATE1)[0] == 0; }\n' >"$tmp/c2.c"
  try "sk_ckpt.h implementation TU + user TU link (-luring -lz)" gcc -std=c11 $W "$tmp/c1.c" "$tmp/c2.c" -o "$tmp/cc" -luring -lz -lpthread -lm
else
  echo "skip the sk_ckpt.h io_uring checks (no liburing or zlib: make deps)"
fi
if [ $fail -ne 0 ]; then echo "check-headers: $fail of $n checks failed"; exit 1; fi
echo "check-headers: $n checks passed"
