/* sk_fusion.h -- the fusion scheduler: bucket many AllReduce / AllGather / ReduceScatter calls
   into few, launch each bucket as soon as its tensors are ready, unpack at wait.

   Do this in ONE .c file:   #define SK_IMPL   #include "shardkit.h"
   (or SK_FUSION_IMPL plus SK_COMM_IMPL and a backend). Link with -lpthread -lm (sk_fusion_pick_threshold uses sqrt).

   STEP BY STEP (on every device, with that device's communicator)
     sk_fusion_desc d = {0};                       // zero = auto mode (64 MiB) for every kind
     d.allreduce.mode = SK_FUSION_SIZE;
     d.allreduce.threshold_mb = 25;
     sk_fusion *f;
     sk_fusion_create(&d, &f, &err);
     for each parameter p, in parameter order:     // every rank registers the same sequence
       sk_fusion_add_allreduce(f, comm, p.grad, p.grad, p.count, SK_F32, SK_SUM, 0, p.name, &h[p]);
     sk_fusion_plan_format(f, buf, sizeof buf);    // optional: the buckets, before anything runs
     per step:
       for each gradient as backward produces it: sk_fusion_ready(f, h[p]);
       sk_fusion_wait(f);                          // everything reduced and unpacked
     sk_fusion_destroy(f);

   RULES (MindSpore's comm_fusion; docs/semantics.md section 10)
     Ops fuse only with ops of the same kind, communicator (group), dtype, reduce op (AllReduce,
     ReduceScatter) and fusion id. fusion_id: 0 in the op (a zero-initialised field) means id 1,
     MindSpore's default; SK_FUSION_NEVER (MindSpore's 0) is never fused; other positive ids are
     Cell.set_comm_fusion's. Different ids are never merged, in any mode.
     Modes, per kind (sk_fusion_config):
       SK_FUSION_AUTO   (zero) size mode with 64 MiB, MindSpore's auto threshold.
       SK_FUSION_NONE   every op alone.
       SK_FUSION_SIZE   threshold in bytes (threshold_bytes, or threshold_mb MiB when that is 0;
                        SK_FUSION_INF = one bucket per key). Per key there is one open bucket; in
                        registration order an op joins it if the bucket stays <= the threshold,
                        else it opens a new one (so an op larger than the threshold is alone).
                        The size of an op is its input: AllReduce and AllGather count x dtype,
                        ReduceScatter size x count x dtype.
       SK_FUSION_INDEX  split positions as all_reduce_fusion_config: 0-based positions in the
                        registration order of that kind, each an INCLUSIVE end: {20, 35} on N ops
                        gives ops [0..20] (21), [21..35] (15), [36..N-1]. Segments are then split
                        further by key. Positions count every op of the kind (never-fuse ones too).
     mindspore_accounting (size and auto modes) reproduces MindSpore's frontend fusion pass
     exactly (docs/semantics.md section 10): sizes in ELEMENTS of the op's input, threshold =
     MB x 262144 elements (threshold_mb, or threshold_bytes / 4), and
         seg = 0; budget = T; first = true
         for each op of the kind (registration order; never-fuse ops skipped):
           if (first || size < budget) { budget -= size; first = false; }   // joins
           else { budget = T; seg++; }               // opens: does NOT consume budget
     over ALL ops of the kind whatever their key, as MindSpore's counter runs over every Mirror
     op; segments are then split by key (MindSpore's backend key group+op+fusion+dtype). Unlike
     MindSpore, the user's fusion ids are kept (they can only split segments further).
     Buckets are ordered by their first op's registration index; every rank that registers the
     same sequence gets the same plan.

   RUNNING
     sk_fusion_ready(f, h) marks op h ready (its send buffer holds the final data). A packed
     bucket copies the tensor into its fusion buffer at once. Buckets launch non-blocking
     (sk_iallreduce & co.) strictly in bucket order on every rank: a bucket whose tensors are all
     ready still waits until every earlier bucket has launched. So ranks may mark tensors ready
     in different orders, but they always issue the same collectives in the same order. Every
     call also tests the outstanding requests (the MPI backend progresses only inside calls),
     except under a link model (sk_world_desc.cluster), where completing a request early would
     move the virtual clock; there completions are observed at wait.
     Register ops in the order their data becomes ready (backward order, as DDP builds its
     buckets) for overlap: buckets launch in registration order.
     sk_fusion_wait(f) waits for every bucket, unpacks, and re-arms the scheduler for the next
     step (the same ops, the same plan, all tensors not ready).
     Packing: a bucket of one op runs directly on the op's buffers. An AllReduce bucket whose
     ops' send buffers are consecutive in memory in bucket order, and whose recv buffers are too
     (in place or not), runs as ONE AllReduce on the flat span: zero-copy, like DDP's
     gradient_as_bucket_view. This is detected at plan time (desc.no_zero_copy turns it off).
     Other buckets are packed: copied into a fusion buffer (AllGather: recv unpacked rank by
     rank; ReduceScatter: send packed rank by rank) and copied out at completion.
     Fusion buffers come from desc.workspace if given (sk_fusion_workspace_bytes tells how much
     the plan needs; several schedulers that never run at once may share one), else they are
     allocated at plan time and kept until destroy.

   ERRORS
     Fallible calls return sk_result and take a trailing sk_error *err (NULL allowed) that
     receives a failure; the scheduler keeps its last one too: sk_fusion_error_message(f),
     sk_last_error (per scheduler).
     Bad arguments -> SK_ERR_INVALID_ARGUMENT naming them; add after planning, ready twice ->
     SK_ERR_INVALID_USAGE. A failing bucket (launch or completion) does not stop the others; its
     error surfaces at wait, naming the bucket and its tensors. At wait, a tensor never marked
     ready is SK_ERR_INVALID_USAGE naming it: every bucket before the first incomplete one has
     run and completed by then; that bucket and every later one are not launched (launching them
     out of order could hang the peers), so wait never hangs on it.

   A scheduler belongs to one device thread; its communicators must be that device's.
   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_FUSION_IMPL)
#define SK_FUSION_IMPL
#endif
#ifndef SK_FUSION_H
#define SK_FUSION_H

#include "sk_comm.h"

SK_EXTERN_C_BEGIN

typedef struct sk_fusion sk_fusion;

/* Fusion ids: 0 in sk_fusion_op.fusion_id = SK_FUSION_DEFAULT_ID; SK_FUSION_NEVER = never fused. */
#define SK_FUSION_DEFAULT_ID 1
#define SK_FUSION_NEVER (-1)
/* threshold_bytes: no limit (one bucket per key). */
#define SK_FUSION_INF ((size_t)-1)
/* auto mode's threshold, MindSpore's 64 MB */
#define SK_FUSION_AUTO_MB 64
/* MindSpore's DEFAULT_THRESHOLD_MB_TO_BYTE: MB in fp32 elements */
#define SK_FUSION_MS_ELEMS_PER_MB 262144

typedef enum sk_fusion_mode {
  SK_FUSION_AUTO = 0, /* size with 64 MiB */
  SK_FUSION_NONE,
  SK_FUSION_SIZE,
  SK_FUSION_INDEX,
  SK_FUSION_MODE_COUNT
} sk_fusion_mode;

