/* pyliteral.h -- reads the Python literals users paste from MindSpore scripts into a command line:
   integers, floats, strings ('..' or ".."), None, True, False, bare names (mp, dp: the forms the
   programs accepted before), tuples and lists (nested, with spaces and trailing commas), and
   calls such as Layout((2,2,2), ("dp","sp","mp"))("mp", ("sp","dp")) with keyword arguments.
   A top-level "a, b" is a tuple, as in Python. (Not part of the library: include/ holds that.)

   Parse once per flag value; every error names the flag and the column, e.g.
     --strategy: expected ')' at column 5 in '(4,1'
   The tree lives in a pylit_doc (fixed-size, no allocation); its nodes refer to each other by
   index, -1 meaning none. */
#ifndef SK_TOOLS_PYLITERAL_H
#define SK_TOOLS_PYLITERAL_H

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PYLIT_MAX_NODES 256
#define PYLIT_TEXT_MAX 64  /* a string's or name's characters + NUL */
#define PYLIT_MAX_DEPTH 16 /* nesting of brackets */

typedef enum pylit_kind { PYLIT_INT, PYLIT_FLOAT, PYLIT_STR, PYLIT_NAME, PYLIT_NONE, PYLIT_BOOL, PYLIT_TUPLE, PYLIT_CALL } pylit_kind;

typedef struct pylit_node {
  pylit_kind kind;
  long long ival;              /* INT; BOOL: 0 or 1 */
  double fval;                 /* FLOAT */
  char text[PYLIT_TEXT_MAX];   /* STR: the characters (escapes resolved); NAME: the identifier */
  char key[PYLIT_TEXT_MAX];    /* a call's keyword argument: its name; else "" */
  int column;                  /* 1-based, where the value starts in the text */
  int bracketed;               /* TUPLE: written in ( ) or [ ] (not a bare top-level a, b) */
  int callee;                  /* CALL: the called value (a NAME or a CALL) */
  int first, next, count;      /* TUPLE / CALL: first item, and each item's next sibling */
} pylit_node;

typedef struct pylit_doc {
  const char *flag, *text;
  const char *p; /* the parse position */
  int depth, nnodes, root;
  pylit_node nodes[PYLIT_MAX_NODES];
  char error[512];
} pylit_doc;

/* "FLAG: MESSAGE at column C in 'TEXT'" into doc->error; returns -1 so callers can
   `return pylit_fail(...)`. */
static inline int pylit_fail_at(pylit_doc *doc, int column, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(doc->error, sizeof doc->error, "%s: %s at column %d in '%.200s'", doc->flag, msg, column, doc->text);
  return -1;
}

static inline int pylit_column(const pylit_doc *doc) { return (int)(doc->p - doc->text) + 1; }

static inline const char *pylit_kind_name(pylit_kind k) {
  static const char *const names[] = {"an integer", "a float", "a string", "a name", "None", "a bool", "a tuple", "a call"};
  return names[k];
}

/* The value of node `n` is not what the caller wanted: "expected WANT, found a string". */
static inline int pylit_expected(pylit_doc *doc, int n, const char *want) {
  return pylit_fail_at(doc, doc->nodes[n].column, "expected %s, found %s", want, pylit_kind_name(doc->nodes[n].kind));
}

static inline void pylit_skip_space(pylit_doc *doc) {
  while (*doc->p == ' ' || *doc->p == '\t' || *doc->p == '\n') doc->p++;
}

/* What the parser found where it wanted something else, for messages. */
static inline int pylit_unexpected(pylit_doc *doc, const char *want) {
  if (!*doc->p) return pylit_fail_at(doc, pylit_column(doc), "expected %s", want);
  return pylit_fail_at(doc, pylit_column(doc), "expected %s, found '%c'", want, *doc->p);
}

static inline int pylit_new_node(pylit_doc *doc, pylit_kind kind, int column) {
  if (doc->nnodes == PYLIT_MAX_NODES) return pylit_fail_at(doc, column, "more than %d values", PYLIT_MAX_NODES);
  int n = doc->nnodes++;
  memset(&doc->nodes[n], 0, sizeof doc->nodes[n]);
  doc->nodes[n].kind = kind;
  doc->nodes[n].column = column;
  doc->nodes[n].callee = doc->nodes[n].first = doc->nodes[n].next = -1;
  return n;
}

static inline int pylit_value(pylit_doc *doc);

/* A number: Python's integer or float spelling, with an optional sign. */
static inline int pylit_number(pylit_doc *doc) {
  int column = pylit_column(doc);
  const char *start = doc->p, *q = doc->p;
  if (*q == '-' || *q == '+') q++;
  if (!isdigit((unsigned char)*q) && !(*q == '.' && isdigit((unsigned char)q[1]))) return pylit_unexpected(doc, "a value");
  while (isdigit((unsigned char)*q) || *q == '_') q++;
  int is_float = *q == '.' || *q == 'e' || *q == 'E';
  char *end;
  int n = pylit_new_node(doc, is_float ? PYLIT_FLOAT : PYLIT_INT, column);
  if (n < 0) return n;
  if (is_float) {
    doc->nodes[n].fval = strtod(start, &end);
  } else {
    char digits[40];
    size_t len = 0;
    for (const char *c = start; c < q; c++)
      if (*c != '_' && len + 1 < sizeof digits) digits[len++] = *c;
    digits[len] = '\0';
    doc->nodes[n].ival = strtoll(digits, &end, 10);
    if (len >= 19) return pylit_fail_at(doc, column, "integer too large");
    end = (char *)q;
  }
  doc->p = end;
  if (isalpha((unsigned char)*doc->p) || *doc->p == '_') return pylit_unexpected(doc, "a number");
  return n;
}

