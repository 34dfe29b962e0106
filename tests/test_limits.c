/* The limits on every text shardkit reads (sk_core.h's TEXT FILES): each loader -- network JSON,
   parallel_speed_up.json, a strategy file, a checkpoint's MANIFEST and LATEST -- refuses a file
   over SK_MAX_TEXT_FILE_BYTES before reading it (sparse files: a size past the limit costs no
   disk), reads one exactly at the limit, and refuses a FIFO (without blocking: the timeouts), a
   character device (/dev/zero) and, inside a checkpoint root, a symbolic link; every parse call
   refuses a length over the limit before it reads the text; a rank file longer than its manifest
   says is refused.

   The implementations come from tests/impl.c, tests/test_json.c, tests/test_ckpt.c and
   tests/test_strategy.c, compiled with the default limit (256 MiB). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, mkfifo, symlink, ftruncate */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "shardkit.h"
#include "sk_ckpt.h"
#include "sk_json.h"
#include "sk_strategy.h"

#define LIMIT ((unsigned long long)SK_MAX_TEXT_FILE_BYTES)
#define NET "examples/nets/operator_parallel.json"

/* call fails with `code` and exactly the message `want` */
#define REFUSED(call, code, want)                                                                      \
  do {                                                                                                 \
    sk_error e_ = {SK_OK, ""};                                                                         \
    sk_result r_ = (call);                                                                             \
    cr_assert_eq(r_, code, "%s returned %s (%s)", #call, sk_result_name(r_), e_.msg);                 \
    cr_assert_str_eq(e_.msg, want, "%s", #call);                                                       \
  } while (0)
#define E (&e_)

/* ---- a scratch directory and the files in it ------------------------------------------------- */

static char dir[64];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/sk_limits_test.XXXXXX");
  cr_assert(mkdtemp(dir), "mkdtemp");
}

static void remove_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

static const char *in_dir(const char *name, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%s", dir, name);
  return buf;
}

/* A file of `size` zero bytes that takes no disk (a hole). */
static void sparse(const char *path, unsigned long long size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  cr_assert(fd >= 0, "creating %s", path);
  cr_assert_eq(ftruncate(fd, (off_t)size), 0, "ftruncate %s", path);
  close(fd);
}

static void put(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert(f, "creating %s", path);
  cr_assert_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

/* ---- the loaders, each reading the file at loader_path() ----------------------------------------- */

/* The network every strategy file is loaded against. */
static sk_graph net;

static void load_net(void) {
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_json_load_network(NET, &net, &e), SK_OK, "%s (run the suites from the project root)", e.msg);
}

typedef struct loader {
  const char *name; /* what the file is called in the scratch directory */
  sk_result (*run)(sk_error *err);
} loader;

static sk_result run_net(sk_error *err) {
  char p[128];
  sk_graph g;
  sk_result r = sk_json_load_network(in_dir("net.json", p, sizeof p), &g, err);
  if (!r) sk_graph_free(&g);
  return r;
}

static sk_result run_opt(sk_error *err) {
  char p[128];
  sk_transformer_opt o;
  return sk_json_load_transformer_opt(in_dir("parallel_speed_up.json", p, sizeof p), &o, err);
}

static sk_result run_strategy(sk_error *err) {
  char p[128];
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.ndevices = 8;
  return sk_strategy_load_operators(in_dir("strategy.json", p, sizeof p), &net, &d, err);
}

static sk_result run_manifest(sk_error *err) {
  sk_ckpt_manifest m;
  sk_result r = sk_ckpt_open_dir(dir, &m, err);
  if (!r) sk_ckpt_manifest_free(&m);
  return r;
}

static sk_result run_latest(sk_error *err) {
  sk_ckpt_manifest m;
  sk_result r = sk_ckpt_open(dir, &m, err);
  if (!r) sk_ckpt_manifest_free(&m);
  return r;
}

#define NLOADERS 5
static const loader loaders[NLOADERS] = {{"net.json", run_net},
                                         {"parallel_speed_up.json", run_opt},
                                         {"strategy.json", run_strategy},
                                         {"MANIFEST", run_manifest},
                                         {"LATEST", run_latest}};

/* ---- files over, and at, the limit ------------------------------------------------------------- */

/* One byte over: refused by name with the exact message (the file is never read: today's readers
   took 256 MiB of memory first). Exactly at the limit: past the size check, refused by the
   parser (zero bytes are no JSON, manifest or checkpoint name). */
Test(limits, files_over_the_limit_are_refused_before_reading, .init = make_dir, .fini = remove_dir, .timeout = 120) {
  load_net();
  for (int i = 0; i < NLOADERS; i++) {
    char p[128], want[256];
    in_dir(loaders[i].name, p, sizeof p);
    sparse(p, LIMIT + 1);
    snprintf(want, sizeof want, "%s: %llu bytes exceeds the limit of %llu bytes", p, LIMIT + 1, LIMIT);
    REFUSED(loaders[i].run(E), SK_ERR_INVALID_ARGUMENT, want);
    sparse(p, LIMIT);
    sk_error e = {SK_OK, ""};
    cr_assert_neq(loaders[i].run(&e), SK_OK, "%s: zeros accepted", loaders[i].name);
    cr_assert(e.msg[0] && !strstr(e.msg, "exceeds the limit"), "%s at the limit: '%s'", loaders[i].name, e.msg);
    cr_assert_eq(unlink(p), 0);
  }
  sk_graph_free(&net);
}

/* ---- what is not a regular file -------------------------------------------------------------- */

/* A FIFO without a writer blocked every loader's open forever; now each refuses it by name. */
Test(limits, fifos_are_refused_without_blocking, .init = make_dir, .fini = remove_dir, .timeout = 20) {
  load_net();
  for (int i = 0; i < NLOADERS; i++) {
    char p[128], want[256];
    in_dir(loaders[i].name, p, sizeof p);
    cr_assert_eq(mkfifo(p, 0644), 0, "mkfifo %s", p);
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", p);
    REFUSED(loaders[i].run(E), SK_ERR_INVALID_ARGUMENT, want);
    cr_assert_eq(unlink(p), 0);
  }
  sk_graph_free(&net);
}

/* /dev/zero, which never ends: refused, not read until memory runs out. */
Test(limits, character_devices_are_refused, .timeout = 20) {
  load_net();
  sk_graph g;
  sk_transformer_opt o;
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.ndevices = 8;
  const char *want = "/dev/zero: not a regular file (a character device)";
  REFUSED(sk_json_load_network("/dev/zero", &g, E), SK_ERR_INVALID_ARGUMENT, want);
  REFUSED(sk_json_load_transformer_opt("/dev/zero", &o, E), SK_ERR_INVALID_ARGUMENT, want);
  REFUSED(sk_strategy_load_operators("/dev/zero", &net, &d, E), SK_ERR_INVALID_ARGUMENT, want);
  sk_graph_free(&net);
}

/* A directory where LATEST or a network file should be. */
Test(limits, directories_are_refused, .init = make_dir, .fini = remove_dir, .timeout = 20) {
  char p[128], want[256];
  sk_graph g;
  in_dir("LATEST", p, sizeof p);
  cr_assert_eq(mkdir(p, 0755), 0);
  snprintf(want, sizeof want, "%s: not a regular file (a directory)", p);
  REFUSED(run_latest(E), SK_ERR_INVALID_ARGUMENT, want);
  snprintf(want, sizeof want, "%s: not a regular file (a directory)", dir);
  REFUSED(sk_json_load_network(dir, &g, E), SK_ERR_INVALID_ARGUMENT, want);
}

/* ---- a small checkpoint, written by hand --------------------------------------------------------- */

/* dir/ckpt-00000001: one device's rank-0.bin (4096 zero bytes: tensor w, f32 [1024]) and its
   MANIFEST; dir/LATEST names it. */
static void write_checkpoint(void) {
  static char zeros[4096];
  char p[128];
  uint32_t block = (uint32_t)crc32(0L, (const Bytef *)zeros, sizeof zeros);
  sk_ckpt_file file;
  sk_ckpt_entry entry;
  sk_ckpt_manifest m;
  memset(&file, 0, sizeof file), memset(&entry, 0, sizeof entry), memset(&m, 0, sizeof m);
  snprintf(file.name, sizeof file.name, "rank-0.bin");
  file.size = sizeof zeros, file.crc = block, file.nblocks = 1, file.blocks = &block;
  snprintf(entry.tensor, sizeof entry.tensor, "w");
  entry.kind = SK_CKPT_PARAM, entry.dtype = SK_F32, entry.ndims = entry.box.ndims = 1;
  entry.shape[0] = entry.box.stop[0] = 1024, entry.length = sizeof zeros;
  snprintf(m.name, sizeof m.name, "ckpt-00000001");
  m.step = 1, m.devices = 1, m.block = 1u << 20, m.nfiles = 1, m.nentries = 1, m.files = &file, m.entries = &entry;
  char *text = NULL;
  size_t len = 0;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_ckpt_manifest_format(&m, &text, &len, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(mkdir(in_dir("ckpt-00000001", p, sizeof p), 0755), 0);
  put(in_dir("ckpt-00000001/MANIFEST", p, sizeof p), text, len);
  put(in_dir("ckpt-00000001/rank-0.bin", p, sizeof p), zeros, sizeof zeros);
  put(in_dir("LATEST", p, sizeof p), "ckpt-00000001\n", 14);
  free(text);
  cr_assert_eq(run_latest(&e), SK_OK, "the hand-written checkpoint: %s", e.msg);
}

/* LATEST and MANIFEST are the root's own files: a symbolic link there is refused, even to the
   right content. A network file the user names may be a link. */
Test(limits, links_inside_a_checkpoint_are_refused, .init = make_dir, .fini = remove_dir, .timeout = 20) {
  char p[128], q[128], want[256];
  write_checkpoint();
  cr_assert_eq(rename(in_dir("LATEST", p, sizeof p), in_dir("LATEST.real", q, sizeof q)), 0);
  cr_assert_eq(symlink("LATEST.real", p), 0);
  snprintf(want, sizeof want, "%s: not a regular file (a symbolic link, not followed here)", p);
  REFUSED(run_latest(E), SK_ERR_INVALID_ARGUMENT, want);
  cr_assert_eq(rename(q, p), 0);
  cr_assert_eq(rename(in_dir("ckpt-00000001/MANIFEST", p, sizeof p), in_dir("MANIFEST.real", q, sizeof q)), 0);
  cr_assert_eq(symlink(q, p), 0);
  snprintf(want, sizeof want, "LATEST names ckpt-00000001: %s: not a regular file (a symbolic link, not followed here)", p);
  REFUSED(run_latest(E), SK_ERR_INVALID_ARGUMENT, want);
  /* a user's network file: followed */
  char cwd[4096], target[4200];
  cr_assert(getcwd(cwd, sizeof cwd));
  snprintf(target, sizeof target, "%s/" NET, cwd);
  cr_assert_eq(symlink(target, in_dir("net.json", p, sizeof p)), 0);
  sk_error e = {SK_OK, ""};
  cr_assert_eq(run_net(&e), SK_OK, "a linked network file: %s", e.msg);
}

/* The rank files have the sizes the manifest gives (sk_ckpt_open's sk__ckpt_check_sizes): one
   that grew is refused by name. (This held before the limits; kept as their guard.) */
Test(limits, rank_files_longer_than_the_manifest_says_are_refused, .init = make_dir, .fini = remove_dir) {
  char p[128];
  write_checkpoint();
  sparse(in_dir("ckpt-00000001/rank-0.bin", p, sizeof p), 8192);
  sk_error e = {SK_OK, ""};
  cr_assert_eq(run_latest(&e), SK_ERR_INVALID_ARGUMENT, "%s", e.msg);
  cr_assert(strstr(e.msg, p) && strstr(e.msg, "8192") && strstr(e.msg, "4096"), "%s", e.msg);
}

/* A manifest that lists a strategy.json over the limit: sk_ckpt_read_strategy refuses it before
   allocating (it wrote the NUL past a 1-byte buffer). */
Test(limits, a_checkpoint_strategy_over_the_limit_is_refused) {
  sk_ckpt_file file;
  sk_ckpt_manifest m;
  memset(&file, 0, sizeof file), memset(&m, 0, sizeof m);
  snprintf(file.name, sizeof file.name, "strategy.json");
  file.size = LIMIT + 1;
  snprintf(m.dir, sizeof m.dir, "/tmp/ck/ckpt-00000001");
  m.block = 1u << 20, m.nfiles = 1, m.files = &file;
  char *text = NULL, want[256];
  size_t len = 0;
  snprintf(want, sizeof want, "/tmp/ck/ckpt-00000001/strategy.json: %llu bytes exceeds the limit of %llu bytes", LIMIT + 1, LIMIT);
  REFUSED(sk_ckpt_read_strategy(&m, &text, &len, E), SK_ERR_INVALID_ARGUMENT, want);
  cr_assert_null(text);
}

/* ---- the parse calls ------------------------------------------------------------------------- */

/* len one past the limit over a 3-byte text: refused before a byte is read (ASan: no read past
   the buffer). */
Test(limits, parse_calls_refuse_a_length_over_the_limit) {
  static const char text[3] = "{}";
  char want[256];
  sk_graph g;
  sk_transformer_opt o;
  sk_ckpt_manifest m;
  snprintf(want, sizeof want, "sk_json_parse_network: %llu bytes exceeds the limit of %llu bytes", LIMIT + 1, LIMIT);
  REFUSED(sk_json_parse_network(text, (size_t)LIMIT + 1, &g, E), SK_ERR_INVALID_ARGUMENT, want);
  cr_assert_eq(g.ntensors, 0, "the graph stays empty");
  snprintf(want, sizeof want, "sk_json_parse_transformer_opt: %llu bytes exceeds the limit of %llu bytes", LIMIT + 1, LIMIT);
  REFUSED(sk_json_parse_transformer_opt(text, (size_t)LIMIT + 1, &o, E), SK_ERR_INVALID_ARGUMENT, want);
  snprintf(want, sizeof want, "sk_ckpt_manifest_parse: %llu bytes exceeds the limit of %llu bytes", LIMIT + 1, LIMIT);
  REFUSED(sk_ckpt_manifest_parse(text, (size_t)LIMIT + 1, &m, E), SK_ERR_INVALID_ARGUMENT, want);
  cr_assert_null(m.files, "nothing allocated");
  sk_ckpt_manifest_free(&m);
}
