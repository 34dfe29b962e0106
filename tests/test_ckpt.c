/* sk_ckpt.h: the pure parts (boxes and writers against sk_opt_shard.h and MindSpore's owners,
   reading plans, the manifest's text), the files (block crcs against zlib over the bytes on
   disk, partial reads that verify only their blocks), the commit with a crash injected at every
   stage (a hook that stops the save, a child process that dies there, and children killed at
   random moments), every byte of every file flipped and refused by name, and training resumed
   from a checkpoint on other device counts and strategies (test_ckpt_train below).

   sk_ckpt.h's implementation is compiled here rather than in tests/impl.c: impl.c also goes into
   the TSan binary, which does not link zlib and liburing. */
#define _POSIX_C_SOURCE 200809L /* fork, kill, mkdtemp, nanosleep */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SK_CKPT_IMPL
#define SK_USE_URING
#include "sk_ckpt.h"
#include "shardkit.h"

#include "ckpt_test_util.h"

static sk_layout layout(const char *mesh, const char *map, int nd, const int64_t *shape) {
  sk_mesh m;
  sk_layout l;
  OK(sk_mesh_parse(&m, mesh, E));
  OK(sk_layout_parse(&l, &m, map, nd, shape, E));
  return l;
}

/* ---- boxes and writers ------------------------------------------------------------------- */

/* SEMANTICS' example: a and b with groups (0,4),(1,5),.. and c replicated: a -> 0,1,2,3; b -> 4..7;
   c -> 0 (remove_param_redundancy's round robin). */
Test(ckpt, writers_are_the_round_robin_owners) {
  int64_t s[2] = {784, 512};
  sk_redundancy_param p[3];
  memset(p, 0, sizeof p);
  p[0].name = "a", p[0].layout = layout("dp=2,mp=4", "mp,None", 2, s);
  p[1].name = "b", p[1].layout = p[0].layout;
  p[2].name = "c", p[2].layout = layout("dp=2,mp=4", "None,None", 2, s);
  for (int rank = 0; rank < 8; rank++) {
    bool w[3];
    for (int i = 0; i < 3; i++) OK(sk_ckpt_writes(3, p, i, rank, &w[i], E));
    cr_assert_eq(w[0], rank < 4, "rank %d writes a: %d", rank, w[0]);
    cr_assert_eq(w[1], rank >= 4, "rank %d writes b: %d", rank, w[1]);
    cr_assert_eq(w[2], rank == 0, "rank %d writes c: %d", rank, w[2]);
  }
}

/* For several layouts and shard counts: the box of every rank is sk_opt_shard.h's rows, and the
   writers' boxes tile the tensor exactly once. */
Test(ckpt, writers_tile_every_tensor_once) {
  const char *meshes[3] = {"dp=2,mp=4", "a=2,b=2,c=2", "x=8"};
  const char *maps[3][3] = {{"mp,None", "None,dp", "None,None"}, {"a,c", "b,None", "None,None"}, {"x,None", "None,None", "None,x"}};
  int64_t s[2] = {64, 32};
  for (int m = 0; m < 3; m++)
    for (int k = 0; k < 3; k++)
      for (int shard = 0; shard <= 4; shard += 2) {
        sk_redundancy_param p;
        memset(&p, 0, sizeof p);
        p.name = "w", p.layout = layout(meshes[m], maps[m][k], 2, s);
        sk_hsdp h = {true, shard ? shard : -1, 0, SK_HSDP_LEVEL1};
        sk_opt_shard os;
        OK(sk_opt_shard_of(&p.layout, SK_F32, &h, 0, &os, E));
        p.opt_shard_size = shard ? os.size : 0;
        int64_t covered = 0;
        static int hits[64][32];
        memset(hits, 0, sizeof hits);
        for (int rank = 0; rank < 8; rank++) {
          sk_slice b;
          bool w;
          OK(sk_ckpt_box(&p.layout, p.opt_shard_size, rank, &b, E));
          OK(sk_ckpt_writes(1, &p, 0, rank, &w, E));
          if (p.opt_shard_size > 1) {
            OK(sk_opt_shard_of(&p.layout, SK_F32, &h, rank, &os, E));
            cr_assert_eq(b.start[0], os.rows_start, "%s %s shard %d rank %d", meshes[m], maps[m][k], shard, rank);
            cr_assert_eq(b.stop[0], os.rows_stop);
          }
          for (int64_t i = b.start[0]; w && i < b.stop[0]; i++)
            for (int64_t j = b.start[1]; j < b.stop[1]; j++) hits[i][j]++, covered++;
        }
        cr_assert_eq(covered, 64 * 32, "%s %s shard %d: %lld elements written", meshes[m], maps[m][k], shard, (long long)covered);
        for (int i = 0; i < 64; i++)
          for (int j = 0; j < 32; j++) cr_assert_eq(hits[i][j], 1, "%s %s: element %d,%d written %d times", meshes[m], maps[m][k], i, j, hits[i][j]);
      }
}

/* ---- manifests and reading plans ----------------------------------------------------------- */

