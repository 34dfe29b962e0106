/* sk-ckpt -- lists, verifies and merges the sharded checkpoints sk-sim --save-checkpoint writes
   (docs/checkpoints.md).

     build/sk-ckpt list DIR      the newest checkpoint under DIR: step, optimizer, files, every slice
     build/sk-ckpt verify DIR    every byte against its block crc, every file's crc, every tensor
                                 covered exactly once; exit 0 only then
     build/sk-ckpt merge DIR [--out OUT]  one whole tensor per parameter and state, as one
                                 device's checkpoint under OUT (default DIR/merged; OUT's lock
                                 held meanwhile); says the directory it wrote

   DIR is a checkpoint root (its LATEST names the newest) or one checkpoint directory (holding
   MANIFEST). Exit status: 0 done, 1 the checkpoint is missing, incomplete or corrupt (the
   message says what), 2 bad usage. */
#define _POSIX_C_SOURCE 200809L
#define SK_IMPL
#include "shardkit.h"
#include "sk_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>

#include "../examples/progs.h"

static void usage(FILE *f, const char *argv0) {
  fprintf(f,
          "Usage: %s list|verify|merge DIR [--out OUT] [--io auto|plain|io_uring]\n"
          "Reads the newest checkpoint under DIR (a root with LATEST, or one checkpoint directory).\n"
          "  list                 its step, data position, optimizer, files and every slice (tensor, kind,\n"
          "                       box, rank)\n"
          "  verify               checks every block's and file's crc32 and that every tensor is whole;\n"
          "                       exit 0 only when all holds, 1 naming what does not\n"
          "  merge                writes each tensor whole (parameters and optimizer states) as one\n"
          "                       device's checkpoint under OUT\n"
          "  --out OUT            merge's checkpoint root (default DIR/merged)\n"
          "  --io P               auto (io_uring when the kernel allows it; default), plain or io_uring\n",
          prog_name(argv0));
}

/* DIR/MANIFEST exists: DIR is one checkpoint; else a root. */
static sk_result open_any(const char *dir, sk_ckpt_manifest *m, sk_error *e) {
  char path[4096 + 16];
  struct stat st;
  snprintf(path, sizeof path, "%s/MANIFEST", dir);
  return stat(path, &st) ? sk_ckpt_open(dir, m, e) : sk_ckpt_open_dir(dir, m, e);
}

/* The checkpoint directories of a root, in name order (ckpt-<step>: step order). */
static void list_root(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  char names[64][SK_CKPT_FILE_MAX];
  int n = 0;
  for (struct dirent *e = readdir(d); e && n < 64; e = readdir(d))
    if (!strncmp(e->d_name, "ckpt-", 5) && strlen(e->d_name) < SK_CKPT_FILE_MAX)
      memcpy(names[n++], e->d_name, strlen(e->d_name) + 1); /* fits: checked (snprintf warns at -O1) */
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
  printf("checkpoints:");
  for (int i = 0; i < n; i++) printf(" %s", names[i]);
  printf("%s\n", n ? "" : " (none)");
}

static void list(const char *dir, const sk_ckpt_manifest *m) {
  list_root(dir);
  printf("checkpoint %s: step %lld, position %lld, saved by %d devices, optimizer %s\n", m->dir, (long long)m->step,
         (long long)m->position, m->devices, *m->optimizer ? m->optimizer : "not recorded");
  for (int f = 0; f < m->nfiles; f++)
    printf("file %-16s %12llu bytes  crc32 %08x  %d blocks\n", m->files[f].name, (unsigned long long)m->files[f].size,
           (unsigned)m->files[f].crc, m->files[f].nblocks);
  for (int i = 0; i < m->nentries; i++) {
    const sk_ckpt_entry *e = &m->entries[i];
    printf("slice %s %s %s box ", e->tensor, sk_ckpt_kind_name(e->kind), sk_dtype_name(e->dtype));
    for (int d = 0; d < e->ndims; d++) printf("%s%lld:%lld", d ? "," : "", (long long)e->box.start[d], (long long)e->box.stop[d]);
    printf(" of (");
    for (int d = 0; d < e->ndims; d++) printf("%s%lld", d ? "," : "", (long long)e->shape[d]);
    printf(") rank %d %s+%llu\n", e->rank, m->files[e->file].name, (unsigned long long)e->offset);
  }
}

