/* sk_ckpt.h: the optimizer a checkpoint was saved with. The manifest's `optimizer KIND` line
   (version 2) round-trips for every kind and for none ("-"); a version-1 manifest, which has no
   such line, still parses (optimizer unknown: ""); a value that is not an optimizer's name, a
   version-2 manifest without the line and a version-1 manifest with it are refused by line; a
   save records its desc's optimizer (and refuses an unknown one before writing anything), and
   a merge keeps it.

   sk_ckpt.h's implementation is in tests/test_ckpt.c: build this suite with it and tests/impl.c. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "sk_ckpt.h"
#include "shardkit.h"

#include "ckpt_test_util.h"

/* One [4] f32 tensor's parameter, one file: the smallest manifest that parses. */
static void one_slice(sk_ckpt_manifest *m, sk_ckpt_file *f, uint32_t *block, sk_ckpt_entry *e, const char *optimizer) {
  memset(m, 0, sizeof *m), memset(f, 0, sizeof *f), memset(e, 0, sizeof *e);
  snprintf(m->name, sizeof m->name, "ckpt-00000003");
  snprintf(m->optimizer, sizeof m->optimizer, "%s", optimizer);
  m->step = 3, m->position = 6, m->devices = 1, m->block = SK_CKPT_BLOCK, m->nfiles = 1, m->nentries = 1;
  m->files = f, m->entries = e;
  snprintf(f->name, sizeof f->name, "rank-0.bin");
  *block = 0x0badcafeu, f->size = 16, f->crc = 0x0badcafeu, f->nblocks = 1, f->blocks = block;
  snprintf(e->tensor, sizeof e->tensor, "w");
  e->kind = SK_CKPT_PARAM, e->dtype = SK_F32, e->ndims = e->box.ndims = 1, e->shape[0] = 4, e->box.stop[0] = 4;
  e->length = 16;
}

/* head + "\n" + body with the crc line the manifest ends with, in a buffer of exactly its bytes
   (no NUL after it: a parser reading past len shows under ASan); *len its length. */
static char *with_crc(const char *head, size_t head_len, const char *body, size_t *len) {
  size_t bl = strlen(body);
  char *text = (char *)malloc(head_len + bl + 14);
  cr_assert(text);
  memcpy(text, head, head_len), memcpy(text + head_len, body, bl);
  char crc[16];
  snprintf(crc, sizeof crc, "crc %08x\n", (unsigned)crc32(0L, (const Bytef *)text, (uInt)(head_len + bl)));
  memcpy(text + head_len + bl, crc, 13);
  *len = head_len + bl + 13;
  return text;
}

#define V1 "shardkit-checkpoint 1\nname ckpt-00000003\nstep 3\nposition 6\ndevices 1\nblock 1048576\n"
#define V2 "shardkit-checkpoint 2\nname ckpt-00000003\nstep 3\nposition 6\ndevices 1\nblock 1048576\n"
#define BODY                                                          \
  "file rank-0.bin size 16 crc 0badcafe blocks 0badcafe\n"            \
  "slice w param f32 shape 4 box 0:4 file 0 offset 0 length 16 rank 0\n"

static sk_result parse_text(const char *head, size_t head_len, sk_ckpt_manifest *m, sk_error *e) {
  size_t len = 0;
  char *text = with_crc(head, head_len, BODY, &len);
  sk_result r = sk_ckpt_manifest_parse(text, len, m, e);
  free(text);
  return r;
}

