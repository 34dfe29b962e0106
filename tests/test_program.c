/* The stages' programs (sk_program.h): compiled plans of the shipped networks under 1f1b, an
   interleaved gpipe and zero_bubble_v with recomputation and hsdp, checked step by step: buffers
   taken and given back once, every Send waited for before the Update, the two sides of each link
   agreeing, recomputation before the backward, the shard steps' groups, a program's size not
   growing with the device count, and the text sk-sim --dump-program prints. */
#include <criterion/criterion.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "shardkit.h"
#include "sk_json.h"

#define RECURSIVE "examples/nets/recursive_programming.json"

static void load(const char *path, sk_graph *g) {
  sk_error e = {SK_OK, ""};
  sk_graph_init(g);
  cr_assert_eq(sk_json_load_network(path, g, &e), SK_OK, "%s: %s", path, e.msg);
}

static sk_autoparallel pipe_desc(int devices, int micro, sk_pipe_scheduler sched, int interleave, bool hsdp) {
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.ndevices = devices;
  d.pipeline.stages = 2, d.pipeline.micro = micro, d.pipeline.scheduler = sched, d.pipeline.interleave = interleave;
  if (hsdp) d.hsdp = (sk_hsdp){true, -1, 0, SK_HSDP_LEVEL1}; /* threshold 0: every replicated parameter shards */
  return d;
}

static void compile(const sk_graph *g, const sk_autoparallel *d, sk_parallel_plan *p) {
  sk_error e = {SK_OK, ""};
  cr_assert_eq(sk_parallel_compile(g, d, p, &e), SK_OK, "%s", e.msg);
}

/* The three plans every check runs on; g is the caller's (the plans point into it). */
enum { PLAN_1F1B, PLAN_GPIPE_INTERLEAVED, PLAN_ZBV, NPLANS };
static const char *const plan_name[NPLANS] = {"1f1b", "gpipe interleave 2", "zero_bubble_v + recompute + hsdp"};

/* recompute false: none of the network's operators flagged for recomputation. */
static void compile_plan_as(sk_graph *g, int which, bool recompute, sk_parallel_plan *p) {
  load(RECURSIVE, g);
  for (int o = 0; o < g->nops && !recompute; o++) g->ops[o].recompute = false;
  sk_autoparallel d = pipe_desc(8, 4, SK_PIPE_1F1B, 0, false);
  if (which == PLAN_GPIPE_INTERLEAVED) d = pipe_desc(8, 4, SK_PIPE_GPIPE, 2, false);
  if (which == PLAN_ZBV) {
    d = pipe_desc(8, 4, SK_PIPE_ZERO_BUBBLE_V, 0, true);
    for (int o = 0; o < g->nops && recompute; o++) g->ops[o].recompute = true; /* refused where it cannot be */
  }
  compile(g, &d, p);
  cr_assert_eq(p->stages, 2, "%s", plan_name[which]);
  cr_assert_eq(p->schedule.chunks, which == PLAN_1F1B ? 1 : 2, "%s: chunks per stage", plan_name[which]);
}

static void compile_plan(sk_graph *g, int which, sk_parallel_plan *p) { compile_plan_as(g, which, true, p); }

static bool is_buffer_step(const sk_program_step *s) { return s->kind == SK_PSTEP_ALLOC || s->kind == SK_PSTEP_FREE; }

static bool same_buffer(const sk_program_step *a, const sk_program_step *b) {
  return a->buffer == b->buffer && a->tensor == b->tensor && a->op == b->op && a->slot == b->slot && a->micro == b->micro &&
         a->vstage == b->vstage;
}

/* Whether tensor t's value (buffer VALUE, micro-batch m) is held at step i of pg: its last Alloc or
   Free before i is an Alloc. Tensors this stage holds no buffer of (parameters, inputs) count. */