/* A quoted string; \\ \' \" \n \t resolved. */
static inline int pylit_string(pylit_doc *doc) {
  int column = pylit_column(doc);
  char quote = *doc->p++;
  int n = pylit_new_node(doc, PYLIT_STR, column);
  if (n < 0) return n;
  size_t len = 0;
  while (*doc->p != quote) {
    char c = *doc->p;
    if (!c) return pylit_fail_at(doc, pylit_column(doc), "unterminated string (opened at column %d)", column);
    if (c == '\\' && doc->p[1]) {
      doc->p++;
      c = *doc->p == 'n' ? '\n' : *doc->p == 't' ? '\t' : *doc->p;
    }
    if (len + 1 == PYLIT_TEXT_MAX) return pylit_fail_at(doc, column, "string longer than %d characters", PYLIT_TEXT_MAX - 1);
    doc->nodes[n].text[len++] = c;
    doc->p++;
  }
  doc->p++;
  return n;
}

/* An identifier (dots allowed: mindspore.Layout); None, True and False become their values. */
static inline int pylit_name(pylit_doc *doc) {
  int column = pylit_column(doc);
  const char *start = doc->p;
  while (isalnum((unsigned char)*doc->p) || *doc->p == '_' || *doc->p == '.') doc->p++;
  size_t len = (size_t)(doc->p - start);
  if (len >= PYLIT_TEXT_MAX) return pylit_fail_at(doc, column, "name longer than %d characters", PYLIT_TEXT_MAX - 1);
  int n = pylit_new_node(doc, PYLIT_NAME, column);
  if (n < 0) return n;
  pylit_node *node = &doc->nodes[n];
  memcpy(node->text, start, len);
  node->text[len] = '\0';
  if (!strcmp(node->text, "None")) node->kind = PYLIT_NONE;
  if (!strcmp(node->text, "True") || !strcmp(node->text, "False")) node->kind = PYLIT_BOOL, node->ival = node->text[0] == 'T';
  return n;
}

/* Items up to `close` into node n (a TUPLE or a CALL): values separated by commas, a trailing
   comma allowed; in a call, `name=value` items too. Returns the number of commas seen, so that
   "(4)" can be told from "(4,)". */
static inline int pylit_items(pylit_doc *doc, int n, char close, int allow_keywords) {
  int commas = 0, last = -1;
  for (;;) {
    pylit_skip_space(doc);
    if (*doc->p == close) break;
    char key[PYLIT_TEXT_MAX] = "";
    if (allow_keywords && (isalpha((unsigned char)*doc->p) || *doc->p == '_')) {
      const char *q = doc->p;
      while (isalnum((unsigned char)*q) || *q == '_') q++;
      const char *after = q;
      while (*after == ' ') after++;
      if (*after == '=' && after[1] != '=' && (size_t)(q - doc->p) < sizeof key) {
        memcpy(key, doc->p, (size_t)(q - doc->p));
        key[q - doc->p] = '\0';
        doc->p = after + 1;
      }
    }
    int item = pylit_value(doc);
    if (item < 0) return item;
    memcpy(doc->nodes[item].key, key, sizeof key);
    if (last < 0)
      doc->nodes[n].first = item;
    else
      doc->nodes[last].next = item;
    last = item;
    doc->nodes[n].count++;
    pylit_skip_space(doc);
    if (*doc->p == ',') {
      doc->p++;
      commas++;
      continue;
    }
    if (*doc->p != close) { /* at the end, only the bracket can finish the value */
      char want[16];
      snprintf(want, sizeof want, *doc->p ? "',' or '%c'" : "'%c'", close);
      return pylit_unexpected(doc, want);
    }
  }
  doc->p++;
  return commas;
}

/* ( ... ) or [ ... ]: a tuple, or, for "(x)" without a comma, x itself as in Python. */
static inline int pylit_bracket(pylit_doc *doc) {
  int column = pylit_column(doc);
  char close = *doc->p == '(' ? ')' : ']';
  if (++doc->depth > PYLIT_MAX_DEPTH) return pylit_fail_at(doc, column, "brackets nested deeper than %d", PYLIT_MAX_DEPTH);
  doc->p++;
  int n = pylit_new_node(doc, PYLIT_TUPLE, column);
  if (n < 0) return n;
  doc->nodes[n].bracketed = 1;
  int commas = pylit_items(doc, n, close, 0);
  if (commas < 0) return commas;
  doc->depth--;
  if (close == ')' && commas == 0 && doc->nodes[n].count == 1) return doc->nodes[n].first; /* (x) is x */
  return n;
}