Test(ckpt_optim, manifest_round_trip_with_each_optimizer) {
  const char *kinds[] = {"sgd", "momentum", "adam", ""};
  for (int k = 0; k < 4; k++) {
    sk_ckpt_manifest m, back;
    sk_ckpt_file f;
    sk_ckpt_entry e;
    uint32_t block;
    one_slice(&m, &f, &block, &e, kinds[k]);
    char *text = NULL, *again = NULL, line[32];
    size_t len = 0;
    OK(sk_ckpt_manifest_format(&m, &text, &len, E));
    cr_assert(!strncmp(text, "shardkit-checkpoint 2\n", 22), "%s", text);
    /* the header's last line, before the files */
    snprintf(line, sizeof line, "block 1048576\noptimizer %s\nfile ", *kinds[k] ? kinds[k] : "-");
    cr_assert(strstr(text, line), "no '%s' in\n%s", line, text);
    OK(sk_ckpt_manifest_parse(text, len, &back, E));
    cr_assert_str_eq(back.optimizer, kinds[k]);
    cr_assert_eq(back.step, 3); cr_assert_eq(back.nentries, 1); cr_assert_eq(back.nfiles, 1);
    OK(sk_ckpt_manifest_format(&back, &again, &len, E));
    cr_assert_str_eq(again, text);
    free(text), free(again);
    sk_ckpt_manifest_free(&back);
  }
}

/* Checkpoints written before the optimizer was recorded: they parse, the optimizer unknown. */
Test(ckpt_optim, version_1_manifest_parses_without_optimizer) {
  sk_ckpt_manifest m;
  memset(&m, 0x55, sizeof m); /* overwritten: "" whatever was there */
  OK(parse_text(V1, strlen(V1), &m, E));
  cr_assert_str_eq(m.optimizer, "");
  cr_assert_eq(m.step, 3); cr_assert_eq(m.nentries, 1);
  /* formatted again, it is a version-2 manifest saying so */
  char *text = NULL;
  size_t len = 0;
  OK(sk_ckpt_manifest_format(&m, &text, &len, E));
  cr_assert(strstr(text, "shardkit-checkpoint 2\n") == text && strstr(text, "\noptimizer -\n"), "%s", text);
  free(text);
  sk_ckpt_manifest_free(&m);
}

/* Every spelling that is not exactly an optimizer's name (or "-") is refused on its line. */
Test(ckpt_optim, bad_optimizer_values_are_refused) {
  const char *bad[] = {"lamb", "adamw", "Adam", "ADAM", "adam ", " adam", "adam\r", "", "-1", "--", "sgd,adam",
                       "momentum\x01", "adam\t"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char head[256];
    int n = snprintf(head, sizeof head, "%soptimizer %s\n", V2, bad[i]);
    sk_ckpt_manifest m;
    BAD(parse_text(head, (size_t)n, &m, E), SK_ERR_INVALID_ARGUMENT, "line 7", "optimizer");
  }
  /* a NUL inside the value: the line is longer than the name before it */
  static const char nul[] = V2 "optimizer adam\0x\n";
  sk_ckpt_manifest m;
  BAD(parse_text(nul, sizeof nul - 1, &m, E), SK_ERR_INVALID_ARGUMENT, "line 7", "optimizer");
  static const char nul_none[] = V2 "optimizer -\0\n";
  BAD(parse_text(nul_none, sizeof nul_none - 1, &m, E), SK_ERR_INVALID_ARGUMENT, "line 7", "optimizer");
  /* version 2 needs the line; version 1 has none (the line is not a file, slice or crc line);
     other versions are refused */
  BAD(parse_text(V2, strlen(V2), &m, E), SK_ERR_INVALID_ARGUMENT, "line 7", "optimizer");
  static const char v1_with[] = V1 "optimizer adam\n";
  BAD(parse_text(v1_with, sizeof v1_with - 1, &m, E), SK_ERR_INVALID_ARGUMENT, "line 7", "expected a file");
  static const char v3[] = "shardkit-checkpoint 3\nname c\nstep 3\nposition 6\ndevices 1\nblock 1048576\noptimizer adam\n";
  BAD(parse_text(v3, sizeof v3 - 1, &m, E), SK_ERR_INVALID_ARGUMENT, "line 1", "version");
  /* the line in the body's place, or twice */
  static const char twice[] = V2 "optimizer adam\noptimizer adam\n";
  BAD(parse_text(twice, sizeof twice - 1, &m, E), SK_ERR_INVALID_ARGUMENT, "line 8", "expected a file");
  /* each kind is accepted, "-" reads as none */
  const char *good[] = {"sgd", "momentum", "adam", "-"};
  for (int k = 0; k < 4; k++) {
    char head[256];
    int n = snprintf(head, sizeof head, "%soptimizer %s\n", V2, good[k]);
    OK(parse_text(head, (size_t)n, &m, E));
    cr_assert_str_eq(m.optimizer, k < 3 ? good[k] : "");
    sk_ckpt_manifest_free(&m);
  }
}

