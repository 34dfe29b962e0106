/* sk_ckpt.h's safety rules (docs/checkpoints.md, "Safety rules"): a save never follows a symlink
   inside its root (a symlinked ckpt-<step> or .tmp-ckpt-* is named and every file of the
   directory it points at survives), a FIFO where a rank file or LATEST.tmp belongs is refused by
   name instead of blocking, one writer per root (sk_ckpt_lock: a second holder, another process,
   is refused naming the first one's pid; a holder killed with SIGKILL leaves the root free), and
   merge names the box a checkpoint is missing before it allocates a whole tensor.

   sk_ckpt.h's implementation comes from tests/test_ckpt.c (linked with this file). */
#define _POSIX_C_SOURCE 200809L /* fork, kill, mkdtemp, mkfifo, symlink */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "sk_ckpt.h"
#include "shardkit.h"

#include "ckpt_test_util.h"

static void put(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert(f, "%s", path);
  fputs(text, f), fclose(f);
}

/* A directory of someone else's files, which no save may touch: dir/a, dir/b, dir/rank-0.bin. */
static void victim(char *dir, size_t cap) {
  char path[256];
  tmp_root(dir, cap);
  const char *names[3] = {"a", "b", "rank-0.bin"};
  for (int i = 0; i < 3; i++) snprintf(path, sizeof path, "%s/%s", dir, names[i]), put(path, names[i]);
}

static void expect_victim_whole(const char *dir) {
  char path[256], got[16];
  const char *names[3] = {"a", "b", "rank-0.bin"};
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s was removed", path);
    cr_assert(fgets(got, sizeof got, f), "%s was emptied", path);
    fclose(f);
    cr_assert_str_eq(got, names[i], "%s was overwritten", path);
  }
}

/* w [8, 8] f64, saved in a rows x cols grid of boxes by one device; w's values: their index. */
static double w_values[64];

static void save_w(const char *root, int64_t step, int rows, int cols, sk_error *e, sk_result want) {
  static double parts[16][64];
  sk_ckpt_slice s[16];
  memset(s, 0, sizeof s);
  int n = 0;
  for (int i = 0; i < 64; i++) w_values[i] = i;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++, n++) {
      sk_ckpt_slice *x = &s[n];
      x->tensor = "w", x->dtype = SK_F64, x->ndims = x->box.ndims = 2, x->shape[0] = x->shape[1] = 8, x->write = true;
      x->box.start[0] = r * 8 / rows, x->box.stop[0] = (r + 1) * 8 / rows;
      x->box.start[1] = c * 8 / cols, x->box.stop[1] = (c + 1) * 8 / cols;
      int k = 0;
      for (int64_t i = x->box.start[0]; i < x->box.stop[0]; i++)
        for (int64_t j = x->box.start[1]; j < x->box.stop[1]; j++) parts[n][k++] = w_values[i * 8 + j];
      x->data = parts[n];
    }
  sk_ckpt_save_desc d;
  memset(&d, 0, sizeof d);
  d.step = step, d.position = step;
  sk_result r = sk_ckpt_save(NULL, root, &d, n, s, NULL, e);
  cr_assert_eq(r, want, "save of step %lld: %s (%s)", (long long)step, sk_result_name(r), e->msg);
}

static int64_t newest_step(const char *root) {
  sk_ckpt_manifest m;
  OK(sk_ckpt_open(root, &m, E));
  int64_t step = m.step;
  OK(sk_ckpt_verify(&m, SK_CKPT_IO_PLAIN, E));
  sk_ckpt_manifest_free(&m);
  return step;
}

/* ---- symlinks inside a root are never followed ---------------------------------------------- */

/* The case: ROOT/ckpt-00000002 a symlink to another directory, a run ending at step 2.
   The save fails naming it; every file there survives; the previous checkpoint stays the
   newest; once the link is gone the save goes through. */