/* Four row slices of a [8, 6] f64 tensor in two files. */
static void four_rows(sk_ckpt_manifest *m, sk_ckpt_file *files, uint32_t *blocks, sk_ckpt_entry *entries) {
  memset(m, 0, sizeof *m);
  snprintf(m->name, sizeof m->name, "ckpt-00000007");
  m->step = 7, m->position = 9, m->devices = 4, m->block = SK_CKPT_BLOCK, m->nfiles = 2, m->nentries = 4;
  m->files = files, m->entries = entries;
  for (int f = 0; f < 2; f++) {
    memset(&files[f], 0, sizeof files[f]);
    snprintf(files[f].name, sizeof files[f].name, "rank-%d.bin", f);
    files[f].size = 8192 + 192, files[f].crc = 0xdeadbeefu + (uint32_t)f, files[f].nblocks = 1, files[f].blocks = &blocks[f];
    blocks[f] = 0x01020304u * (uint32_t)(f + 1);
  }
  for (int i = 0; i < 4; i++) {
    sk_ckpt_entry *e = &entries[i];
    memset(e, 0, sizeof *e);
    snprintf(e->tensor, sizeof e->tensor, "fc1.weight");
    e->kind = SK_CKPT_STATE1, e->dtype = SK_F64, e->ndims = 2, e->shape[0] = 8, e->shape[1] = 6;
    e->box.ndims = 2, e->box.start[0] = 2 * i, e->box.stop[0] = 2 * i + 2, e->box.stop[1] = 6;
    e->file = i / 2, e->offset = (uint64_t)(i % 2) * 8192, e->length = 96, e->rank = i;
  }
}

Test(ckpt, manifest_round_trip) {
  sk_ckpt_manifest m, back;
  sk_ckpt_file files[2];
  uint32_t blocks[2];
  sk_ckpt_entry entries[4];
  four_rows(&m, files, blocks, entries);
  char *text = NULL;
  size_t len = 0;
  OK(sk_ckpt_manifest_format(&m, &text, &len, E));
  OK(sk_ckpt_manifest_parse(text, len, &back, E));
  cr_assert_eq(back.step, 7); cr_assert_eq(back.position, 9); cr_assert_eq(back.devices, 4);
  cr_assert_str_eq(back.name, "ckpt-00000007");
  cr_assert_eq(back.nfiles, 2); cr_assert_eq(back.nentries, 4);
  for (int f = 0; f < 2; f++) {
    cr_assert_str_eq(back.files[f].name, files[f].name);
    cr_assert_eq(back.files[f].size, files[f].size); cr_assert_eq(back.files[f].crc, files[f].crc);
    cr_assert_eq(back.files[f].nblocks, 1); cr_assert_eq(back.files[f].blocks[0], blocks[f]);
  }
  for (int i = 0; i < 4; i++) cr_assert_eq(memcmp(&back.entries[i], &entries[i], sizeof entries[i]), 0, "entry %d", i);
  char *again = NULL;
  OK(sk_ckpt_manifest_format(&back, &again, &len, E));
  cr_assert_str_eq(again, text);
  sk_ckpt_manifest_free(&back); /* parsed into again below */
  /* every single byte changed, and every truncation, is refused */
  for (size_t i = 0; i < len; i++) {
    sk_ckpt_manifest bad;
    char saved = text[i];
    text[i] = (char)(text[i] ^ 0x20);
    cr_assert_neq(sk_ckpt_manifest_parse(text, len, &bad, NULL), SK_OK, "byte %zu flipped was accepted", i);
    text[i] = saved;
    cr_assert_neq(sk_ckpt_manifest_parse(text, i, &bad, NULL), SK_OK, "the first %zu bytes were accepted", i);
  }
  BAD(sk_ckpt_manifest_parse(text, len - 3, &back, E), SK_ERR_INVALID_ARGUMENT, "line", "crc");
  free(text), free(again);
  sk_ckpt_manifest_free(&back);
}

/* ---- manifests the fuzzer wrote (tests/fuzz/fuzz_manifest.c) ---- */

#define HEAD "shardkit-checkpoint 1\nname ckpt-00000001\nstep 1\nposition 0\ndevices 1\nblock 1048576\n"
#define FILE0 "file rank-0.bin size 4096 crc 00000000 blocks 00000000\n"

/* Parses head + body (+ its crc line when `crc`), the text's last byte just before a page that
   cannot be read: a parser reading past len faults, even inside libc. */
static sk_result parse_guarded(const char *head, const char *body, bool crc, sk_ckpt_manifest *m, sk_error *e) {
  char text[4096];
  int n = snprintf(text, sizeof text, "%s%s", head, body);
  cr_assert(n > 0 && n + 16 < (int)sizeof text);
  if (crc) n += snprintf(text + n, 16, "crc %08x\n", (unsigned)crc32(0L, (const Bytef *)text, (uInt)n));
  long page = sysconf(_SC_PAGESIZE);
  int fd = open("/dev/zero", O_RDWR);
  cr_assert(fd >= 0);
  char *map = (char *)mmap(NULL, (size_t)page * 3, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd);
  cr_assert(map != MAP_FAILED);
  cr_assert_eq(mprotect(map + 2 * page, (size_t)page, PROT_NONE), 0);
  char *at = map + 2 * page - n;
  memcpy(at, text, (size_t)n);
  sk_result r = sk_ckpt_manifest_parse(at, (size_t)n, m, e);
  munmap(map, (size_t)page * 3);
  return r;
}