/* Bucketing of one collective kind; zero = auto. */
typedef struct sk_fusion_config {
  sk_fusion_mode mode;
  size_t threshold_bytes;     /* size: bytes (SK_FUSION_INF = no limit); 0 = use threshold_mb */
  double threshold_mb;        /* size: MiB, when threshold_bytes is 0 (both 0: 0 bytes) */
  const int *indices;         /* index: inclusive end positions, strictly increasing, >= 0 */
  int nindices;
  bool mindspore_accounting;  /* size/auto: MindSpore's element accounting (see above) */
} sk_fusion_config;

/* Scheduler configuration; zero fields mean the default:
     allreduce, allgather, reduce_scatter   auto (64 MiB)
     no_zero_copy      false: detect views of one flat buffer (AllReduce) and skip packing
     workspace         NULL: allocate the fusion buffers at plan time
     workspace_bytes   size of workspace (>= sk_fusion_workspace_bytes; checked at plan time)
     allocator         the C library */
typedef struct sk_fusion_desc {
  sk_fusion_config allreduce, allgather, reduce_scatter;
  bool no_zero_copy;
  void *workspace;
  size_t workspace_bytes;
  sk_allocator allocator;
} sk_fusion_desc;

/* One registered collective, with sk_comm.h's count conventions (NCCL's). */
typedef struct sk_fusion_op {
  sk_coll_kind kind; /* SK_COLL_ALLREDUCE, SK_COLL_ALLGATHER or SK_COLL_REDUCE_SCATTER */
  sk_comm *comm;     /* required: the group */
  const void *send;
  void *recv;
  size_t count;
  sk_dtype dtype;
  sk_redop op;       /* AllReduce, ReduceScatter */
  int fusion_id;     /* 0 = SK_FUSION_DEFAULT_ID; SK_FUSION_NEVER; or a positive id */
  const char *name;  /* optional, copied (up to 47 chars); default "#<handle>" */
} sk_fusion_op;

/* How a bucket moves its data. */
typedef enum sk_fusion_pack {
  SK_FUSION_DIRECT = 0, /* one op: its own buffers */
  SK_FUSION_ZERO_COPY,  /* AllReduce over the flat span the ops' buffers form */
  SK_FUSION_PACKED      /* copied through a fusion buffer */
} sk_fusion_pack;

typedef struct sk_fusion_bucket_info {
  sk_coll_kind kind;
  sk_comm *comm;
  sk_dtype dtype;
  sk_redop op;
  int fusion_id;       /* normalised: 1 for 0; SK_FUSION_NEVER */
  int ntensors;
  const int *tensors;  /* handles, in bucket order (valid until destroy) */
  size_t count;        /* count of the fused call */
  size_t bytes;        /* input bytes (the threshold's measure) */
  sk_fusion_pack pack;
} sk_fusion_bucket_info;

SK_API sk_result sk_fusion_create(const sk_fusion_desc *desc, sk_fusion **out, sk_error *err);
/* Waits for anything still in flight, then frees. NULL is fine. */
SK_API void sk_fusion_destroy(sk_fusion *f);
SK_API const char *sk_fusion_error_message(const sk_fusion *f);

/* Registers an op (parameter order); *handle (may be NULL) receives its handle: 0, 1, 2, ... in
   registration order. Only before planning. */
SK_API sk_result sk_fusion_add(sk_fusion *f, const sk_fusion_op *op, int *handle, sk_error *err);
SK_API sk_result sk_fusion_add_allreduce(sk_fusion *f, sk_comm *c, const void *send, void *recv, size_t count,
                                         sk_dtype dt, sk_redop op, int fusion_id, const char *name, int *handle, sk_error *err);
SK_API sk_result sk_fusion_add_allgather(sk_fusion *f, sk_comm *c, const void *send, void *recv, size_t count,
                                         sk_dtype dt, int fusion_id, const char *name, int *handle, sk_error *err);
SK_API sk_result sk_fusion_add_reduce_scatter(sk_fusion *f, sk_comm *c, const void *send, void *recv, size_t count,
                                              sk_dtype dt, sk_redop op, int fusion_id, const char *name, int *handle, sk_error *err);

/* Builds the buckets and the fusion buffers; registration ends. The calls below plan implicitly
   when needed. Calling it again is a no-op. */
SK_API sk_result sk_fusion_plan(sk_fusion *f, sk_error *err);
SK_API int sk_fusion_bucket_count(sk_fusion *f); /* -1 if planning failed */
SK_API sk_result sk_fusion_get_bucket(sk_fusion *f, int bucket, sk_fusion_bucket_info *out, sk_error *err);
/* Bucket of a handle (-1 if invalid or planning failed). */
SK_API int sk_fusion_bucket_of(sk_fusion *f, int handle);
/* Fusion buffer bytes the plan needs (0 when nothing is packed). */
SK_API sk_result sk_fusion_workspace_bytes(sk_fusion *f, size_t *bytes, sk_error *err);
/* snprintf-style: writes the plan (one line per bucket, then one per tensor when `tensors`),
   returns the length it needed (excluding the NUL), or -1 if planning failed. */
SK_API int sk_fusion_plan_format(sk_fusion *f, char *buf, size_t cap, bool tensors);

/* Marks op `handle` ready; launches every bucket that may now launch (in order). */
SK_API sk_result sk_fusion_ready(sk_fusion *f, int handle, sk_error *err);
/* Completes every bucket and unpacks; returns the first error (see ERRORS). Re-arms. */
SK_API sk_result sk_fusion_wait(sk_fusion *f, sk_error *err);

/* The closed form of docs/cost-models.md section 4: gradients of total_bytes produced
   uniformly over backward_us, one bucket costing a_us + c_us_per_byte * b. Compute-bound (c*r < 1, r =
   total/backward): b* = a*r / (1 - c*r); comm-bound: b* = sqrt(a * total * r). Clamped to
   [0, total_bytes]; backward_us <= 0 (pure communication) gives total_bytes (one bucket). */
SK_API double sk_fusion_pick_threshold(double a_us, double c_us_per_byte, double total_bytes, double backward_us);

/* One op to plan without communicators: its group named by an id, with its size (a
   ReduceScatter's input is count x group_size). */
typedef struct sk_fusion_key_op {
  sk_coll_kind kind; /* SK_COLL_ALLREDUCE, SK_COLL_ALLGATHER or SK_COLL_REDUCE_SCATTER */
  int group;         /* any id: ops of different ids never share a bucket */
  int group_size;    /* >= 1 */
  size_t count;
  sk_dtype dtype;
  sk_redop op;       /* AllReduce, ReduceScatter */
  int fusion_id;     /* as sk_fusion_op's */
} sk_fusion_key_op;

/* The buckets a scheduler of this desc would form from these ops registered in this order
   (a compiler plans them before any communicator exists): bucket[i] receives op i's bucket,
   numbered as sk_fusion_bucket_of numbers them; *nbuckets (may be NULL) how many. */
SK_API sk_result sk_fusion_plan_keys(const sk_fusion_desc *desc, const sk_fusion_key_op *ops, int n, int *bucket,
                                     int *nbuckets, sk_error *err);

SK_API const char *sk_fusion_mode_name(sk_fusion_mode m);

SK_EXTERN_C_END

#endif /* SK_FUSION_H */

