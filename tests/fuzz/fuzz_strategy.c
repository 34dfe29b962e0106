/* libFuzzer harness: strategy files (sk_strategy.h), read as sk-sim --load-strategy reads them:
   sk_parallel_compile with the input as both the operator and the parameter strategy file, on 8
   devices, against each network of examples/nets (tests/fuzz/README.md), which must leave each
   network byte for byte as it was. The loaders read a
   path, so each input is written to a file first. Run from the repository's top directory.
   The desc names gpipe, which runs any micro-batch count: a file's "stages" then compiles a
   pipeline of one micro-batch (1f1b would refuse it before reading further). */
#define _DEFAULT_SOURCE /* mkstemp */
/* A limit the fuzzer's inputs reach (make fuzz passes -max_len above it; every seed is below it):
   the refusal of a text over SK_MAX_TEXT_FILE_BYTES is fuzzed too (sk_core.h's TEXT FILES). */
#define SK_MAX_TEXT_FILE_BYTES ((size_t)64 << 10)
#define SK_IMPL
#include "shardkit.h"
#include "sk_json.h"
#include "sk_strategy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_guard.h"

#define NNETS 3
static const char *const nets[NNETS] = {"examples/nets/operator_parallel.json", "examples/nets/recursive_programming.json",
                                        "examples/nets/transformer.json"};
static sk_graph graphs[NNETS];
static sk_graph_op *saved[NNETS]; /* each network's operators as loaded: no compile may change them */
static char path[64];

static void remove_file(void) { unlink(path); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  for (int i = 0; i < NNETS; i++) {
    sk_error e = {SK_OK, ""};
    if (sk_json_load_network(nets[i], &graphs[i], &e)) {
      fprintf(stderr, "fuzz_strategy: %s (run from the repository's top directory)\n", e.msg);
      exit(1);
    }
    saved[i] = (sk_graph_op *)malloc(((size_t)graphs[i].nops + 1) * sizeof *saved[i]);
    if (!saved[i]) exit(1);
    memcpy(saved[i], graphs[i].ops, (size_t)graphs[i].nops * sizeof *saved[i]);
  }
  snprintf(path, sizeof path, "/tmp/sk_fuzz_strategy.XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0) exit(1);
  close(fd);
  atexit(remove_file);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (size) fwrite(data, 1, size, f);
  fclose(f);
  for (int i = 0; i < NNETS; i++) {
    sk_autoparallel d;
    sk_parallel_plan plan;
    sk_error e = {SK_OK, ""};
    memset(&d, 0, sizeof d);
    d.ndevices = 8, d.pipeline.scheduler = SK_PIPE_GPIPE;
    d.load_operator_strategy_file = d.load_param_strategy_file = path, d.strategy_io = sk_strategy_io();
    sk_result r = sk_parallel_compile(&graphs[i], &d, &plan, &e);
    fuzz_check_limit(size, r == SK_OK, e.msg);
    if (r == SK_OK) sk_parallel_free(&plan);
    else if (!e.msg[0]) abort(); /* a refusal always says why */
    if (memcmp(saved[i], graphs[i].ops, (size_t)graphs[i].nops * sizeof *saved[i])) abort(); /* the caller's graph changed */
  }
  return 0;
}
