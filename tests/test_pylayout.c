/* tools/pylayout.h: a tuple of MindSpore Layout literals (a dataset_strategy as sk-sim reads
   it) into meshes and map texts, each refusal naming the flag and the column; and the predicate
   that tells such a tuple from a tuple of strategies. The map texts are fed to sk_layout_parse,
   as the tools do. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "../tools/pylayout.h"

#define MAX 4

typedef struct parsed {
  int r, n;
  sk_mesh meshes[MAX];
  char maps[MAX][PYLAYOUT_MAP_MAX];
  char err[512];
} parsed;

static parsed parse(const char *text) {
  parsed p;
  memset(&p, 0, sizeof p);
  p.r = pylayout_tuple("--dataset-strategy", text, MAX, p.meshes, p.maps, &p.n, p.err, sizeof p.err);
  return p;
}

static void expect_ok(const parsed *p, int n) {
  cr_assert_eq(p->r, 0, "refused: %s", p->err);
  cr_assert_eq(p->n, n);
  cr_assert_str_empty(p->err);
}

static void expect_mesh(const sk_mesh *m, int naxes, const int *dims, const char *const *names) {
  cr_assert_eq(m->naxes, naxes);
  for (int k = 0; k < naxes; k++) {
    cr_assert_eq(m->dims[k], dims[k], "axis %d", k);
    cr_assert_str_eq(m->names[k], names[k], "axis %d", k);
  }
}

/* The refusal: -1, no entries, and a message "--dataset-strategy: ... at column C in '...'"
   holding `want`. */
static void expect_bad(const char *text, const char *want, int column) {
  parsed p = parse(text);
  char at[32];
  snprintf(at, sizeof at, " at column %d in '", column);
  cr_assert_eq(p.r, -1, "accepted: %s", text);
  cr_assert_eq(p.n, 0);
  cr_assert(!strncmp(p.err, "--dataset-strategy: ", 20), "no flag in: %s", p.err);
  cr_assert(strstr(p.err, want), "'%s' not in: %s", want, p.err);
  cr_assert(strstr(p.err, at), "'%s' not in: %s", at, p.err);
}

static const int dims24[] = {2, 4};
static const char *const dp_mp[] = {"dp", "mp"};