/* ==== implementation ======================================================================== */
#if defined(SK_FUSION_IMPL) && !defined(SK_FUSION_IMPL_DONE)
#define SK_FUSION_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <limits.h>
#include <math.h>

SK_EXTERN_C_BEGIN

#define SK__FNAME 48
#define SK__FMSG 1024
#define SK__FBMSG 600

typedef struct sk__ften {
  sk_fusion_op op;
  char name[SK__FNAME];
  int group;        /* sk_fusion_plan_keys' group id; -1 for an op with a communicator */
  int id;           /* normalised fusion id */
  size_t in_bytes;  /* the threshold's measure */
  size_t in_elems;  /* MindSpore's measure */
  int bucket;
  size_t off;       /* element offset within the bucket (in count units) */
  bool ready;
} sk__ften;

typedef struct sk__fbucket {
  sk_coll_kind kind;
  sk_comm *comm;
  int group;        /* sk__ften.group */
  sk_dtype dt;
  sk_redop op;
  int id;
  int seg;          /* segment (index / MindSpore modes) */
  int first;        /* first handle */
  int start, n;     /* range in f->order */
  size_t count, bytes;
  sk_fusion_pack pack;
  size_t ws_off;    /* workspace offset of the fusion buffer (packed) */
  unsigned char *sbuf, *rbuf;
  int nready;
  bool launched, completed;
  sk_request *req;
  sk_result result;
  char msg[SK__FBMSG];
} sk__fbucket;

struct sk_fusion {
  sk_object_head head; /* the last failure, for sk_last_error (the first SK_ERROR_MSG_MAX bytes of msg) */
  sk_fusion_desc desc;
  sk__ften *t;
  int nt, capt;
  sk__fbucket *b;
  int nb;
  int *order;        /* handles by bucket */
  bool planned;
  sk_result plan_result;
  int next_launch;   /* first bucket not launched yet */
  int next_done;     /* first bucket not observed complete */
  unsigned char *ws; /* workspace in use */
  size_t ws_need;
  bool ws_owned;
  char msg[SK__FMSG];
};

static SK__PRINTF(3, 4) sk_result sk__fset(sk_fusion *f, sk_result code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->msg, sizeof f->msg, fmt, ap);
  va_end(ap);
  return sk_object_set_error(&f->head, code, f->msg);
}

SK_API const char *sk_fusion_mode_name(sk_fusion_mode m) {
  switch (m) {
    case SK_FUSION_AUTO: return "auto";
    case SK_FUSION_NONE: return "none";
    case SK_FUSION_SIZE: return "size";
    case SK_FUSION_INDEX: return "index";
    default: return "invalid";
  }
}

static bool sk__fcheck_config(const sk_fusion_config *c, const char *which, sk_error *err, sk_result *r) {
  if ((int)c->mode < 0 || c->mode >= SK_FUSION_MODE_COUNT) {
    *r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc.%s.mode = %d is not a sk_fusion_mode", which, (int)c->mode);
    return false;
  }
  if (c->mode == SK_FUSION_SIZE && !(c->threshold_mb >= 0 && c->threshold_mb < 1e12)) {
    *r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc.%s.threshold_mb = %g; must be >= 0", which, c->threshold_mb);
    return false;
  }
  if (c->mode == SK_FUSION_INDEX) {
    if (c->nindices < 0 || (c->nindices > 0 && !c->indices)) {
      *r = sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc.%s: nindices = %d with indices %s", which, c->nindices,
                    c->indices ? "set" : "NULL");
      return false;
    }
    for (int i = 0; i < c->nindices; i++)
      if (c->indices[i] < 0 || (i > 0 && c->indices[i] <= c->indices[i - 1])) {
        *r = sk__fail(err, SK_ERR_INVALID_ARGUMENT,
                      "desc.%s.indices[%d] = %d; split positions must be >= 0 and strictly increasing", which, i,
                      c->indices[i]);
        return false;
      }
  }
  return true;
}

SK_API sk_result sk_fusion_create(const sk_fusion_desc *desc, sk_fusion **out, sk_error *err) {
  if (!out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "out (the output pointer) is NULL");
  *out = NULL;
  sk_fusion_desc zero;
  memset(&zero, 0, sizeof zero);
  if (!desc) desc = &zero;
  if (!sk__allocator_ok(&desc->allocator))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc.allocator: set both alloc and free, or neither");
  sk_result r = SK_OK;
  if (!sk__fcheck_config(&desc->allreduce, "allreduce", err, &r) ||
      !sk__fcheck_config(&desc->allgather, "allgather", err, &r) ||
      !sk__fcheck_config(&desc->reduce_scatter, "reduce_scatter", err, &r))
    return r;
  if (desc->workspace_bytes && !desc->workspace)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "desc.workspace is NULL with workspace_bytes %zu", desc->workspace_bytes);
  sk_fusion *f = (sk_fusion *)sk__calloc(&desc->allocator, sizeof *f, 64);
  if (!f) return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "allocating the scheduler");
  f->head.magic = SK_OBJECT_MAGIC;
  f->desc = *desc;
  *out = f;
  return SK_OK;
}

static void sk__fdrain(sk_fusion *f) {
  for (int i = 0; f->b && i < f->nb; i++)
    if (f->b[i].req) sk_wait(&f->b[i].req, NULL);
}

SK_API void sk_fusion_destroy(sk_fusion *f) {
  if (!f) return;
  sk_allocator a = f->desc.allocator;
  sk__fdrain(f);
  if (f->ws_owned) sk__free(&a, f->ws);
  sk__free(&a, f->t);
  sk__free(&a, f->b);
  sk__free(&a, f->order);
  sk__free(&a, f);
}

SK_API const char *sk_fusion_error_message(const sk_fusion *f) { return f ? f->msg : "scheduler is NULL"; }

/* ---- registration ----------------------------------------------------------------------------- */