Test(ckpt_safety, a_symlinked_checkpoint_is_never_followed) {
  char root[64], other[64], link[128];
  tmp_root(root, sizeof root), victim(other, sizeof other);
  sk_error e = {SK_OK, ""};
  save_w(root, 1, 2, 1, &e, SK_OK);
  snprintf(link, sizeof link, "%s/ckpt-00000002", root);
  cr_assert_eq(symlink(other, link), 0);
  save_w(root, 2, 2, 1, &e, SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, link) && strstr(e.msg, "symbolic link"), "'%s' does not name %s as a symlink", e.msg, link);
  expect_victim_whole(other);
  struct stat st;
  cr_assert(!lstat(link, &st) && S_ISLNK(st.st_mode), "the symlink itself was removed");
  cr_assert_eq(newest_step(root), 1);
  cr_assert_eq(unlink(link), 0);
  save_w(root, 2, 2, 1, &e, SK_OK);
  cr_assert_eq(newest_step(root), 2);
  expect_victim_whole(other);
  rm_rf(root), rm_rf(other);
}

/* A symlinked temporary, of this step or an older one, is named and left alone; a real stale
   temporary holding a symlink loses the link, never what it points at. */
Test(ckpt_safety, a_symlinked_temporary_is_never_followed) {
  const char *names[2] = {".tmp-ckpt-00000002", ".tmp-ckpt-00000001"};
  for (int k = 0; k < 2; k++) {
    char root[64], other[64], link[128];
    tmp_root(root, sizeof root), victim(other, sizeof other);
    snprintf(link, sizeof link, "%s/%s", root, names[k]);
    cr_assert_eq(symlink(other, link), 0);
    sk_error e = {SK_OK, ""};
    save_w(root, 2, 2, 1, &e, SK_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(e.msg, link) && strstr(e.msg, "symbolic link"), "'%s' does not name %s", e.msg, link);
    expect_victim_whole(other);
    rm_rf(root), rm_rf(other);
  }
  char root[64], other[64], path[256];
  tmp_root(root, sizeof root), victim(other, sizeof other);
  snprintf(path, sizeof path, "%s/.tmp-ckpt-00000009", root);
  cr_assert_eq(mkdir(path, 0755), 0);
  snprintf(path, sizeof path, "%s/.tmp-ckpt-00000009/rank-0.bin", root);
  char target[128];
  snprintf(target, sizeof target, "%s/rank-0.bin", other);
  cr_assert_eq(symlink(target, path), 0);
  sk_error e = {SK_OK, ""};
  save_w(root, 2, 2, 1, &e, SK_OK);
  snprintf(path, sizeof path, "%s/.tmp-ckpt-00000009", root);
  cr_assert_neq(access(path, F_OK), 0, "the stale temporary is still there");
  expect_victim_whole(other);
  rm_rf(root), rm_rf(other);
}

/* Where a checkpoint directory belongs, a regular file is named and kept; LATEST naming a
   symlinked checkpoint directory is refused when opened. */
Test(ckpt_safety, entries_that_are_not_checkpoint_directories_are_left_alone) {
  char root[64], other[64], path[128];
  tmp_root(root, sizeof root);
  sk_error e = {SK_OK, ""};
  save_w(root, 1, 2, 1, &e, SK_OK);
  snprintf(path, sizeof path, "%s/ckpt-00000002", root);
  put(path, "mine");
  save_w(root, 2, 2, 1, &e, SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, path) && strstr(e.msg, "a regular file, not a checkpoint directory"), "'%s'", e.msg);
  struct stat st;
  cr_assert(!lstat(path, &st) && S_ISREG(st.st_mode) && st.st_size == 4, "the file was touched");
  /* LATEST -> a symlink to a real checkpoint elsewhere: not followed for reading either */
  tmp_root(other, sizeof other);
  save_w(other, 3, 1, 1, &e, SK_OK);
  char real[128], link[128];
  snprintf(real, sizeof real, "%s/ckpt-00000003", other);
  snprintf(link, sizeof link, "%s/ckpt-00000003", root);
  cr_assert_eq(symlink(real, link), 0);
  snprintf(path, sizeof path, "%s/LATEST", root);
  put(path, "ckpt-00000003\n");
  BAD(sk_ckpt_open(root, &(sk_ckpt_manifest){0}, E), SK_ERR_INVALID_ARGUMENT, link, "symbolic link");
  rm_rf(root), rm_rf(other);
}