/* A block list cut off at the end of the text was read past it (strtoul ran on). */
Test(ckpt, fuzzed_manifest_block_list_at_the_end) {
  sk_ckpt_manifest m;
  BAD(parse_guarded(HEAD, "file rank-0.bin size 4 crc 00000000 blocks ", false, &m, E), SK_ERR_INVALID_ARGUMENT,
      "line 7", "block list");
  BAD(parse_guarded(HEAD, "file rank-0.bin size 4 crc 00000000 blocks 0000000", false, &m, E), SK_ERR_INVALID_ARGUMENT,
      "line 7", "block list");
  /* one spelling of a crc: 8 hex digits, no sign, blank or 0x */
  BAD(parse_guarded(HEAD, "file rank-0.bin size 4 crc 00000000 blocks +0000001\n", true, &m, E),
      SK_ERR_INVALID_ARGUMENT, "line 7", "block list");
  BAD(parse_guarded(HEAD, "file rank-0.bin size 4 crc 00000000 blocks  0000001\n", true, &m, E),
      SK_ERR_INVALID_ARGUMENT, "line 7", "block list");
}

Test(ckpt, fuzzed_manifest_header_numbers_out_of_range) {
  sk_ckpt_manifest m;
  /* 2^32 + 1 devices read as 1 through (int); 2^32 + 2^20 as a 1 MiB block through (uint32_t) */
  BAD(parse_guarded("shardkit-checkpoint 1\nname c\nstep 1\nposition 0\ndevices 4294967297\nblock 1048576\n", "", true,
                    &m, E), SK_ERR_INVALID_ARGUMENT, "line 5", "device count");
  BAD(parse_guarded("shardkit-checkpoint 1\nname c\nstep 1\nposition 0\ndevices 1\nblock 4296015872\n", "", true,
                    &m, E), SK_ERR_INVALID_ARGUMENT, "line 6", "block size");
}

/* A file's size sized the block array before its list was read: 2^50 bytes asked for 4 GiB, and
   2^64 - 1 wrapped to no blocks at all. */
Test(ckpt, fuzzed_manifest_file_sizes_the_line_cannot_list) {
  sk_ckpt_manifest m;
  BAD(parse_guarded(HEAD, "file rank-0.bin size 1125899906842624 crc 00000000 blocks 00000000\n", true, &m, E),
      SK_ERR_INVALID_ARGUMENT, "line 7", "block list");
  BAD(parse_guarded(HEAD, "file rank-0.bin size 18446744073709551615 crc 00000000 blocks -\n", true, &m, E),
      SK_ERR_INVALID_ARGUMENT, "line 7", "block list");
  /* a list longer than the line buffer is still read whole: 1000 blocks */
  static char body[16384];
  int n = snprintf(body, sizeof body, "file rank-0.bin size %llu crc 00000000 blocks ", 1000ULL << 20);
  for (int k = 0; k < 1000; k++) n += snprintf(body + n, sizeof body - (size_t)n, "%s%08x", k ? "," : "", (unsigned)k);
  snprintf(body + n, sizeof body - (size_t)n, "\n");
  char *text = (char *)malloc(sizeof body + 256);
  int len = sprintf(text, "%s%s", HEAD, body);
  len += sprintf(text + len, "crc %08x\n", (unsigned)crc32(0L, (const Bytef *)text, (uInt)len));
  OK(sk_ckpt_manifest_parse(text, (size_t)len, &m, E));
  cr_assert_eq(m.files[0].nblocks, 1000);
  cr_assert_eq(m.files[0].blocks[999], 999u);
  sk_ckpt_manifest_free(&m);
  free(text);
}

/* Byte counts that overflowed: a shape of 2^64 elements (signed overflow), 2^61 f64 elements
   whose 2^64 bytes wrapped to a length of 0, an offset whose end wrapped past 2^64. */
Test(ckpt, fuzzed_manifest_byte_counts_that_overflow) {
  sk_ckpt_manifest m;
  BAD(parse_guarded(HEAD FILE0,
                    "slice t param f64 shape 4611686018427387904,4 box 0:4611686018427387904,0:4 file 0 offset 0 "
                    "length 0 rank 0\n", true, &m, E), SK_ERR_INVALID_ARGUMENT, "line 8", "2^60 elements");
  BAD(parse_guarded(HEAD FILE0,
                    "slice t param f64 shape 2305843009213693952 box 0:2305843009213693952 file 0 offset 0 length 0 rank 0\n",
                    true, &m, E), SK_ERR_INVALID_ARGUMENT, "line 8", "2^60 elements");
  BAD(parse_guarded(HEAD FILE0, "slice t param u8 shape 8 box 0:8 file 0 offset 18446744073709551615 length 8 rank 0\n",
                    true, &m, E), SK_ERR_INVALID_ARGUMENT, "slice 0", "outside its file");
}