static sk_result sk__fusion_add(sk_fusion *f, const sk_fusion_op *op, int *handle) {
  if (!f) return SK_ERR_INVALID_ARGUMENT;
  if (handle) *handle = -1;
  if (!op) return sk__fset(f, SK_ERR_INVALID_ARGUMENT, "add: op is NULL");
  int h = f->nt;
  const char *nm = op->name ? op->name : "";
  if (f->planned)
    return sk__fset(f, SK_ERR_INVALID_USAGE, "add '%s': the plan is already built; register every op before planning or the first ready", nm);
  if (op->kind != SK_COLL_ALLREDUCE && op->kind != SK_COLL_ALLGATHER && op->kind != SK_COLL_REDUCE_SCATTER)
    return sk__fset(f, SK_ERR_INVALID_ARGUMENT, "add '%s' (handle %d): kind %d (%s) is not allreduce, allgather or reduce_scatter",
                    nm, h, (int)op->kind, sk_coll_kind_name(op->kind));
  if (!op->comm) return sk__fset(f, SK_ERR_INVALID_ARGUMENT, "add '%s' (handle %d): comm is NULL", nm, h);
  if (!sk_dtype_valid(op->dtype))
    return sk__fset(f, SK_ERR_INVALID_ARGUMENT, "add '%s' (handle %d): invalid dtype %d", nm, h, (int)op->dtype);
  if (op->kind != SK_COLL_ALLGATHER && !sk_redop_valid(op->op))
    return sk__fset(f, SK_ERR_INVALID_ARGUMENT, "add '%s' (handle %d): invalid reduce op %d", nm, h, (int)op->op);
  if (op->fusion_id < SK_FUSION_NEVER)
    return sk__fset(f, SK_ERR_INVALID_ARGUMENT,
                    "add '%s' (handle %d): fusion_id %d; use 0 (default id 1), SK_FUSION_NEVER (-1) or a positive id",
                    nm, h, op->fusion_id);
  size_t es = sk_dtype_size(op->dtype), n = (size_t)sk_comm_size(op->comm);
  if (n < 1) n = 1;
  if (op->count > (SIZE_MAX / 8) / es / n)
    return sk__fset(f, SK_ERR_INVALID_ARGUMENT, "add '%s' (handle %d): count %zu is too large", nm, h, op->count);
  if (op->count && (!op->send || !op->recv))
    return sk__fset(f, SK_ERR_INVALID_ARGUMENT, "add '%s' (handle %d): %s buffer is NULL with count %zu", nm, h,
                    op->send ? "recv" : "send", op->count);
  if (f->nt == f->capt) {
    int cap = f->capt ? f->capt * 2 : 64;
    sk__ften *nt = (sk__ften *)sk__alloc(&f->desc.allocator, sizeof(sk__ften) * (size_t)cap, 64);
    if (!nt) return sk__fset(f, SK_ERR_OUT_OF_MEMORY, "add '%s': growing the op table to %d", nm, cap);
    if (f->nt) memcpy(nt, f->t, sizeof(sk__ften) * (size_t)f->nt);
    sk__free(&f->desc.allocator, f->t);
    f->t = nt, f->capt = cap;
  }
  sk__ften *t = &f->t[f->nt++];
  memset(t, 0, sizeof *t);
  t->op = *op;
  if (op->kind == SK_COLL_ALLGATHER) t->op.op = SK_SUM; /* no op: never splits a key */
  if (op->name && op->name[0])
    snprintf(t->name, sizeof t->name, "%s", op->name);
  else
    snprintf(t->name, sizeof t->name, "#%d", h);
  t->op.name = NULL;
  t->id = op->fusion_id == 0 ? SK_FUSION_DEFAULT_ID : op->fusion_id;
  t->group = -1;
  t->in_elems = op->kind == SK_COLL_REDUCE_SCATTER ? op->count * n : op->count;
  t->in_bytes = t->in_elems * es;
  t->bucket = -1;
  if (handle) *handle = h;
  return SK_OK;
}
SK_API sk_result sk_fusion_add(sk_fusion *f, const sk_fusion_op *op, int *handle, sk_error *err) {
  return sk__report(f, sk__fusion_add(f, op, handle), err);
}

SK_API sk_result sk_fusion_add_allreduce(sk_fusion *f, sk_comm *c, const void *send, void *recv, size_t count,
                                         sk_dtype dt, sk_redop op, int fusion_id, const char *name, int *handle, sk_error *err) {
  sk_fusion_op o;
  memset(&o, 0, sizeof o);
  o.kind = SK_COLL_ALLREDUCE, o.comm = c, o.send = send, o.recv = recv, o.count = count, o.dtype = dt, o.op = op;
  o.fusion_id = fusion_id, o.name = name;
  return sk_fusion_add(f, &o, handle, err);
}

SK_API sk_result sk_fusion_add_allgather(sk_fusion *f, sk_comm *c, const void *send, void *recv, size_t count,
                                         sk_dtype dt, int fusion_id, const char *name, int *handle, sk_error *err) {
  sk_fusion_op o;
  memset(&o, 0, sizeof o);
  o.kind = SK_COLL_ALLGATHER, o.comm = c, o.send = send, o.recv = recv, o.count = count, o.dtype = dt, o.op = SK_SUM;
  o.fusion_id = fusion_id, o.name = name;
  return sk_fusion_add(f, &o, handle, err);
}

SK_API sk_result sk_fusion_add_reduce_scatter(sk_fusion *f, sk_comm *c, const void *send, void *recv, size_t count,
                                              sk_dtype dt, sk_redop op, int fusion_id, const char *name, int *handle, sk_error *err) {
  sk_fusion_op o;
  memset(&o, 0, sizeof o);
  o.kind = SK_COLL_REDUCE_SCATTER, o.comm = c, o.send = send, o.recv = recv, o.count = count, o.dtype = dt, o.op = op;
  o.fusion_id = fusion_id, o.name = name;
  return sk_fusion_add(f, &o, handle, err);
}

/* ---- planning --------------------------------------------------------------------------------- */

static bool sk__fsame_key(const sk__fbucket *b, const sk__ften *t) {
  return b->kind == t->op.kind && b->comm == t->op.comm && b->group == t->group && b->dt == t->op.dtype && b->op == t->op.op && b->id == t->id;
}

static const sk_fusion_config *sk__fconfig(const sk_fusion *f, sk_coll_kind k) {
  return k == SK_COLL_ALLREDUCE ? &f->desc.allreduce : k == SK_COLL_ALLGATHER ? &f->desc.allgather : &f->desc.reduce_scatter;
}

static size_t sk__fthreshold_bytes(const sk_fusion_config *c) {
  if (c->mode == SK_FUSION_AUTO) return (size_t)SK_FUSION_AUTO_MB << 20;
  if (c->threshold_bytes) return c->threshold_bytes;
  double b = c->threshold_mb * 1048576.0;
  return b >= 1.8e19 ? SK_FUSION_INF : (size_t)b;
}

static int sk__fnew_bucket(sk_fusion *f, const sk__ften *t, int handle, int seg) {
  sk__fbucket *b = &f->b[f->nb];
  memset(b, 0, sizeof *b);
  b->kind = t->op.kind, b->comm = t->op.comm, b->group = t->group, b->dt = t->op.dtype, b->op = t->op.op, b->id = t->id;
  b->seg = seg, b->first = handle;
  return f->nb++;
}

