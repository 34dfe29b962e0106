/* ckpt_test_util.h -- what the checkpoint suites share (test_ckpt.c, test_ckpt_safety.c,
   test_ckpt_optim.c): OK and BAD around a call that takes an sk_error (E), a temporary root and
   its removal. Include after <criterion/criterion.h>, <stdio.h>, <stdlib.h>, <string.h> and
   sk_ckpt.h; mkdtemp needs _POSIX_C_SOURCE 200809L (or _DEFAULT_SOURCE) before them. */
#ifndef CKPT_TEST_UTIL_H
#define CKPT_TEST_UTIL_H

#define OK(call)                                                                          \
  do {                                                                                    \
    sk_error e_ = {SK_OK, ""};                                                            \
    sk_result r_ = (call);                                                                \
    cr_assert_eq(r_, SK_OK, "%s: %s (%s)", #call, sk_result_name(r_), e_.msg);            \
  } while (0)
#define E (&e_)
/* call fails with `code` and a message holding each of the words */
#define BAD(call, code, w1, w2)                                                                           \
  do {                                                                                                    \
    sk_error e_ = {SK_OK, ""};                                                                            \
    sk_result r_ = (call);                                                                                \
    cr_assert_eq(r_, code, "%s returned %s (%s)", #call, sk_result_name(r_), e_.msg);                    \
    cr_assert(strstr(e_.msg, w1) && strstr(e_.msg, w2), "%s: '%s' lacks '%s' or '%s'", #call, e_.msg, w1, w2); \
  } while (0)

/* A new empty directory under /tmp, its path in buf. */
static inline void tmp_root(char *buf, size_t cap) {
  snprintf(buf, cap, "/tmp/sk_ckpt_test.XXXXXX");
  cr_assert(mkdtemp(buf), "mkdtemp");
}

static inline void rm_rf(const char *dir) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

#endif /* CKPT_TEST_UTIL_H */