/* Tiling sums of boxes that overlap each other (not the first) passed int64; slices of one
   tensor in two shapes were summed against the first's. */
Test(ckpt, fuzzed_manifest_tiling_sums) {
  sk_ckpt_manifest m;
  sk_ckpt_entry e[4];
  memset(&m, 0, sizeof m), memset(e, 0, sizeof e);
  m.block = SK_CKPT_BLOCK, m.entries = e, m.nentries = 4;
  for (int i = 0; i < 4; i++) {
    snprintf(e[i].tensor, sizeof e[i].tensor, "w");
    e[i].dtype = SK_U8, e[i].ndims = e[i].box.ndims = 1, e[i].shape[0] = (int64_t)1 << 62, e[i].rank = i;
    e[i].box.start[0] = i ? 1 : 0, e[i].box.stop[0] = i ? e[i].shape[0] : 1;
  }
  BAD(sk_ckpt_verify(&m, SK_CKPT_IO_PLAIN, E), SK_ERR_INVALID_ARGUMENT, "ranks 1 and 2", "overlap");
  m.nentries = 2, e[1].shape[0] = 2, e[1].box.stop[0] = 2; /* [0:1] of 2^62, [1:2] of 2 */
  BAD(sk_ckpt_verify(&m, SK_CKPT_IO_PLAIN, E), SK_ERR_INVALID_ARGUMENT, "ranks 0 and 1", "disagree on its shape");
}

static sk_ckpt_slice target(const char *name, sk_ckpt_kind kind, int r0, int r1, int c0, int c1) {
  sk_ckpt_slice t;
  memset(&t, 0, sizeof t);
  t.tensor = name, t.kind = kind, t.dtype = SK_F64, t.ndims = 2, t.shape[0] = 8, t.shape[1] = 6;
  t.box.ndims = 2, t.box.start[0] = r0, t.box.stop[0] = r1, t.box.start[1] = c0, t.box.stop[1] = c1;
  return t;
}

Test(ckpt, reading_plans_tile_the_target) {
  sk_ckpt_manifest m;
  sk_ckpt_file files[2];
  uint32_t blocks[2];
  sk_ckpt_entry entries[4];
  four_rows(&m, files, blocks, entries);
  sk_ckpt_piece p[8];
  int n = 0;
  sk_ckpt_slice col = target("fc1.weight", SK_CKPT_STATE1, 0, 8, 3, 6); /* a column half: all four rows */
  OK(sk_ckpt_read_plan(&m, &col, 5, p, 8, &n, E));
  cr_assert_eq(n, 4);
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(p[i].entry, i);
    cr_assert_eq(p[i].box.start[0], 2 * i); cr_assert_eq(p[i].box.stop[0], 2 * i + 2);
    cr_assert_eq(p[i].box.start[1], 3); cr_assert_eq(p[i].box.stop[1], 6);
  }
  sk_ckpt_slice mid = target("fc1.weight", SK_CKPT_STATE1, 3, 5, 0, 6); /* rows 3, 4: two saved slices */
  OK(sk_ckpt_read_plan(&m, &mid, 5, p, 8, &n, E));
  cr_assert_eq(n, 2); cr_assert_eq(p[0].entry, 1); cr_assert_eq(p[1].entry, 2);
  /* a saved slice gone: the tensor, kind and rank are named */
  m.nentries = 3;
  BAD(sk_ckpt_read_plan(&m, &col, 5, p, 8, &n, E), SK_ERR_INVALID_ARGUMENT, "'fc1.weight' state1 (rank 5)", "missing");
  m.nentries = 4;
  sk_ckpt_slice other = target("fc2.weight", SK_CKPT_PARAM, 0, 8, 0, 6);
  BAD(sk_ckpt_read_plan(&m, &other, 2, p, 8, &n, E), SK_ERR_INVALID_ARGUMENT, "'fc2.weight' param (rank 2)", "missing");
  sk_ckpt_slice shaped = target("fc1.weight", SK_CKPT_STATE1, 0, 8, 0, 6);
  shaped.dtype = SK_F32; /* floating dtypes convert */
  OK(sk_ckpt_read_plan(&m, &shaped, 1, p, 8, &n, E));
  shaped.dtype = SK_I32;
  BAD(sk_ckpt_read_plan(&m, &shaped, 1, p, 8, &n, E), SK_ERR_INVALID_ARGUMENT, "'fc1.weight'", "i32");
  shaped.dtype = SK_F64, shaped.shape[1] = 7;
  BAD(sk_ckpt_read_plan(&m, &shaped, 1, p, 8, &n, E), SK_ERR_INVALID_ARGUMENT, "'fc1.weight'", "another shape");
}

/* ---- files ------------------------------------------------------------------------------ */

/* One device's slices of tensor "big" [ROWS, 1000] f64 (rows split in two) and "small" [3]. */
#define ROWS 300
static double big[ROWS * 1000], small_t[3];