Test(pylayout_tuple, two_entries_in_input_order) {
  parsed p = parse("(Layout((2,4),(\"dp\",\"mp\"))(\"dp\",\"None\",\"None\",\"None\"), Layout((2,4),(\"dp\",\"mp\"))(\"dp\",))");
  expect_ok(&p, 2);
  expect_mesh(&p.meshes[0], 2, dims24, dp_mp);
  expect_mesh(&p.meshes[1], 2, dims24, dp_mp);
  cr_assert_str_eq(p.maps[0], "dp,None,None,None");
  cr_assert_str_eq(p.maps[1], "dp");

  /* what the caller does with them once it knows the shapes */
  const int64_t x[] = {16, 1, 28, 28}, y[] = {16};
  sk_layout l;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_layout_parse(&l, &p.meshes[0], p.maps[0], 4, x, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(l.map[0].naxes, 1);
  cr_assert_eq(l.map[0].axes[0], 0);
  cr_assert_eq(l.map[1].naxes, 0);
  cr_assert_eq(sk_layout_parse(&l, &p.meshes[1], p.maps[1], 1, y, &e), SK_OK, "%s", e.msg);
}

Test(pylayout_tuple, meshes_and_tuple_dims_per_entry) {
  parsed p = parse("[Layout((2,2,2),('dp','sp','mp'))('mp', ('sp','dp')), Layout((8,),('d',))(None, 'd')]");
  expect_ok(&p, 2);
  const int dims222[] = {2, 2, 2}, dims8[] = {8};
  const char *const dsm[] = {"dp", "sp", "mp"}, *const d[] = {"d"};
  expect_mesh(&p.meshes[0], 3, dims222, dsm);
  expect_mesh(&p.meshes[1], 1, dims8, d);
  cr_assert_str_eq(p.maps[0], "mp,(sp,dp)");
  cr_assert_str_eq(p.maps[1], "None,d");
  /* a one-dim tensor cut by two axes: one tuple argument */
  p = parse("(Layout((2,4),('dp','mp'))(('dp','mp')),)");
  expect_ok(&p, 1);
  cr_assert_str_eq(p.maps[0], "(dp,mp)");
  const int64_t v[] = {16};
  sk_layout l;
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_layout_parse(&l, &p.meshes[0], p.maps[0], 1, v, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(l.map[0].naxes, 2);
}

Test(pylayout_tuple, keywords_and_module_prefix) {
  parsed p = parse("(mindspore.Layout(device_matrix=(2, 4), alias_name=(\"dp\", \"mp\"))(\"dp\", \"mp\"),"
                   " Layout(alias_name=(dp, mp), device_matrix=(2, 4), rank_list=None)(mp, None))");
  expect_ok(&p, 2);
  expect_mesh(&p.meshes[0], 2, dims24, dp_mp);
  expect_mesh(&p.meshes[1], 2, dims24, dp_mp);
  cr_assert_str_eq(p.maps[0], "dp,mp");
  cr_assert_str_eq(p.maps[1], "mp,None");
}

Test(pylayout_tuple, trailing_comma_lone_layout_and_bare_tuple) {
  const char *one[] = {
      "(Layout((2,4),(\"dp\",\"mp\"))(\"dp\",\"None\"),)", /* Python's one-element tuple */
      "Layout((2,4),(\"dp\",\"mp\"))(\"dp\",\"None\")",    /* a lone layout */
      " Layout((2,4),(\"dp\",\"mp\"))(\"dp\", \"None\" ,) , ", /* a bare tuple, spaces */
  };
  for (size_t i = 0; i < sizeof one / sizeof *one; i++) {
    parsed p = parse(one[i]);
    expect_ok(&p, 1);
    expect_mesh(&p.meshes[0], 2, dims24, dp_mp);
    cr_assert_str_eq(p.maps[0], "dp,None", "%s", one[i]);
  }
  parsed p = parse("Layout((2,4),('dp','mp'))('dp',), Layout((2,4),('dp','mp'))('mp','dp'),");
  expect_ok(&p, 2);
  cr_assert_str_eq(p.maps[1], "mp,dp");
}

Test(pylayout_tuple, bad_axis_names) {
  /* not an axis of its own alias_name (column of the name) */
  expect_bad("(Layout((2,4),('dp','mp'))('dp',), Layout((2,4),('dp','mp'))('xp','None'))",
             "'xp' is not an axis of the Layout's alias_name", 62);
  /* inside a tuple dim */
  expect_bad("Layout((2,4),('dp','mp'))(('mp','sp'),)", "'sp' is not an axis", 33);
  /* not an identifier; empty; a number */
  expect_bad("Layout((2,4),('dp','mp'))('d p',)", "'d p' is not an axis name", 27);
  expect_bad("Layout((2,4),('dp','mp'))('',)", "an empty axis name", 27);
  expect_bad("Layout((2,4),('dp','mp'))(3,)", "expected an axis name or None, found an integer", 27);
  /* used twice */
  expect_bad("Layout((2,4),('dp','mp'))('dp',('mp','dp'))", "axis 'dp' used twice in the map", 38);
  /* a bad alias_name: sk_mesh_init's words, with the layout's index and column */
  expect_bad("(Layout((2,4),('dp','mp'))('dp',), Layout((2,2),('dp','dp'))('dp',))",
             "layout 1: axis name 'dp' appears twice in the mesh", 36);
  expect_bad("Layout((2,2),('d-p','mp'))('mp',)", "layout 0: name of axis 0 ('d-p')", 1);
}

Test(pylayout_tuple, alias_name_count_and_constructor) {
  expect_bad("(Layout((2,4),('dp',))('dp',),)", "alias_name has 1 names for 2 device matrix dims", 15);
  expect_bad("Layout((2,2,2),('dp','mp'))('dp',)", "alias_name has 2 names for 3 device matrix dims", 16);
  expect_bad("Layout((2,4))('dp',)", "Layout needs device_matrix and alias_name", 1);
  expect_bad("Layout((2,4),('dp','mp'),foo=1)('dp',)", "Layout takes no keyword 'foo'", 30);
  expect_bad("Layout((2,4),('dp','mp'),rank_list=(0,1,2,3,4,5,6,7))('dp',)", "rank_list is not supported", 36);
  expect_bad("Mesh((2,4),('dp','mp'))('dp',)", "expected Layout(device_matrix, alias_name)", 1);
  expect_bad("(Layout((2,4),('dp','mp'))('dp',), (2,1))", "expected Layout(device_matrix, alias_name), found a tuple", 36);
}

Test(pylayout_tuple, maps) {
  expect_bad("(Layout((2,4),('dp','mp'))('dp',), Layout((2,4),('dp','mp')))", "layout 1 has no map", 36);
  expect_bad("Layout((2,4),('dp','mp'))()", "layout 0's map has no dims", 1);
  expect_bad("Layout((2,4),('dp','mp'))(x='dp')", "a map takes no keyword 'x'", 29);
  expect_bad("Layout((2,4),('dp','mp'))(('dp',('mp',)),)", "nested tuple in a map dim", 33);
  expect_bad("Layout((2,4),('dp','mp'))((),'dp')", "an empty tuple cuts nothing", 27);
}

Test(pylayout_tuple, text_around_the_tuple) {
  expect_bad("(Layout((2,4),('dp','mp'))('dp',),) extra", "expected the end, found 'e'", 37);
  expect_bad("(Layout((2,4),('dp','mp'))('dp',)", "expected ')'", 34);
  expect_bad("()", "expected a tuple of Layout(...)(map...), found ()", 1);
  expect_bad("", "expected a value, found nothing", 1);
  /* more entries than the caller has room for */
  expect_bad("L(), L(), L(), L(), Layout((2,),('dp',))('dp',)", "more than 4 layouts", 21);
}

Test(pylayout_tuple, small_error_buffer_and_long_map) {
  sk_mesh meshes[1];
  char maps[1][PYLAYOUT_MAP_MAX];
  char err[16];
  int n = 7;
  cr_assert_eq(pylayout_tuple("--ds", "Layout((2,),('dp',))('xp',)", 1, meshes, maps, &n, err, sizeof err), -1);
  cr_assert_eq(n, 0);
  cr_assert_str_eq(err, "--ds: 'xp' is n"); /* truncated to fit */
  cr_assert_eq(pylayout_tuple("--ds", "Layout((2,),('dp',))('xp',)", 1, meshes, maps, &n, NULL, 0), -1);

  /* a map text longer than PYLAYOUT_MAP_MAX: the plain message gets the flag and the column */
  char text[4096] = "Layout((2,),('dp',))(";
  for (int i = 0; i < 40; i++) strcat(text, "'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn',");
  strcat(text, ")");
  expect_bad(text, "layout 0: a tensor map longer than 1023 characters", 1);
}

Test(pylayout_is_layout_text, tells_layouts_from_strategies) {
  cr_assert(pylayout_is_layout_text("(Layout((2,4),(\"dp\",\"mp\"))(\"dp\",),)"));
  cr_assert(pylayout_is_layout_text("mindspore.Layout ((2,),('dp',))('dp',)"));
  cr_assert(pylayout_is_layout_text("Layout(2)"));
  cr_assert(!pylayout_is_layout_text("((2,1),(2,))"));
  cr_assert(!pylayout_is_layout_text("data_parallel"));
  cr_assert(!pylayout_is_layout_text("full_batch"));
  cr_assert(!pylayout_is_layout_text("MyLayout((2,),('dp',))"));
  cr_assert(!pylayout_is_layout_text("Layout"));
  cr_assert(!pylayout_is_layout_text(""));
}