/* merge --out: the same rules in the output root. */
Test(ckpt_safety, merge_never_follows_a_symlink_in_its_output) {
  char root[64], other[64], out[128], link[160];
  tmp_root(root, sizeof root), victim(other, sizeof other);
  sk_error e = {SK_OK, ""};
  save_w(root, 4, 2, 2, &e, SK_OK);
  snprintf(out, sizeof out, "%s/merged", root);
  cr_assert_eq(mkdir(out, 0755), 0);
  snprintf(link, sizeof link, "%s/ckpt-00000004", out);
  cr_assert_eq(symlink(other, link), 0);
  sk_ckpt_manifest m;
  OK(sk_ckpt_open(root, &m, E));
  BAD(sk_ckpt_merge(&m, out, SK_CKPT_IO_PLAIN, NULL, E), SK_ERR_INVALID_ARGUMENT, link, "symbolic link");
  expect_victim_whole(other);
  cr_assert_eq(unlink(link), 0);
  sk_ckpt_report rep;
  OK(sk_ckpt_merge(&m, out, SK_CKPT_IO_PLAIN, &rep, E));
  cr_assert_str_eq(rep.name, "ckpt-00000004");
  cr_assert_eq(newest_step(out), 4);
  sk_ckpt_manifest_free(&m);
  rm_rf(root), rm_rf(other);
}

/* ---- file types: refused by name, never waited for -------------------------------------------- */

/* rank-0.bin replaced by a FIFO (no writer: an open for reading would block for ever): opening
   the checkpoint, and loading through a manifest opened before, fail naming it. */
Test(ckpt_safety, a_fifo_rank_file_is_refused_not_waited_for, .timeout = 20) {
  char root[64], path[128];
  tmp_root(root, sizeof root);
  sk_error e = {SK_OK, ""};
  save_w(root, 1, 2, 1, &e, SK_OK);
  sk_ckpt_manifest m;
  OK(sk_ckpt_open(root, &m, E));
  snprintf(path, sizeof path, "%s/ckpt-00000001/rank-0.bin", root);
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(mkfifo(path, 0644), 0);
  double got[64];
  sk_ckpt_slice t;
  memset(&t, 0, sizeof t);
  t.tensor = "w", t.dtype = SK_F64, t.ndims = t.box.ndims = 2, t.shape[0] = t.shape[1] = 8;
  t.box.stop[0] = t.box.stop[1] = 8, t.data = got;
  BAD(sk_ckpt_load(&m, 0, SK_CKPT_IO_PLAIN, 1, &t, NULL, E), SK_ERR_INVALID_ARGUMENT, path, "is a FIFO, not a regular file");
  BAD(sk_ckpt_load(&m, 0, SK_CKPT_IO_AUTO, 1, &t, NULL, E), SK_ERR_INVALID_ARGUMENT, path, "is a FIFO");
  BAD(sk_ckpt_verify(&m, SK_CKPT_IO_PLAIN, E), SK_ERR_INVALID_ARGUMENT, path, "is a FIFO");
  sk_ckpt_manifest_free(&m);
  BAD(sk_ckpt_open(root, &(sk_ckpt_manifest){0}, E), SK_ERR_INVALID_ARGUMENT, path, "is a FIFO");
  /* a symlink to the real file is not followed either */
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(symlink("/dev/null", path), 0);
  BAD(sk_ckpt_open(root, &(sk_ckpt_manifest){0}, E), SK_ERR_INVALID_ARGUMENT, path, "symbolic link");
  rm_rf(root);
}