static void fill(uint64_t seed) {
  for (int i = 0; i < ROWS * 1000; i++) big[i] = (double)((seed * 2654435761u + (uint64_t)i * 40503u) % 100003u) / 7.0;
  for (int i = 0; i < 3; i++) small_t[i] = (double)seed + i;
}

static int slices_of(sk_ckpt_slice *s, double *b, double *sm) {
  memset(s, 0, 3 * sizeof *s);
  for (int h = 0; h < 2; h++) {
    s[h].tensor = "big", s[h].kind = SK_CKPT_PARAM, s[h].dtype = SK_F64, s[h].ndims = 2;
    s[h].shape[0] = ROWS, s[h].shape[1] = 1000, s[h].box.ndims = 2, s[h].write = true;
    s[h].box.start[0] = h * ROWS / 2, s[h].box.stop[0] = (h + 1) * ROWS / 2, s[h].box.stop[1] = 1000;
    s[h].data = b + h * (ROWS / 2) * 1000;
  }
  s[2].tensor = "small", s[2].kind = SK_CKPT_STATE0, s[2].dtype = SK_F64, s[2].ndims = 1, s[2].shape[0] = 3;
  s[2].box.ndims = 1, s[2].box.stop[0] = 3, s[2].data = sm, s[2].write = true;
  return 3;
}

static void save_step(const char *root, int64_t step, sk_ckpt_io io) {
  sk_ckpt_slice s[3];
  int n = slices_of(s, big, small_t);
  sk_ckpt_save_desc d;
  memset(&d, 0, sizeof d);
  d.step = step, d.position = step * 2, d.io = io, d.strategy = "{\"strategy\": 1}\n", d.strategy_len = 16;
  OK(sk_ckpt_save(NULL, root, &d, n, s, NULL, E));
}

/* Loads the newest under root whole and compares with what fill(seed) made. */
static void expect_newest(const char *root, uint64_t seed, int64_t step) {
  sk_ckpt_manifest m;
  OK(sk_ckpt_open(root, &m, E));
  cr_assert_eq(m.step, step, "newest step %lld, want %lld", (long long)m.step, (long long)step);
  OK(sk_ckpt_verify(&m, SK_CKPT_IO_AUTO, E));
  static double b[ROWS * 1000];
  double sm[3];
  sk_ckpt_slice s[3];
  slices_of(s, b, sm);
  OK(sk_ckpt_load(&m, 0, SK_CKPT_IO_AUTO, 3, s, NULL, E));
  fill(seed);
  cr_assert_eq(memcmp(b, big, sizeof b), 0, "big differs");
  cr_assert_eq(memcmp(sm, small_t, sizeof sm), 0, "small differs");
  sk_ckpt_manifest_free(&m);
}

/* The crcs in the manifest are zlib's over the bytes on disk, block by block and whole. */
Test(ckpt, block_crcs_are_the_files_bytes) {
  char root[64], path[4200];
  tmp_root(root, sizeof root);
  fill(3);
  save_step(root, 5, SK_CKPT_IO_PLAIN);
  sk_ckpt_manifest m;
  OK(sk_ckpt_open(root, &m, E));
  cr_assert_eq(m.nfiles, 2); cr_assert_eq(m.nentries, 3);
  for (int f = 0; f < m.nfiles; f++) {
    snprintf(path, sizeof path, "%s/%s", m.dir, m.files[f].name);
    FILE *fp = fopen(path, "rb");
    cr_assert(fp);
    unsigned char *buf = (unsigned char *)malloc(m.files[f].size + 1);
    cr_assert_eq(fread(buf, 1, m.files[f].size, fp), m.files[f].size);
    fclose(fp);
    cr_assert_eq((uint32_t)crc32(0, buf, (uInt)m.files[f].size), m.files[f].crc, "%s", path);
    for (int k = 0; k < m.files[f].nblocks; k++) {
      size_t at = (size_t)k * SK_CKPT_BLOCK, len = m.files[f].size - at < SK_CKPT_BLOCK ? m.files[f].size - at : SK_CKPT_BLOCK;
      cr_assert_eq((uint32_t)crc32(0, buf + at, (uInt)len), m.files[f].blocks[k], "%s block %d", path, k);
    }
    free(buf);
  }
  cr_assert_eq(m.files[0].nblocks, 3); /* 2.4 MB of "big" */
  sk_ckpt_manifest_free(&m);
  expect_newest(root, 3, 5);
  rm_rf(root);
}

/* A slice saved in f64 loads into f32, f16 and bf16 targets (another box than the saved ones),
   each element rounded once to nearest even from its float value; an f32 checkpoint loads back
   into f64 exactly. */
