#!/bin/sh
# Checks `make install` and `make uninstall` the way a user's project meets them: installs into a
# staging directory (DESTDIR, PREFIX=/usr), builds a small consumer against it with pkg-config and
# with CMake (a C-only project, a C++-only one, one that finds no MPI, shardkit::mpi under
# mpirun.openmpi when Open MPI is installed, the version check, a moved copy of the tree), runs
# them, then uninstalls and checks that nothing is left and that directories which existed
# before are kept. Run from anywhere; `make test` runs it. About 30 s on the 2-core machine.
set -u
cd "$(dirname "$0")/.." || exit 1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; [ -s "$tmp/log" ] && tail -n 20 "$tmp/log" | sed 's/^/    /'; fail=$((fail + 1)); }
# check DESCRIPTION COMMAND...: the command succeeds (its output goes to $tmp/log)
check() { desc=$1; shift; if "$@" >"$tmp/log" 2>&1; then ok; else bad "$desc"; fi; }
# refuse DESCRIPTION COMMAND...: the command fails
refuse() { desc=$1; shift; if "$@" >"$tmp/log" 2>&1; then bad "$desc (succeeded)"; else ok; fi; }
# same DESCRIPTION WANT GOT
same() { if [ "$2" = "$3" ]; then ok; else : >"$tmp/log"; bad "$1: want '$2', got '$3'"; fi; }
summary() { echo "install: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

version=$(sed -n 's/^#define SK_VERSION_\(MAJOR\|MINOR\|PATCH\) *//p' include/sk_core.h | paste -sd.)
# Open MPI as the Makefile sees it: its wrapper and the mpi.h the wrapper points at.
have_mpi=
for d in $(mpicc.openmpi --showme:incdirs 2>/dev/null); do [ -f "$d/mpi.h" ] && have_mpi=y; done
command -v mpirun.openmpi >/dev/null 2>&1 || have_mpi=
command -v cmake >/dev/null 2>&1 || { echo "FAIL: no cmake (make deps installs it)"; fail=$((fail + 1)); summary; }

stage=$tmp/stage
if ! make -s install DESTDIR="$stage" PREFIX=/usr >"$tmp/log" 2>&1; then bad "make install DESTDIR=... PREFIX=/usr"; summary; fi
ok
usr=$stage/usr

# ---- what was installed ----
for h in include/*.h; do [ -f "$usr/include/shardkit/${h#include/}" ] || { : >"$tmp/log"; bad "$h not installed"; }; done
for f in lib/pkgconfig/shardkit.pc lib/cmake/shardkit/shardkitConfig.cmake lib/cmake/shardkit/shardkitConfigVersion.cmake; do
  if [ -f "$usr/$f" ]; then ok; else : >"$tmp/log"; bad "$f not installed"; fi
done
check "installed bin/sk-layout runs" "$usr/bin/sk-layout" --mesh dp=2 --shape 4,4 --map "dp,None"

# ---- the consumers: a 2-device AllReduce on the threads backend, plus a libm call ----
mkdir "$tmp/src"
cat >"$tmp/src/consumer.c" <<'EOF'
#define SK_IMPL
#include <shardkit.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

static float got[2];

static sk_result step(sk_comm *c, void *arg) {
  (void)arg;
  float v = (float)(sk_comm_rank(c) + 1);
  sk_result r = sk_allreduce(c, &v, &v, 1, SK_F32, SK_SUM, NULL);
  got[sk_comm_rank(c)] = v;
  return r;
}

int main(void) {
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.ndevices = 2;
  d.backend = sk_threads_backend();
  sk_world *w;
  if (sk_world_create(&d, &w, NULL) != SK_OK) return 1;
  sk_result r = sk_world_run(w, step, NULL, NULL);
  sk_world_destroy(w, NULL);
  volatile double nine = 9.0;
  printf("allreduce %g %g, version %d\n", (double)got[0], (double)got[1], SK_VERSION);
  return r == SK_OK && got[0] == 3.0f && got[1] == 3.0f && sqrt(nine) == 3.0 ? 0 : 1;
}
EOF
cp "$tmp/src/consumer.c" "$tmp/src/consumer.cpp"
cat >"$tmp/src/consumer_mpi.c" <<'EOF'
#define SK_IMPL
#include <shardkit.h>
#include <sk_mpi.h>

#include <stdio.h>
#include <string.h>

static sk_result step(sk_comm *c, void *arg) {
  int n = sk_comm_size(c);
  float v = (float)(sk_comm_rank(c) + 1);
  sk_result r = sk_allreduce(c, &v, &v, 1, SK_F32, SK_SUM, NULL);
  *(int *)arg = r == SK_OK && v == (float)(n * (n + 1) / 2);
  return r;
}

int main(void) {
  sk_world_desc d;
  memset(&d, 0, sizeof d);
  d.backend = sk_mpi_backend(); /* one device per MPI process */
  sk_world *w;
  if (sk_world_create(&d, &w, NULL) != SK_OK) return 1;
  int good = 0;
  sk_result r = sk_world_run(w, step, &good, NULL);
  sk_world_destroy(w, NULL);
  return r == SK_OK && good ? 0 : 1;
}
EOF
# One project for every CMake case; -D picks the language, sources and what to ask for. It
# records where the package came from and what it defined, for the checks below.
cat >"$tmp/src/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.13)
project(consumer ${LANG})
find_package(shardkit ${WANT} REQUIRED ${COMPONENTS})
add_executable(consumer ${SRC})
target_link_libraries(consumer PRIVATE shardkit::shardkit)
get_target_property(inc shardkit::shardkit INTERFACE_INCLUDE_DIRECTORIES)
set(mpi no)
if(TARGET shardkit::mpi)
  set(mpi yes)
  if(LANG STREQUAL "C")
    add_executable(consumer_mpi consumer_mpi.c)
    target_link_libraries(consumer_mpi PRIVATE shardkit::mpi)
  endif()