static int sk__fcmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Assigns t->bucket for every op of kind k. Buckets are created in registration order. */
static void sk__fplan_kind(sk_fusion *f, sk_coll_kind k) {
  const sk_fusion_config *c = sk__fconfig(f, k);
  bool seg_mode = c->mode == SK_FUSION_INDEX || ((c->mode == SK_FUSION_SIZE || c->mode == SK_FUSION_AUTO) && c->mindspore_accounting);
  size_t T = sk__fthreshold_bytes(c);
  long long Te = 0;
  if (c->mindspore_accounting) {
    if (c->mode == SK_FUSION_AUTO)
      Te = (long long)SK_FUSION_AUTO_MB * SK_FUSION_MS_ELEMS_PER_MB;
    else if (c->threshold_bytes)
      Te = c->threshold_bytes == SK_FUSION_INF ? LLONG_MAX : (long long)(c->threshold_bytes / 4);
    else
      Te = (long long)(c->threshold_mb * SK_FUSION_MS_ELEMS_PER_MB);
  }
  int first_bucket = f->nb; /* buckets of this kind start here */
  int pos = 0, seg = 0, cur_seg = -1, seg_first_bucket = f->nb;
  long long budget = Te;
  bool first = true;
  for (int h = 0; h < f->nt; h++) {
    sk__ften *t = &f->t[h];
    if (t->op.kind != k) continue;
    int p = pos++;
    if (t->id == SK_FUSION_NEVER || c->mode == SK_FUSION_NONE) {
      t->bucket = sk__fnew_bucket(f, t, h, -1);
      continue;
    }
    if (seg_mode) {
      int s;
      if (c->mode == SK_FUSION_INDEX) {
        s = 0;
        while (s < c->nindices && c->indices[s] < p) s++;
      } else {
        long long size = (long long)t->in_elems;
        if (first || size < budget) {
          budget -= size;
          first = false;
        } else {
          budget = Te;
          seg++;
        }
        s = seg;
      }
      if (s != cur_seg) { /* segments only grow: earlier segments' buckets are closed */
        cur_seg = s;
        seg_first_bucket = f->nb;
      }
      int found = -1;
      for (int i = seg_first_bucket; i < f->nb; i++)
        if (f->b[i].seg == s && sk__fsame_key(&f->b[i], t)) found = i;
      t->bucket = found >= 0 ? found : sk__fnew_bucket(f, t, h, s);
    } else {
      /* size: one open bucket per key; the latest bucket of the key is the open one */
      int found = -1;
      for (int i = f->nb - 1; i >= first_bucket; i--)
        if (f->b[i].seg >= 0 && sk__fsame_key(&f->b[i], t)) {
          found = i;
          break;
        }
      if (found >= 0 && f->b[found].bytes <= T && t->in_bytes <= T - f->b[found].bytes)
        t->bucket = found;
      else
        t->bucket = sk__fnew_bucket(f, t, h, 0);
    }
    f->b[t->bucket].bytes += t->in_bytes; /* running size, recomputed below */
  }
}

/* Sorts buckets by first handle (stable: first handles are unique) and renumbers. */
static sk_result sk__forder_buckets(sk_fusion *f) {
  int nb = f->nb;
  int *keys = (int *)sk__alloc(&f->desc.allocator, sizeof(int) * 2 * (size_t)(nb ? nb : 1), 16);
  if (!keys) return SK_ERR_OUT_OF_MEMORY;
  for (int i = 0; i < nb; i++) keys[2 * i] = f->b[i].first, keys[2 * i + 1] = i;
  qsort(keys, (size_t)nb, sizeof(int) * 2, sk__fcmp_int);
  sk__fbucket *nbk = (sk__fbucket *)sk__alloc(&f->desc.allocator, sizeof(sk__fbucket) * (size_t)(nb ? nb : 1), 64);
  int *newidx = (int *)sk__alloc(&f->desc.allocator, sizeof(int) * (size_t)(nb ? nb : 1), 16);
  if (!nbk || !newidx) {
    sk__free(&f->desc.allocator, keys);
    sk__free(&f->desc.allocator, nbk);
    sk__free(&f->desc.allocator, newidx);
    return SK_ERR_OUT_OF_MEMORY;
  }
  for (int i = 0; i < nb; i++) {
    nbk[i] = f->b[keys[2 * i + 1]];
    newidx[keys[2 * i + 1]] = i;
  }
  for (int h = 0; h < f->nt; h++) f->t[h].bucket = newidx[f->t[h].bucket];
  sk__free(&f->desc.allocator, f->b);
  f->b = nbk;
  sk__free(&f->desc.allocator, keys);
  sk__free(&f->desc.allocator, newidx);
  return SK_OK;
}

#define SK__FALIGN(x) (((x) + 63) & ~(size_t)63)

static sk_result sk__fplan(sk_fusion *f) {
  size_t nmax = (size_t)(f->nt ? f->nt : 1);
  f->b = (sk__fbucket *)sk__alloc(&f->desc.allocator, sizeof(sk__fbucket) * nmax, 64);
  f->order = (int *)sk__alloc(&f->desc.allocator, sizeof(int) * nmax, 16);
  if (!f->b || !f->order) return sk__fset(f, SK_ERR_OUT_OF_MEMORY, "plan: allocating %zu buckets", nmax);
  f->nb = 0;
  sk__fplan_kind(f, SK_COLL_ALLREDUCE);
  sk__fplan_kind(f, SK_COLL_ALLGATHER);
  sk__fplan_kind(f, SK_COLL_REDUCE_SCATTER);
  if (sk__forder_buckets(f) != SK_OK) return sk__fset(f, SK_ERR_OUT_OF_MEMORY, "plan: sorting buckets");
  /* tensors of each bucket, in registration order; offsets and counts */
  for (int i = 0; i < f->nb; i++) f->b[i].n = 0, f->b[i].count = 0, f->b[i].bytes = 0;
  for (int h = 0; h < f->nt; h++) f->b[f->t[h].bucket].n++;
  int s = 0;
  for (int i = 0; i < f->nb; i++) f->b[i].start = s, s += f->b[i].n, f->b[i].n = 0;
  for (int h = 0; h < f->nt; h++) {
    sk__fbucket *b = &f->b[f->t[h].bucket];
    f->order[b->start + b->n++] = h;
    f->t[h].off = b->count;
    b->count += f->t[h].op.count;
    b->bytes += f->t[h].in_bytes;
  }
  /* packing mode and fusion buffer offsets */
  size_t ws = 0;
  for (int i = 0; i < f->nb; i++) {
    sk__fbucket *b = &f->b[i];
    size_t es = sk_dtype_size(b->dt), n = (size_t)sk_comm_size(b->comm), tot = b->count * es;
    if (b->n == 1) {
      b->pack = SK_FUSION_DIRECT;
      continue;
    }
    if (b->kind == SK_COLL_ALLREDUCE && !f->desc.no_zero_copy) {
      bool flat = true;
      for (int j = 1; j < b->n && flat; j++) {
        const sk__ften *p = &f->t[f->order[b->start + j - 1]], *q = &f->t[f->order[b->start + j]];
        size_t pb = p->op.count * es;
        flat = (const char *)q->op.send == (const char *)p->op.send + pb && (char *)q->op.recv == (char *)p->op.recv + pb;
      }
      if (flat) {
        b->pack = SK_FUSION_ZERO_COPY;
        continue;
      }
    }
    b->pack = SK_FUSION_PACKED;
    b->ws_off = ws;
    size_t need = b->kind == SK_COLL_ALLREDUCE ? tot : tot + tot * n; /* AG: send + n recv; RS: n send + recv */
    ws += SK__FALIGN(need);
  }
  f->ws_need = ws;
  if (ws) {
    if (f->desc.workspace) {
      if (f->desc.workspace_bytes < ws)
        return sk__fset(f, SK_ERR_INVALID_ARGUMENT, "plan: desc.workspace_bytes %zu is below the %zu bytes the plan needs",
                        f->desc.workspace_bytes, ws);
      f->ws = (unsigned char *)f->desc.workspace;
    } else {
      f->ws = (unsigned char *)sk__alloc(&f->desc.allocator, ws, 64);
      if (!f->ws) return sk__fset(f, SK_ERR_OUT_OF_MEMORY, "plan: allocating %zu bytes of fusion buffers", ws);
      f->ws_owned = true;
    }
  }
  for (int i = 0; i < f->nb; i++) {
    sk__fbucket *b = &f->b[i];
    if (b->pack != SK_FUSION_PACKED) continue;
    size_t es = sk_dtype_size(b->dt), n = (size_t)sk_comm_size(b->comm), tot = b->count * es;
    b->sbuf = f->ws + b->ws_off;
    b->rbuf = b->kind == SK_COLL_ALLREDUCE ? b->sbuf : b->kind == SK_COLL_ALLGATHER ? b->sbuf + tot : b->sbuf + tot * n;
  }
  return SK_OK;
}