Test(ckpt, floating_dtypes_convert_on_load) {
  char root[64];
  tmp_root(root, sizeof root);
  fill(6);
  for (int i = 0; i < ROWS * 1000; i += 7) big[i] = -big[i] * 1e-3; /* signs and small values too */
  save_step(root, 2, SK_CKPT_IO_PLAIN);
  sk_ckpt_manifest m;
  OK(sk_ckpt_open(root, &m, E));
  static float f32[100 * 1000];
  static uint16_t half[100 * 1000];
  sk_ckpt_slice t;
  memset(&t, 0, sizeof t);
  t.tensor = "big", t.ndims = t.box.ndims = 2, t.shape[0] = ROWS, t.shape[1] = 1000;
  t.box.start[0] = 100, t.box.stop[0] = 200, t.box.stop[1] = 1000; /* across the two saved halves */
  const sk_dtype to[3] = {SK_F32, SK_F16, SK_BF16};
  for (int k = 0; k < 3; k++) {
    t.dtype = to[k], t.data = k ? (void *)half : (void *)f32;
    OK(sk_ckpt_load(&m, 0, SK_CKPT_IO_PLAIN, 1, &t, NULL, E));
    for (int i = 0; i < 100 * 1000; i++) {
      float want = (float)big[100 * 1000 + i];
      if (k == 0) cr_assert_eq(f32[i], want, "f32 element %d: %g, want %g", i, f32[i], want);
      else cr_assert_eq(half[i], k == 1 ? sk_f32_to_f16(want) : sk_f32_to_bf16(want), "%s element %d", sk_dtype_name(to[k]), i);
    }
  }
  sk_ckpt_manifest_free(&m);
  /* f32 saved (the rows just loaded), read back into f64 */
  char root2[64];
  tmp_root(root2, sizeof root2);
  sk_ckpt_slice s = t;
  s.dtype = SK_F32, s.data = f32, s.write = true, s.shape[0] = 100, s.box.start[0] = 0, s.box.stop[0] = 100;
  sk_ckpt_save_desc d;
  memset(&d, 0, sizeof d);
  d.step = 1;
  OK(sk_ckpt_save(NULL, root2, &d, 1, &s, NULL, E));
  OK(sk_ckpt_open(root2, &m, E));
  static double back[100 * 1000];
  s.dtype = SK_F64, s.data = back, s.write = false;
  OK(sk_ckpt_load(&m, 0, SK_CKPT_IO_PLAIN, 1, &s, NULL, E));
  for (int i = 0; i < 100 * 1000; i++) cr_assert_eq(back[i], (double)f32[i], "f64 element %d", i);
  sk_ckpt_manifest_free(&m);
  rm_rf(root), rm_rf(root2);
}

/* A byte flipped in block 2 of the rank file: a target inside block 0 still loads (its blocks
   verify), one reading block 2 is refused naming the tensor, the rank, the file and the block. */
Test(ckpt, partial_reads_verify_their_blocks) {
  char root[64], path[256];
  tmp_root(root, sizeof root);
  fill(4);
  save_step(root, 1, SK_CKPT_IO_AUTO);
  snprintf(path, sizeof path, "%s/ckpt-00000001/rank-0.bin", root);
  FILE *fp = fopen(path, "r+b");
  cr_assert(fp);
  fseek(fp, 2 * (long)SK_CKPT_BLOCK + 100, SEEK_SET);
  int c = fgetc(fp);
  fseek(fp, 2 * (long)SK_CKPT_BLOCK + 100, SEEK_SET);
  fputc(c ^ 1, fp);
  fclose(fp);
  sk_ckpt_manifest m;
  OK(sk_ckpt_open(root, &m, E));
  static double b[ROWS * 1000];
  sk_ckpt_slice t;
  memset(&t, 0, sizeof t);
  t.tensor = "big", t.dtype = SK_F64, t.ndims = t.box.ndims = 2, t.shape[0] = ROWS, t.shape[1] = 1000;
  t.box.stop[0] = 10, t.box.start[1] = 500, t.box.stop[1] = 1000, t.data = b; /* rows 0..9: block 0 */
  sk_ckpt_report rep;
  OK(sk_ckpt_load(&m, 3, SK_CKPT_IO_AUTO, 1, &t, &rep, E));
  cr_assert_eq(rep.bytes, SK_CKPT_BLOCK, "read %llu bytes for a box in block 0", (unsigned long long)rep.bytes);
  for (int i = 0; i < 10; i++)
    for (int j = 0; j < 500; j++) cr_assert_eq(b[i * 500 + j], big[i * 1000 + 500 + j]);
  t.box.start[0] = 280, t.box.stop[0] = 290;
  BAD(sk_ckpt_load(&m, 3, SK_CKPT_IO_AUTO, 1, &t, NULL, E), SK_ERR_INVALID_ARGUMENT, "'big' param (rank 3", "block 2");
  BAD(sk_ckpt_verify(&m, SK_CKPT_IO_PLAIN, E), SK_ERR_INVALID_ARGUMENT, "rank-0.bin: block 2", "corrupt");
  sk_ckpt_manifest_free(&m);
  rm_rf(root);
}

/* Each file of a committed checkpoint, a random byte of it flipped (many times): verify refuses
   naming the file; the manifest and LATEST are refused when opened. */