static bool value_held(const sk_program *pg, int i, int t, int m) {
  for (int j = i - 1; j >= 0; j--) {
    const sk_program_step *s = &pg->steps[j];
    if (is_buffer_step(s) && s->buffer == SK_PBUF_VALUE && s->tensor == t && s->micro == m) return s->kind == SK_PSTEP_ALLOC;
  }
  return true; /* never allocated here: not an activation of this stage */
}

/* Every Alloc given back by exactly one later Free (none without its Alloc), and every forward or
   recomputed operator step's activations (inputs and outputs) held while it runs. */
static void expect_buffers_balanced(const sk_parallel_plan *p, const char *what) {
  const sk_graph *g = p->graph;
  for (int st = 0; st < p->stages; st++) {
    const sk_program *pg = &p->programs[st];
    int *open = (int *)calloc((size_t)pg->nsteps + 1, sizeof(int)), nopen = 0;
    cr_assert_not_null(open);
    for (int i = 0; i < pg->nsteps; i++) {
      const sk_program_step *s = &pg->steps[i];
      if (!is_buffer_step(s)) continue;
      int at = -1;
      for (int k = 0; k < nopen && at < 0; k++)
        if (same_buffer(&pg->steps[open[k]], s)) at = k;
      if (s->kind == SK_PSTEP_ALLOC) {
        cr_assert_lt(at, 0, "%s: stage %d step %d: Alloc of a buffer taken at step %d", what, st, i, at < 0 ? -1 : open[at]);
        open[nopen++] = i;
      } else {
        cr_assert_geq(at, 0, "%s: stage %d step %d: Free of a buffer not taken (tensor %d op %d micro %d)", what, st, i,
                      s->tensor, s->op, s->micro);
        open[at] = open[--nopen];
      }
    }
    cr_assert_eq(nopen, 0, "%s: stage %d: %d buffers never freed, the first taken at step %d (tensor %d, buffer %d)", what,
                 st, nopen, nopen ? open[0] : -1, nopen ? pg->steps[open[0]].tensor : -1, nopen ? pg->steps[open[0]].buffer : -1);
    free(open);
    for (int i = 0; i < pg->nsteps; i++) {
      const sk_program_step *s = &pg->steps[i];
      bool fwd = s->kind == SK_PSTEP_RECOMPUTE || s->kind == SK_PSTEP_FORWARD;
      if (!fwd) continue;
      const sk_graph_op *op = &g->ops[s->op];
      for (int k = 0; k < op->ninputs; k++)
        cr_assert(value_held(pg, i, op->inputs[k], s->micro), "%s: stage %d step %d (%s %s): input '%s' not held", what, st, i,
                  sk_parallel_step_name(s->kind), op->name, g->tensors[op->inputs[k]].name);
      for (int k = 0; k < op->noutputs; k++)
        cr_assert(value_held(pg, i, op->outputs[k], s->micro), "%s: stage %d step %d (%s %s): output not held", what, st, i,
                  sk_parallel_step_name(s->kind), op->name);
    }
  }
}

/* Every Send waited for once (WaitSend's send= is its index), the staging copy freed right after
   the wait, and all of it before the Update (the program's last step). */
static void expect_sends_waited(const sk_parallel_plan *p, const char *what) {
  for (int st = 0; st < p->stages; st++) {
    const sk_program *pg = &p->programs[st];
    int update = pg->nsteps - 1;
    cr_assert_eq(pg->steps[update].kind, SK_PSTEP_UPDATE, "%s: stage %d ends with the Update", what, st);
    int sends = 0;
    for (int i = 0; i < pg->nsteps; i++) {
      const sk_program_step *s = &pg->steps[i];
      if (s->kind != SK_PSTEP_SEND) continue;
      sends++;
      cr_assert(i > 0 && pg->steps[i - 1].kind == SK_PSTEP_ALLOC && pg->steps[i - 1].buffer == SK_PBUF_STAGING &&
                    pg->steps[i - 1].tensor == s->tensor,
                "%s: stage %d: Send %d without its staging copy just before", what, st, i);
      int waits = 0, at = -1;
      for (int j = 0; j < pg->nsteps; j++)
        if (pg->steps[j].kind == SK_PSTEP_WAIT_SEND && pg->steps[j].send == i) waits++, at = j;
      cr_assert_eq(waits, 1, "%s: stage %d: Send %d waited for %d times", what, st, i, waits);
      cr_assert(at > i && at + 1 < update, "%s: stage %d: Send %d's WaitSend at %d (Update %d)", what, st, i, at, update);
      const sk_program_step *f = &pg->steps[at + 1];
      cr_assert(f->kind == SK_PSTEP_FREE && f->buffer == SK_PBUF_STAGING && f->tensor == s->tensor && f->micro == s->micro &&
                    f->vstage == s->vstage,
                "%s: stage %d: WaitSend %d not followed by its staging copy's Free", what, st, at);
    }
    cr_assert_gt(sends, 0, "%s: stage %d sends nothing", what, st);
  }
}