/* The plan, one item (SK_LOG_FUSION_PLAN, INFO) through the first bucket's world logger. */
static void sk__flog_plan(sk_fusion *f) {
  size_t bytes = 0;
  for (int i = 0; i < f->nb; i++) bytes += f->b[i].bytes;
  sk_comm_log(f->b[0].comm, SK_LOG_INFO, SK_LOG_FUSION_PLAN, "%d tensors in %d buckets, %zu bytes", f->nt, f->nb,
              bytes);
}

static sk_result sk__fusion_plan(sk_fusion *f) {
  if (!f) return SK_ERR_INVALID_ARGUMENT;
  if (f->planned) {
    if (f->plan_result != SK_OK) sk__fset(f, f->plan_result, "plan: planning failed earlier; destroy this scheduler");
    return f->plan_result;
  }
  f->planned = true;
  f->plan_result = sk__fplan(f);
  if (f->plan_result == SK_OK && f->nb > 0) sk__flog_plan(f);
  return f->plan_result;
}
SK_API sk_result sk_fusion_plan(sk_fusion *f, sk_error *err) {
  return sk__report(f, sk__fusion_plan(f), err);
}

static sk_result sk__fkey_check(const sk_fusion_key_op *o, int i, sk_error *err) {
  if (o->kind != SK_COLL_ALLREDUCE && o->kind != SK_COLL_ALLGATHER && o->kind != SK_COLL_REDUCE_SCATTER)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "plan_keys: op %d: kind %d (%s) is not allreduce, allgather or reduce_scatter",
                    i, (int)o->kind, sk_coll_kind_name(o->kind));
  if (o->group_size < 1 || !sk_dtype_valid(o->dtype) || o->fusion_id < SK_FUSION_NEVER ||
      (o->kind != SK_COLL_ALLGATHER && !sk_redop_valid(o->op)))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "plan_keys: op %d: group_size %d, dtype %d, op %d, fusion_id %d", i,
                    o->group_size, (int)o->dtype, (int)o->op, o->fusion_id);
  if (o->count > (SIZE_MAX / 8) / sk_dtype_size(o->dtype) / (size_t)o->group_size)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "plan_keys: op %d: count %zu is too large", i, o->count);
  return SK_OK;
}

/* The scheduler's bucketing (sk__fplan_kind, sk__forder_buckets) on ops with ids for groups. */
SK_API sk_result sk_fusion_plan_keys(const sk_fusion_desc *desc, const sk_fusion_key_op *ops, int n, int *bucket,
                                     int *nbuckets, sk_error *err) {
  if (nbuckets) *nbuckets = 0;
  if (n < 0 || (n && (!ops || !bucket))) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "plan_keys: %d ops, ops or bucket NULL", n);
  sk_fusion *f = NULL;
  sk_result r = sk_fusion_create(desc, &f, err);
  for (int i = 0; i < n && !r; i++) r = sk__fkey_check(&ops[i], i, err);
  size_t nmax = (size_t)(n ? n : 1);
  if (!r && !f) r = SK_ERR_OUT_OF_MEMORY; /* not reached: create gives a scheduler or an error */
  if (!r) {
    f->t = (sk__ften *)sk__calloc(&f->desc.allocator, sizeof(sk__ften) * nmax, 64);
    f->b = (sk__fbucket *)sk__alloc(&f->desc.allocator, sizeof(sk__fbucket) * nmax, 64);
    if (!f->t || !f->b) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "plan_keys: %d ops", n);
  }
  for (int i = 0; i < n && !r; i++) {
    sk__ften *t = &f->t[f->nt++];
    const sk_fusion_key_op *o = &ops[i];
    t->op.kind = o->kind, t->op.count = o->count, t->op.dtype = o->dtype;
    t->op.op = o->kind == SK_COLL_ALLGATHER ? SK_SUM : o->op, t->group = o->group;
    t->id = o->fusion_id == 0 ? SK_FUSION_DEFAULT_ID : o->fusion_id;
    t->in_elems = o->kind == SK_COLL_REDUCE_SCATTER ? o->count * (size_t)o->group_size : o->count;
    t->in_bytes = t->in_elems * sk_dtype_size(o->dtype), t->bucket = -1;
  }
  if (!r) {
    sk__fplan_kind(f, SK_COLL_ALLREDUCE), sk__fplan_kind(f, SK_COLL_ALLGATHER), sk__fplan_kind(f, SK_COLL_REDUCE_SCATTER);
    if (sk__forder_buckets(f) != SK_OK) r = sk__fail(err, SK_ERR_OUT_OF_MEMORY, "plan_keys: sorting %d buckets", f->nb);
  }
  for (int i = 0; i < n && !r; i++) bucket[i] = f->t[i].bucket;
  if (!r && nbuckets) *nbuckets = f->nb;
  sk_fusion_destroy(f);
  return r;
}

SK_API int sk_fusion_bucket_count(sk_fusion *f) {
  if (!f || sk_fusion_plan(f, NULL) != SK_OK) return -1;
  return f->nb;
}

static sk_result sk__fusion_get_bucket(sk_fusion *f, int i, sk_fusion_bucket_info *out) {
  if (!f) return SK_ERR_INVALID_ARGUMENT;
  if (!out) return sk__fset(f, SK_ERR_INVALID_ARGUMENT, "get_bucket: out is NULL");
  sk_result r = sk__fusion_plan(f);
  if (r != SK_OK) return r;
  if (i < 0 || i >= f->nb) return sk__fset(f, SK_ERR_INVALID_ARGUMENT, "get_bucket: bucket %d out of range [0, %d)", i, f->nb);
  const sk__fbucket *b = &f->b[i];
  out->kind = b->kind, out->comm = b->comm, out->dtype = b->dt, out->op = b->op, out->fusion_id = b->id;
  out->ntensors = b->n, out->tensors = f->order + b->start, out->count = b->count, out->bytes = b->bytes;
  out->pack = b->pack;
  return SK_OK;
}
SK_API sk_result sk_fusion_get_bucket(sk_fusion *f, int i, sk_fusion_bucket_info *out, sk_error *err) {
  return sk__report(f, sk__fusion_get_bucket(f, i, out), err);
}

SK_API int sk_fusion_bucket_of(sk_fusion *f, int handle) {
  if (!f || sk_fusion_plan(f, NULL) != SK_OK || handle < 0 || handle >= f->nt) return -1;
  return f->t[handle].bucket;
}

static sk_result sk__fusion_workspace_bytes(sk_fusion *f, size_t *bytes) {
  if (!f) return SK_ERR_INVALID_ARGUMENT;
  if (!bytes) return sk__fset(f, SK_ERR_INVALID_ARGUMENT, "workspace_bytes: bytes is NULL");
  *bytes = 0;
  sk_result r = sk__fusion_plan(f);
  if (r == SK_OK) *bytes = f->ws_need;
  return r;
}
SK_API sk_result sk_fusion_workspace_bytes(sk_fusion *f, size_t *bytes, sk_error *err) {
  return sk__report(f, sk__fusion_workspace_bytes(f, bytes), err);
}