Test(ckpt, every_flipped_byte_is_refused, .timeout = 60) {
  char root[64], path[256];
  tmp_root(root, sizeof root);
  fill(5);
  save_step(root, 2, SK_CKPT_IO_AUTO);
  const char *names[4] = {"ckpt-00000002/rank-0.bin", "ckpt-00000002/strategy.json", "ckpt-00000002/MANIFEST", "LATEST"};
  uint64_t seed = 12345;
  for (int f = 0; f < 4; f++)
    for (int trial = 0; trial < 12; trial++) {
      snprintf(path, sizeof path, "%s/%s", root, names[f]);
      struct stat st;
      cr_assert_eq(stat(path, &st), 0);
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      long at = (long)((seed >> 33) % (uint64_t)st.st_size);
      unsigned char bit = (unsigned char)(1u << ((seed >> 20) % 8));
      FILE *fp = fopen(path, "r+b");
      fseek(fp, at, SEEK_SET);
      int c = fgetc(fp);
      fseek(fp, at, SEEK_SET), fputc(c ^ bit, fp), fclose(fp);
      sk_ckpt_manifest m;
      sk_error e = {SK_OK, ""};
      sk_result r = sk_ckpt_open(root, &m, &e);
      if (!r) r = sk_ckpt_verify(&m, SK_CKPT_IO_AUTO, &e), sk_ckpt_manifest_free(&m);
      cr_assert_neq(r, SK_OK, "%s: byte %ld flipped was not noticed", names[f], at);
      const char *word = f < 2 ? strchr(names[f], '/') + 1 : f == 2 ? "manifest" : "LATEST";
      cr_assert(strstr(e.msg, word), "%s byte %ld: '%s' does not name %s", names[f], at, e.msg, word);
      fp = fopen(path, "r+b"); /* put it back */
      fseek(fp, at, SEEK_SET), fputc(c, fp), fclose(fp);
    }
  expect_newest(root, 5, 2);
  rm_rf(root);
}

/* The newest committed checkpoint loses its tail or a file: open refuses it (incomplete). */
Test(ckpt, truncated_or_missing_files_are_refused) {
  char root[64], path[256];
  tmp_root(root, sizeof root);
  fill(6);
  save_step(root, 1, SK_CKPT_IO_AUTO);
  snprintf(path, sizeof path, "%s/ckpt-00000001/rank-0.bin", root);
  cr_assert_eq(truncate(path, 4096), 0);
  BAD(sk_ckpt_open(root, &(sk_ckpt_manifest){0}, E), SK_ERR_INVALID_ARGUMENT, "rank-0.bin", "incomplete");
  cr_assert_eq(unlink(path), 0);
  BAD(sk_ckpt_open(root, &(sk_ckpt_manifest){0}, E), SK_ERR_SYSTEM, "rank-0.bin", "missing");
  snprintf(path, sizeof path, "%s/LATEST", root);
  FILE *fp = fopen(path, "w");
  fputs("../elsewhere\n", fp), fclose(fp);
  BAD(sk_ckpt_open(root, &(sk_ckpt_manifest){0}, E), SK_ERR_INVALID_ARGUMENT, "LATEST", "one checkpoint");
  rm_rf(root);
}

/* ---- the commit, crashed at every stage ---------------------------------------------------- */

typedef struct crash {
  sk_ckpt_stage at;
  bool die; /* _exit the process there (a child) instead of returning nonzero */
} crash;

static int crash_hook(void *user, sk_ckpt_stage at, int rank) {
  const crash *c = (const crash *)user;
  (void)rank;
  if (at != c->at) return 0;
  if (c->die) _exit(0);
  return 1;
}

static sk_result save_with_hook(const char *root, int64_t step, crash *c, sk_error *e) {
  sk_ckpt_slice s[3];
  int n = slices_of(s, big, small_t);
  sk_ckpt_save_desc d;
  memset(&d, 0, sizeof d);
  d.step = step, d.position = 2 * step, d.hook = crash_hook, d.hook_user = c;
  return sk_ckpt_save(NULL, root, &d, n, s, NULL, e);
}

/* A save stopped at any stage (returning, and a child process dying there) leaves the previous
   checkpoint the newest, whole; a save after it succeeds (the stale temporary is cleared). */
Test(ckpt, a_crash_at_any_stage_keeps_the_previous, .timeout = 60) {
  for (int die = 0; die < 2; die++)
    for (int at = 0; at < SK_CKPT_STAGES; at++) {
      char root[64];
      tmp_root(root, sizeof root);
      fill(10);
      save_step(root, 1, SK_CKPT_IO_AUTO);
      fill(20);
      crash c = {(sk_ckpt_stage)at, die != 0};
      if (die) {
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (!pid) _exit(save_with_hook(root, 2, &c, NULL) == SK_OK ? 1 : 2); /* the hook _exits 0 first */
        int status = 0;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "stage %d: the child did not die at its hook", at);
      } else {
        BAD(save_with_hook(root, 2, &c, E), SK_ERR_ABORTED, "stopped", "stage");
      }
      /* LATEST moves last: until then the previous stays the newest */
      expect_newest(root, 10, 1);
      fill(30); /* saving the same step again replaces what the crash left */
      save_step(root, 2, SK_CKPT_IO_AUTO);
      expect_newest(root, 30, 2);
      rm_rf(root);
    }
}

