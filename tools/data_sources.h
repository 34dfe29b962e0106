/* data_sources.h -- the inputs fed from a data source (docs/network-json.md's "data" object, and
   sk-sim's --data NAME=FILE.npy, which overrides it), beside the built-in datasets of
   datasets.h, which feed every other input:

     npy             rows of a NumPy file (include/sk_npy.h): batch b of an input whose batch dim
                     is B holds rows b*B .. b*B+B-1, taken modulo the file's rows (batches are
                     taken in order and wrap). The file's dims after the first are the input's
                     after its batch dim. Floats feed a float input (f32 and f64 either way);
                     integers an integer input, or a float one as their values; floats into an
                     integer input are refused. A relative path in the JSON is read from the
                     JSON file's directory; --data's from the current one.
     random_int      integers uniform in [lo, hi)
     random_normal   mean + std * N(0, 1) (Box-Muller)
     random_uniform  uniform in [lo, hi)

   A random value is a function of the seed (--seed), the input and its index in the run's
   stream of GLOBAL batches (splitmix64 over a counter): each device draws the whole global batch
   and keeps its slice, so 1 and 8 devices see the same numbers. Without a built-in dataset an
   epoch is the largest .npy file's rows divided by its batch (at least one batch), or 64 batches
   when every source is random; there is no test set then. Each device reads through readers of
   its own (data_readers): a read moves its file's offset. */
#ifndef SK_TOOLS_DATA_SOURCES_H
#define SK_TOOLS_DATA_SOURCES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_graph.h"
#include "sk_npy.h"

#define DATA_MAX_INPUTS 64      /* inputs with a source, and --data options */
#define DATA_RANDOM_BATCHES 64  /* an epoch of random sources alone */
#define DATA_PATH_CAP (SK_GRAPH_DIR_MAX + SK_DATA_PATH_MAX)

/* One fed input: its source, the file read (npy) and what a batch is. */
typedef struct data_input {
  int tensor;
  sk_data_source src;
  char path[DATA_PATH_CAP]; /* npy: the path opened */
  sk_dtype read_dt;         /* what the rows or draws are made into: f64 for a float input, i32 / i64 */
  int64_t batch, numel;     /* rows per batch (dim 0), elements per batch */
  int64_t file_rows;
} data_input;

typedef struct data_sources {
  int n;
  data_input in[DATA_MAX_INPUTS];
  uint64_t seed;
  long batches; /* an epoch's batches, when no built-in dataset feeds the network */
} data_sources;

/* A device's open files, one per npy input, and the buffer a batch is made in. */
typedef struct data_readers {
  sk_npy npy[DATA_MAX_INPUTS];
  void *buf;
} data_readers;

/* --data NAME=FILE as given: the text after '=' is the file. */
typedef struct data_override {
  const char *arg;
} data_override;

static int data__fail(char *err, size_t cap, const char *fmt, const char *a, const char *b) {
  snprintf(err, cap, fmt, a, b);
  return -1;
}

/* The --data override of input `name`, or NULL. */
static const char *data__override(const data_override *ov, int nov, const char *name) {
  for (int k = 0; k < nov; k++) {
    const char *eq = strchr(ov[k].arg, '=');
    if ((size_t)(eq - ov[k].arg) == strlen(name) && !strncmp(ov[k].arg, name, strlen(name))) return eq + 1;
  }
  return NULL;
}

/* Every --data names an input of g. */
static int data__check_overrides(const sk_graph *g, const data_override *ov, int nov, char *err, size_t cap) {
  for (int k = 0; k < nov; k++) {
    char name[SK_GRAPH_NAME_MAX];
    size_t n = (size_t)(strchr(ov[k].arg, '=') - ov[k].arg);
    snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), ov[k].arg);
    int t = sk_graph_find(g, name);
    if (t < 0 || n >= sizeof name) return data__fail(err, cap, "--data: the network has no input '%s'%s", name, "");
    if (g->tensors[t].role != SK_TENSOR_INPUT)
      return data__fail(err, cap, "--data: '%s' is a %s, not an input", name, sk_tensor_role_name(g->tensors[t].role));
  }
  return 0;
}