static int group_of_kind(const sk_parallel_plan *p, sk_plan_group_kind kind) {
  for (int i = 0; i < p->ngroups; i++)
    if (p->groups[i].kind == kind) return i;
  cr_assert_fail("no group of kind %d", kind);
  return -1;
}

/* Stage s's messages of `kind` with stage q on `link`, as (tensor, micro, grad) triples. */
static int messages(const sk_parallel_plan *p, int s, int q, int link, sk_parallel_step_kind kind, int *out) {
  int n = 0;
  const sk_program *pg = &p->programs[s];
  for (int i = 0; i < pg->nsteps; i++) {
    const sk_program_step *x = &pg->steps[i];
    if (x->kind != kind || x->peer != q || x->group != link) continue;
    out[3 * n] = x->tensor, out[3 * n + 1] = x->micro, out[3 * n + 2] = x->grad, n++;
  }
  return n;
}

/* Each stage's Sends to q on a link are q's Recvs from it on that link, in the same order. */
static void expect_links_agree(const sk_parallel_plan *p, const char *what) {
  int links[2] = {group_of_kind(p, SK_PGROUP_LINK_FWD), group_of_kind(p, SK_PGROUP_LINK_BWD)};
  cr_assert_eq(links[0], 2, "%s: g2 the forward link", what);
  cr_assert_eq(links[1], 3, "%s: g3 the backward link", what);
  int cap = 3 * (p->programs[0].nsteps + p->programs[1].nsteps);
  int *a = (int *)malloc(sizeof(int) * (size_t)cap), *b = (int *)malloc(sizeof(int) * (size_t)cap);
  cr_assert(a && b);
  for (int s = 0; s < p->stages; s++)
    for (int q = 0; q < p->stages; q++)
      for (int l = 0; l < 2; l++) {
        int ns = messages(p, s, q, links[l], SK_PSTEP_SEND, a), nr = messages(p, q, s, links[l], SK_PSTEP_RECV, b);
        cr_assert_eq(ns, nr, "%s: stage %d sends %d on g%d to stage %d, which receives %d", what, s, ns, links[l], q, nr);
        for (int i = 0; i < 3 * ns; i++)
          cr_assert_eq(a[i], b[i], "%s: message %d from stage %d to %d on g%d differs", what, i / 3, s, q, links[l]);
        for (int i = 0; i < ns; i++) cr_assert_eq(a[3 * i + 2], l, "%s: the %s link carries only %s", what,
                                                  l ? "backward" : "forward", l ? "gradients" : "activations");
      }
  free(a), free(b);
}

/* check on each of the three plans (recompute: as the network and compile_plan flag it). */
static void on_every_plan(void (*check)(const sk_parallel_plan *, const char *), bool recompute) {
  for (int w = 0; w < NPLANS; w++) {
    sk_graph g;
    sk_parallel_plan p;
    compile_plan_as(&g, w, recompute, &p);
    check(&p, plan_name[w]);
    sk_parallel_free(&p), sk_graph_free(&g);
  }
}

TestSuite(program);

Test(program, buffers_are_taken_and_given_back_once) { on_every_plan(expect_buffers_balanced, false); }