/* Children killed at random moments while saving one checkpoint after another: whatever LATEST
   names is always complete and verifies. */
Test(ckpt, random_kills_never_lose_the_newest, .timeout = 120) {
  char root[64];
  tmp_root(root, sizeof root);
  fill(1);
  save_step(root, 1, SK_CKPT_IO_AUTO);
  uint64_t seed = 99;
  for (int run = 0; run < 25; run++) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (!pid) {
      for (int64_t step = 100 * (run + 1);; step++) {
        fill((uint64_t)step);
        save_step(root, step, SK_CKPT_IO_AUTO);
      }
    }
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    struct timespec ts = {0, (long)((seed >> 33) % 40000000)}; /* up to 40 ms: a few saves */
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    sk_ckpt_manifest m;
    OK(sk_ckpt_open(root, &m, E));
    OK(sk_ckpt_verify(&m, SK_CKPT_IO_AUTO, E));
    int64_t step = m.step;
    sk_ckpt_manifest_free(&m);
    expect_newest(root, step == 1 ? 1 : (uint64_t)step, step);
  }
  rm_rf(root);
}

/* merge: one device's checkpoint of the whole tensors, equal to what was saved. */
Test(ckpt, merge_gives_whole_tensors) {
  char root[64], out[128];
  tmp_root(root, sizeof root);
  fill(8);
  save_step(root, 4, SK_CKPT_IO_AUTO);
  sk_ckpt_manifest m, mm;
  OK(sk_ckpt_open(root, &m, E));
  snprintf(out, sizeof out, "%s/merged", root);
  OK(sk_ckpt_merge(&m, out, SK_CKPT_IO_AUTO, NULL, E));
  OK(sk_ckpt_open(out, &mm, E));
  cr_assert_eq(mm.nentries, 2, "merged: %d slices", mm.nentries);
  cr_assert_eq(mm.entries[0].box.stop[0], ROWS); cr_assert_eq(mm.step, 4); cr_assert_eq(mm.position, 8);
  OK(sk_ckpt_verify(&mm, SK_CKPT_IO_PLAIN, E));
  char *strategy = NULL;
  size_t len = 0;
  OK(sk_ckpt_read_strategy(&mm, &strategy, &len, E));
  cr_assert_str_eq(strategy, "{\"strategy\": 1}\n");
  free(strategy);
  sk_ckpt_manifest_free(&m), sk_ckpt_manifest_free(&mm);
  expect_newest(out, 8, 4);
  rm_rf(root);
}

/* The io_uring path and the plain one write the same bytes (AUTO says which ran). */
Test(ckpt, uring_and_plain_agree) {
  char a[64], b[64], pa[256], pb[256];
  tmp_root(a, sizeof a), tmp_root(b, sizeof b);
  fill(9);
  sk_ckpt_slice s[3];
  int n = slices_of(s, big, small_t);
  sk_ckpt_save_desc d;
  memset(&d, 0, sizeof d);
  d.step = 3, d.io = SK_CKPT_IO_AUTO;
  sk_ckpt_report rep;
  OK(sk_ckpt_save(NULL, a, &d, n, s, &rep, E));
  cr_assert(rep.used == SK_CKPT_IO_URING || rep.used == SK_CKPT_IO_PLAIN);
  d.io = SK_CKPT_IO_PLAIN;
  OK(sk_ckpt_save(NULL, b, &d, n, s, &rep, E));
  cr_assert_eq(rep.used, SK_CKPT_IO_PLAIN);
  snprintf(pa, sizeof pa, "cmp -s %s/ckpt-00000003/rank-0.bin %s/ckpt-00000003/rank-0.bin", a, b);
  cr_assert_eq(system(pa), 0, "the two paths wrote different bytes");
  snprintf(pb, sizeof pb, "cmp -s %s/ckpt-00000003/MANIFEST %s/ckpt-00000003/MANIFEST", a, b);
  cr_assert_eq(system(pb), 0);
  expect_newest(a, 9, 3);
  rm_rf(a), rm_rf(b);
}

/* A save whose slices leave a tensor incomplete (half of "big" not written by anyone) or
   written twice is refused before anything is visible: the previous checkpoint stays the newest. */
Test(ckpt, a_save_that_does_not_tile_is_refused) {
  char root[64];
  tmp_root(root, sizeof root);
  fill(11);
  save_step(root, 1, SK_CKPT_IO_AUTO);
  sk_ckpt_slice s[3];
  int n = slices_of(s, big, small_t);
  sk_ckpt_save_desc d;
  memset(&d, 0, sizeof d);
  d.step = 2;
  s[1].write = false;
  BAD(sk_ckpt_save(NULL, root, &d, n, s, NULL, E), SK_ERR_INVALID_ARGUMENT, "'big' param", "missing");
  s[1].write = true, s[1].box = s[0].box; /* the first half twice */
  BAD(sk_ckpt_save(NULL, root, &d, n, s, NULL, E), SK_ERR_INVALID_ARGUMENT, "'big' param", "overlap");
  expect_newest(root, 11, 1);
  rm_rf(root);
}