static const char *sk__fpack_name(sk_fusion_pack p) {
  return p == SK_FUSION_DIRECT ? "direct" : p == SK_FUSION_ZERO_COPY ? "zero-copy" : "packed";
}

/* appends to buf (snprintf-style accounting in *len) */
static SK__PRINTF(4, 5) void sk__fcat(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *dst = buf && *len < cap ? buf + *len : NULL;
  size_t room = buf && *len < cap ? cap - *len : 0;
  char dummy[1];
  int k = vsnprintf(dst ? dst : dummy, dst ? room : 0, fmt, ap);
  va_end(ap);
  if (k > 0) *len += (size_t)k;
}

static void sk__fcat_config(char *buf, size_t cap, size_t *len, const char *name, const sk_fusion_config *c) {
  sk__fcat(buf, cap, len, " %s=%s", name, sk_fusion_mode_name(c->mode));
  if (c->mode == SK_FUSION_SIZE || c->mode == SK_FUSION_AUTO) {
    size_t T = sk__fthreshold_bytes(c);
    if (T == SK_FUSION_INF)
      sk__fcat(buf, cap, len, "(inf)");
    else
      sk__fcat(buf, cap, len, "(%zu B)", T);
    if (c->mindspore_accounting) sk__fcat(buf, cap, len, "[mindspore]");
  } else if (c->mode == SK_FUSION_INDEX) {
    sk__fcat(buf, cap, len, "[");
    for (int i = 0; i < c->nindices; i++) sk__fcat(buf, cap, len, "%s%d", i ? "," : "", c->indices[i]);
    sk__fcat(buf, cap, len, "]");
  }
}

SK_API int sk_fusion_plan_format(sk_fusion *f, char *buf, size_t cap, bool tensors) {
  if (!f || sk_fusion_plan(f, NULL) != SK_OK) return -1;
  size_t len = 0;
  if (buf && cap) buf[0] = 0;
  sk__fcat(buf, cap, &len, "fusion plan: %d ops -> %d buckets;", f->nt, f->nb);
  sk__fcat_config(buf, cap, &len, "allreduce", &f->desc.allreduce);
  sk__fcat_config(buf, cap, &len, "allgather", &f->desc.allgather);
  sk__fcat_config(buf, cap, &len, "reduce_scatter", &f->desc.reduce_scatter);
  sk__fcat(buf, cap, &len, "; fusion buffers %zu B\n", f->ws_need);
  for (int i = 0; i < f->nb; i++) {
    const sk__fbucket *b = &f->b[i];
    const sk__ften *t0 = &f->t[f->order[b->start]], *t1 = &f->t[f->order[b->start + b->n - 1]];
    char id[16];
    if (b->id == SK_FUSION_NEVER)
      snprintf(id, sizeof id, "never");
    else
      snprintf(id, sizeof id, "%d", b->id);
    int group = 0; /* groups numbered by first appearance */
    for (int j = 0; j < i; j++) {
      bool seen = false;
      for (int k = 0; k < j && !seen; k++) seen = f->b[k].comm == f->b[j].comm;
      if (!seen && f->b[j].comm == b->comm) break;
      if (!seen) group++;
    }
    sk__fcat(buf, cap, &len, "bucket %d: %s %s%s%s id %s group %d (size %d): %d tensor%s, %zu B, %s, '%s'%s%s%s\n", i,
             sk_coll_kind_name(b->kind), sk_dtype_name(b->dt), b->kind == SK_COLL_ALLGATHER ? "" : " ",
             b->kind == SK_COLL_ALLGATHER ? "" : sk_redop_name(b->op), id, group, sk_comm_size(b->comm), b->n,
             b->n == 1 ? "" : "s", b->bytes, sk__fpack_name(b->pack), t0->name, b->n > 1 ? " .. '" : "",
             b->n > 1 ? t1->name : "", b->n > 1 ? "'" : "");
    if (tensors)
      for (int j = 0; j < b->n; j++) {
        const sk__ften *t = &f->t[f->order[b->start + j]];
        sk__fcat(buf, cap, &len, "  [%d] '%s' count %zu, %zu B, offset %zu\n", f->order[b->start + j], t->name, t->op.count,
                 t->in_bytes, t->off);
      }
  }
  return len > (size_t)2147483647 ? 2147483647 : (int)len;
}

/* ---- running ---------------------------------------------------------------------------------- */

static void sk__fbucket_names(const sk_fusion *f, const sk__fbucket *b, char *buf, size_t cap) {
  const sk__ften *t0 = &f->t[f->order[b->start]], *t1 = &f->t[f->order[b->start + b->n - 1]];
  if (b->n == 1)
    snprintf(buf, cap, "tensor '%s'", t0->name);
  else
    snprintf(buf, cap, "%d tensors '%s' .. '%s'", b->n, t0->name, t1->name);
}

static void sk__fbucket_fail(sk_fusion *f, int i, sk_result r, const char *what) {
  sk__fbucket *b = &f->b[i];
  if (b->result != SK_OK) return;
  char names[160];
  sk__fbucket_names(f, b, names, sizeof names);
  b->result = r;
  snprintf(b->msg, sizeof b->msg, "bucket %d (%s of %s) %s: %s: %s", i, sk_coll_kind_name(b->kind), names, what,
           sk_result_name(r), sk_comm_error_message(b->comm));
}

/* Packs tensor t into its bucket's fusion buffer, through the backend's copy (a device-memory
   backend cannot memcpy). ReduceScatter's input is n blocks, each going to its rank's part. */
static sk_result sk__fpack(const sk__fbucket *b, const sk__ften *t) {
  size_t es = sk_dtype_size(b->dt), bytes = t->op.count * es, tot = b->count * es;
  int n = b->kind == SK_COLL_REDUCE_SCATTER ? sk_comm_size(b->comm) : 1;
  sk_result r = SK_OK;
  for (int i = 0; i < n && r == SK_OK; i++)
    r = sk_comm_copy(b->comm, b->sbuf + (size_t)i * tot + t->off * es, (const char *)t->op.send + (size_t)i * bytes, bytes, NULL);
  return r;
}

/* Copies every tensor's result out of the bucket; AllGather's output is n blocks. */
static sk_result sk__funpack(const sk_fusion *f, const sk__fbucket *b) {
  if (b->pack != SK_FUSION_PACKED) return SK_OK;
  size_t es = sk_dtype_size(b->dt), tot = b->count * es;
  int n = b->kind == SK_COLL_ALLGATHER ? sk_comm_size(b->comm) : 1;
  sk_result r = SK_OK;
  for (int j = 0; j < b->n && r == SK_OK; j++) {
    const sk__ften *t = &f->t[f->order[b->start + j]];
    size_t bytes = t->op.count * es;
    for (int i = 0; i < n && r == SK_OK; i++)
      r = sk_comm_copy(b->comm, (char *)t->op.recv + (size_t)i * bytes, b->rbuf + (size_t)i * tot + t->off * es, bytes, NULL);
  }
  return r;
}