/* LATEST.tmp, written by every save: a FIFO there is refused (an open for writing would wait
   for a reader for ever), a symlink there is not followed (its target is not truncated). */
Test(ckpt_safety, latest_tmp_is_never_followed_or_waited_for, .timeout = 20) {
  char root[64], other[64], path[128], target[128];
  tmp_root(root, sizeof root), victim(other, sizeof other);
  sk_error e = {SK_OK, ""};
  save_w(root, 1, 1, 1, &e, SK_OK);
  snprintf(path, sizeof path, "%s/LATEST.tmp", root);
  cr_assert_eq(mkfifo(path, 0644), 0);
  save_w(root, 2, 1, 1, &e, SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, path) && strstr(e.msg, "FIFO"), "'%s'", e.msg);
  cr_assert_eq(unlink(path), 0);
  snprintf(target, sizeof target, "%s/a", other);
  cr_assert_eq(symlink(target, path), 0);
  save_w(root, 3, 1, 1, &e, SK_ERR_INVALID_ARGUMENT);
  cr_assert(strstr(e.msg, path) && strstr(e.msg, "symbolic link"), "'%s'", e.msg);
  expect_victim_whole(other);
  cr_assert_eq(newest_step(root), 1);
  rm_rf(root), rm_rf(other);
}

/* ---- one writer per root ---------------------------------------------------------------------- */

/* The message a second writer gets. */
static void busy_msg(char *buf, size_t cap, const char *root, long pid) {
  snprintf(buf, cap, "checkpoint root %s is being written by process %ld", root, pid);
}

/* The lock creates a missing root (leaving no probe behind) and writes its pid into .lock; a
   second lock, in a child process and in this one, is refused naming this process; after
   sk_ckpt_unlock the root is free and .lock stays. */
Test(ckpt_safety, a_second_writer_is_refused_naming_the_first, .timeout = 20) {
  char dir[64], root[128], path[160], want[256], text[32] = "";
  tmp_root(dir, sizeof dir);
  snprintf(root, sizeof root, "%s/root", dir);
  sk_ckpt_root_lock lock, again;
  OK(sk_ckpt_lock(root, &lock, E));
  snprintf(path, sizeof path, "%s/.lock", root);
  FILE *f = fopen(path, "r");
  cr_assert(f && fgets(text, sizeof text, f), "no pid in %s", path);
  fclose(f);
  cr_assert_eq(atol(text), (long)getpid(), ".lock holds '%s'", text);
  snprintf(path, sizeof path, "%s/.probe", root);
  cr_assert_neq(access(path, F_OK), 0, "the probe was left behind");
  busy_msg(want, sizeof want, root, (long)getpid());
  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (!child) {
    sk_error e = {SK_OK, ""};
    sk_result r = sk_ckpt_lock(root, &again, &e);
    _exit(r == SK_ERR_INVALID_USAGE && !strcmp(e.msg, want) ? 0 : 1);
  }
  int status = 0;
  cr_assert_eq(waitpid(child, &status, 0), child);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's second lock was not refused naming pid %ld",
            (long)getpid());
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_ckpt_lock(root, &again, &e), SK_ERR_INVALID_USAGE, "%s", e.msg);
  cr_assert_str_eq(e.msg, want);
  sk_ckpt_unlock(&lock);
  sk_ckpt_unlock(&lock); /* twice, and on a lock never taken: nothing */
  sk_ckpt_root_lock zero = {0, false};
  sk_ckpt_unlock(&zero);
  OK(sk_ckpt_lock(root, &again, E));
  sk_ckpt_unlock(&again);
  snprintf(path, sizeof path, "%s/.lock", root);
  cr_assert_eq(access(path, F_OK), 0, ".lock was removed");
  rm_rf(dir);
}

/* A holder killed with SIGKILL: while it lives the root is refused naming its pid, once it is
   gone the root is free (the lock dies with its process). */