/* A recomputed output is taken three times a micro-batch (forward, freed; recompute; the slot's
   Free after the backward): each Alloc has its Free. */
Test(program, buffers_are_given_back_under_recomputation) {
  on_every_plan(expect_buffers_balanced, true);
}

Test(program, every_send_is_waited_for_before_the_update) { on_every_plan(expect_sends_waited, true); }

Test(program, both_sides_of_a_link_agree) { on_every_plan(expect_links_agree, true); }

/* The evaluation programs (plan.evals) seen as the plan's programs: the same checks hold. */
static void expect_evals(const sk_parallel_plan *p, const char *what) {
  sk_parallel_plan e = *p;
  char name[128];
  snprintf(name, sizeof name, "%s, evaluation", what);
  cr_assert_not_null(p->evals, "%s: no evaluation programs", what);
  e.programs = p->evals;
  expect_buffers_balanced(&e, name);
  expect_links_agree(&e, name);
  int last = p->stages * p->schedule.chunks - 1, scores = 0;
  for (int s = 0; s < p->stages; s++)
    for (int i = 0; i < p->evals[s].nsteps; i++) {
      const sk_program_step *x = &p->evals[s].steps[i];
      cr_assert(x->kind != SK_PSTEP_BACKWARD && x->kind != SK_PSTEP_UPDATE && x->kind != SK_PSTEP_SEED_LOSS && !x->grad,
                "%s: stage %d step %d: %s in an evaluation", name, s, i, sk_parallel_step_name(x->kind));
      if (x->kind == SK_PSTEP_SCORE) {
        cr_assert_eq(s, sk_pipe_stage_of(&p->schedule, last, NULL), "%s: Score on stage %d", name, s);
        cr_assert_eq(x->micro, scores++, "%s: the micro-batches scored in order", name);
      }
    }
  cr_assert_eq(scores, p->micro, "%s: %d Score steps for %d micro-batches", name, scores, p->micro);
}

Test(program, evaluation_programs_forward_and_score_every_micro_batch) { on_every_plan(expect_evals, true); }

/* The first step index of `kind` on operator o for micro-batch m in pg; -1 none. */
static int first_step(const sk_program *pg, sk_parallel_step_kind kind, int o, int m) {
  for (int i = 0; i < pg->nsteps; i++)
    if (pg->steps[i].kind == kind && pg->steps[i].op == o && pg->steps[i].micro == m) return i;
  return -1;
}

Test(program, recomputed_outputs_are_recomputed_before_the_backward) {
  sk_graph g;
  sk_parallel_plan p;
  compile_plan(&g, PLAN_ZBV, &p);
  int recomputed = 0;
  for (int t = 0; t < p.graph->ntensors; t++) {
    if (!sk_parallel_recomputed(&p, t)) continue;
    int o = p.graph->tensors[t].producer, st = sk_pipe_stage_of(&p.schedule, p.vstage[o], NULL);
    const sk_program *pg = &p.programs[st];
    recomputed++;
    for (int m = 0; m < p.micro; m++) {
      int fwd = first_step(pg, SK_PSTEP_FORWARD, o, m), rc = first_step(pg, SK_PSTEP_RECOMPUTE, o, m);
      int bwd = first_step(pg, SK_PSTEP_BACKWARD, o, m);
      cr_assert(fwd >= 0 && rc > fwd && bwd > rc, "'%s' micro %d: Forward %d, Recompute %d, Backward %d",
                p.graph->ops[o].name, m, fwd, rc, bwd);
      bool freed = false; /* given back between the forward and the Recompute, taken again just before */
      for (int i = fwd + 1; i < rc; i++)
        freed = freed || (pg->steps[i].kind == SK_PSTEP_FREE && pg->steps[i].tensor == t && pg->steps[i].micro == m);
      cr_assert(freed, "'%s' micro %d: its output is kept through the forward", p.graph->ops[o].name, m);
      cr_assert(value_held(pg, rc, t, m), "'%s' micro %d: recomputed into no buffer", p.graph->ops[o].name, m);
    }
  }
  cr_assert_gt(recomputed, 0, "some output recomputed");
  sk_parallel_free(&p), sk_graph_free(&g);
}

