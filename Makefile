# shardkit -- header-only; this Makefile builds the tools, examples, benchmarks and tests.
#   make            every tool, example and benchmark into build/ whose packages are installed; a
#                   program that needs a missing one is skipped with a line naming it; and the
#                   networks' .npy data (make data: build/data/, written by build/make_npy)
#   make test       make deps, then header checks, the Criterion suites (the MPI ones launch
#                   mpirun.openmpi), the tools', benchmarks', demo's and install tests, and
#                   MindSpore's operator unit tests asked of sk-layout (tests/ms_cases.txt)
#   make demo       make deps, then the MindSpore tutorial tables and the 8-card training demo
#   make sanitize   the suites under ASan + UBSan;   make tsan   under ThreadSanitizer
#   make test-clang the Criterion suites built with Clang (same warnings, -Werror) and run, plus a
#                   Clang warning check (-fsyntax-only) of every example, tool, benchmark and the MPI driver
#   make analyze    Clang's static analyzer over each header's implementation (SK_IMPL) and every
#                   example, tool, benchmark and test source; fails on any report in our files
#                   (tests/analyze.sh; ANALYZE_JOBS=N, default 2)
#   make fuzz       the parsers' libFuzzer harnesses, each for FUZZ_TIME seconds (60), one at a
#                   time; not part of make test (tests/fuzz/README.md)
#   make oom-full   the allocation-failure suites (tests/test_oom*.c) refusing every allocation in
#                   turn (make test's oom_nets strides past k = 500); not part of make test
#   make install PREFIX=/usr/local [DESTDIR=stage]   headers, shardkit.pc, the CMake package
#                   (find_package(shardkit)) and the command-line tools;   make uninstall
#   make deps       install the Debian packages below that are missing (as root), or name them
#
# Only deps, test and demo install packages. Every other target builds with what is there: a
# program that needs a missing package fails with a line naming it and `make deps` (plain `make`
# skips it instead), so `make`, `make build/<program>` and `make -n` never run apt-get.

# Every Debian package the build, tests, demo and benchmarks use. One list, checked by `deps`.
DEB_PACKAGES := gcc g++ make pkg-config libcriterion-dev openmpi-bin libopenmpi-dev zlib1g-dev libopenblas-dev \
                dataset-fashion-mnist gnuplot-nox clang cmake libgloo-dev libjansson-dev liburing-dev

PREFIX ?= /usr/local
BUILD  := build
CC     := gcc
CXX    := g++
# The second compiler (test-clang, the Clang header checks) and the analyzer's (analyze).
CLANG  := clang
WARN   := -Wall -Wextra -Werror -pedantic
CFLAGS := -std=c11 $(WARN) -O2 -g
CPPFLAGS := -Iinclude
LDLIBS := -lpthread -lm
# Open MPI's compiler wrapper: the benchmarks, the two-backend example and the MPI test driver
# are built with it (one binary serves -B threads and -B mpi). Named explicitly: a machine may
# also have MPICH, whose mpicc/mpirun alternatives could win.
MPICC  := mpicc.openmpi
SAN_FLAGS  := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
TSAN_FLAGS := -fsanitize=thread