Test(ckpt_safety, a_killed_holder_leaves_the_root_free, .timeout = 20) {
  char root[64], want[256];
  tmp_root(root, sizeof root);
  int ready[2];
  cr_assert_eq(pipe(ready), 0);
  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (!child) {
    sk_ckpt_root_lock held;
    if (sk_ckpt_lock(root, &held, NULL) || write(ready[1], "x", 1) != 1) _exit(1);
    for (;;) pause();
  }
  char c = 0;
  cr_assert_eq(read(ready[0], &c, 1), 1, "the child could not lock");
  busy_msg(want, sizeof want, root, (long)child);
  sk_ckpt_root_lock lock;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_ckpt_lock(root, &lock, &e), SK_ERR_INVALID_USAGE, "%s", e.msg);
  cr_assert_str_eq(e.msg, want);
  kill(child, SIGKILL);
  cr_assert_eq(waitpid(child, NULL, 0), child);
  OK(sk_ckpt_lock(root, &lock, E));
  sk_ckpt_unlock(&lock);
  close(ready[0]), close(ready[1]);
  rm_rf(root);
}

/* merge takes its output root's lock: refused while another process holds it. */
Test(ckpt_safety, merge_takes_its_output_roots_lock, .timeout = 20) {
  char root[64], out[128], want[256];
  tmp_root(root, sizeof root);
  sk_error e = {SK_OK, ""};
  save_w(root, 2, 2, 1, &e, SK_OK);
  snprintf(out, sizeof out, "%s/merged", root);
  int ready[2];
  cr_assert_eq(pipe(ready), 0);
  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (!child) {
    sk_ckpt_root_lock held;
    if (sk_ckpt_lock(out, &held, NULL) || write(ready[1], "x", 1) != 1) _exit(1);
    for (;;) pause();
  }
  char c = 0;
  cr_assert_eq(read(ready[0], &c, 1), 1, "the child could not lock");
  sk_ckpt_manifest m;
  OK(sk_ckpt_open(root, &m, E));
  busy_msg(want, sizeof want, out, (long)child);
  cr_assert_eq(sk_ckpt_merge(&m, out, SK_CKPT_IO_PLAIN, NULL, &e), SK_ERR_INVALID_USAGE, "%s", e.msg);
  cr_assert_str_eq(e.msg, want);
  kill(child, SIGKILL);
  cr_assert_eq(waitpid(child, NULL, 0), child);
  OK(sk_ckpt_merge(&m, out, SK_CKPT_IO_PLAIN, NULL, E));
  sk_ckpt_manifest_free(&m);
  close(ready[0]), close(ready[1]);
  rm_rf(root);
}

/* The root itself may be a symlink to a directory (the user's path); .lock, inside, may not be
   one, nor a FIFO; a root that cannot be a directory is named. */
Test(ckpt_safety, the_lock_file_is_a_regular_file_of_the_root, .timeout = 20) {
  char dir[64], other[64], root[128], path[160];
  tmp_root(dir, sizeof dir), victim(other, sizeof other);
  sk_ckpt_root_lock lock;
  snprintf(root, sizeof root, "%s/link", dir);
  cr_assert_eq(symlink(other, root), 0);
  OK(sk_ckpt_lock(root, &lock, E));
  sk_ckpt_unlock(&lock);
  snprintf(path, sizeof path, "%s/.lock", other);
  cr_assert_eq(access(path, F_OK), 0, "no .lock in the directory the root links to");
  cr_assert_eq(unlink(path), 0);
  char target[128];
  snprintf(target, sizeof target, "%s/a", other);
  cr_assert_eq(symlink(target, path), 0);
  BAD(sk_ckpt_lock(other, &lock, E), SK_ERR_INVALID_ARGUMENT, path, "symbolic link");
  expect_victim_whole(other);
  cr_assert_eq(unlink(path), 0);
  cr_assert_eq(mkfifo(path, 0644), 0);
  BAD(sk_ckpt_lock(other, &lock, E), SK_ERR_INVALID_ARGUMENT, path, "FIFO");
  snprintf(root, sizeof root, "%s/a", other); /* a regular file */
  BAD(sk_ckpt_lock(root, &lock, E), SK_ERR_SYSTEM, root, "not writable");
  rm_rf(dir), rm_rf(other);
}

