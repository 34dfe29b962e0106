/* text_file_util.h -- whole small text files for the strategy suites (test_strategy.c,
   test_strategy_roundtrip.c, test_ms_rules.c): read_text (malloc'd, NUL-terminated) and write_text, asserting on
   the test's thread. Include after <criterion/criterion.h>, <stdio.h>, <stdlib.h>, <string.h>. */
#ifndef TEXT_FILE_UTIL_H
#define TEXT_FILE_UTIL_H

static inline char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = (char *)malloc((size_t)n + 1);
  cr_assert_not_null(text);
  cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n);
  text[n] = 0;
  fclose(f);
  return text;
}

static inline void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "%s", path);
  cr_assert_eq(fwrite(text, 1, strlen(text), f), strlen(text));
  fclose(f);
}

#endif /* TEXT_FILE_UTIL_H */