Test(program, shard_steps_name_their_shard_group) {
  sk_graph g;
  sk_parallel_plan p;
  compile_plan(&g, PLAN_ZBV, &p);
  int *got = (int *)malloc(sizeof(int) * SK_MAX_DEVICES), *want = (int *)malloc(sizeof(int) * 2 * SK_MAX_DEVICES);
  cr_assert(got && want);
  int checked = 0;
  for (int r = 0; r < p.world_devices; r++) {
    int st = sk_parallel_stage_of_rank(&p, r), local = r - st * p.desc.ndevices;
    const sk_program *pg = &p.programs[st];
    for (int i = 0; i < pg->nsteps; i++) {
      const sk_program_step *s = &pg->steps[i];
      if (s->kind != SK_PSTEP_PARAM_GATHER && s->kind != SK_PSTEP_GRAD_REDUCE_SCATTER) continue;
      int t = p.graph->ops[s->op].inputs[s->slot], ng = 0, nm = 0, n = 0;
      cr_assert_eq(sk_opt_shard_groups(&p.tensors[t].layout, p.graph->tensors[t].dtype, &p.desc.hsdp, local, want, &ng,
                                       want + SK_MAX_DEVICES, &nm, SK_MAX_DEVICES, NULL), SK_OK);
      /* a shard group, or the stage's own when the shards span the stage (one id per partition) */
      sk_plan_group_kind kind = p.groups[s->group].kind;
      cr_assert(kind >= SK_PGROUP_MESH || (kind == SK_PGROUP_STAGE && ng == p.desc.ndevices),
                "step %d names g%d, not a shard group", i, s->group);
      cr_assert_eq(sk_parallel_group_ranks(&p, s->group, r, got, SK_MAX_DEVICES, &n, NULL), SK_OK);
      cr_assert_eq(n, ng, "rank %d step %d: g%d has %d ranks, the shard group %d", r, i, s->group, n, ng);
      for (int k = 0; k < n; k++) cr_assert_eq(got[k], want[k] + st * p.desc.ndevices, "rank %d step %d", r, i);
      checked++;
    }
  }
  cr_assert_gt(checked, 0, "the plan shards some parameter");
  free(got), free(want);
  sk_parallel_free(&p), sk_graph_free(&g);
}

/* Data parallel (no strategies): the programs of 8 and 32 devices have as many steps each. */
Test(program, size_does_not_grow_with_the_devices) {
  int steps[2][2] = {{0}};
  for (int k = 0; k < 2; k++) {
    sk_graph g;
    load(RECURSIVE, &g);
    for (int o = 0; o < g.nops; o++) g.ops[o].desc.has_strategy = false;
    sk_autoparallel d = pipe_desc(k ? 32 : 8, 2, SK_PIPE_1F1B, 0, false);
    sk_parallel_plan p;
    compile(&g, &d, &p);
    cr_assert_eq(p.world_devices, k ? 32 : 8);
    for (int o = 0; o < g.nops; o++) cr_assert_not(p.ops[o].moved[0], "data parallel: '%s' moves nothing", g.ops[o].name);
    for (int st = 0; st < 2; st++) steps[k][st] = p.programs[st].nsteps;
    sk_parallel_free(&p), sk_graph_free(&g);
  }
  for (int st = 0; st < 2; st++)
    cr_assert_eq(steps[0][st], steps[1][st], "stage %d: %d steps on 8 devices, %d on 32", st, steps[0][st], steps[1][st]);
  cr_assert_gt(steps[0][0], 0);
}

static char *dump(const sk_parallel_plan *p, int rank) {
  size_t n = sk_parallel_format_program(p, rank, NULL, 0);
  char *text = (char *)malloc(n + 1);
  cr_assert_not_null(text);
  cr_assert_eq(sk_parallel_format_program(p, rank, text, n + 1), n);
  return text;
}