static void sk__flaunch(sk_fusion *f, int i) {
  sk__fbucket *b = &f->b[i];
  const void *send;
  void *recv;
  if (b->pack == SK_FUSION_PACKED) {
    send = b->sbuf, recv = b->rbuf;
  } else {
    const sk__ften *t0 = &f->t[f->order[b->start]];
    send = t0->op.send, recv = t0->op.recv;
  }
  sk_result r;
  switch (b->kind) {
    case SK_COLL_ALLREDUCE: r = sk_iallreduce(b->comm, send, recv, b->count, b->dt, b->op, &b->req, NULL); break;
    case SK_COLL_ALLGATHER: r = sk_iallgather(b->comm, send, recv, b->count, b->dt, &b->req, NULL); break;
    default: r = sk_ireduce_scatter(b->comm, send, recv, b->count, b->dt, b->op, &b->req, NULL); break;
  }
  b->launched = true;
  if (r != SK_OK) {
    b->req = NULL;
    sk__fbucket_fail(f, i, r, "failed to launch");
    b->completed = true;
    /* Peers launched this bucket and wait for ours; a later bucket of ours would pair with it.
       Take the world down instead: peers return ABORTED at once and so do our later launches. */
    if (r != SK_ERR_ABORTED) sk_world_fail(sk_comm_world(b->comm), r, sk_comm_error_message(b->comm));
  }
}

/* Observes completions in order (non-blocking); unpacks what completed. */
static void sk__fpoll(sk_fusion *f) {
  while (f->next_done < f->next_launch) {
    sk__fbucket *b = &f->b[f->next_done];
    /* Under a link model, completing a request moves the device's virtual clock to its
       modelled end; polling would make that depend on real-time races. The threads backend
       (the only one with clocks) progresses without polling, so leave it to wait. */
    sk_cluster cluster = sk_world_cluster(sk_comm_world(b->comm));
    if (!b->completed && sk_cluster_prices(&cluster)) return;
    if (!b->completed) {
      bool done = false;
      sk_result r = sk_test(&b->req, &done, NULL);
      if (!done && r != SK_OK && r != SK_ERR_IN_PROGRESS) { /* a broken test: wait settles it */
        r = sk_wait(&b->req, NULL);
        done = true;
      }
      if (!done) return;
      b->completed = true;
      if (r != SK_OK)
        sk__fbucket_fail(f, f->next_done, r, "failed");
      else if ((r = sk__funpack(f, b)) != SK_OK)
        sk__fbucket_fail(f, f->next_done, r, "unpacking");
    }
    f->next_done++;
  }
}

static void sk__flaunch_ready(sk_fusion *f) {
  while (f->next_launch < f->nb && f->b[f->next_launch].nready == f->b[f->next_launch].n) sk__flaunch(f, f->next_launch++);
}

static sk_result sk__fusion_ready(sk_fusion *f, int handle) {
  if (!f) return SK_ERR_INVALID_ARGUMENT;
  sk_result r = sk__fusion_plan(f);
  if (r != SK_OK) return r;
  if (handle < 0 || handle >= f->nt)
    return sk__fset(f, SK_ERR_INVALID_ARGUMENT, "ready: handle %d out of range [0, %d)", handle, f->nt);
  sk__ften *t = &f->t[handle];
  if (t->ready)
    return sk__fset(f, SK_ERR_INVALID_USAGE, "ready: tensor '%s' (handle %d, bucket %d) was already marked ready in this step",
                    t->name, handle, t->bucket);
  t->ready = true;
  sk__fbucket *b = &f->b[t->bucket];
  if (b->pack == SK_FUSION_PACKED && (r = sk__fpack(b, t)) != SK_OK) {
    /* the bucket can never launch here, and its peers would wait for it: take the world down */
    sk_world_fail(sk_comm_world(b->comm), r, sk_comm_error_message(b->comm));
    return sk__fset(f, r, "ready: packing tensor '%s' into bucket %d: %s", t->name, t->bucket,
                    sk_comm_error_message(b->comm));
  }
  b->nready++;
  sk__flaunch_ready(f);
  sk__fpoll(f);
  return SK_OK;
}
SK_API sk_result sk_fusion_ready(sk_fusion *f, int handle, sk_error *err) {
  return sk__report(f, sk__fusion_ready(f, handle), err);
}

static sk_result sk__fusion_wait(sk_fusion *f) {
  if (!f) return SK_ERR_INVALID_ARGUMENT;
  sk_result r = sk__fusion_plan(f);
  if (r != SK_OK) return r;
  sk__flaunch_ready(f);
  /* complete every launched bucket, in order */
  for (int i = f->next_done; i < f->next_launch; i++) {
    sk__fbucket *b = &f->b[i];
    if (b->completed) continue;
    sk_result w = sk_wait(&b->req, NULL);
    b->completed = true;
    if (w != SK_OK)
      sk__fbucket_fail(f, i, w, "failed");
    else if ((w = sk__funpack(f, b)) != SK_OK)
      sk__fbucket_fail(f, i, w, "unpacking");
  }
  f->next_done = f->next_launch;
  /* the first failure, and tensors never marked ready */
  int nfail = 0, first_fail = -1, nmissing = 0, first_missing = -1;
  for (int i = 0; i < f->nb; i++)
    if (f->b[i].result != SK_OK && nfail++ == 0) first_fail = i;
  for (int h = 0; h < f->nt; h++)
    if (!f->t[h].ready && nmissing++ == 0) first_missing = h;
  sk_result res = SK_OK;
  if (nmissing) {
    const sk__ften *t = &f->t[first_missing];
    res = sk__fset(f, SK_ERR_INVALID_USAGE,
                   "wait: tensor '%s' (handle %d, bucket %d) was never marked ready (%d tensor%s missing); buckets %d..%d "
                   "were not run%s%s",
                   t->name, first_missing, t->bucket, nmissing, nmissing == 1 ? "" : "s", f->next_launch, f->nb - 1,
                   nfail ? "; also " : "", nfail ? f->b[first_fail].msg : "");
  } else if (nfail) {
    res = sk__fset(f, f->b[first_fail].result, "wait: %s%s", f->b[first_fail].msg,
                   nfail > 1 ? " (and more buckets failed)" : "");
  }
  /* re-arm */
  for (int h = 0; h < f->nt; h++) f->t[h].ready = false;
  for (int i = 0; i < f->nb; i++) {
    sk__fbucket *b = &f->b[i];
    b->nready = 0, b->launched = b->completed = false, b->result = SK_OK, b->msg[0] = 0, b->req = NULL;
  }
  f->next_launch = f->next_done = 0;
  return res;
}
SK_API sk_result sk_fusion_wait(sk_fusion *f, sk_error *err) {
  return sk__report(f, sk__fusion_wait(f), err);
}

SK_API double sk_fusion_pick_threshold(double a_us, double c_us_per_byte, double total_bytes, double backward_us) {
  if (!(total_bytes > 0)) return 0;
  if (!(backward_us > 0) || a_us < 0 || c_us_per_byte < 0) return total_bytes;
  double r = total_bytes / backward_us; /* bytes per us */
  double cr = c_us_per_byte * r, b;
  if (cr < 1)
    b = a_us * r / (1 - cr);
  else
    b = sqrt(a_us * total_bytes * r);
  if (b > total_bytes) b = total_bytes;
  if (b < 0) b = 0;
  return b;
}

SK_EXTERN_C_END

#endif /* SK_FUSION_IMPL */