static int parse_io(const char *v, sk_ckpt_io *io) {
  if (!strcmp(v, "auto")) *io = SK_CKPT_IO_AUTO;
  else if (!strcmp(v, "plain")) *io = SK_CKPT_IO_PLAIN;
  else if (!strcmp(v, "io_uring")) *io = SK_CKPT_IO_URING;
  else return -1;
  return 0;
}

/* The bytes a root must leave for the names beneath it (ckpt-<step>/rank-<r>.bin, merged/...). */
#define NAMES_BENEATH (2 * SK_CKPT_FILE_MAX + 8)

/* A root's syntax (what is there is read after). 0, or 2 after a usage error. */
static int check_root(const char *argv0, const char *what, const char *path) {
  const char *why = prog_path_problem(path, NAMES_BENEATH);
  char msg[128];
  snprintf(msg, sizeof msg, "%s: %s", what, why ? why : "");
  return why ? prog_bad_usage(argv0, msg, path) : 0;
}

/* argv: COMMAND DIR [--out OUT] [--io P]. 0: go on; 1: --help printed; 2: bad usage. */
static int parse_args(int argc, char **argv, const char **out, sk_ckpt_io *io) {
  for (int i = 1; i < argc; i++)
    if (prog_is_help(argv[i])) return usage(stdout, argv[0]), 1;
  if (argc < 3) return prog_bad_usage(argv[0], "list, verify or merge, then DIR", NULL);
  const char *cmd = argv[1];
  if (strcmp(cmd, "list") && strcmp(cmd, "verify") && strcmp(cmd, "merge")) return prog_bad_usage(argv[0], "unknown command", cmd);
  if (check_root(argv[0], "DIR", argv[2])) return 2;
  for (int i = 3; i < argc; i += 2) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) return prog_bad_usage(argv[0], "an option without its value", a);
    if (!strcmp(a, "--out")) {
      if (strcmp(cmd, "merge")) return prog_bad_usage(argv[0], "--out goes with merge", cmd);
      if (check_root(argv[0], "--out OUT", v)) return 2;
      *out = v;
    } else if (!strcmp(a, "--io")) {
      if (parse_io(v, io)) return prog_bad_usage(argv[0], "--io takes auto, plain or io_uring", v);
    } else return prog_bad_usage(argv[0], "unknown option", a);
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *out = NULL;
  sk_ckpt_io io = SK_CKPT_IO_AUTO;
  int code = parse_args(argc, argv, &out, &io);
  if (code) return code == 1 ? 0 : code;
  const char *cmd = argv[1], *dir = argv[2];
  sk_ckpt_manifest m;
  memset(&m, 0, sizeof m);
  sk_error e = {SK_OK, ""};
  char merged[4096 + 16];
  sk_result r = open_any(dir, &m, &e);
  if (!r && !strcmp(cmd, "list")) list(dir, &m);
  if (!r && !strcmp(cmd, "verify") && !(r = sk_ckpt_verify(&m, io, &e)))
    printf("ok: %s: %d files, %d slices, every block's crc32 holds, every tensor whole\n", m.dir, m.nfiles, m.nentries);
  if (!r && !strcmp(cmd, "merge")) {
    if (!out) snprintf(merged, sizeof merged, "%s/merged", dir), out = merged;
    sk_ckpt_report rep; /* the name written, never the manifest's */
    if (!(r = sk_ckpt_merge(&m, out, io, &rep, &e))) printf("merged into %s/%s\n", out, rep.name);
  }
  if (r) fprintf(stderr, "%s: %s\n", prog_name(argv[0]), e.msg);
  sk_ckpt_manifest_free(&m);
  return r ? 1 : 0;
}