endif()
file(WRITE "${CMAKE_BINARY_DIR}/found" "${inc}\n${mpi}\n${shardkit_VERSION}\n")
EOF

# pkg-config: the .pc says prefix=/usr; the sysroot maps it into the staging directory.
pc() { PKG_CONFIG_LIBDIR="$usr/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$stage" pkg-config "$@"; }
same "pkg-config --modversion" "$version" "$(pc --modversion shardkit 2>&1)"
same "pkg-config --cflags" "-I$usr/include/shardkit" "$(pc --cflags shardkit 2>&1 | sed 's/ *$//')"
check "pkg-config consumer builds" sh -c "gcc -std=c11 -Wall -Wextra -Werror -pedantic '$tmp/src/consumer.c' \
  -o '$tmp/pc_consumer' \$(PKG_CONFIG_LIBDIR='$usr/lib/pkgconfig' PKG_CONFIG_SYSROOT_DIR='$stage' pkg-config --cflags --libs shardkit)"
check "pkg-config consumer runs" "$tmp/pc_consumer"

# cmake_case NAME PREFIX-PATH CMAKE-ARGS...: configures and builds the project in $tmp/b-NAME.
cmake_case() {
  name=$1 prefix=$2; shift 2
  b=$tmp/b-$name
  timeout 120 cmake -S "$tmp/src" -B "$b" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "$@" &&
    timeout 120 cmake --build "$b"
}
found() { sed -n "${2}p" "$tmp/b-$1/found" 2>/dev/null; }

check "CMake C-only project builds" cmake_case c "$usr" -DLANG=C -DSRC=consumer.c -DWANT="$version"
check "CMake C-only consumer runs" "$tmp/b-c/consumer"
same "CMake include directory" "$usr/include/shardkit" "$(found c 1)"
same "CMake package version" "$version" "$(found c 3)"
same "shardkit::mpi when MPI is found" "$([ -n "$have_mpi" ] && echo yes || echo no)" "$(found c 2)"

check "CMake C++-only project builds" cmake_case cxx "$usr" -DLANG=CXX -DSRC=consumer.cpp
check "CMake C++-only consumer runs" "$tmp/b-cxx/consumer"

# A project where MPI cannot be found: shardkit::shardkit still works, shardkit::mpi is absent,
# and asking for the mpi component fails at configure time.
check "CMake without MPI builds" cmake_case nompi "$usr" -DLANG=C -DSRC=consumer.c -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON
check "CMake without MPI runs" "$tmp/b-nompi/consumer"
same "no shardkit::mpi without MPI" no "$(found nompi 2)"
refuse "COMPONENTS mpi without MPI fails" cmake_case nompi-req "$usr" -DLANG=C -DSRC=consumer.c \
  -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCOMPONENTS="COMPONENTS;mpi"

refuse "a newer major version is refused" cmake_case v1 "$usr" -DLANG=C -DSRC=consumer.c -DWANT=1
refuse "a newer minor version is refused" cmake_case v99 "$usr" -DLANG=C -DSRC=consumer.c -DWANT="${version%%.*}.99"

if [ -n "$have_mpi" ]; then
  check "CMake shardkit::mpi consumer builds" cmake_case mpi "$usr" -DLANG=C -DSRC=consumer.c -DCOMPONENTS="COMPONENTS;mpi"
  # Open MPI refuses root unless told; the permission goes to this one job.
  check "shardkit::mpi consumer runs under mpirun.openmpi -np 2" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    timeout 120 mpirun.openmpi --oversubscribe --mca btl self,vader -np 2 "$tmp/b-mpi/consumer_mpi"
else
  echo "install: skip the shardkit::mpi consumer (no Open MPI: make deps)"
fi

# The CMake package locates the headers from its own place: a moved tree still works.
mv "$stage" "$tmp/moved"
check "CMake against a moved install builds" cmake_case moved "$tmp/moved/usr" -DLANG=C -DSRC=consumer.c
same "moved install's include directory" "$tmp/moved/usr/include/shardkit" "$(found moved 1)"
mv "$tmp/moved" "$stage"

# ---- uninstall ----
check "make uninstall" make -s uninstall DESTDIR="$stage" PREFIX=/usr
left=$(cd "$stage" && find . -mindepth 1 ! -path ./usr)
same "left after uninstall (only the prefix itself)" "" "$left"

# Directories that existed before install stay, as do other packages' files in them.
pre=$tmp/pre/usr
mkdir -p "$pre/bin" "$pre/lib/pkgconfig" && : >"$pre/lib/pkgconfig/other.pc"
check "install over existing directories" make -s install DESTDIR="$tmp/pre" PREFIX=/usr
check "uninstall over existing directories" make -s uninstall DESTDIR="$tmp/pre" PREFIX=/usr
same "kept after uninstall" "./bin ./lib ./lib/pkgconfig ./lib/pkgconfig/other.pc" \
  "$(cd "$pre" && find . -mindepth 1 | sort | tr '\n' ' ' | sed 's/ $//')"

summary