/* ---- merge names what is missing ------------------------------------------------------------- */

/* Rewrites dir/MANIFEST: drops the slice lines of the listed boxes, replaces `from` by `to` on
   every line, and puts the crc line right again. */
static void edit_manifest(const char *dir, const char *const *drop, int ndrop, const char *from, const char *to) {
  char path[256], line[8192];
  static char text[1 << 16];
  size_t len = 0;
  snprintf(path, sizeof path, "%s/MANIFEST", dir);
  FILE *f = fopen(path, "r");
  cr_assert(f);
  while (fgets(line, sizeof line, f)) {
    bool skip = !strncmp(line, "crc ", 4);
    for (int i = 0; i < ndrop; i++) skip = skip || (!strncmp(line, "slice ", 6) && strstr(line, drop[i]));
    if (skip) continue;
    char *at = from ? strstr(line, from) : NULL;
    if (at) len += (size_t)snprintf(text + len, sizeof text - len, "%.*s%s%s", (int)(at - line), line, to, at + strlen(from));
    else len += (size_t)snprintf(text + len, sizeof text - len, "%s", line);
  }
  fclose(f);
  snprintf(text + len, sizeof text - len, "crc %08x\n", (unsigned)crc32(0L, (const Bytef *)text, (uInt)len));
  put(path, text);
}

static void expect_merge_error(const char *root, const char *want) {
  char out[128];
  snprintf(out, sizeof out, "%s/merged", root);
  sk_ckpt_manifest m;
  OK(sk_ckpt_open(root, &m, E));
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_ckpt_merge(&m, out, SK_CKPT_IO_PLAIN, NULL, &e), SK_ERR_INVALID_ARGUMENT, "%s", e.msg);
  cr_assert_str_eq(e.msg, want);
  sk_ckpt_manifest_free(&m);
}

/* A slice gone from the manifest: merge names its box (the message), also when the gap
   spans several of the grid's cells; a shape that claims more than was saved (the cause of
   "out of memory merging": merge allocated the claimed shape before looking) is a gap too. */
Test(ckpt_safety, merge_names_the_missing_box) {
  char root[64], dir[128];
  tmp_root(root, sizeof root);
  sk_error e = {SK_OK, ""};
  save_w(root, 2, 2, 1, &e, SK_OK);
  snprintf(dir, sizeof dir, "%s/ckpt-00000002", root);
  const char *first[1] = {"box 0:4,0:8 "};
  edit_manifest(dir, first, 1, NULL, NULL);
  expect_merge_error(root, "merge: tensor 'w': box [0:4, 0:8] is missing");
  rm_rf(root);

  tmp_root(root, sizeof root);
  save_w(root, 2, 2, 2, &e, SK_OK); /* quarters; the top two gone: one box of two cells */
  snprintf(dir, sizeof dir, "%s/ckpt-00000002", root);
  const char *top[2] = {"box 0:4,0:4 ", "box 0:4,4:8 "};
  edit_manifest(dir, top, 2, NULL, NULL);
  expect_merge_error(root, "merge: tensor 'w': box [0:4, 0:8] is missing");
  rm_rf(root);

  tmp_root(root, sizeof root);
  save_w(root, 2, 2, 1, &e, SK_OK);
  snprintf(dir, sizeof dir, "%s/ckpt-00000002", root);
  edit_manifest(dir, NULL, 0, "shape 8,8", "shape 1099511627776,8");
  expect_merge_error(root, "merge: tensor 'w': box [8:1099511627776, 0:8] is missing");
  rm_rf(root);
}