/* One value, followed by any number of calls: f(...)(...). */
static inline int pylit_value(pylit_doc *doc) {
  pylit_skip_space(doc);
  char c = *doc->p;
  int n;
  if (c == '(' || c == '[')
    n = pylit_bracket(doc);
  else if (c == '"' || c == '\'')
    n = pylit_string(doc);
  else if (isalpha((unsigned char)c) || c == '_')
    n = pylit_name(doc);
  else
    n = pylit_number(doc);
  while (n >= 0 && (doc->nodes[n].kind == PYLIT_NAME || doc->nodes[n].kind == PYLIT_CALL)) {
    pylit_skip_space(doc);
    if (*doc->p != '(') break;
    int call = pylit_new_node(doc, PYLIT_CALL, doc->nodes[n].column);
    if (call < 0) return call;
    doc->nodes[call].callee = n;
    if (++doc->depth > PYLIT_MAX_DEPTH) return pylit_fail_at(doc, pylit_column(doc), "calls nested deeper than %d", PYLIT_MAX_DEPTH);
    doc->p++;
    int r = pylit_items(doc, call, ')', 1);
    if (r < 0) return r;
    doc->depth--;
    n = call;
  }
  return n;
}

/* Parses `text`, the value of `flag`; 0 and doc->root set, or -1 and doc->error. A bare
   top-level "a, b" (or "a,") is a tuple whose `bracketed` is 0. */
static inline int pylit_parse(pylit_doc *doc, const char *flag, const char *text) {
  doc->flag = flag, doc->text = text, doc->p = text;
  doc->depth = 0, doc->nnodes = 0, doc->root = -1, doc->error[0] = '\0';
  pylit_skip_space(doc);
  if (!*doc->p) return pylit_fail_at(doc, 1, "expected a value, found nothing");
  int first = pylit_value(doc);
  if (first < 0) return -1;
  pylit_skip_space(doc);
  if (*doc->p == ',') { /* a bare tuple: parse the rest as the items of one */
    int n = pylit_new_node(doc, PYLIT_TUPLE, 1);
    if (n < 0) return -1;
    doc->nodes[n].first = first, doc->nodes[n].count = 1;
    doc->p++;
    int last = first;
    for (;;) {
      pylit_skip_space(doc);
      if (!*doc->p) break;
      int item = pylit_value(doc);
      if (item < 0) return -1;
      doc->nodes[last].next = item, last = item, doc->nodes[n].count++;
      pylit_skip_space(doc);
      if (!*doc->p) break;
      if (*doc->p != ',') return pylit_unexpected(doc, "','");
      doc->p++;
    }
    first = n;
  }
  if (*doc->p) return pylit_unexpected(doc, "the end");
  doc->root = first;
  return 0;
}

/* The items of node n: a tuple's, a call's arguments, or, for any other value, the value itself
   (so "4" reads as "(4,)"). Returns the count; at most `max` indices are stored. */
static inline int pylit_list(const pylit_doc *doc, int n, int *items, int max) {
  const pylit_node *node = &doc->nodes[n];
  if (node->kind != PYLIT_TUPLE && node->kind != PYLIT_CALL) {
    if (max > 0) items[0] = n;
    return 1;
  }
  int count = 0;
  for (int i = node->first; i >= 0; i = doc->nodes[i].next, count++)
    if (count < max) items[count] = i;
  return count;
}

/* Node n as an integer in [lo, hi]; `what` names it in the message. */
static inline int pylit_int(pylit_doc *doc, int n, long long lo, long long hi, const char *what, long long *out) {
  const pylit_node *node = &doc->nodes[n];
  if (node->kind != PYLIT_INT) return pylit_expected(doc, n, what);
  if (node->ival < lo || node->ival > hi)
    return pylit_fail_at(doc, node->column, "%s %lld is out of range [%lld, %lld]", what, node->ival, lo, hi);
  *out = node->ival;
  return 0;
}

/* Node n as a tuple of integers in [lo, hi] (a lone integer counts as a 1-tuple); at most
   `max` of them. Returns the count, or -1. */
static inline int pylit_int_tuple(pylit_doc *doc, int n, long long lo, long long hi, const char *what, long long *out, int max) {
  int items[PYLIT_MAX_NODES];
  int count = pylit_list(doc, n, items, PYLIT_MAX_NODES);
  if (count > max) return pylit_fail_at(doc, doc->nodes[n].column, "more than %d values", max);
  for (int i = 0; i < count; i++)
    if (pylit_int(doc, items[i], lo, hi, what, &out[i]) < 0) return -1;
  return count;
}

/* Node n as a bool: True / False (or 1 / 0, as Python treats them alike). */
static inline int pylit_bool(pylit_doc *doc, int n, int *out) {
  const pylit_node *node = &doc->nodes[n];
  if ((node->kind != PYLIT_BOOL && node->kind != PYLIT_INT) || node->ival < 0 || node->ival > 1)
    return pylit_expected(doc, n, "True or False");
  *out = (int)node->ival;
  return 0;
}

#endif /* SK_TOOLS_PYLITERAL_H */