/* A manifest built by hand with a name that is no optimizer's is not formatted. */
Test(ckpt_optim, format_refuses_an_unknown_optimizer) {
  sk_ckpt_manifest m;
  sk_ckpt_file f;
  sk_ckpt_entry e;
  uint32_t block;
  char *text = NULL;
  size_t len = 0;
  one_slice(&m, &f, &block, &e, "lamb");
  BAD(sk_ckpt_manifest_format(&m, &text, &len, E), SK_ERR_INVALID_ARGUMENT, "optimizer", "lamb");
  memset(m.optimizer, 'a', sizeof m.optimizer); /* no NUL at all */
  BAD(sk_ckpt_manifest_format(&m, &text, &len, E), SK_ERR_INVALID_ARGUMENT, "optimizer", "sgd");
  cr_assert_null(text);
}

/* sk_ckpt_save writes its desc's optimizer into the manifest (NULL: "-"); an unknown name is
   refused before the root is touched; sk_ckpt_merge keeps what the checkpoint says. */
Test(ckpt_optim, save_records_the_optimizer) {
  char root[64], out[128], latest[128];
  snprintf(root, sizeof root, "/tmp/sk_ckpt_optim.XXXXXX");
  cr_assert(mkdtemp(root));
  float w[4] = {1, 2, 3, 4}, m0[4] = {5, 6, 7, 8};
  sk_ckpt_slice s[2];
  memset(s, 0, sizeof s);
  for (int i = 0; i < 2; i++) {
    s[i].tensor = "w", s[i].kind = i ? SK_CKPT_STATE0 : SK_CKPT_PARAM, s[i].dtype = SK_F32, s[i].ndims = 1;
    s[i].shape[0] = 4, s[i].box.ndims = 1, s[i].box.stop[0] = 4, s[i].data = i ? m0 : w, s[i].write = true;
  }
  sk_ckpt_save_desc d;
  memset(&d, 0, sizeof d);
  d.step = 1, d.optimizer = "lamb";
  BAD(sk_ckpt_save(NULL, root, &d, 2, s, NULL, E), SK_ERR_INVALID_ARGUMENT, "optimizer", "lamb");
  snprintf(latest, sizeof latest, "%s/LATEST", root);
  cr_assert_neq(access(latest, F_OK), 0, "a refused save left LATEST");
  const char *kinds[] = {"momentum", NULL};
  for (int k = 0; k < 2; k++) {
    sk_ckpt_manifest m;
    d.step = 1 + k, d.optimizer = kinds[k];
    OK(sk_ckpt_save(NULL, root, &d, 2, s, NULL, E));
    OK(sk_ckpt_open(root, &m, E));
    cr_assert_str_eq(m.optimizer, kinds[k] ? kinds[k] : "");
    sk_ckpt_manifest_free(&m);
  }
  /* the merge of a momentum checkpoint is one too */
  sk_ckpt_manifest m, mm;
  snprintf(out, sizeof out, "%s/ckpt-00000001", root);
  OK(sk_ckpt_open_dir(out, &m, E));
  snprintf(out, sizeof out, "%s/merged", root);
  OK(sk_ckpt_merge(&m, out, SK_CKPT_IO_PLAIN, NULL, E));
  OK(sk_ckpt_open(out, &mm, E));
  cr_assert_str_eq(mm.optimizer, "momentum");
  sk_ckpt_manifest_free(&m), sk_ckpt_manifest_free(&mm);
  rm_rf(root);
}