/* An npy input: the file opened once here to check its dtype, its samples' shape and that it
   has samples. */
static int data__check_npy(const sk_graph *g, data_input *in, char *err, size_t cap) {
  const sk_graph_tensor *x = &g->tensors[in->tensor];
  sk_npy npy;
  sk_error e;
  if (x->ndims < 1) return data__fail(err, cap, "input '%s' is a scalar: an .npy file feeds inputs with a batch dim%s", x->name, "");
  if (sk_npy_open(in->path, &npy, &e)) return data__fail(err, cap, "%s%s", e.msg, "");
  int rc = 0;
  if (!sk_npy_convertible(npy.dtype, in->read_dt))
    snprintf(err, cap, "%s: holds %s values; input '%s' is %s: floats would be truncated (save integers)", npy.path,
             sk_dtype_name(npy.dtype), x->name, sk_dtype_name(x->dtype)), rc = -1;
  else if (sk_npy_check_rows(&npy, x->ndims - 1, x->shape + 1, &e))
    snprintf(err, cap, "%s (input '%s')", e.msg, x->name), rc = -1;
  else if (npy.rows == 0)
    snprintf(err, cap, "%s: has no samples (shape[0] is 0); input '%s' needs %lld per batch", npy.path, x->name,
             (long long)x->shape[0]), rc = -1;
  in->file_rows = npy.rows;
  sk_npy_close(&npy);
  return rc;
}

/* Input t's source (an override wins over the graph's), its file checked; 0 when it has none. */
static int data__input(const sk_graph *g, int t, const char *override, data_input *in, char *err, size_t cap) {
  const sk_graph_tensor *x = &g->tensors[t];
  sk_error e;
  memset(in, 0, sizeof *in);
  in->tensor = t, in->src = x->data;
  if (override) {
    in->src.kind = SK_DATA_NPY;
    if (snprintf(in->path, sizeof in->path, "%s", override) >= (int)sizeof in->path)
      return data__fail(err, cap, "--data %s: the path is too long%s", x->name, "");
  } else if (x->data.kind == SK_DATA_NPY && sk_graph_data_path(g, t, in->path, sizeof in->path, &e)) {
    return data__fail(err, cap, "%s%s", e.msg, "");
  }
  bool is_float = x->dtype == SK_F32 || x->dtype == SK_F64 || x->dtype == SK_F16 || x->dtype == SK_BF16;
  in->read_dt = is_float ? SK_F64 : x->dtype == SK_I32 ? SK_I32 : SK_I64;
  in->batch = x->ndims ? x->shape[0] : 1, in->numel = sk_graph_numel(g, t);
  if (in->src.kind == SK_DATA_NPY) return data__check_npy(g, in, err, cap) ? -1 : 1;
  return in->src.kind != SK_DATA_NONE;
}

/* The sources of g's inputs (the graph's "data", --data over it). `dataset` says whether a
   built-in dataset feeds the rest; without one every input needs a source. 0, or -1 with err. */
static int data_sources_open(const sk_graph *g, const data_override *ov, int nov, bool dataset, uint64_t seed,
                             data_sources *ds, char *err, size_t cap) {
  memset(ds, 0, sizeof *ds);
  ds->seed = seed, ds->batches = DATA_RANDOM_BATCHES;
  if (data__check_overrides(g, ov, nov, err, cap)) return -1;
  bool npy = false;
  for (int t = 0; t < g->ntensors; t++) {
    const sk_graph_tensor *x = &g->tensors[t];
    if (x->role != SK_TENSOR_INPUT) continue;
    if (ds->n == DATA_MAX_INPUTS) return data__fail(err, cap, "more than 64 inputs with a data source%s%s", "", "");
    int got = data__input(g, t, data__override(ov, nov, x->name), &ds->in[ds->n], err, cap);
    if (got < 0) return -1;
    if (!got && !dataset)
      return data__fail(err, cap, "input '%s' has no data: give the network a \"dataset\", a \"data\" entry for it, or "
                        "--data %s=FILE.npy", x->name, x->name);
    if (!got) continue;
    const data_input *in = &ds->in[ds->n++];
    if (in->src.kind != SK_DATA_NPY) continue;
    long epoch = (long)(in->file_rows / in->batch);
    if (!npy || epoch > ds->batches) ds->batches = epoch > 0 ? epoch : 1;
    npy = true;
  }
  return 0;
}

