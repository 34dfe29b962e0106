# shardkit -- header-only; this Makefile builds the tools, examples, benchmarks and tests.
#   make            every example, tool and benchmark into build/
#   make test       header checks + the Criterion suites (the MPI ones launch mpirun.openmpi)
#   make demo       the MindSpore tutorial tables (and later the 8-card training demo)
#   make sanitize   the suites under ASan + UBSan;   make tsan   under ThreadSanitizer
#   make test-clang the Criterion suites built with Clang (same warnings, -Werror) and run, plus a
#                   Clang compile of every example, tool, benchmark and the MPI test driver
#   make analyze    Clang's static analyzer over each header's implementation (SK_IMPL) and every
#                   example, tool, benchmark and test source; fails on any report in our files
#                   (tests/analyze.sh; ANALYZE_JOBS=N, default 2)
#   make install PREFIX=/usr/local   headers + shardkit.pc
#   make deps       install the Debian packages below that are missing (as root), or name them

# Every Debian package the build, tests, demo and benchmarks use. One list, checked by `deps`.
DEB_PACKAGES := gcc g++ make pkg-config libcriterion-dev openmpi-bin libopenmpi-dev zlib1g-dev libopenblas-dev \
                dataset-fashion-mnist gnuplot-nox clang

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
TOOLS     := $(BUILD)/sk-layout
BENCHES   := $(patsubst bench/%.c,$(BUILD)/%,$(wildcard bench/*.c))
EXAMPLES  := $(filter-out $(BUILD)/sk_layout,$(patsubst examples/%.c,$(BUILD)/%,$(wildcard examples/*.c)))
MPI_EXAMPLES := $(BUILD)/both_backends

# Tests run with a per-test timeout inside the suites; CRITERION_JOBS keeps the 2-core box sane.
CRITERION_ARGS ?= --jobs 2

.PHONY: all test demo sanitize tsan test-clang analyze install deps check-headers clean

all: $(TOOLS) $(EXAMPLES) $(BENCHES)

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

$(BUILD)/sk-layout: examples/sk_layout.c $(HEADERS) | deps
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LDLIBS)

# The training demo: MPI-capable, OpenBLAS for the GEMMs, zlib for the gzip'd dataset.
$(BUILD)/operator_parallel: examples/operator_parallel.c examples/fashion_mnist.h $(HEADERS) | deps
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) -o $@ $< -lopenblas -lz $(LDLIBS)

$(MPI_EXAMPLES): $(BUILD)/%: examples/%.c $(HEADERS) | deps
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LDLIBS)

$(BUILD)/%: examples/%.c $(HEADERS) | deps
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(LDLIBS)

$(BUILD)/%: bench/%.c $(wildcard bench/*.h) $(HEADERS) | deps
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) -DSK_BENCH_MPI $(CFLAGS) -o $@ $< $(LDLIBS)

# The MPI test driver, run under mpirun by tests/test_mpi.c (never inside Criterion itself). It
# runs the collective grid of tests/coll_grid.h (included by its path: no -Itests needed).
MPI_DRIVER_DEPS := $(wildcard tests/mpi/*.c tests/mpi/*.h) tests/coll_grid.h tests/comm_test_util.h
$(BUILD)/mpi_driver: $(MPI_DRIVER_DEPS) $(HEADERS) | deps
	@mkdir -p $(@D)
	$(MPICC) $(CPPFLAGS) -Itests/mpi $(CFLAGS) -o $@ tests/mpi/mpi_driver.c $(LDLIBS)

# ---- tests -------------------------------------------------------------------------------
$(BUILD)/tests/unit: $(TEST_SRCS) $(HEADERS) | deps
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $(TEST_SRCS) -lcriterion $(LDLIBS)

$(BUILD)/san/unit: $(TEST_SRCS) $(HEADERS) | deps
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -O1 $(SAN_FLAGS) -o $@ $(TEST_SRCS) -lcriterion $(LDLIBS)

# Criterion cannot start under TSan (Snaipe/Criterion#274), so the threaded suites are built
# against a small stand-in with the same assertions and run in one process (tests/tsan_shim/).
TSAN_TEST_SRCS := $(sort $(wildcard tests/test_comm*.c) tests/test_fusion.c tests/test_redist.c tests/test_ops.c) tests/impl.c tests/tsan_shim/runner.c
$(BUILD)/tsan/unit: $(TSAN_TEST_SRCS) $(wildcard tests/*.h tests/tsan_shim/criterion/*.h) $(HEADERS) | deps
	@mkdir -p $(@D)
	$(CC) -Itests/tsan_shim $(CPPFLAGS) -std=c11 -Wall -Wextra -Werror -O1 -g $(TSAN_FLAGS) -o $@ $(TSAN_TEST_SRCS) $(LDLIBS)

check-headers: | deps
	@sh tests/check_headers.sh

test: check-headers $(BUILD)/tests/unit all $(BUILD)/mpi_driver
	$(BUILD)/tests/unit $(CRITERION_ARGS)
	@sh tests/tools_test.sh
	@sh tests/bench_test.sh
	@sh tests/demo_test.sh

sanitize: $(BUILD)/san/unit $(BUILD)/mpi_driver
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
$(BUILD)/clang/unit: $(TEST_SRCS) $(HEADERS) | deps
	@mkdir -p $(@D)
	$(CLANG) $(CPPFLAGS) $(CFLAGS) -o $@ $(TEST_SRCS) -lcriterion $(LDLIBS)

# Every other program compiled (not linked: linking checks nothing Clang-specific) by Clang,
# through Open MPI's wrapper with OMPI_CC so the MPI ones find mpi.h.
CLANG_OBJS := $(patsubst %.c,$(BUILD)/clang/%.o,$(wildcard examples/*.c bench/*.c) tests/mpi/mpi_driver.c)
$(BUILD)/clang/examples/%.o: examples/%.c $(wildcard examples/*.h) $(HEADERS) | deps
	@mkdir -p $(@D)
	OMPI_CC=$(CLANG) $(MPICC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<
$(BUILD)/clang/bench/%.o: bench/%.c $(wildcard bench/*.h) $(HEADERS) | deps
	@mkdir -p $(@D)
	OMPI_CC=$(CLANG) $(MPICC) $(CPPFLAGS) -DSK_BENCH_MPI $(CFLAGS) -c -o $@ $<
$(BUILD)/clang/tests/mpi/mpi_driver.o: $(MPI_DRIVER_DEPS) $(HEADERS) | deps
	@mkdir -p $(@D)
	OMPI_CC=$(CLANG) $(MPICC) $(CPPFLAGS) -Itests/mpi $(CFLAGS) -c -o $@ tests/mpi/mpi_driver.c

test-clang: $(BUILD)/clang/unit $(CLANG_OBJS) $(BUILD)/mpi_driver
	$(BUILD)/clang/unit $(CRITERION_ARGS)

analyze: | deps
	@CLANG=$(CLANG) sh tests/analyze.sh

demo: $(BUILD)/sk-layout $(BUILD)/operator_parallel
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

install:
	install -d $(DESTDIR)$(PREFIX)/include/shardkit $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(HEADERS) $(DESTDIR)$(PREFIX)/include/shardkit/
	printf 'prefix=%s\nincludedir=$${prefix}/include/shardkit\n\nName: shardkit\nDescription: header-only tensor sharding and collectives\nVersion: %s\nCflags: -I$${includedir}\nLibs: -lpthread -lm\n' \
	  "$(PREFIX)" "$$(sed -n 's/^#define SK_VERSION_MAJOR //p' include/sk_core.h).$$(sed -n 's/^#define SK_VERSION_MINOR //p' include/sk_core.h).$$(sed -n 's/^#define SK_VERSION_PATCH //p' include/sk_core.h)" \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/shardkit.pc

clean:
	rm -rf $(BUILD)