/* Every line of the dump in its form: the header, the training step's "#N ..." lines, the
   create section's "#cN ..." and the evaluation program's "#eN ..." (each numbered in order,
   each section after the one before), the evaluation's WaitSends naming its own Sends. */
Test(program, dump_lines_have_one_form) {
  regex_t re, create;
  cr_assert_eq(regcomp(&re, "^#e?[0-9]+ [A-Za-z]+( [^ =]+)?( [a-z_]+=[^ ]+)*$", REG_EXTENDED | REG_NOSUB), 0);
  cr_assert_eq(regcomp(&create, "^#c[0-9]+ Alloc( [^ =]+)? buffer=[a-z_]+( [a-z_]+=[^ ]+)* memory=[a-z]+ bytes=[0-9]+$",
                       REG_EXTENDED | REG_NOSUB), 0);
  for (int w = 0; w < NPLANS; w++) {
    sk_graph g;
    sk_parallel_plan p;
    compile_plan(&g, w, &p);
    for (int r = 0; r < p.world_devices; r += 5) {
      char *text = dump(&p, r);
      int stage = sk_parallel_stage_of_rank(&p, r);
      const sk_program *pg = &p.programs[stage], *ev = &p.evals[stage];
      int lines = 0, n[3] = {0, 0, 0}, section = 0, waits = 0; /* section: 0 steps, 1 create, 2 evaluation */
      for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"), lines++) {
        if (!strncmp(l, "# ", 2)) {
          if (!strncmp(l, "# evaluation: ", 14)) {
            char want[96];
            snprintf(want, sizeof want, "# evaluation: %d steps, every micro-batch's forwards%s", ev->nsteps,
                     stage == p.stages - 1 ? " and their Score" : "");
            cr_assert_str_eq(l, want, "%s rank %d", plan_name[w], r);
          }
          continue;
        }
        int c = l[1] == 'c' ? 1 : l[1] == 'e' ? 2 : 0;
        cr_assert_geq(c, section, "%s rank %d: a line after a later section: '%s'", plan_name[w], r, l);
        section = c;
        cr_assert_eq(regexec(c == 1 ? &create : &re, l, 0, NULL, 0), 0, "%s rank %d: '%s'", plan_name[w], r, l);
        cr_assert_eq(atoi(l + 1 + (c > 0)), n[c], "%s rank %d: numbered in order: '%s'", plan_name[w], r, l);
        const char *send = strstr(l, " send=#");
        if (send) {
          waits++;
          cr_assert_eq(send[7] == 'e', c == 2, "%s rank %d: a WaitSend names its own program's Send: '%s'", plan_name[w], r, l);
        }
        n[c]++;
      }
      cr_assert_eq(n[0], pg->nsteps, "%s rank %d", plan_name[w], r);
      cr_assert_eq(n[1], pg->ncreate, "%s rank %d", plan_name[w], r);
      cr_assert_eq(n[2], ev->nsteps, "%s rank %d: the evaluation's steps", plan_name[w], r);
      cr_assert_gt(n[1], 0, "%s rank %d: nothing at create", plan_name[w], r);
      cr_assert_gt(n[2], 0, "%s rank %d: no evaluation", plan_name[w], r);
      cr_assert_gt(waits, 0, "%s rank %d: no WaitSend", plan_name[w], r);
      cr_assert_eq(lines, n[0] + n[1] + n[2] + 3, "a header line before the steps, the create section and the evaluation");
      free(text);
    }
    sk_parallel_free(&p), sk_graph_free(&g);
  }
  regfree(&re), regfree(&create);
}