/* The source of tensor t, or NULL when the built-in dataset feeds it. */
static const data_input *data_source_of(const data_sources *ds, int t) {
  for (int k = 0; k < ds->n; k++)
    if (ds->in[k].tensor == t) return &ds->in[k];
  return NULL;
}

static void data_readers_close(data_readers *r) {
  for (int k = 0; k < DATA_MAX_INPUTS; k++) sk_npy_close(&r->npy[k]);
  free(r->buf);
  r->buf = NULL;
}

/* A device's readers: its own open file per npy input and a buffer for the largest batch. */
static sk_result data_readers_open(const data_sources *ds, data_readers *r, sk_error *e) {
  int64_t most = 1;
  memset(r, 0, sizeof *r);
  for (int k = 0; k < DATA_MAX_INPUTS; k++) r->npy[k].fd = -1;
  for (int k = 0; k < ds->n; k++) {
    if (ds->in[k].numel > most) most = ds->in[k].numel;
    sk_result rc = ds->in[k].src.kind == SK_DATA_NPY ? sk_npy_open(ds->in[k].path, &r->npy[k], e) : SK_OK;
    if (rc) return data_readers_close(r), rc;
  }
  r->buf = malloc(sizeof(double) * (size_t)most);
  if (!r->buf) return data_readers_close(r), sk_error_set(e, SK_ERR_OUT_OF_MEMORY, "out of memory");
  return SK_OK;
}

static uint64_t data__mix(uint64_t z) { /* splitmix64 */
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1) from draw i of a stream. */
static double data__unit(uint64_t stream, uint64_t i) { return (double)(data__mix(stream + i) >> 11) / 9007199254740992.0; }

/* Batch b of a random source: element i is draw j = b*numel + i of the input's stream (Box-Muller
   takes draws 2j and 2j+1). */
static void data__random(const data_sources *ds, const data_input *in, long b, void *dst) {
  uint64_t stream = data__mix(ds->seed ^ data__mix((uint64_t)in->tensor + 1)), first = (uint64_t)b * (uint64_t)in->numel;
  double lo = in->src.a, hi = in->src.b;
  for (int64_t i = 0; i < in->numel; i++) {
    uint64_t j = first + (uint64_t)i;
    double v;
    if (in->src.kind == SK_DATA_RANDOM_INT) {
      uint64_t range = (uint64_t)(hi - lo); /* at most 2^54 */
      int64_t x = (int64_t)lo + (int64_t)(data__mix(stream + j) % range);
      if (in->read_dt == SK_I32) ((int32_t *)dst)[i] = (int32_t)x;
      else if (in->read_dt == SK_I64) ((int64_t *)dst)[i] = x;
      else ((double *)dst)[i] = (double)x;
      continue;
    }
    if (in->src.kind == SK_DATA_RANDOM_NORMAL) {
      double u1 = data__unit(stream, 2 * j), u2 = data__unit(stream, 2 * j + 1);
      v = lo + hi * sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
    } else {
      v = lo + (hi - lo) * data__unit(stream, j);
      if (v >= hi) v = lo; /* rounding may reach hi; the interval is half-open */
    }
    ((double *)dst)[i] = v;
  }
}

/* Batch b of source k into r->buf (in->numel values of in->read_dt). */
static sk_result data_batch(const data_sources *ds, data_readers *r, int k, long b, sk_error *e) {
  const data_input *in = &ds->in[k];
  if (in->src.kind != SK_DATA_NPY) return data__random(ds, in, b, r->buf), SK_OK;
  int64_t first = (int64_t)(((uint64_t)b * (uint64_t)in->batch) % (uint64_t)in->file_rows);
  return sk_npy_read_rows(&r->npy[k], first, in->batch, in->read_dt, r->buf, e);
}

#endif