HEADERS   := $(wildcard include/*.h)
TEST_SRCS := $(sort $(wildcard tests/test_*.c)) tests/impl.c
# The headers the suites include from tests/ (the grid, the helpers), from tools/ (the
# command-line literals, tests/test_pylayout.c; sk-sim's checkpoint glue) and from examples/ (the
# loss check): a change rebuilds them.
TEST_HDRS := $(wildcard tests/*.h) tools/pyliteral.h tools/pylayout.h tools/sim_ckpt.h examples/progs.h examples/loss_check.h
# sk_json.h's library. The Criterion suites link it (tests/test_json.c holds sk_json.h's
# implementation); the TSan binary, which leaves that suite out, does not.
JSON_LIBS := -ljansson
# sk_ckpt.h's libraries (zlib's crc32; liburing under SK_USE_URING): tests/test_ckpt.c holds its
# implementation, so only the suites, sk-sim and sk-ckpt link them.
CKPT_LIBS := -luring -lz
# The command-line tools (tools/sk_layout.c, ...): what `make install` puts in $(PREFIX)/bin.
TOOLS     := $(BUILD)/sk-layout $(BUILD)/sk-sim $(BUILD)/sk-ckpt
BENCHES   := $(patsubst bench/%.c,$(BUILD)/%,$(wildcard bench/*.c)) $(BUILD)/gloo_allreduce
EXAMPLES  := $(patsubst examples/%.c,$(BUILD)/%,$(wildcard examples/*.c))
MPI_EXAMPLES := $(BUILD)/both_backends
# What the tools, examples and benchmarks share (--help, the MPI launcher, the GEMM, the loss
# check): every program depends on it. TOOL_HDRS: the tools' own parsers and glue, which only the
# tools (and the suites and fuzz harness that test them) include.
PROG_HDRS := $(wildcard examples/*.h)
TOOL_HDRS := $(wildcard tools/*.h)
# Test programs live under build/tests/ (and build/san, tsan, clang): build/ itself holds only
# the user's programs.
MPI_DRIVER := $(BUILD)/tests/mpi_driver

# Tests run with a per-test timeout inside the suites; CRITERION_JOBS keeps the 2-core box sane.
CRITERION_ARGS ?= --jobs 2
# make test builds with this many jobs (the suites' objects, the programs, the header checks).
JOBS ?= 2

# ---- what is installed -------------------------------------------------------------------------
# The headers need only libc and pthreads (sk_json.h: jansson too). Beyond that a program needs
# some of these, each named by the Debian package that provides it (all of them in DEB_PACKAGES).
# The checks look for files and run no compiler on test programs, so every make, sub-makes
# included, can afford them.
# Non-empty means present.
PKG_mpi        := libopenmpi-dev
PKG_openblas   := libopenblas-dev
PKG_zlib       := zlib1g-dev
PKG_criterion  := libcriterion-dev
PKG_clang      := clang
PKG_gloo       := libgloo-dev
PKG_jansson    := libjansson-dev
PKG_uring      := liburing-dev
HAVE_mpi       := $(shell for d in $$($(MPICC) --showme:incdirs 2>/dev/null); do [ -f "$$d/mpi.h" ] && echo y; done)
HAVE_openblas  := $(filter /%,$(shell $(CC) -print-file-name=libopenblas.so 2>/dev/null))
HAVE_zlib      := $(filter /%,$(shell $(CC) -print-file-name=libz.so 2>/dev/null))
HAVE_criterion := $(filter /%,$(shell $(CC) -print-file-name=libcriterion.so 2>/dev/null))
HAVE_clang     := $(shell command -v $(CLANG) 2>/dev/null)
HAVE_gloo      := $(wildcard /usr/include/gloo/allreduce.h)
HAVE_jansson   := $(filter /%,$(shell $(CC) -print-file-name=libjansson.so 2>/dev/null))
HAVE_uring     := $(filter /%,$(shell $(CC) -print-file-name=liburing.so 2>/dev/null))

# What each program needs beyond the headers. The training demo also reads the Fashion-MNIST
# files, but only when it runs (make demo installs them), so building it does not need them.
NEEDS.$(BUILD)/operator_parallel := mpi openblas zlib
NEEDS.$(BUILD)/both_backends     := mpi
NEEDS.$(BUILD)/sk-sim            := mpi openblas zlib jansson uring
NEEDS.$(BUILD)/sk-ckpt           := zlib uring
NEEDS.$(BUILD)/gloo_allreduce    := gloo
NEEDS.$(BUILD)/search_perf       := jansson
NEEDS.$(MPI_DRIVER)              := mpi
NEEDS.$(BUILD)/tests/unit        := criterion jansson zlib uring
NEEDS.$(BUILD)/san/unit          := criterion jansson zlib uring
NEEDS.$(BUILD)/clang/unit        := clang criterion jansson zlib uring

# $(call missing,PROGRAM): the packages PROGRAM needs that are not installed (empty: buildable).
missing = $(strip $(foreach t,$(NEEDS.$1),$(if $(HAVE_$t),,$(PKG_$t))))
# The first line of every recipe that needs a package: when one is missing, fail with its name.
need = $(if $(call missing,$@),@echo "$@: needs $(call missing,$@) (run make deps)" >&2; exit 1)

PROGRAMS  := $(TOOLS) $(EXAMPLES) $(BENCHES)
BUILDABLE := $(foreach p,$(PROGRAMS),$(if $(call missing,$p),,$p))
SKIPPED   := $(filter-out $(BUILDABLE),$(PROGRAMS))

.PHONY: all data test test-run demo demo-run sanitize tsan test-clang analyze install uninstall deps \
        check-headers clean fuzz oom-full FORCE

all: $(BUILDABLE) data
	@:$(foreach p,$(SKIPPED),; echo "skipping $p: needs $(call missing,$p) (run make deps)")
	@:$(if $(HAVE_mpi),,; echo "benchmarks built without -B mpi: needs $(PKG_mpi) (run make deps)")

# Installs what is missing when root; otherwise prints the exact command and fails.
deps:
	@command -v dpkg-query >/dev/null 2>&1 || { echo "deps: not a Debian system; need: $(DEB_PACKAGES)"; exit 0; }; \
	missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "deps: installing$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	  else \
	    echo "deps: missing Debian packages:$$missing"; \
	    echo "deps: run: sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

$(BUILD)/sk-layout: tools/sk_layout.c $(TOOL_HDRS) $(PROG_HDRS) $(HEADERS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LDLIBS)

# Trains a network from its JSON file on N devices (threads or MPI): jansson reads it, OpenBLAS
# runs the GEMMs, zlib the dataset.
$(BUILD)/sk-sim: tools/sk_sim.c $(TOOL_HDRS) $(PROG_HDRS) $(HEADERS)
	$(need)
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) -DSK_USE_URING -o $@ $< -lopenblas -ljansson $(CKPT_LIBS) $(LDLIBS)

# Lists, verifies and merges sk-sim's checkpoints (sk_ckpt.h: zlib, liburing).
$(BUILD)/sk-ckpt: tools/sk_ckpt.c $(TOOL_HDRS) $(PROG_HDRS) $(HEADERS)
	$(need)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DSK_USE_URING -o $@ $< $(CKPT_LIBS) $(LDLIBS)

# The training demo: MPI-capable, OpenBLAS for the GEMMs, zlib for the gzip'd dataset.
$(BUILD)/operator_parallel: examples/operator_parallel.c $(PROG_HDRS) $(HEADERS)
	$(need)
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) -o $@ $< -lopenblas -lz $(LDLIBS)

$(MPI_EXAMPLES): $(BUILD)/%: examples/%.c $(PROG_HDRS) $(HEADERS)
	$(need)
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LDLIBS)

# OpenMP threads joining a world as its devices: GCC's -fopenmp (libgomp comes with gcc). A rule
# of its own so that no other program links the OpenMP runtime; Clang compiles the example without
# -fopenmp in test-clang, where it runs its POSIX-threads fallback.
$(BUILD)/openmp_devices: examples/openmp_devices.c $(PROG_HDRS) $(HEADERS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fopenmp -o $@ $< $(LDLIBS)

$(BUILD)/%: examples/%.c $(PROG_HDRS) $(HEADERS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LDLIBS)

# The .npy files the networks' "data" objects name (relative to the JSON's folder, so
# "../../build/data/attention/x.npy" from examples/nets/), written by make_npy: NPY.<file> holds
# its arguments. Every fill is a function of the seed, so a file is the same on every machine;
# a changed Makefile writes them again.
NPY_DATA := $(BUILD)/data/attention/x.npy $(BUILD)/data/dense_mutmul/x.npy $(BUILD)/data/npy/x.npy \
            $(BUILD)/data/npy/label.npy $(BUILD)/data/tests/image.npy $(BUILD)/data/tests/target.npy \
            $(BUILD)/data/tests/class.npy
# examples/nets/attention.json: x [32, 8], two batches of rows drawn from N(0, 1)
NPY.$(BUILD)/data/attention/x.npy    := --dtype f32 --shape 64,8 --fill normal --seed 1
# examples/nets/dense_mutmul.json: x [32, 32], two batches
NPY.$(BUILD)/data/dense_mutmul/x.npy := --dtype f32 --shape 64,32 --fill normal --seed 2
# tests/nets/npy.json: x [16, 2, 4] and labels [16] of 4 classes; 40 rows, so batches wrap around
NPY.$(BUILD)/data/npy/x.npy          := --dtype f32 --shape 40,2,4 --fill normal --seed 3
NPY.$(BUILD)/data/npy/label.npy      := --dtype i64 --shape 40 --fill classes:4 --seed 3
# tests/nets/ops37*.json, operands.json, frozen.json: images [32, 1, 28, 28] with pixels in
# [0, 1), MAELoss's targets [32, 1] in [0, 1), class indices [32] of 10 classes; two batches
NPY.$(BUILD)/data/tests/image.npy    := --dtype f32 --shape 64,1,28,28 --fill uniform --seed 3
NPY.$(BUILD)/data/tests/target.npy   := --dtype f32 --shape 64,1 --fill uniform --seed 4
NPY.$(BUILD)/data/tests/class.npy    := --dtype i32 --shape 64 --fill classes:10 --seed 5

data: $(NPY_DATA)

$(NPY_DATA): $(BUILD)/make_npy Makefile
	@mkdir -p $(@D)
	$(BUILD)/make_npy --out $@ $(NPY.$@)

# The benchmarks take -B mpi when Open MPI's wrapper builds them; without Open MPI they are built
# by $(CC) for -B threads only. $(BENCH_CONFIG) holds the choice and changes only with it, so the
# benchmarks are rebuilt when Open MPI comes or goes (not on every make).
BENCH_CC     := $(if $(HAVE_mpi),$(MPICC) -DSK_BENCH_MPI,$(CC))
BENCH_CONFIG := $(BUILD)/config/bench
$(BENCH_CONFIG): FORCE
	@mkdir -p $(@D)
	@echo '$(BENCH_CC)' | cmp -s - $@ || echo '$(BENCH_CC)' > $@

# Checkpoint throughput (sk_ckpt.h: zlib, liburing), threads backend only.
NEEDS.$(BUILD)/ckpt_perf := zlib uring
$(BUILD)/ckpt_perf: bench/ckpt_perf.c $(PROG_HDRS) $(HEADERS)
	$(need)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DSK_USE_URING -o $@ $< $(CKPT_LIBS) $(LDLIBS)

$(BUILD)/%: bench/%.c $(wildcard bench/*.h) $(PROG_HDRS) $(HEADERS) $(BENCH_CONFIG)
	@mkdir -p $(@D)
	$(BENCH_CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LDLIBS)

# The strategy-search bench reads the tutorial networks' JSON (jansson); pure planning, no MPI.
$(BUILD)/search_perf: bench/search_perf.c $(wildcard bench/*.h) $(PROG_HDRS) $(HEADERS)
	$(need)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< -ljansson $(LDLIBS)

# gloo, the peer bench/compare sets beside the threads backend: C++, over gloo's TCP transport.
$(BUILD)/gloo_allreduce: bench/gloo_allreduce.cc
	$(need)
	@mkdir -p $(@D)
	$(CXX) -std=c++17 $(WARN) -O2 -g -o $@ $< -lgloo -lpthread

# The MPI test driver, run under mpirun by tests/test_mpi.c (never inside Criterion itself). It
# runs the collective grid of tests/coll_grid.h (included by its path: no -Itests needed).
MPI_DRIVER_DEPS := $(wildcard tests/mpi/*.c tests/mpi/*.h) tests/coll_grid.h tests/comm_test_util.h
$(MPI_DRIVER): $(MPI_DRIVER_DEPS) $(HEADERS)
	$(need)
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) -Itests/mpi $(CFLAGS) -o $@ tests/mpi/mpi_driver.c $(LDLIBS)

# ---- tests -------------------------------------------------------------------------------
# Each suite source is an object of its own, so that -j2 (make test's default) keeps both cores
# busy and a change to one suite recompiles one file. Every object depends on every header, as a
# header-only library's must. build/<variant>/obj/ holds them: tests (GCC), san, tsan, clang.
suite_objs  = $(patsubst %.c,$(BUILD)/$1/obj/%.o,$2)
UNIT_OBJS   := $(call suite_objs,tests,$(TEST_SRCS))
SAN_OBJS    := $(call suite_objs,san,$(TEST_SRCS))
CLANGU_OBJS := $(call suite_objs,clang,$(TEST_SRCS))
SUITE_DEPS  := $(TEST_HDRS) $(HEADERS)
$(foreach o,$(UNIT_OBJS) $(SAN_OBJS),$(eval NEEDS.$o := criterion jansson zlib uring))
$(foreach o,$(CLANGU_OBJS),$(eval NEEDS.$o := clang criterion jansson zlib uring))

$(BUILD)/tests/obj/%.o: %.c $(SUITE_DEPS)
	$(need)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<
$(BUILD)/tests/unit: $(UNIT_OBJS)
	$(need)
	$(CC) $(CFLAGS) -o $@ $^ -lcriterion $(JSON_LIBS) $(CKPT_LIBS) $(LDLIBS)

$(BUILD)/san/obj/%.o: %.c $(SUITE_DEPS)
	$(need)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -O1 $(SAN_FLAGS) -c -o $@ $<
$(BUILD)/san/unit: $(SAN_OBJS)
	$(need)
	$(CC) $(CFLAGS) -O1 $(SAN_FLAGS) -o $@ $^ -lcriterion $(JSON_LIBS) $(CKPT_LIBS) $(LDLIBS)

# oom-full: the unit binary with tests/test_oom_nets.c compiled with -DSK_OOM_FULL (every k,
# not make test's stride), run on the OOM suites only; tests/test_oom.c and tests/test_oom_more.c
# already refuse every allocation, so their unit objects serve as they are.
OOM_FULL_OBJ  := $(BUILD)/oomfull/obj/tests/test_oom_nets.o
OOM_FULL_OBJS := $(filter-out $(BUILD)/tests/obj/tests/test_oom_nets.o,$(UNIT_OBJS)) $(OOM_FULL_OBJ)
NEEDS.$(OOM_FULL_OBJ) := criterion jansson zlib uring
$(OOM_FULL_OBJ): tests/test_oom_nets.c $(SUITE_DEPS)
	$(need)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DSK_OOM_FULL -c -o $@ $<
$(BUILD)/oomfull/unit: $(OOM_FULL_OBJS)
	$(need)
	$(CC) $(CFLAGS) -o $@ $^ -lcriterion $(JSON_LIBS) $(CKPT_LIBS) $(LDLIBS)
oom-full: $(BUILD)/oomfull/unit
	$(BUILD)/oomfull/unit --filter 'oom*/*' $(CRITERION_ARGS)

# Criterion cannot start under TSan (Snaipe/Criterion#274), so the threaded suites are built
# against a small stand-in with the same assertions and run in one process (tests/tsan_shim/).
TSAN_TEST_SRCS := $(sort $(wildcard tests/test_comm*.c) tests/test_fusion.c tests/test_redist.c tests/test_redist_across.c tests/test_redist_reshape.c tests/test_ops.c tests/test_ops_sharded.c tests/test_redundancy.c tests/test_runtime.c tests/test_hsdp.c tests/test_pipeline_runtime.c tests/test_search_runtime.c tests/test_pipeline_hsdp.c tests/test_dead_branches.c tests/test_layouts.c tests/test_program_run.c) tests/impl.c tests/tsan_shim/runner.c
TSAN_OBJS := $(call suite_objs,tsan,$(TSAN_TEST_SRCS))
$(BUILD)/tsan/obj/%.o: %.c $(SUITE_DEPS) $(wildcard tests/tsan_shim/criterion/*.h)
	@mkdir -p $(@D)
	$(CC) -Itests/tsan_shim $(CPPFLAGS) -std=c11 -Wall -Wextra -Werror -O1 -g $(TSAN_FLAGS) -c -o $@ $<
$(BUILD)/tsan/unit: $(TSAN_OBJS)
	$(CC) $(TSAN_FLAGS) -o $@ $^ $(LDLIBS)

# GCC always; Clang, Open MPI and C++ checks skip themselves when those are missing.
check-headers:
	@sh tests/check_headers.sh

# `make test` first installs what is missing, then runs in a second make, which sees the new
# packages (this one already decided what is installed when it read the Makefile). `make
# test-run` is the same without the installing.
test:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory -j$(JOBS) test-run

test-run: check-headers $(BUILD)/tests/unit all $(MPI_DRIVER)
	$(BUILD)/tests/unit $(CRITERION_ARGS)
	@sh tests/tools_test.sh
	@sh tests/bench_test.sh
	@sh tests/demo_test.sh
	@sh tests/install_test.sh
	@sh tests/docs_test.sh
	@sh tests/help_test.sh
	@sh tests/openmp_test.sh
	@sh tests/fusion_test.sh
	@sh tests/sim_test.sh
	@sh tests/ms_cases_test.sh

sanitize: $(BUILD)/san/unit $(MPI_DRIVER)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 LSAN_OPTIONS=suppressions=tests/lsan.supp UBSAN_OPTIONS=print_stacktrace=1 $(BUILD)/san/unit $(CRITERION_ARGS)

# TSan on recent kernels needs a non-randomised address space (setarch -R); fall back if refused.
tsan: $(BUILD)/tsan/unit
	@if setarch $$(uname -m) -R true 2>/dev/null; then r="setarch $$(uname -m) -R"; else r=""; fi; \
	echo "TSAN_OPTIONS=halt_on_error=1 $$r $(BUILD)/tsan/unit"; \
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 $$r $(BUILD)/tsan/unit

# ---- Clang -------------------------------------------------------------------------------
# The suites again, built by the second compiler: Clang warns where GCC does not, and its code
# generation exercises the atomics and the threads backend differently. The MPI cases use the
# programs in build/, as under `make sanitize`.
$(BUILD)/clang/obj/%.o: %.c $(SUITE_DEPS)
	$(need)
	@mkdir -p $(@D)
	$(CLANG) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<
$(BUILD)/clang/unit: $(CLANGU_OBJS)
	$(need)
	$(CLANG) $(CFLAGS) -o $@ $^ -lcriterion $(JSON_LIBS) $(CKPT_LIBS) $(LDLIBS)

# Every other program checked by Clang: its front end, where all of Clang's warnings come from,
# without code generation (-fsyntax-only: a tenth of the time; linking or optimising checks nothing
# Clang-specific). Through Open MPI's wrapper with OMPI_CC so the MPI ones find mpi.h; a stamp
# file records each check that passed.
CLANG_CHECKS := $(patsubst %.c,$(BUILD)/clang/%.ok,$(wildcard tools/*.c examples/*.c bench/*.c) tests/mpi/mpi_driver.c)
$(foreach o,$(CLANG_CHECKS),$(eval NEEDS.$o := clang mpi))
NEEDS.$(BUILD)/clang/examples/operator_parallel.ok := clang mpi openblas zlib
NEEDS.$(BUILD)/clang/tools/sk_sim.ok := clang mpi openblas zlib jansson uring
NEEDS.$(BUILD)/clang/tools/sk_ckpt.ok := clang mpi zlib uring
NEEDS.$(BUILD)/clang/bench/search_perf.ok := clang mpi jansson
NEEDS.$(BUILD)/clang/bench/ckpt_perf.ok := clang mpi zlib uring
CLANG_CHECK = OMPI_CC=$(CLANG) $(MPICC) $(CPPFLAGS) $(CFLAGS) -DSK_USE_URING -c -fsyntax-only
$(BUILD)/clang/tools/%.ok: tools/%.c $(TOOL_HDRS) $(PROG_HDRS) $(HEADERS)
	$(need)
	@mkdir -p $(@D)
	$(CLANG_CHECK) $<
	@touch $@
$(BUILD)/clang/examples/%.ok: examples/%.c $(PROG_HDRS) $(HEADERS)
	$(need)
	@mkdir -p $(@D)
	$(CLANG_CHECK) $<
	@touch $@
$(BUILD)/clang/bench/%.ok: bench/%.c $(wildcard bench/*.h) $(PROG_HDRS) $(HEADERS)
	$(need)
	@mkdir -p $(@D)
	$(CLANG_CHECK) -DSK_BENCH_MPI $<
	@touch $@
$(BUILD)/clang/tests/mpi/mpi_driver.ok: $(MPI_DRIVER_DEPS) $(HEADERS)
	$(need)
	@mkdir -p $(@D)
	$(CLANG_CHECK) -Itests/mpi tests/mpi/mpi_driver.c
	@touch $@

test-clang: $(BUILD)/clang/unit $(CLANG_CHECKS) $(MPI_DRIVER)
	$(BUILD)/clang/unit $(CRITERION_ARGS)

# Needs clang and Open MPI; tests/analyze.sh names whichever is missing.
analyze:
	@CLANG=$(CLANG) sh tests/analyze.sh

demo:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory demo-run

demo-run: $(BUILD)/sk-layout $(BUILD)/operator_parallel
	@echo '== Layout((2,2,2),("dp","sp","mp")), x[16,784] under layout("mp",("sp","dp")) =='
	@$(BUILD)/sk-layout --mesh dp=2,sp=2,mp=2 --shape 16,784 --map "mp,(sp,dp)" --name x
	@echo
	@echo '== the weight [784,512] under layout(("sp","dp"),"None") =='
	@$(BUILD)/sk-layout --mesh dp=2,sp=2,mp=2 --shape 784,512 --map "(sp,dp),None" --name W
	@echo
	@echo "== MatMul().shard(((2,4),(4,1))) on 8 devices: device matrix (a,b,c) = (2,4,1); x by (a,b), w by (b,c) =="
	@$(BUILD)/sk-layout --mesh a=2,b=4,c=1 --shape 16,784 --map "a,b" --name x
	@$(BUILD)/sk-layout --mesh a=2,b=4,c=1 --shape 784,512 --map "b,c" --name w
	@echo "w's replica groups (its gradient AllReduce):"
	@$(BUILD)/sk-layout --mesh a=2,b=4,c=1 --shape 784,512 --map "b,c" --groups
	@echo
	@echo "== ReLU().shard(((4,1),)) on 8 devices: the repeat axis goes on the right =="
	@$(BUILD)/sk-layout --devices 8 --strategy 4,1 --shape 16,512 --name relu_in
	@echo
	@echo "== the tutorial's network trained on 8 simulated devices, checked against 1 device (300 steps) =="
	@$(BUILD)/operator_parallel --devices 8 --steps 300 --check


# ---- fuzzing -----------------------------------------------------------------------------
# libFuzzer harnesses for the text parsers (tests/fuzz/README.md), built with Clang under ASan and
# UBSan and run one at a time for FUZZ_TIME seconds each. Not part of make test: a run is never
# the same twice. A crash, hang or leak stops that fuzzer, leaves its input in
# build/fuzz/artifacts/<target>/ and fails the target.
FUZZ_TIME    ?= 60
FUZZ_TARGETS := manifest json strategy pylayout
FUZZ_FLAGS   := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_LIBS.manifest := -lz
FUZZ_LIBS.json     := -ljansson
FUZZ_LIBS.strategy := -ljansson
FUZZ_SEEDS.json    := examples/nets
# The text harnesses (all but pylayout) compile the library with SK_MAX_TEXT_FILE_BYTES at 64 KiB,
# above every seed: inputs may grow past it, so that the refusal of a longer text is fuzzed too.
FUZZ_MAX_LEN       := 70000
NEEDS.$(BUILD)/fuzz/fuzz_manifest := clang zlib
NEEDS.$(BUILD)/fuzz/fuzz_json     := clang jansson
NEEDS.$(BUILD)/fuzz/fuzz_strategy := clang jansson
NEEDS.$(BUILD)/fuzz/fuzz_pylayout := clang
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_guard.h $(TOOL_HDRS) $(HEADERS)
	$(need)
	@mkdir -p $(@D)
	$(CLANG) $(CPPFLAGS) -Itools $(FUZZ_FLAGS) -o $@ $< $(FUZZ_LIBS.$*) $(LDLIBS)

fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD)/fuzz/corpus/$$t $(BUILD)/fuzz/artifacts/$$t; \
	  seeds=tests/fuzz/seeds/$$t; [ -d "$$seeds" ] || seeds=; \
	  case $$t in json) seeds=$(FUZZ_SEEDS.json);; esac; \
	  maxlen=-max_len=$(FUZZ_MAX_LEN); [ $$t = pylayout ] && maxlen=; \
	  dict=tests/fuzz/$$t.dict; [ -f "$$dict" ] && dict=-dict=$$dict || dict=; \
	  echo "== fuzz_$$t: $(FUZZ_TIME) s"; \
	  $(BUILD)/fuzz/fuzz_$$t $$dict $$maxlen -max_total_time=$(FUZZ_TIME) -timeout=5 -rss_limit_mb=2048 \
	    -artifact_prefix=$(BUILD)/fuzz/artifacts/$$t/ -print_final_stats=1 $(BUILD)/fuzz/corpus/$$t $$seeds \
	    >$(BUILD)/fuzz/$$t.log 2>&1 || { tail -40 $(BUILD)/fuzz/$$t.log; echo "fuzz_$$t failed: see $(BUILD)/fuzz/$$t.log"; exit 1; }; \
	  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' $(BUILD)/fuzz/$$t.log | tr '\n' ' '; \
	  echo "corpus: $$(ls $(BUILD)/fuzz/corpus/$$t | wc -l) inputs"; \
	done

# ---- install -------------------------------------------------------------------------------
# Headers in include/shardkit (as pkg-config and CMake consumers expect), shardkit.pc, the CMake
# package and the command-line tools. Only the tools go in bin: the benchmarks carry nccl-tests'
# program names (all_reduce_perf, ...), which would clash with an installed nccl-tests, and they
# are meant to be run from the tree (bench/compare); the examples are there to be read.
# Uninstall removes the same files, then shardkit's own directories and those install had to
# create (recorded in $(CREATED_DIRS)) when they are empty; bin, lib and the like that existed
# before stay, even if empty.
DEST         := $(DESTDIR)$(PREFIX)
INSTALL_DIRS := bin include include/shardkit lib lib/pkgconfig lib/cmake lib/cmake/shardkit
CMAKE_DIR    := lib/cmake/shardkit
CMAKE_FILES  := shardkitConfig.cmake shardkitConfigVersion.cmake
CREATED_DIRS := $(CMAKE_DIR)/created-dirs
SK_VERSION    = $(shell sed -n 's/^#define SK_VERSION_\(MAJOR\|MINOR\|PATCH\) *//p' include/sk_core.h | paste -sd.)

install: $(TOOLS)
	@new=$$(for d in $(INSTALL_DIRS); do [ -d "$(DEST)/$$d" ] || echo $$d; done); \
	echo 'install -d $(INSTALL_DIRS:%="$(DEST)/%")'; install -d $(INSTALL_DIRS:%="$(DEST)/%") && \
	{ cat "$(DEST)/$(CREATED_DIRS)" 2>/dev/null; printf '%s\n' $$new; } | sort -u >"$(DEST)/$(CREATED_DIRS).tmp" && \
	mv "$(DEST)/$(CREATED_DIRS).tmp" "$(DEST)/$(CREATED_DIRS)"
	install -m 644 $(HEADERS) "$(DEST)/include/shardkit/"
	install -m 755 $(TOOLS) "$(DEST)/bin/"
	printf 'prefix=%s\nincludedir=$${prefix}/include/shardkit\n\nName: shardkit\nDescription: header-only tensor sharding and collectives\nVersion: %s\nCflags: -I$${includedir}\nLibs: -lpthread -lm\n' \
	  "$(PREFIX)" "$(SK_VERSION)" >"$(DEST)/lib/pkgconfig/shardkit.pc"
	install -m 644 cmake/shardkitConfig.cmake "$(DEST)/$(CMAKE_DIR)/"
	sed 's/@VERSION@/$(SK_VERSION)/' cmake/shardkitConfigVersion.cmake.in >"$(DEST)/$(CMAKE_DIR)/shardkitConfigVersion.cmake"

uninstall:
	rm -f $(patsubst %,"$(DEST)/include/shardkit/%",$(notdir $(HEADERS))) $(patsubst %,"$(DEST)/bin/%",$(notdir $(TOOLS))) \
	  "$(DEST)/lib/pkgconfig/shardkit.pc" $(CMAKE_FILES:%="$(DEST)/$(CMAKE_DIR)/%")
	@created=$$(cat "$(DEST)/$(CREATED_DIRS)" 2>/dev/null); rm -f "$(DEST)/$(CREATED_DIRS)"; \
	for d in $$(printf '%s\n' $$created include/shardkit $(CMAKE_DIR) | sort -ru); do rmdir "$(DEST)/$$d" 2>/dev/null && echo "rmdir $(DEST)/$$d"; done; :

clean:
	rm -rf $(BUILD)