/* Without a pipeline the dump names the training steps evaluation runs: those before SeedLoss. */
Test(program, dump_names_the_plain_evaluation) {
  sk_graph g;
  load(RECURSIVE, &g);
  sk_autoparallel d;
  memset(&d, 0, sizeof d);
  d.ndevices = 8;
  sk_parallel_plan p;
  compile(&g, &d, &p);
  cr_assert_null(p.evals, "no evaluation program of its own");
  int seed = 0;
  while (seed < p.programs[0].nsteps && p.programs[0].steps[seed].kind != SK_PSTEP_SEED_LOSS) seed++;
  cr_assert(seed > 0 && seed < p.programs[0].nsteps, "SeedLoss at %d", seed);
  char *text = dump(&p, 3), want[96];
  snprintf(want, sizeof want, "\n# evaluation: the training steps #0..#%d (the forward part)\n", seed - 1);
  const char *at = strstr(text, want);
  cr_assert_not_null(at, "%s", text);
  cr_assert_eq(at[strlen(want)], '\0', "the dump's last line: %s", text);
  cr_assert_null(strstr(text, "\n#e"), "no #e lines: %s", text);
  free(text);
  sk_parallel_free(&p), sk_graph_free(&g);
}

/* The line numbered n of text (without its newline), in buf. */
static const char *line_numbered(const char *text, int n, char *buf, size_t cap) {
  char head[32];
  snprintf(head, sizeof head, "\n#%d ", n);
  const char *at = strstr(text, head);
  cr_assert_not_null(at, "no step %d", n);
  at++;
  size_t len = strcspn(at, "\n");
  cr_assert_lt(len, cap);
  memcpy(buf, at, len), buf[len] = 0;
  return buf;
}

Test(program, dump_lines_of_a_two_stage_plan) {
  sk_graph g;
  sk_parallel_plan p;
  compile_plan(&g, PLAN_1F1B, &p);
  char *text = dump(&p, 0), line[512];
  cr_assert(!strncmp(text, "# device 0 of 8: stage 0 of 2 (ranks 0..3; chunks 0 of 2), 4 micro-batches, ", 76), "%s", text);
  cr_assert_str_eq(line_numbered(text, 7, line, sizeof line),
                   "#7 Forward relu1 op=ReLU out=[0:2,0:512] recompute=refused micro=0 chunk=0");
  cr_assert_str_eq(line_numbered(text, 8, line, sizeof line), "#8 Alloc relu1 buffer=staging micro=0 chunk=0 bytes=4096");
  cr_assert_str_eq(line_numbered(text, 9, line, sizeof line),
                   "#9 Send relu1 data=value micro=0 chunk=0 peer=4 group=g2 bytes=4096");
  /* 1f1b: the second forward's Send, then micro-batch 0's gradient back, which proves Send #9 done */
  cr_assert_str_eq(line_numbered(text, 20, line, sizeof line),
                   "#20 Recv relu1 data=grad micro=0 chunk=0 peer=4 group=g3 bytes=4096");
  cr_assert_str_eq(line_numbered(text, 21, line, sizeof line), "#21 WaitSend relu1 data=value send=#9 micro=0 chunk=0 peer=4");
  cr_assert_str_eq(line_numbered(text, 22, line, sizeof line), "#22 Free relu1 buffer=staging micro=0 chunk=0 bytes=4096");
  free(text);
  text = dump(&p, 5); /* rank 5: stage 1, its peer rank 1 */
  cr_assert_str_eq(line_numbered(text, 10, line, sizeof line),
                   "#10 Recv relu1 data=value micro=0 chunk=0 peer=1 group=g2 bytes=4096");
  cr_assert_str_eq(line_numbered(text, 19, line, sizeof line), "#19 SeedLoss loss micro=0 chunk=0");
  const char *create = strstr(text, "\n# create: "), *last = create;
  while (last && last > text && last[-1] != '#') last--;
  cr_assert(create && last > text && !strncmp(strchr(last, ' '), " Update parameters\n", 19), "%s", text);
  free(text);
  p.desc.dtype = SK_F64; /* an f64 run: a float's bytes double, the steps stay */
  text = dump(&p, 0);
  cr_assert_str_eq(line_numbered(text, 9, line, sizeof line),
                   "#9 Send relu1 data=value micro=0 chunk=0 peer=4 group=g2 bytes=8192");
  free(text);
  sk_parallel_free(&p), sk_graph_free(&g);
}
