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

#include "progs.h"

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
    if (!strncmp(e->d_name, "ckpt-", 5) && strlen(e->d_name) < SK_CKPT_FILE_MAX) snprintf(names[n++], SK_CKPT_FILE_MAX, "%s", e->d_name);
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

static int bad_usage(const char *argv0, const char *msg) {
  fprintf(stderr, "%s: %s (try --help)\n", prog_name(argv0), msg);
  return 2;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (prog_is_help(argv[i])) return usage(stdout, argv[0]), 0;
  if (argc < 3) return bad_usage(argv[0], "list, verify or merge, then DIR");
  const char *cmd = argv[1], *dir = argv[2], *out = NULL;
  sk_ckpt_io io = SK_CKPT_IO_AUTO;
  if (strcmp(cmd, "list") && strcmp(cmd, "verify") && strcmp(cmd, "merge")) return bad_usage(argv[0], "unknown command");
  for (int i = 3; i < argc; i += 2) {
    if (i + 1 >= argc) return bad_usage(argv[0], "an option without its value");
    if (!strcmp(argv[i], "--out") && !strcmp(cmd, "merge")) out = argv[i + 1];
    else if (!strcmp(argv[i], "--io")) {
      if (parse_io(argv[i + 1], &io)) return bad_usage(argv[0], "--io takes auto, plain or io_uring");
    } else return bad_usage(argv[0], "unknown option");
  }
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
