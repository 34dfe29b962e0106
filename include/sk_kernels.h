/* sk_kernels.h -- the reference forward and backward kernels of every operator in sk_ops.h, run
   on one device's local slice.

   Do this in ONE .c file:   #define SK_IMPL  (or SK_KERNELS_IMPL)   #include "sk_kernels.h"
   Needs only libc and libm (link -lm). No global state: a GEMM hook travels in an
   sk_kernel_ctx the caller passes.

   WHAT IT IS
     The one implementation of each operator's math in shardkit. A kernel sees only its device's
     slice: shapes are the LOCAL shapes, row-major and contiguous, given as (ndims, shape).
     Where a sharded run must reproduce the unsharded one, the kernel takes the sharding facts it
     needs and nothing else, so that the runtime adds the collective sk_ops.h plans:
       - losses (fused softmax cross-entropy, MAELoss) and ReduceMean divide by a GLOBAL count, so
         an AllReduce(sum) of the devices' partial results is the unsharded value;
       - ReduceMax's backward takes the GLOBAL max (after AllReduce(max)) and the GLOBAL number of
         ties (sk_kern_reduce_max_ties, then AllReduce(sum));
       - OneHot takes a class offset (a device holding classes [off, off + local_depth) writes
         only those), Gather a row offset (rows outside [off, off + local_rows) give zeros, so an
         AllReduce(sum) over the row shards is the unsharded gather);
       - the dropout mask is a pure function of (seed, keep_prob, GLOBAL element index): every
         slice draws exactly its part of the unsharded mask.
     Semantics follow MindSpore's primitives (docs/kernels.md lists each one's math).

   DTYPES
     Compute kernels take an sk_dtype (SK_F32 or SK_F64) and `const void *` buffers. f32 data is
     computed as f32: every accumulator is rounded to f32 after each step, so a sum runs in f32
     arithmetic as MindSpore's f32 kernels do. Indices are SK_I32 or SK_I64. Cast also converts
     f16 and bf16; the copies (Transpose, Reshape, Gather forward) take any dtype. Any other
     dtype is SK_ERR_INVALID_ARGUMENT naming the kernel and the dtype.

   GEMM
     MatMul, BatchMatMul and Dense run their products through one GEMM: the built-in blocked one
     (sk_gemm_builtin), or the caller's sk_gemm_fn in an sk_kernel_ctx (e.g. a wrapper around
     cblas_sgemm / cblas_dgemm). ctx NULL or ctx->gemm NULL: the built-in.

   ERRORS
     Bad input (NULL buffer, ndims outside 0..SK_MAX_DIMS, negative dim, mismatched shapes, bad
     axis, unknown dtype, bad attribute) returns SK_ERR_INVALID_ARGUMENT with a message naming
     the kernel and the argument; nothing is written then. A GEMM hook's failure is returned as
     it came (with a message naming the kernel). ReduceMax's backward without a tie count
     allocates one buffer: SK_ERR_OUT_OF_MEMORY if that fails.

   License: MIT. */
#if defined(SK_IMPL) && !defined(SK_KERNELS_IMPL)
#define SK_KERNELS_IMPL
#endif
#ifndef SK_KERNELS_H
#define SK_KERNELS_H

#include "sk_core.h"
#include "sk_layout.h" /* sk_slice, SK_MAX_DIMS */

SK_EXTERN_C_BEGIN

/* ---- GEMM and the kernel context ------------------------------------------------------------ */

/* C = alpha * op(A) * op(B) + beta * C, row-major (CblasRowMajor's convention): op(A) is
   [m, k] (A stored [k, m] when trans_a), op(B) is [k, n] (B stored [n, k] when trans_b), lda /
   ldb / ldc are the row strides in elements. dt is SK_F32 or SK_F64. Return SK_OK on success. */
typedef sk_result (*sk_gemm_fn)(void *user, sk_dtype dt, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                double alpha, const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
                                void *c, int64_t ldc);

/* What kernels may borrow from the caller. Zero-initialised (or a NULL pointer) = defaults. */
typedef struct sk_kernel_ctx {
  sk_gemm_fn gemm; /* NULL: sk_gemm_builtin */
  void *gemm_user; /* passed to gemm as `user` */
} sk_kernel_ctx;

/* The built-in GEMM: cache-blocked, f32 accumulated in f32. `user` is ignored. Validates its
   arguments (SK_ERR_INVALID_ARGUMENT; it has no sk_error to write to). beta == 0 overwrites C
   without reading it. */
SK_API sk_result sk_gemm_builtin(void *user, sk_dtype dt, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                 double alpha, const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
                                 void *c, int64_t ldc);

/* ---- shapes --------------------------------------------------------------------------------- */

/* numpy broadcasting of two shapes, aligned from the right (a dim of 1 stretches). */
SK_API sk_result sk_kern_broadcast_shape(int nda, const int64_t *sha, int ndb, const int64_t *shb, int *nd,
                                         int64_t *shape, sk_error *err);
/* A reduction's output shape: the dims in axes (naxes 0: every dim) become 1 (keep_dims) or go.
   Reductions write the same buffer either way; this only names its shape. */
SK_API sk_result sk_kern_reduce_shape(int nd, const int64_t *shape, int naxes, const int *axes, bool keep_dims,
                                      int *out_nd, int64_t *out_shape, sk_error *err);

/* ---- MatMul, BatchMatMul, Dense --------------------------------------------------------------- */

/* MatMul: c = op(a) op(b); a [m,k] ([k,m] with transpose_a), b [k,n] ([n,k] with transpose_b),
   c [m,n]. Backward: da, db (either may be NULL: not computed). */
SK_API sk_result sk_kern_matmul(const sk_kernel_ctx *ctx, sk_dtype dt, bool transpose_a, bool transpose_b, int nda,
                                const int64_t *sha, const void *a, int ndb, const int64_t *shb, const void *b, void *c,
                                sk_error *err);
SK_API sk_result sk_kern_matmul_bwd(const sk_kernel_ctx *ctx, sk_dtype dt, bool transpose_a, bool transpose_b, int nda,
                                    const int64_t *sha, const void *a, int ndb, const int64_t *shb, const void *b,
                                    const void *dc, void *da, void *db, sk_error *err);
/* BatchMatMul: a [..., m, k], b [..., k, n] (last two dims swapped by the transpose flags); the
   batch dims broadcast numpy-style into c [broadcast batch..., m, n]. The backward sums a
   broadcast input's gradient over the batches it was repeated in. */
SK_API sk_result sk_kern_batch_matmul(const sk_kernel_ctx *ctx, sk_dtype dt, bool transpose_a, bool transpose_b,
                                      int nda, const int64_t *sha, const void *a, int ndb, const int64_t *shb,
                                      const void *b, void *c, sk_error *err);
SK_API sk_result sk_kern_batch_matmul_bwd(const sk_kernel_ctx *ctx, sk_dtype dt, bool transpose_a, bool transpose_b,
                                          int nda, const int64_t *sha, const void *a, int ndb, const int64_t *shb,
                                          const void *b, const void *dc, void *da, void *db, sk_error *err);
/* Dense: y = x w^T + bias; x [..., k] (the leading dims are rows), w [n, k], bias [n] or NULL,
   y [..., n]. Backward: dx, dw, dbias (each may be NULL). */
SK_API sk_result sk_kern_dense(const sk_kernel_ctx *ctx, sk_dtype dt, int ndx, const int64_t *shx, const void *x,
                               const int64_t *shw, const void *w, const void *bias, void *y, sk_error *err);
SK_API sk_result sk_kern_dense_bwd(const sk_kernel_ctx *ctx, sk_dtype dt, int ndx, const int64_t *shx, const void *x,
                                   const int64_t *shw, const void *w, const void *dy, void *dx, void *dw, void *dbias,
                                   sk_error *err);

/* ---- element-wise --------------------------------------------------------------------------- */

/* ReLU max(x, 0) (gradient 0 at 0, as ReluGrad); GeLU, MindSpore's tanh form
   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); Tanh. The backward takes the forward's input
   x (not y) and dy. In-place (y == x, dx == dy) is allowed. */
SK_API sk_result sk_kern_relu(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *y, sk_error *err);
SK_API sk_result sk_kern_relu_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *x, const void *dy, void *dx,
                                  sk_error *err);
SK_API sk_result sk_kern_gelu(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *y, sk_error *err);
SK_API sk_result sk_kern_gelu_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *x, const void *dy, void *dx,
                                  sk_error *err);
SK_API sk_result sk_kern_tanh(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *y, sk_error *err);
SK_API sk_result sk_kern_tanh_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *x, const void *dy, void *dx,
                                  sk_error *err);
/* Sigmoid 1 / (1 + exp(-x)) and SiLU x sigmoid(x) (MindSpore's SiLU), with the same calling
   convention: the backward takes x and dy (SigmoidGrad's d sigmoid = s (1 - s); SiLU's
   s (1 + x (1 - s))). */
SK_API sk_result sk_kern_sigmoid(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *y, sk_error *err);
SK_API sk_result sk_kern_sigmoid_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *x, const void *dy,
                                     void *dx, sk_error *err);
SK_API sk_result sk_kern_silu(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *y, sk_error *err);
SK_API sk_result sk_kern_silu_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *x, const void *dy, void *dx,
                                  sk_error *err);

/* Cast between any two of f32, f64, f16, bf16 (f16/bf16 round to nearest even through f32).
   Its backward is the cast back: call it with the dtypes swapped. */
SK_API sk_result sk_kern_cast(sk_dtype src_dt, int nd, const int64_t *shape, const void *src, sk_dtype dst_dt,
                              void *dst, sk_error *err);

/* Dropout. The mask (1 keep, 0 drop) of the slice `slice` (NULL: the whole tensor) of a tensor
   of GLOBAL shape (nd, global_shape): element g (its row-major index in the global tensor) is
   kept when a hash of (seed, g) falls below keep_prob, so the mask of any slice is the same
   slice of the unsharded mask. keep_prob in (0, 1]. mask holds the slice's element count. */
SK_API sk_result sk_kern_dropout_mask(uint64_t seed, double keep_prob, int nd, const int64_t *global_shape,
                                      const sk_slice *slice, uint8_t *mask, sk_error *err);
/* y = x * mask / keep_prob (MindSpore's Dropout scales the kept values). The backward is the
   same map applied to dy: dx = dy * mask / keep_prob. */
SK_API sk_result sk_kern_dropout(sk_dtype dt, int nd, const int64_t *shape, double keep_prob, const void *x,
                                 const uint8_t *mask, void *y, sk_error *err);
SK_API sk_result sk_kern_dropout_bwd(sk_dtype dt, int nd, const int64_t *shape, double keep_prob, const void *dy,
                                     const uint8_t *mask, void *dx, sk_error *err);

/* Add, Sub, Mul, Div (RealDiv), Pow with two-way numpy broadcasting; c has the broadcast shape
   (sk_kern_broadcast_shape). Pow: x^y; dy/dx = y x^(y-1), dx^y/dy = x^y ln x for x > 0 and 0
   otherwise. The backward writes da / db in a's / b's shape (each may be NULL), summed over the
   dims that input broadcast; a and b may be NULL for Add and Sub. */
typedef enum sk_binop { SK_BIN_ADD = 0, SK_BIN_SUB, SK_BIN_MUL, SK_BIN_DIV, SK_BIN_POW } sk_binop;
SK_API sk_result sk_kern_binary(sk_binop op, sk_dtype dt, int nda, const int64_t *sha, const void *a, int ndb,
                                const int64_t *shb, const void *b, void *c, sk_error *err);
SK_API sk_result sk_kern_binary_bwd(sk_binop op, sk_dtype dt, int nda, const int64_t *sha, const void *a, int ndb,
                                    const int64_t *shb, const void *b, const void *dc, void *da, void *db,
                                    sk_error *err);

/* BiasAdd: bias [C] added along the channel dim: dim 1 for SK_NCHW (MindSpore's default
   data_format; also right for NCDHW and for 2-D input), the last dim for SK_NHWC. nd >= 2.
   Backward: dx = dy (may be NULL; dx == dy allowed), dbias = dy summed over the other dims. */
typedef enum sk_data_format { SK_NCHW = 0, SK_NHWC = 1 } sk_data_format;
SK_API sk_result sk_kern_bias_add(sk_dtype dt, sk_data_format fmt, int nd, const int64_t *shape, const void *x,
                                  const void *bias, void *y, sk_error *err);
SK_API sk_result sk_kern_bias_add_bwd(sk_dtype dt, sk_data_format fmt, int nd, const int64_t *shape, const void *dy,
                                      void *dx, void *dbias, sk_error *err);

/* PReLU: y = x (x > 0) or w_c x, w per channel (dim 1, nw = shape[1]) or one w (nw = 1); a 1-D
   x has one channel. Backward: dx, dw (each may be NULL); dw sums over the local elements. */
SK_API sk_result sk_kern_prelu(sk_dtype dt, int nd, const int64_t *shape, const void *x, int64_t nw, const void *w,
                               void *y, sk_error *err);
SK_API sk_result sk_kern_prelu_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *x, int64_t nw, const void *w,
                                   const void *dy, void *dx, void *dw, sk_error *err);

/* ---- along an axis ---------------------------------------------------------------------------- */

/* Softmax / LogSoftmax along axis (negative counts from the end); the backward takes the
   forward's OUTPUT y and dy. */
SK_API sk_result sk_kern_softmax(sk_dtype dt, int nd, const int64_t *shape, int axis, const void *x, void *y,
                                 sk_error *err);
SK_API sk_result sk_kern_softmax_bwd(sk_dtype dt, int nd, const int64_t *shape, int axis, const void *y,
                                     const void *dy, void *dx, sk_error *err);
SK_API sk_result sk_kern_log_softmax(sk_dtype dt, int nd, const int64_t *shape, int axis, const void *x, void *y,
                                     sk_error *err);
SK_API sk_result sk_kern_log_softmax_bwd(sk_dtype dt, int nd, const int64_t *shape, int axis, const void *y,
                                         const void *dy, void *dx, sk_error *err);
/* L2Normalize: y = x / sqrt(max(sum_axis x^2, epsilon)) (MindSpore: axis 0, epsilon 1e-4 by
   default). The backward takes x and dy. */
#define SK_L2_NORMALIZE_EPSILON 1e-4
SK_API sk_result sk_kern_l2_normalize(sk_dtype dt, int nd, const int64_t *shape, int axis, double epsilon,
                                      const void *x, void *y, sk_error *err);
SK_API sk_result sk_kern_l2_normalize_bwd(sk_dtype dt, int nd, const int64_t *shape, int axis, double epsilon,
                                          const void *x, const void *dy, void *dx, sk_error *err);

/* LayerNorm over the dims from begin_norm_axis on (in [-nd, nd)): each row's mean and biased
   variance, y = (x - mean) / sqrt(variance + epsilon) * gamma + beta, with gamma and beta over
   the normalised dims (begin_params_axis = begin_norm_axis; NULL: 1 and 0). mean and variance
   hold one value per row (MindSpore's shape: x's leading dims, then 1s). epsilon: MindSpore's
   default is SK_LAYER_NORM_EPSILON. Backward: from x, dy and the forward's mean and variance,
   dx, dgamma, dbeta (each may be NULL; dgamma / dbeta are sums over the local rows). */
#define SK_LAYER_NORM_EPSILON 1e-7
SK_API sk_result sk_kern_layer_norm(sk_dtype dt, int nd, const int64_t *shape, int begin_norm_axis, double epsilon,
                                    const void *x, const void *gamma, const void *beta, void *y, void *mean,
                                    void *variance, sk_error *err);
SK_API sk_result sk_kern_layer_norm_bwd(sk_dtype dt, int nd, const int64_t *shape, int begin_norm_axis,
                                        double epsilon, const void *x, const void *dy, const void *mean,
                                        const void *variance, const void *gamma, void *dx, void *dgamma, void *dbeta,
                                        sk_error *err);

/* RmsNorm over the dims from begin_norm_axis on (in [-nd, nd); MindSpore derives it as rank(x) -
   rank(gamma)): per row rstd = 1 / sqrt(mean(x^2) + epsilon), y = x rstd gamma, gamma over the
   normalised dims. rstd holds one value per row (MindSpore's shape: x's leading dims, then 1s).
   epsilon in (0, 1] as MindSpore checks it; its default is SK_RMS_NORM_EPSILON. Backward: from
   x, dy and the forward's rstd, dx = rstd (g - xh mean(g xh)) with xh = x rstd and g = dy gamma,
   and dgamma = the sum over the local rows of dy xh (each may be NULL). */
#define SK_RMS_NORM_EPSILON 1e-6
SK_API sk_result sk_kern_rms_norm(sk_dtype dt, int nd, const int64_t *shape, int begin_norm_axis, double epsilon,
                                  const void *x, const void *gamma, void *y, void *rstd, sk_error *err);
SK_API sk_result sk_kern_rms_norm_bwd(sk_dtype dt, int nd, const int64_t *shape, int begin_norm_axis, const void *x,
                                      const void *dy, const void *rstd, const void *gamma, void *dx, void *dgamma,
                                      sk_error *err);

/* ---- losses ----------------------------------------------------------------------------------- */

/* SoftmaxCrossEntropyWithLogits: logits and labels [B, C]; loss [B] = -sum_c labels log
   softmax(logits), dlogits [B, C] = softmax(logits) - labels (MindSpore's second output).
   The backward scales the saved dlogits by each row's loss gradient: dx = dloss[b] dlogits. */
SK_API sk_result sk_kern_softmax_ce_logits(sk_dtype dt, int nd, const int64_t *shape, const void *logits,
                                           const void *labels, void *loss, void *dlogits, sk_error *err);
SK_API sk_result sk_kern_softmax_ce_logits_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *dloss,
                                               const void *dlogits, void *dx, sk_error *err);
/* The fused scalar-mean softmax cross-entropy: loss (one element) = sum over the LOCAL rows of
   the rows' cross-entropy / global_batch, so an AllReduce(sum) over the batch-split devices is
   the mean over the whole batch. Dense labels [B, C], or sparse class indices [B] (SK_I32 /
   SK_I64, each in [0, C)). The backward: dx = dloss (NULL: 1) (softmax - labels) / global_batch.
   global_batch >= the local B. */
SK_API sk_result sk_kern_softmax_ce(sk_dtype dt, int nd, const int64_t *shape, const void *logits, const void *labels,
                                    int64_t global_batch, void *loss, sk_error *err);
SK_API sk_result sk_kern_softmax_ce_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *logits,
                                        const void *labels, int64_t global_batch, const void *dloss, void *dx,
                                        sk_error *err);
SK_API sk_result sk_kern_sparse_softmax_ce(sk_dtype dt, int nd, const int64_t *shape, const void *logits,
                                           sk_dtype label_dt, const void *labels, int64_t global_batch, void *loss,
                                           sk_error *err);
SK_API sk_result sk_kern_sparse_softmax_ce_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *logits,
                                               sk_dtype label_dt, const void *labels, int64_t global_batch,
                                               const void *dloss, void *dx, sk_error *err);
/* MAELoss (reduction "mean"): loss (one element) = sum |pred - label| / global_count, the count
   of the GLOBAL prediction, so an AllReduce(sum) of the shards' losses is the mean. The label
   (label_nd, label_shape) broadcasts to the prediction's shape, aligned from the right (its dims
   1 or the prediction's; it may have fewer). Backward: dpred = dloss (NULL: 1) sign(pred - label)
   / global_count; dlabel = -dpred summed over the dims the label broadcasts (each may be NULL). */
SK_API sk_result sk_kern_mae_loss(sk_dtype dt, int nd, const int64_t *shape, const void *pred, int label_nd,
                                  const int64_t *label_shape, const void *label, int64_t global_count, void *loss,
                                  sk_error *err);
SK_API sk_result sk_kern_mae_loss_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *pred, int label_nd,
                                      const int64_t *label_shape, const void *label, int64_t global_count,
                                      const void *dloss, void *dpred, void *dlabel, sk_error *err);
/* VirtualLoss: loss (one element) = the sum of x's local elements, so an AllReduce(sum) over the
   devices that cut x is the whole sum. Backward: dx = dloss (NULL: 1) at every element. */
SK_API sk_result sk_kern_virtual_loss(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *loss,
                                      sk_error *err);
SK_API sk_result sk_kern_virtual_loss_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *dloss, void *dx,
                                          sk_error *err);

/* ---- reductions ------------------------------------------------------------------------------- */

/* ReduceSum (SK_SUM), ReduceMean (SK_AVG), ReduceMax (SK_MAX) over axes (naxes 0: every dim;
   negative axes count from the end; no repeats). y has the reduced shape (keep_dims does not
   change the buffer). ReduceMean divides by `divisor`: 0 means the local count of the reduced
   elements; pass the GLOBAL count when a reduced axis is split, then AllReduce(sum) the
   results. A split reduced axis under ReduceSum / ReduceMax: AllReduce(sum / max). */
SK_API sk_result sk_kern_reduce(sk_redop op, sk_dtype dt, int nd, const int64_t *shape, int naxes, const int *axes,
                                int64_t divisor, const void *x, void *y, sk_error *err);
/* ReduceMax's tie count: count[j] = how many elements of x equal y[j] (y: the GLOBAL max). With
   a split reduced axis, AllReduce(sum) the counts before the backward. */
SK_API sk_result sk_kern_reduce_max_ties(sk_dtype dt, int nd, const int64_t *shape, int naxes, const int *axes,
                                         const void *x, const void *y, void *count, sk_error *err);
/* Backward: SK_SUM dx = dy broadcast; SK_AVG dx = dy / divisor (as the forward's); SK_MAX as
   MindSpore's grad: dx = (x == y) dy / (count + 1e-24), dy shared among the ties, where y is the
   GLOBAL max and count the GLOBAL tie count (NULL: counted here, right when the reduced axes
   are whole on this device). x and y are read only for SK_MAX. */
SK_API sk_result sk_kern_reduce_bwd(sk_redop op, sk_dtype dt, int nd, const int64_t *shape, int naxes,
                                    const int *axes, int64_t divisor, const void *x, const void *y,
                                    const void *count, const void *dy, void *dx, sk_error *err);

/* ---- data movement ---------------------------------------------------------------------------- */

/* Transpose: output dim i is input dim perm[i]; shape is the INPUT's; any dtype. The backward
   transposes dy (the output's shape) by the inverse permutation into dx (shape). */
SK_API sk_result sk_kern_transpose(sk_dtype dt, int nd, const int64_t *shape, const int *perm, const void *x, void *y,
                                   sk_error *err);
SK_API sk_result sk_kern_transpose_bwd(sk_dtype dt, int nd, const int64_t *shape, const int *perm, const void *dy,
                                       void *dx, sk_error *err);
/* Reshape, Flatten, ExpandDims -- and their backwards -- change only the shape of a row-major
   buffer: the kernel is this copy (any dtype; x == y is a no-op). GetNext and VirtualDataset
   need no kernel: their outputs are their inputs (or the dataset's batch); copy if a separate
   buffer is wanted. */
SK_API sk_result sk_kern_copy(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *y, sk_error *err);

/* OneHot: indices (SK_I32 / SK_I64, shape (nd, shape)) into `depth` classes, of which this
   device holds [class_offset, class_offset + local_depth); the output (dtype dt, f32 / f64)
   inserts local_depth at `axis` (-1: last; 0..nd) and holds on_value where index == class
   offset + c, off_value elsewhere (an index outside [0, depth) gives a row of off_value). */
SK_API sk_result sk_kern_one_hot(sk_dtype idx_dt, int nd, const int64_t *shape, const void *indices, int64_t depth,
                                 int64_t class_offset, int64_t local_depth, int axis, sk_dtype dt, double on_value,
                                 double off_value, void *out, sk_error *err);

/* Gather along axis (0 or 1 for a [V] or [V, E] table; any axis of an nd table): out =
   table.shape[:axis] + indices.shape + table.shape[axis+1:]. This device holds the table's
   entries [offset, offset + tshape[axis]) along axis: an index outside them (or negative)
   yields zeros, so an AllReduce(sum) over the shards is the unsharded gather. The forward takes
   any dtype; the backward (f32 / f64) zeroes dtable and scatter-adds dout into the entries this
   device holds. */
SK_API sk_result sk_kern_gather(sk_dtype dt, int tnd, const int64_t *tshape, const void *table, sk_dtype idx_dt,
                                int ind, const int64_t *ishape, const void *indices, int axis, int64_t offset,
                                void *out, sk_error *err);
SK_API sk_result sk_kern_gather_bwd(sk_dtype dt, int tnd, const int64_t *tshape, sk_dtype idx_dt, int ind,
                                    const int64_t *ishape, const void *indices, int axis, int64_t offset,
                                    const void *dout, void *dtable, sk_error *err);

SK_EXTERN_C_END

#endif /* SK_KERNELS_H */

/* ==== implementation ======================================================================== */
#if defined(SK_KERNELS_IMPL) && !defined(SK_KERNELS_IMPL_DONE)
#define SK_KERNELS_IMPL_DONE
#define SK__CORE_PRIVATE
#include "sk_core.h"
#include <math.h>
#include <string.h>

SK_EXTERN_C_BEGIN

/* ---- element access and checks ---------------------------------------------------------------- */

/* Kernels compute in double and store in the buffer's dtype; sk__krnd rounds an accumulator to
   f32 after each step for f32 data, so sums keep f32 semantics (a double holding two rounded
   floats' sum, rounded to float, is the float sum). */
static double sk__kld(sk_dtype dt, const void *p, int64_t i) {
  return dt == SK_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}
static void sk__kst(sk_dtype dt, void *p, int64_t i, double v) {
  if (dt == SK_F32)
    ((float *)p)[i] = (float)v;
  else
    ((double *)p)[i] = v;
}
static double sk__krnd(sk_dtype dt, double v) { return dt == SK_F32 ? (double)(float)v : v; }
static void sk__kadd(sk_dtype dt, void *p, int64_t i, double v) { sk__kst(dt, p, i, sk__kld(dt, p, i) + v); }
static void sk__kzero(sk_dtype dt, void *p, int64_t n) { memset(p, 0, (size_t)n * sk_dtype_size(dt)); }

static int64_t sk__kidx(sk_dtype idx_dt, const void *p, int64_t i) {
  return idx_dt == SK_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

static sk_result sk__kdt(sk_error *err, const char *fn, sk_dtype dt) {
  if (dt == SK_F32 || dt == SK_F64) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: dtype %s is not supported (f32 or f64)", fn, sk_dtype_name(dt));
}
static sk_result sk__kidt(sk_error *err, const char *fn, sk_dtype dt) {
  if (dt == SK_I32 || dt == SK_I64) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: index dtype %s is not supported (i32 or i64)", fn,
                  sk_dtype_name(dt));
}
static sk_result sk__kptr(sk_error *err, const char *fn, const void *p, const char *what) {
  if (p) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
}

/* Validates (nd, shape) and returns its element count. */
static sk_result sk__kshape(sk_error *err, const char *fn, const char *what, int nd, const int64_t *shape,
                            int64_t *count) {
  if (nd < 0 || nd > SK_MAX_DIMS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: %s has %d dims (0..%d)", fn, what, nd, SK_MAX_DIMS);
  if (nd > 0 && !shape) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: %s shape is NULL", fn, what);
  int64_t n = 1;
  for (int d = 0; d < nd; d++) {
    if (shape[d] < 0)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: %s dim %d is negative (%lld)", fn, what, d,
                      (long long)shape[d]);
    if (shape[d] > 0 && n > INT64_MAX / shape[d])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: %s has too many elements", fn, what);
    n *= shape[d];
  }
  *count = n;
  return SK_OK;
}

/* axis in [-nd, nd) -> [0, nd). */
static sk_result sk__kaxis(sk_error *err, const char *fn, const char *what, int nd, int axis, int *out) {
  if (axis < -nd || axis >= nd)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: %s %d is out of range for %d dims", fn, what, axis, nd);
  *out = axis < 0 ? axis + nd : axis;
  return SK_OK;
}

static int64_t sk__kprod(const int64_t *shape, int from, int to) {
  int64_t n = 1;
  for (int d = from; d < to; d++) n *= shape[d];
  return n;
}

static void sk__kstrides(int nd, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int d = nd - 1; d >= 0; d--) strides[d] = s, s *= shape[d];
}

/* ---- the strided walker ------------------------------------------------------------------- */

/* Walks a shape in row-major order keeping two strided offsets: the two inputs of a broadcast,
   the output slot of a reduction, the source of a transpose. A stride of 0 repeats an element. */
typedef struct sk__walk {
  int nd;
  int64_t shape[SK_MAX_DIMS], s0[SK_MAX_DIMS], s1[SK_MAX_DIMS], ctr[SK_MAX_DIMS];
  int64_t o0, o1;
} sk__walk;

static void sk__walk_init(sk__walk *w, int nd, const int64_t *shape) {
  memset(w, 0, sizeof *w);
  w->nd = nd;
  for (int d = 0; d < nd; d++) w->shape[d] = shape[d];
}

/* Back to the first element (strides kept). */
static void sk__walk_rewind(sk__walk *w) {
  memset(w->ctr, 0, sizeof w->ctr);
  w->o0 = w->o1 = 0;
}

static void sk__walk_next(sk__walk *w) {
  for (int d = w->nd - 1; d >= 0; d--) {
    w->o0 += w->s0[d], w->o1 += w->s1[d];
    if (++w->ctr[d] < w->shape[d]) return;
    w->o0 -= w->s0[d] * w->shape[d], w->o1 -= w->s1[d] * w->shape[d];
    w->ctr[d] = 0;
  }
}

/* Broadcasts a and b into w (the output shape, s0 / s1 a's / b's strides, 0 where they repeat). */
static sk_result sk__kbcast(sk_error *err, const char *fn, int nda, const int64_t *sha, int ndb, const int64_t *shb,
                            sk__walk *w) {
  int nd = nda > ndb ? nda : ndb;
  int64_t sa[SK_MAX_DIMS], sb[SK_MAX_DIMS], out[SK_MAX_DIMS] = {0};
  sk__kstrides(nda, sha, sa);
  sk__kstrides(ndb, shb, sb);
  for (int d = 0; d < nd; d++) {
    int da = d - (nd - nda), db = d - (nd - ndb);
    int64_t xa = da >= 0 ? sha[da] : 1, xb = db >= 0 ? shb[db] : 1;
    if (xa != xb && xa != 1 && xb != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: dim %d does not broadcast (%lld vs %lld)", fn, d,
                      (long long)xa, (long long)xb);
    out[d] = xa == 1 ? xb : xa;
  }
  sk__walk_init(w, nd, out);
  for (int d = 0; d < nd; d++) {
    int da = d - (nd - nda), db = d - (nd - ndb);
    w->s0[d] = da >= 0 && sha[da] != 1 ? sa[da] : 0;
    w->s1[d] = db >= 0 && shb[db] != 1 ? sb[db] : 0;
  }
  return SK_OK;
}

SK_API sk_result sk_kern_broadcast_shape(int nda, const int64_t *sha, int ndb, const int64_t *shb, int *nd,
                                         int64_t *shape, sk_error *err) {
  static const char *fn = "sk_kern_broadcast_shape";
  int64_t na, nb;
  sk_result r;
  sk__walk w;
  if ((r = sk__kshape(err, fn, "a", nda, sha, &na)) || (r = sk__kshape(err, fn, "b", ndb, shb, &nb)) ||
      (r = sk__kptr(err, fn, nd, "nd")) || (r = sk__kptr(err, fn, shape, "shape")) ||
      (r = sk__kbcast(err, fn, nda, sha, ndb, shb, &w)))
    return r;
  *nd = w.nd;
  for (int d = 0; d < w.nd; d++) shape[d] = w.shape[d];
  return SK_OK;
}

/* ---- GEMM ----------------------------------------------------------------------------------- */

#define SK__GB 64 /* block edge: two packed 64x64 f64 blocks (64 KiB) stay in L2 and on the stack */

/* One cache-blocked product C += alpha op(A) op(B), instantiated for float and double so that
   f32 products accumulate in f32 (as an f32 BLAS does). Blocks of A and B are packed row-major
   (transposes resolved there), so the inner loop runs over contiguous rows of B and C. */
#define SK__GEMM_BLOCKED(NAME, T)                                                                       \
  static void NAME(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T *a, int64_t lda,   \
                   const T *b, int64_t ldb, T *c, int64_t ldc) {                                          \
    T ap[SK__GB * SK__GB], bp[SK__GB * SK__GB];                                                           \
    for (int64_t k0 = 0; k0 < k; k0 += SK__GB) {                                                          \
      int64_t kb = k - k0 < SK__GB ? k - k0 : SK__GB;                                                     \
      for (int64_t j0 = 0; j0 < n; j0 += SK__GB) {                                                        \
        int64_t nb = n - j0 < SK__GB ? n - j0 : SK__GB;                                                   \
        for (int64_t p = 0; p < kb; p++)                                                                  \
          for (int64_t j = 0; j < nb; j++)                                                                \
            bp[p * SK__GB + j] = tb ? b[(j0 + j) * ldb + k0 + p] : b[(k0 + p) * ldb + j0 + j];            \
        for (int64_t i0 = 0; i0 < m; i0 += SK__GB) {                                                      \
          int64_t mb = m - i0 < SK__GB ? m - i0 : SK__GB;                                                 \
          for (int64_t i = 0; i < mb; i++)                                                                \
            for (int64_t p = 0; p < kb; p++)                                                              \
              ap[i * SK__GB + p] = alpha * (ta ? a[(k0 + p) * lda + i0 + i] : a[(i0 + i) * lda + k0 + p]); \
          for (int64_t i = 0; i < mb; i++) {                                                              \
            T *cr = c + (i0 + i) * ldc + j0;                                                              \
            for (int64_t p = 0; p < kb; p++) {                                                            \
              T av = ap[i * SK__GB + p];                                                                  \
              const T *br = bp + p * SK__GB;                                                              \
              for (int64_t j = 0; j < nb; j++) cr[j] += av * br[j];                                       \
            }                                                                                             \
          }                                                                                               \
        }                                                                                                 \
      }                                                                                                   \
    }                                                                                                     \
  }
SK__GEMM_BLOCKED(sk__gemm_f32, float)
SK__GEMM_BLOCKED(sk__gemm_f64, double)
#undef SK__GEMM_BLOCKED

SK_API sk_result sk_gemm_builtin(void *user, sk_dtype dt, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                 double alpha, const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
                                 void *c, int64_t ldc) {
  (void)user;
  if ((dt != SK_F32 && dt != SK_F64) || m < 0 || n < 0 || k < 0) return SK_ERR_INVALID_ARGUMENT;
  if (m == 0 || n == 0) return SK_OK;
  if (!c || ldc < n || (k > 0 && (!a || !b))) return SK_ERR_INVALID_ARGUMENT;
  if (k > 0 && (lda < (trans_a ? m : k) || ldb < (trans_b ? k : n))) return SK_ERR_INVALID_ARGUMENT;
  for (int64_t i = 0; i < m; i++) /* beta == 0 overwrites: C may hold garbage (or NaN) */
    for (int64_t j = 0; j < n; j++)
      sk__kst(dt, c, i * ldc + j, beta == 0 ? 0.0 : beta * sk__kld(dt, c, i * ldc + j));
  if (k == 0 || alpha == 0) return SK_OK;
  if (dt == SK_F32)
    sk__gemm_f32(trans_a, trans_b, m, n, k, (float)alpha, (const float *)a, lda, (const float *)b, ldb, (float *)c,
                 ldc);
  else
    sk__gemm_f64(trans_a, trans_b, m, n, k, alpha, (const double *)a, lda, (const double *)b, ldb, (double *)c, ldc);
  return SK_OK;
}

/* One product through the context's GEMM (or the built-in), contiguous operands. */
static sk_result sk__kgemm(const sk_kernel_ctx *ctx, const char *fn, sk_dtype dt, bool ta, bool tb, int64_t m,
                           int64_t n, int64_t k, const void *a, const void *b, double beta, void *c, sk_error *err) {
  if (m == 0 || n == 0) return SK_OK;
  int64_t lda = ta ? m : k, ldb = tb ? k : n;
  lda = lda > 0 ? lda : 1, ldb = ldb > 0 ? ldb : 1; /* BLAS wants ld >= 1 even when k == 0 */
  sk_gemm_fn g = ctx && ctx->gemm ? ctx->gemm : sk_gemm_builtin;
  sk_result r = g(ctx ? ctx->gemm_user : NULL, dt, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, n);
  if (r != SK_OK) return sk__fail(err, r, "%s: the GEMM failed (%s)", fn, sk_result_name(r));
  return SK_OK;
}

/* ---- MatMul, BatchMatMul, Dense ------------------------------------------------------------ */

/* A batched product's geometry: op(a) [m,k], op(b) [k,n]; w walks the broadcast batch dims with
   s0 / s1 counting a's / b's matrices. MatMul is the case without batch dims. */
typedef struct sk__bmm {
  int64_t m, n, k, nbatch;
  sk__walk w;
} sk__bmm;

static sk_result sk__bmm_prep(const char *fn, sk_dtype dt, bool ta, bool tb, int nda, const int64_t *sha,
                              const void *a, int ndb, const int64_t *shb, const void *b, sk__bmm *p, sk_error *err) {
  int64_t na, nb;
  sk_result r;
  memset(p, 0, sizeof *p); /* a caller that ignores a failure still reads defined sizes */
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kshape(err, fn, "a", nda, sha, &na)) ||
      (r = sk__kshape(err, fn, "b", ndb, shb, &nb)) || (r = sk__kptr(err, fn, a, "a")) ||
      (r = sk__kptr(err, fn, b, "b")))
    return r;
  if (nda < 2 || ndb < 2)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: a has %d dims and b %d (each needs >= 2)", fn, nda, ndb);
  int64_t ka = ta ? sha[nda - 2] : sha[nda - 1], kb = tb ? shb[ndb - 1] : shb[ndb - 2];
  if (ka != kb)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: contraction dims differ (a: %lld, b: %lld)", fn,
                    (long long)ka, (long long)kb);
  p->m = ta ? sha[nda - 1] : sha[nda - 2];
  p->n = tb ? shb[ndb - 2] : shb[ndb - 1];
  p->k = ka;
  if ((r = sk__kbcast(err, fn, nda - 2, sha, ndb - 2, shb, &p->w))) return r;
  p->nbatch = sk__kprod(p->w.shape, 0, p->w.nd);
  return SK_OK;
}

/* Gradients of one product c = op(a) op(b), ACCUMULATED into da / db (beta 1):
   d op(a) = dc op(b)^T, d op(b) = op(a)^T dc, transposed back where a / b are stored so. */
static sk_result sk__mm_grads(const sk_kernel_ctx *ctx, const char *fn, sk_dtype dt, bool ta, bool tb, int64_t m,
                              int64_t n, int64_t k, const void *a, const void *b, const void *dc, void *da, void *db,
                              sk_error *err) {
  sk_result r = SK_OK;
  if (da && !ta) r = sk__kgemm(ctx, fn, dt, false, !tb, m, k, n, dc, b, 1.0, da, err);
  if (da && ta) r = sk__kgemm(ctx, fn, dt, tb, true, k, m, n, b, dc, 1.0, da, err);
  if (r) return r;
  if (db && !tb) r = sk__kgemm(ctx, fn, dt, !ta, false, k, n, m, a, dc, 1.0, db, err);
  if (db && tb) r = sk__kgemm(ctx, fn, dt, true, ta, n, k, m, dc, a, 1.0, db, err);
  return r;
}

#define SK__KAT(p, i, es) ((const char *)(p) + (size_t)(i) * (es)) /* element i of a read buffer */
#define SK__KAT_W(p, i, es) ((char *)(p) + (size_t)(i) * (es))    /* element i of a written one */

SK_API sk_result sk_kern_batch_matmul(const sk_kernel_ctx *ctx, sk_dtype dt, bool transpose_a, bool transpose_b,
                                      int nda, const int64_t *sha, const void *a, int ndb, const int64_t *shb,
                                      const void *b, void *c, sk_error *err) {
  static const char *fn = "sk_kern_batch_matmul";
  sk__bmm p;
  sk_result r;
  if ((r = sk__bmm_prep(fn, dt, transpose_a, transpose_b, nda, sha, a, ndb, shb, b, &p, err)) ||
      (r = sk__kptr(err, fn, c, "c")))
    return r;
  size_t es = sk_dtype_size(dt);
  for (int64_t i = 0; i < p.nbatch; i++, sk__walk_next(&p.w)) {
    r = sk__kgemm(ctx, fn, dt, transpose_a, transpose_b, p.m, p.n, p.k, SK__KAT(a, p.w.o0 * p.m * p.k, es),
                  SK__KAT(b, p.w.o1 * p.k * p.n, es), 0.0, SK__KAT_W(c, i * p.m * p.n, es), err);
    if (r) return r;
  }
  return SK_OK;
}

SK_API sk_result sk_kern_batch_matmul_bwd(const sk_kernel_ctx *ctx, sk_dtype dt, bool transpose_a, bool transpose_b,
                                          int nda, const int64_t *sha, const void *a, int ndb, const int64_t *shb,
                                          const void *b, const void *dc, void *da, void *db, sk_error *err) {
  static const char *fn = "sk_kern_batch_matmul_bwd";
  sk__bmm p;
  sk_result r;
  if ((r = sk__bmm_prep(fn, dt, transpose_a, transpose_b, nda, sha, a, ndb, shb, b, &p, err)) ||
      (r = sk__kptr(err, fn, dc, "dc")))
    return r;
  size_t es = sk_dtype_size(dt);
  /* zeroed first: a broadcast input's batch receives several batches' contributions */
  if (da) sk__kzero(dt, da, sk__kprod(sha, 0, nda));
  if (db) sk__kzero(dt, db, sk__kprod(shb, 0, ndb));
  for (int64_t i = 0; i < p.nbatch; i++, sk__walk_next(&p.w)) {
    int64_t oa = p.w.o0 * p.m * p.k, ob = p.w.o1 * p.k * p.n;
    r = sk__mm_grads(ctx, fn, dt, transpose_a, transpose_b, p.m, p.n, p.k, SK__KAT(a, oa, es), SK__KAT(b, ob, es),
                     SK__KAT(dc, i * p.m * p.n, es), da ? SK__KAT_W(da, oa, es) : NULL,
                     db ? SK__KAT_W(db, ob, es) : NULL, err);
    if (r) return r;
  }
  return SK_OK;
}

/* MatMul is BatchMatMul without batch dims: one implementation of the product. */
static sk_result sk__kmatrix(sk_error *err, const char *fn, int nda, int ndb) {
  if (nda == 2 && ndb == 2) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: a has %d dims and b %d (MatMul takes 2 and 2)", fn, nda, ndb);
}

SK_API sk_result sk_kern_matmul(const sk_kernel_ctx *ctx, sk_dtype dt, bool transpose_a, bool transpose_b, int nda,
                                const int64_t *sha, const void *a, int ndb, const int64_t *shb, const void *b, void *c,
                                sk_error *err) {
  sk_result r = sk__kmatrix(err, "sk_kern_matmul", nda, ndb);
  return r ? r : sk_kern_batch_matmul(ctx, dt, transpose_a, transpose_b, nda, sha, a, ndb, shb, b, c, err);
}

SK_API sk_result sk_kern_matmul_bwd(const sk_kernel_ctx *ctx, sk_dtype dt, bool transpose_a, bool transpose_b, int nda,
                                    const int64_t *sha, const void *a, int ndb, const int64_t *shb, const void *b,
                                    const void *dc, void *da, void *db, sk_error *err) {
  sk_result r = sk__kmatrix(err, "sk_kern_matmul_bwd", nda, ndb);
  return r ? r : sk_kern_batch_matmul_bwd(ctx, dt, transpose_a, transpose_b, nda, sha, a, ndb, shb, b, dc, da, db, err);
}

/* Dense's geometry: rows = the product of x's leading dims, k = its last, n = w's rows. */
static sk_result sk__dense_prep(const char *fn, sk_dtype dt, int ndx, const int64_t *shx, const void *x,
                                const int64_t *shw, const void *w, int64_t *rows, int64_t *n, int64_t *k,
                                sk_error *err) {
  int64_t nx, nw;
  sk_result r;
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kshape(err, fn, "x", ndx, shx, &nx)) ||
      (r = sk__kshape(err, fn, "w", 2, shw, &nw)) || (r = sk__kptr(err, fn, x, "x")) ||
      (r = sk__kptr(err, fn, w, "w")))
    return r;
  if (ndx < 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: x has 0 dims (needs >= 1)", fn);
  if (shw[1] != shx[ndx - 1])
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: w [%lld, %lld] does not match x's last dim %lld", fn,
                    (long long)shw[0], (long long)shw[1], (long long)shx[ndx - 1]);
  *rows = sk__kprod(shx, 0, ndx - 1), *n = shw[0], *k = shw[1];
  return SK_OK;
}

SK_API sk_result sk_kern_dense(const sk_kernel_ctx *ctx, sk_dtype dt, int ndx, const int64_t *shx, const void *x,
                               const int64_t *shw, const void *w, const void *bias, void *y, sk_error *err) {
  static const char *fn = "sk_kern_dense";
  int64_t rows, n, k;
  sk_result r;
  if ((r = sk__dense_prep(fn, dt, ndx, shx, x, shw, w, &rows, &n, &k, err)) || (r = sk__kptr(err, fn, y, "y")) ||
      (r = sk__kgemm(ctx, fn, dt, false, true, rows, n, k, x, w, 0.0, y, err)))
    return r;
  if (bias)
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < n; j++) sk__kadd(dt, y, i * n + j, sk__kld(dt, bias, j));
  return SK_OK;
}

SK_API sk_result sk_kern_dense_bwd(const sk_kernel_ctx *ctx, sk_dtype dt, int ndx, const int64_t *shx, const void *x,
                                   const int64_t *shw, const void *w, const void *dy, void *dx, void *dw, void *dbias,
                                   sk_error *err) {
  static const char *fn = "sk_kern_dense_bwd";
  int64_t rows, n, k;
  sk_result r;
  if ((r = sk__dense_prep(fn, dt, ndx, shx, x, shw, w, &rows, &n, &k, err)) || (r = sk__kptr(err, fn, dy, "dy")))
    return r;
  if (dx) sk__kzero(dt, dx, rows * k);
  if (dw) sk__kzero(dt, dw, n * k);
  if ((r = sk__mm_grads(ctx, fn, dt, false, true, rows, n, k, x, w, dy, dx, dw, err))) return r;
  if (dbias) {
    sk__kzero(dt, dbias, n);
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < n; j++) sk__kadd(dt, dbias, j, sk__kld(dt, dy, i * n + j));
  }
  return SK_OK;
}

/* ---- element-wise ------------------------------------------------------------------------- */

typedef enum sk__unary { SK__RELU, SK__GELU, SK__TANH, SK__SIGMOID, SK__SILU } sk__unary;

#define SK__GELU_C 0.7978845608028654 /* sqrt(2 / pi) */
#define SK__GELU_A 0.044715

/* 1 / (1 + exp(-x)), without overflowing exp for large |x|. */
static double sk__sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}

static double sk__unary_f(sk__unary u, double x) {
  if (u == SK__RELU) return x > 0 ? x : 0.0;
  if (u == SK__TANH) return tanh(x);
  if (u == SK__SIGMOID) return sk__sigmoid(x);
  if (u == SK__SILU) return x * sk__sigmoid(x);
  return 0.5 * x * (1.0 + tanh(SK__GELU_C * (x + SK__GELU_A * x * x * x)));
}

/* d f / d x at x. */
static double sk__unary_df(sk__unary u, double x) {
  if (u == SK__RELU) return x > 0 ? 1.0 : 0.0;
  if (u == SK__TANH) {
    double t = tanh(x);
    return 1.0 - t * t;
  }
  if (u == SK__SIGMOID || u == SK__SILU) {
    double sg = sk__sigmoid(x);
    return u == SK__SIGMOID ? sg * (1.0 - sg) : sg * (1.0 + x * (1.0 - sg));
  }
  double t = tanh(SK__GELU_C * (x + SK__GELU_A * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SK__GELU_C * (1.0 + 3.0 * SK__GELU_A * x * x);
}

/* ReLU over a type T: the generic loop below costs a dtype test and an indirect call per element,
   which made ReLU a visible share of a small MLP's step. The same values as sk__unary_f and
   sk__unary_df times dy, in T. The forward keeps x's bits or clears them all (+0, also for NaN
   and -0, as x > 0 ? x : 0 does) with an integer mask: written as the ternary, GCC emits a
   branch that a random sign mispredicts half the time. Backward: (1 or 0) * dy is exact in
   either width, so the bits are the generic loop's (0 * dy keeps its sign and NaN, as there). */
#define SK__RELU_TYPED(SUF, T, U)                                                                \
  static void sk__krelu_##SUF(bool bwd, int64_t n, const T *x, const T *dy, T *out) {            \
    if (bwd) {                                                                                   \
      for (int64_t i = 0; i < n; i++) out[i] = (x[i] > 0 ? (T)1 : (T)0) * dy[i];                 \
      return;                                                                                    \
    }                                                                                            \
    for (int64_t i = 0; i < n; i++) {                                                            \
      T v = x[i];                                                                                \
      U bits;                                                                                    \
      memcpy(&bits, &v, sizeof bits);                                                            \
      bits &= (U)0 - (U)(v > 0);                                                                 \
      memcpy(&out[i], &bits, sizeof bits);                                                       \
    }                                                                                            \
  }
SK__RELU_TYPED(f32, float, uint32_t)
SK__RELU_TYPED(f64, double, uint64_t)
#undef SK__RELU_TYPED

/* Forward (dy NULL and bwd false): out = f(x); backward: out = f'(x) dy. */
static sk_result sk__kunary(const char *fn, sk__unary u, bool bwd, sk_dtype dt, int nd, const int64_t *shape,
                            const void *x, const void *dy, void *out, sk_error *err) {
  int64_t n;
  sk_result r;
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kshape(err, fn, "x", nd, shape, &n)) || (r = sk__kptr(err, fn, x, "x")) ||
      (bwd && (r = sk__kptr(err, fn, dy, "dy"))) || (r = sk__kptr(err, fn, out, bwd ? "dx" : "y")))
    return r;
  if (u == SK__RELU && dt == SK_F64)
    return sk__krelu_f64(bwd, n, (const double *)x, (const double *)dy, (double *)out), SK_OK;
  if (u == SK__RELU) return sk__krelu_f32(bwd, n, (const float *)x, (const float *)dy, (float *)out), SK_OK;
  for (int64_t i = 0; i < n; i++) {
    double v = sk__kld(dt, x, i);
    sk__kst(dt, out, i, bwd ? sk__unary_df(u, v) * sk__kld(dt, dy, i) : sk__unary_f(u, v));
  }
  return SK_OK;
}

SK_API sk_result sk_kern_relu(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *y, sk_error *err) {
  return sk__kunary("sk_kern_relu", SK__RELU, false, dt, nd, shape, x, NULL, y, err);
}
SK_API sk_result sk_kern_relu_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *x, const void *dy, void *dx,
                                  sk_error *err) {
  return sk__kunary("sk_kern_relu_bwd", SK__RELU, true, dt, nd, shape, x, dy, dx, err);
}
SK_API sk_result sk_kern_gelu(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *y, sk_error *err) {
  return sk__kunary("sk_kern_gelu", SK__GELU, false, dt, nd, shape, x, NULL, y, err);
}
SK_API sk_result sk_kern_gelu_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *x, const void *dy, void *dx,
                                  sk_error *err) {
  return sk__kunary("sk_kern_gelu_bwd", SK__GELU, true, dt, nd, shape, x, dy, dx, err);
}
SK_API sk_result sk_kern_tanh(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *y, sk_error *err) {
  return sk__kunary("sk_kern_tanh", SK__TANH, false, dt, nd, shape, x, NULL, y, err);
}
SK_API sk_result sk_kern_tanh_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *x, const void *dy, void *dx,
                                  sk_error *err) {
  return sk__kunary("sk_kern_tanh_bwd", SK__TANH, true, dt, nd, shape, x, dy, dx, err);
}
SK_API sk_result sk_kern_sigmoid(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *y, sk_error *err) {
  return sk__kunary("sk_kern_sigmoid", SK__SIGMOID, false, dt, nd, shape, x, NULL, y, err);
}
SK_API sk_result sk_kern_sigmoid_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *x, const void *dy,
                                     void *dx, sk_error *err) {
  return sk__kunary("sk_kern_sigmoid_bwd", SK__SIGMOID, true, dt, nd, shape, x, dy, dx, err);
}
SK_API sk_result sk_kern_silu(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *y, sk_error *err) {
  return sk__kunary("sk_kern_silu", SK__SILU, false, dt, nd, shape, x, NULL, y, err);
}
SK_API sk_result sk_kern_silu_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *x, const void *dy, void *dx,
                                  sk_error *err) {
  return sk__kunary("sk_kern_silu_bwd", SK__SILU, true, dt, nd, shape, x, dy, dx, err);
}

/* ---- Cast ------------------------------------------------------------------------------------ */

static bool sk__kcastable(sk_dtype dt) { return dt == SK_F32 || dt == SK_F64 || dt == SK_F16 || dt == SK_BF16; }

static double sk__kcast_ld(sk_dtype dt, const void *p, int64_t i) {
  if (dt == SK_F16) return (double)sk_f16_to_f32(((const uint16_t *)p)[i]);
  if (dt == SK_BF16) return (double)sk_bf16_to_f32(((const uint16_t *)p)[i]);
  return sk__kld(dt, p, i);
}

static void sk__kcast_st(sk_dtype dt, void *p, int64_t i, double v) {
  if (dt == SK_F16)
    ((uint16_t *)p)[i] = sk_f32_to_f16((float)v);
  else if (dt == SK_BF16)
    ((uint16_t *)p)[i] = sk_f32_to_bf16((float)v);
  else
    sk__kst(dt, p, i, v);
}

SK_API sk_result sk_kern_cast(sk_dtype src_dt, int nd, const int64_t *shape, const void *src, sk_dtype dst_dt,
                              void *dst, sk_error *err) {
  static const char *fn = "sk_kern_cast";
  int64_t n;
  sk_result r;
  if (!sk__kcastable(src_dt) || !sk__kcastable(dst_dt))
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: cannot cast %s to %s (f32, f64, f16, bf16)", fn,
                    sk_dtype_name(src_dt), sk_dtype_name(dst_dt));
  if ((r = sk__kshape(err, fn, "x", nd, shape, &n)) || (r = sk__kptr(err, fn, src, "src")) ||
      (r = sk__kptr(err, fn, dst, "dst")))
    return r;
  for (int64_t i = 0; i < n; i++) sk__kcast_st(dst_dt, dst, i, sk__kcast_ld(src_dt, src, i));
  return SK_OK;
}

/* ---- Dropout --------------------------------------------------------------------------------- */

/* splitmix64's finaliser: a bijective mix, so (seed, index) pairs map to well-spread words. */
static uint64_t sk__kmix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Keep element g of the global tensor? A uniform draw in [0, 1) from 53 bits of the hash. */
static uint8_t sk__kkeep(uint64_t seed, double keep_prob, uint64_t g) {
  uint64_t h = sk__kmix(sk__kmix(seed) + g * 0x9e3779b97f4a7c15ull);
  return (double)(h >> 11) * (1.0 / 9007199254740992.0) < keep_prob ? 1 : 0;
}

static sk_result sk__kkeep_prob(sk_error *err, const char *fn, double keep_prob) {
  if (keep_prob > 0 && keep_prob <= 1) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: keep_prob %g is not in (0, 1]", fn, keep_prob);
}

SK_API sk_result sk_kern_dropout_mask(uint64_t seed, double keep_prob, int nd, const int64_t *global_shape,
                                      const sk_slice *slice, uint8_t *mask, sk_error *err) {
  static const char *fn = "sk_kern_dropout_mask";
  int64_t n, gs[SK_MAX_DIMS], local[SK_MAX_DIMS] = {0};
  sk_result r;
  if ((r = sk__kkeep_prob(err, fn, keep_prob)) || (r = sk__kshape(err, fn, "global_shape", nd, global_shape, &n)) ||
      (r = sk__kptr(err, fn, mask, "mask")))
    return r;
  if (slice && slice->ndims != nd)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: slice has %d dims, the tensor %d", fn, slice->ndims, nd);
  int64_t origin = 0;
  sk__kstrides(nd, global_shape, gs);
  for (int d = 0; d < nd; d++) {
    int64_t lo = slice ? slice->start[d] : 0, hi = slice ? slice->stop[d] : global_shape[d];
    if (lo < 0 || hi < lo || hi > global_shape[d])
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: slice dim %d [%lld, %lld) is outside [0, %lld)", fn, d,
                      (long long)lo, (long long)hi, (long long)global_shape[d]);
    local[d] = hi - lo, origin += lo * gs[d];
  }
  sk__walk w; /* over the slice, o0 = the element's offset from the slice's origin, globally */
  sk__walk_init(&w, nd, local);
  for (int d = 0; d < nd; d++) w.s0[d] = gs[d];
  n = sk__kprod(local, 0, nd);
  for (int64_t i = 0; i < n; i++, sk__walk_next(&w)) mask[i] = sk__kkeep(seed, keep_prob, (uint64_t)(origin + w.o0));
  return SK_OK;
}

/* out = in * mask / keep_prob: Dropout's forward and, applied to dy, its backward. */
static sk_result sk__kdropout(const char *fn, sk_dtype dt, int nd, const int64_t *shape, double keep_prob,
                              const void *in, const uint8_t *mask, void *out, sk_error *err) {
  int64_t n;
  sk_result r;
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kkeep_prob(err, fn, keep_prob)) ||
      (r = sk__kshape(err, fn, "x", nd, shape, &n)) || (r = sk__kptr(err, fn, in, "input")) ||
      (r = sk__kptr(err, fn, mask, "mask")) || (r = sk__kptr(err, fn, out, "output")))
    return r;
  double scale = 1.0 / keep_prob;
  for (int64_t i = 0; i < n; i++) sk__kst(dt, out, i, mask[i] ? sk__kld(dt, in, i) * scale : 0.0);
  return SK_OK;
}

SK_API sk_result sk_kern_dropout(sk_dtype dt, int nd, const int64_t *shape, double keep_prob, const void *x,
                                 const uint8_t *mask, void *y, sk_error *err) {
  return sk__kdropout("sk_kern_dropout", dt, nd, shape, keep_prob, x, mask, y, err);
}
SK_API sk_result sk_kern_dropout_bwd(sk_dtype dt, int nd, const int64_t *shape, double keep_prob, const void *dy,
                                     const uint8_t *mask, void *dx, sk_error *err) {
  return sk__kdropout("sk_kern_dropout_bwd", dt, nd, shape, keep_prob, dy, mask, dx, err);
}

/* ---- Add, Sub, Mul, Div, Pow ----------------------------------------------------------------- */

static double sk__kbin_f(sk_binop op, double a, double b) {
  switch (op) {
  case SK_BIN_ADD: return a + b;
  case SK_BIN_SUB: return a - b;
  case SK_BIN_MUL: return a * b;
  case SK_BIN_DIV: return a / b;
  default: return pow(a, b);
  }
}

/* The partial derivatives (d c / d a, d c / d b) at (a, b). */
static void sk__kbin_df(sk_binop op, double a, double b, double *ga, double *gb) {
  switch (op) {
  case SK_BIN_ADD: *ga = 1, *gb = 1; break;
  case SK_BIN_SUB: *ga = 1, *gb = -1; break;
  case SK_BIN_MUL: *ga = b, *gb = a; break;
  case SK_BIN_DIV: *ga = 1 / b, *gb = -a / (b * b); break;
  default: *ga = b * pow(a, b - 1), *gb = a > 0 ? pow(a, b) * log(a) : 0.0; break;
  }
}

/* Validation shared by the forward and backward; w receives the broadcast walk. a and b may be
   NULL when the caller allows it (Add / Sub backward). */
static sk_result sk__kbin_prep(const char *fn, sk_binop op, sk_dtype dt, int nda, const int64_t *sha, const void *a,
                               int ndb, const int64_t *shb, const void *b, bool need_ab, sk__walk *w, sk_error *err) {
  int64_t na, nb;
  sk_result r;
  if ((int)op < (int)SK_BIN_ADD || (int)op > (int)SK_BIN_POW)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: unknown binary op %d", fn, (int)op);
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kshape(err, fn, "a", nda, sha, &na)) ||
      (r = sk__kshape(err, fn, "b", ndb, shb, &nb)) || (need_ab && (r = sk__kptr(err, fn, a, "a"))) ||
      (need_ab && (r = sk__kptr(err, fn, b, "b"))))
    return r;
  return sk__kbcast(err, fn, nda, sha, ndb, shb, w);
}

SK_API sk_result sk_kern_binary(sk_binop op, sk_dtype dt, int nda, const int64_t *sha, const void *a, int ndb,
                                const int64_t *shb, const void *b, void *c, sk_error *err) {
  static const char *fn = "sk_kern_binary";
  sk__walk w;
  sk_result r;
  if ((r = sk__kbin_prep(fn, op, dt, nda, sha, a, ndb, shb, b, true, &w, err)) || (r = sk__kptr(err, fn, c, "c")))
    return r;
  int64_t n = sk__kprod(w.shape, 0, w.nd);
  for (int64_t i = 0; i < n; i++, sk__walk_next(&w))
    sk__kst(dt, c, i, sk__kbin_f(op, sk__kld(dt, a, w.o0), sk__kld(dt, b, w.o1)));
  return SK_OK;
}

SK_API sk_result sk_kern_binary_bwd(sk_binop op, sk_dtype dt, int nda, const int64_t *sha, const void *a, int ndb,
                                    const int64_t *shb, const void *b, const void *dc, void *da, void *db,
                                    sk_error *err) {
  static const char *fn = "sk_kern_binary_bwd";
  bool need_ab = op != SK_BIN_ADD && op != SK_BIN_SUB;
  sk__walk w;
  sk_result r;
  if ((r = sk__kbin_prep(fn, op, dt, nda, sha, a, ndb, shb, b, need_ab, &w, err)) ||
      (r = sk__kptr(err, fn, dc, "dc")))
    return r;
  /* zeroed, then summed: a broadcast input gathers every output position it fed */
  if (da) sk__kzero(dt, da, sk__kprod(sha, 0, nda));
  if (db) sk__kzero(dt, db, sk__kprod(shb, 0, ndb));
  int64_t n = sk__kprod(w.shape, 0, w.nd);
  for (int64_t i = 0; i < n; i++, sk__walk_next(&w)) {
    double ga, gb, g = sk__kld(dt, dc, i);
    sk__kbin_df(op, need_ab ? sk__kld(dt, a, w.o0) : 0.0, need_ab ? sk__kld(dt, b, w.o1) : 0.0, &ga, &gb);
    if (da) sk__kadd(dt, da, w.o0, ga * g);
    if (db) sk__kadd(dt, db, w.o1, gb * g);
  }
  return SK_OK;
}

/* ---- BiasAdd, PReLU -------------------------------------------------------------------------- */

/* x seen as [outer, C, inner] around its channel dim. */
static sk_result sk__kchannel(const char *fn, sk_dtype dt, sk_data_format fmt, int nd, const int64_t *shape,
                              int64_t *outer, int64_t *c, int64_t *inner, sk_error *err) {
  int64_t n;
  sk_result r;
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kshape(err, fn, "x", nd, shape, &n))) return r;
  if (fmt != SK_NCHW && fmt != SK_NHWC)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: unknown data_format %d", fn, (int)fmt);
  if (nd < 2) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: x has %d dims (needs >= 2)", fn, nd);
  int cd = fmt == SK_NCHW ? 1 : nd - 1;
  *outer = sk__kprod(shape, 0, cd), *c = shape[cd], *inner = sk__kprod(shape, cd + 1, nd);
  return SK_OK;
}

SK_API sk_result sk_kern_bias_add(sk_dtype dt, sk_data_format fmt, int nd, const int64_t *shape, const void *x,
                                  const void *bias, void *y, sk_error *err) {
  static const char *fn = "sk_kern_bias_add";
  int64_t outer, c, inner;
  sk_result r;
  if ((r = sk__kchannel(fn, dt, fmt, nd, shape, &outer, &c, &inner, err)) || (r = sk__kptr(err, fn, x, "x")) ||
      (r = sk__kptr(err, fn, bias, "bias")) || (r = sk__kptr(err, fn, y, "y")))
    return r;
  for (int64_t o = 0, i = 0; o < outer; o++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t in = 0; in < inner; in++, i++) sk__kst(dt, y, i, sk__kld(dt, x, i) + sk__kld(dt, bias, ch));
  return SK_OK;
}

SK_API sk_result sk_kern_bias_add_bwd(sk_dtype dt, sk_data_format fmt, int nd, const int64_t *shape, const void *dy,
                                      void *dx, void *dbias, sk_error *err) {
  static const char *fn = "sk_kern_bias_add_bwd";
  int64_t outer, c, inner;
  sk_result r;
  if ((r = sk__kchannel(fn, dt, fmt, nd, shape, &outer, &c, &inner, err)) || (r = sk__kptr(err, fn, dy, "dy")))
    return r;
  if (dx && dx != dy) memcpy(dx, dy, (size_t)(outer * c * inner) * sk_dtype_size(dt));
  if (!dbias) return SK_OK;
  sk__kzero(dt, dbias, c);
  for (int64_t o = 0, i = 0; o < outer; o++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t in = 0; in < inner; in++, i++) sk__kadd(dt, dbias, ch, sk__kld(dt, dy, i));
  return SK_OK;
}

/* PReLU's channel layout: [outer, C, inner] with C = shape[1] (1 for 1-D x), and w's length. */
static sk_result sk__kprelu_prep(const char *fn, sk_dtype dt, int nd, const int64_t *shape, const void *x, int64_t nw,
                                 const void *w, int64_t *outer, int64_t *c, int64_t *inner, sk_error *err) {
  int64_t n;
  sk_result r;
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kshape(err, fn, "x", nd, shape, &n)) || (r = sk__kptr(err, fn, x, "x")) ||
      (r = sk__kptr(err, fn, w, "w")))
    return r;
  if (nd < 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: x has 0 dims (needs >= 1)", fn);
  *c = nd >= 2 ? shape[1] : 1;
  *outer = shape[0], *inner = nd >= 2 ? sk__kprod(shape, 2, nd) : 1;
  if (nd < 2) *outer = 1, *inner = shape[0];
  if (nw != 1 && nw != *c)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: w has %lld values (1 or the %lld channels)", fn,
                    (long long)nw, (long long)*c);
  return SK_OK;
}

SK_API sk_result sk_kern_prelu(sk_dtype dt, int nd, const int64_t *shape, const void *x, int64_t nw, const void *w,
                               void *y, sk_error *err) {
  static const char *fn = "sk_kern_prelu";
  int64_t outer, c, inner;
  sk_result r;
  if ((r = sk__kprelu_prep(fn, dt, nd, shape, x, nw, w, &outer, &c, &inner, err)) || (r = sk__kptr(err, fn, y, "y")))
    return r;
  for (int64_t o = 0, i = 0; o < outer; o++)
    for (int64_t ch = 0; ch < c; ch++) {
      double wc = sk__kld(dt, w, nw == 1 ? 0 : ch);
      for (int64_t in = 0; in < inner; in++, i++) {
        double v = sk__kld(dt, x, i);
        sk__kst(dt, y, i, v > 0 ? v : wc * v);
      }
    }
  return SK_OK;
}

SK_API sk_result sk_kern_prelu_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *x, int64_t nw, const void *w,
                                   const void *dy, void *dx, void *dw, sk_error *err) {
  static const char *fn = "sk_kern_prelu_bwd";
  int64_t outer, c, inner;
  sk_result r;
  if ((r = sk__kprelu_prep(fn, dt, nd, shape, x, nw, w, &outer, &c, &inner, err)) || (r = sk__kptr(err, fn, dy, "dy")))
    return r;
  if (dw) sk__kzero(dt, dw, nw);
  for (int64_t o = 0, i = 0; o < outer; o++)
    for (int64_t ch = 0; ch < c; ch++) {
      int64_t wi = nw == 1 ? 0 : ch;
      double wc = sk__kld(dt, w, wi);
      for (int64_t in = 0; in < inner; in++, i++) {
        double v = sk__kld(dt, x, i), g = sk__kld(dt, dy, i);
        if (dx) sk__kst(dt, dx, i, v > 0 ? g : wc * g);
        if (dw && v <= 0) sk__kadd(dt, dw, wi, v * g);
      }
    }
  return SK_OK;
}

/* ---- Softmax, LogSoftmax, L2Normalize: lanes along an axis ----------------------------------- */

/* One lane: `len` elements `stride` apart from `base`. The kernels below each compute one lane
   and sk__klanes runs them over [outer, len, inner]. */
typedef struct sk__lane {
  sk_dtype dt;
  int64_t len, stride;
  double eps;
  const void *x, *dy; /* x: the forward's input, or its output y where the backward needs that */
  void *out;
} sk__lane;
typedef void (*sk__lane_fn)(const sk__lane *l, int64_t base);

static double sk__klane_max(const sk__lane *l, const void *p, int64_t base) {
  double m = -INFINITY;
  for (int64_t j = 0; j < l->len; j++) m = fmax(m, sk__kld(l->dt, p, base + j * l->stride));
  return m;
}
/* sum_j f(p_j) g_j (g NULL: 1), accumulated in the data's precision; f: 0 identity, 1 exp(p - shift), 2 square */
static double sk__klane_sum(const sk__lane *l, const void *p, const void *g, int kind, double shift, int64_t base) {
  double s = 0;
  for (int64_t j = 0; j < l->len; j++) {
    int64_t i = base + j * l->stride;
    double v = sk__kld(l->dt, p, i);
    v = kind == 1 ? exp(v - shift) : kind == 2 ? v * v : v;
    s = sk__krnd(l->dt, s + v * (g ? sk__kld(l->dt, g, i) : 1.0));
  }
  return s;
}

static void sk__softmax_lane(const sk__lane *l, int64_t base) {
  double m = sk__klane_max(l, l->x, base), s = sk__klane_sum(l, l->x, NULL, 1, m, base);
  for (int64_t j = 0, i = base; j < l->len; j++, i += l->stride) sk__kst(l->dt, l->out, i, exp(sk__kld(l->dt, l->x, i) - m) / s);
}
static void sk__log_softmax_lane(const sk__lane *l, int64_t base) {
  double m = sk__klane_max(l, l->x, base), ls = log(sk__klane_sum(l, l->x, NULL, 1, m, base));
  for (int64_t j = 0, i = base; j < l->len; j++, i += l->stride) sk__kst(l->dt, l->out, i, sk__kld(l->dt, l->x, i) - m - ls);
}
/* dx = y (dy - sum(dy y)) */
static void sk__softmax_bwd_lane(const sk__lane *l, int64_t base) {
  double s = sk__klane_sum(l, l->x, l->dy, 0, 0, base);
  for (int64_t j = 0, i = base; j < l->len; j++, i += l->stride)
    sk__kst(l->dt, l->out, i, sk__kld(l->dt, l->x, i) * (sk__kld(l->dt, l->dy, i) - s));
}
/* dx = dy - exp(y) sum(dy) */
static void sk__log_softmax_bwd_lane(const sk__lane *l, int64_t base) {
  double s = sk__klane_sum(l, l->dy, NULL, 0, 0, base);
  for (int64_t j = 0, i = base; j < l->len; j++, i += l->stride)
    sk__kst(l->dt, l->out, i, sk__kld(l->dt, l->dy, i) - exp(sk__kld(l->dt, l->x, i)) * s);
}
static void sk__l2n_lane(const sk__lane *l, int64_t base) {
  double d = sqrt(fmax(sk__klane_sum(l, l->x, NULL, 2, 0, base), l->eps));
  for (int64_t j = 0, i = base; j < l->len; j++, i += l->stride) sk__kst(l->dt, l->out, i, sk__kld(l->dt, l->x, i) / d);
}
/* Above epsilon, y = x / |x| and dx = (dy - y sum(dy y)) / |x|; below it the denominator is the
   constant sqrt(epsilon) and dx = dy / sqrt(epsilon). */
static void sk__l2n_bwd_lane(const sk__lane *l, int64_t base) {
  double ss = sk__klane_sum(l, l->x, NULL, 2, 0, base), d = sqrt(fmax(ss, l->eps));
  double dot = ss > l->eps ? sk__klane_sum(l, l->x, l->dy, 0, 0, base) / d : 0.0; /* sum(dy y) */
  for (int64_t j = 0, i = base; j < l->len; j++, i += l->stride)
    sk__kst(l->dt, l->out, i, (sk__kld(l->dt, l->dy, i) - sk__kld(l->dt, l->x, i) / d * dot) / d);
}

/* Validates, then runs f over every lane along axis. */
static sk_result sk__klanes(const char *fn, sk_dtype dt, int nd, const int64_t *shape, int axis, double eps,
                            const void *x, const void *dy, bool bwd, void *out, sk__lane_fn f, sk_error *err) {
  int64_t n;
  int ax;
  sk_result r;
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kshape(err, fn, "x", nd, shape, &n)) ||
      (r = sk__kaxis(err, fn, "axis", nd, axis, &ax)) || (r = sk__kptr(err, fn, x, bwd ? "forward tensor" : "x")) ||
      (bwd && (r = sk__kptr(err, fn, dy, "dy"))) || (r = sk__kptr(err, fn, out, bwd ? "dx" : "y")))
    return r;
  if (!(eps >= 0)) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: epsilon %g is negative", fn, eps);
  sk__lane l;
  l.dt = dt, l.len = shape[ax], l.stride = sk__kprod(shape, ax + 1, nd), l.eps = eps, l.x = x, l.dy = dy, l.out = out;
  int64_t outer = sk__kprod(shape, 0, ax);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < l.stride; i++) f(&l, o * l.len * l.stride + i);
  return SK_OK;
}

SK_API sk_result sk_kern_softmax(sk_dtype dt, int nd, const int64_t *shape, int axis, const void *x, void *y,
                                 sk_error *err) {
  return sk__klanes("sk_kern_softmax", dt, nd, shape, axis, 0, x, NULL, false, y, sk__softmax_lane, err);
}
SK_API sk_result sk_kern_softmax_bwd(sk_dtype dt, int nd, const int64_t *shape, int axis, const void *y,
                                     const void *dy, void *dx, sk_error *err) {
  return sk__klanes("sk_kern_softmax_bwd", dt, nd, shape, axis, 0, y, dy, true, dx, sk__softmax_bwd_lane, err);
}
SK_API sk_result sk_kern_log_softmax(sk_dtype dt, int nd, const int64_t *shape, int axis, const void *x, void *y,
                                     sk_error *err) {
  return sk__klanes("sk_kern_log_softmax", dt, nd, shape, axis, 0, x, NULL, false, y, sk__log_softmax_lane, err);
}
SK_API sk_result sk_kern_log_softmax_bwd(sk_dtype dt, int nd, const int64_t *shape, int axis, const void *y,
                                         const void *dy, void *dx, sk_error *err) {
  return sk__klanes("sk_kern_log_softmax_bwd", dt, nd, shape, axis, 0, y, dy, true, dx, sk__log_softmax_bwd_lane, err);
}
SK_API sk_result sk_kern_l2_normalize(sk_dtype dt, int nd, const int64_t *shape, int axis, double epsilon,
                                      const void *x, void *y, sk_error *err) {
  return sk__klanes("sk_kern_l2_normalize", dt, nd, shape, axis, epsilon, x, NULL, false, y, sk__l2n_lane, err);
}
SK_API sk_result sk_kern_l2_normalize_bwd(sk_dtype dt, int nd, const int64_t *shape, int axis, double epsilon,
                                          const void *x, const void *dy, void *dx, sk_error *err) {
  return sk__klanes("sk_kern_l2_normalize_bwd", dt, nd, shape, axis, epsilon, x, dy, true, dx, sk__l2n_bwd_lane, err);
}

/* ---- LayerNorm ----------------------------------------------------------------------------- */

/* x seen as [rows, cols], cols = the normalised dims' product. */
static sk_result sk__kln_prep(const char *fn, sk_dtype dt, int nd, const int64_t *shape, int begin, double eps,
                              const void *x, int64_t *rows, int64_t *cols, sk_error *err) {
  int64_t n;
  int b;
  sk_result r;
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kshape(err, fn, "x", nd, shape, &n)) ||
      (r = sk__kaxis(err, fn, "begin_norm_axis", nd, begin, &b)) || (r = sk__kptr(err, fn, x, "x")))
    return r;
  if (!(eps >= 0)) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: epsilon %g is negative", fn, eps);
  *rows = sk__kprod(shape, 0, b), *cols = sk__kprod(shape, b, nd);
  return SK_OK;
}

SK_API sk_result sk_kern_layer_norm(sk_dtype dt, int nd, const int64_t *shape, int begin_norm_axis, double epsilon,
                                    const void *x, const void *gamma, const void *beta, void *y, void *mean,
                                    void *variance, sk_error *err) {
  static const char *fn = "sk_kern_layer_norm";
  int64_t rows, cols;
  sk_result r;
  if ((r = sk__kln_prep(fn, dt, nd, shape, begin_norm_axis, epsilon, x, &rows, &cols, err)) ||
      (r = sk__kptr(err, fn, y, "y")))
    return r;
  sk__lane l = {dt, cols, 1, 0, x, NULL, y};
  for (int64_t row = 0; row < rows; row++) {
    int64_t base = row * cols;
    double mu = cols ? sk__klane_sum(&l, x, NULL, 0, 0, base) / (double)cols : 0.0, var = 0;
    for (int64_t j = 0; j < cols; j++) {
      double d = sk__kld(dt, x, base + j) - mu;
      var = sk__krnd(dt, var + d * d);
    }
    var = cols ? var / (double)cols : 0.0;
    double rstd = 1.0 / sqrt(var + epsilon);
    for (int64_t j = 0; j < cols; j++) {
      double v = (sk__kld(dt, x, base + j) - mu) * rstd;
      sk__kst(dt, y, base + j, v * (gamma ? sk__kld(dt, gamma, j) : 1.0) + (beta ? sk__kld(dt, beta, j) : 0.0));
    }
    if (mean) sk__kst(dt, mean, row, mu);
    if (variance) sk__kst(dt, variance, row, var);
  }
  return SK_OK;
}

/* With xh = (x - mean) rstd and g = dy gamma: dx = rstd (g - mean(g) - xh mean(g xh)),
   dgamma += dy xh, dbeta += dy. */
SK_API sk_result sk_kern_layer_norm_bwd(sk_dtype dt, int nd, const int64_t *shape, int begin_norm_axis,
                                        double epsilon, const void *x, const void *dy, const void *mean,
                                        const void *variance, const void *gamma, void *dx, void *dgamma, void *dbeta,
                                        sk_error *err) {
  static const char *fn = "sk_kern_layer_norm_bwd";
  int64_t rows, cols;
  sk_result r;
  if ((r = sk__kln_prep(fn, dt, nd, shape, begin_norm_axis, epsilon, x, &rows, &cols, err)) ||
      (r = sk__kptr(err, fn, dy, "dy")) || (r = sk__kptr(err, fn, mean, "mean")) ||
      (r = sk__kptr(err, fn, variance, "variance")))
    return r;
  if (dgamma) sk__kzero(dt, dgamma, cols);
  if (dbeta) sk__kzero(dt, dbeta, cols);
  for (int64_t row = 0; row < rows; row++) {
    int64_t base = row * cols;
    double mu = sk__kld(dt, mean, row), rstd = 1.0 / sqrt(sk__kld(dt, variance, row) + epsilon), sg = 0, sgx = 0;
    for (int64_t j = 0; j < cols; j++) {
      double xh = (sk__kld(dt, x, base + j) - mu) * rstd, g = sk__kld(dt, dy, base + j);
      if (dgamma) sk__kadd(dt, dgamma, j, g * xh);
      if (dbeta) sk__kadd(dt, dbeta, j, g);
      g *= gamma ? sk__kld(dt, gamma, j) : 1.0;
      sg = sk__krnd(dt, sg + g), sgx = sk__krnd(dt, sgx + g * xh);
    }
    if (!dx) continue;
    sg /= (double)cols, sgx /= (double)cols;
    for (int64_t j = 0; j < cols; j++) {
      double xh = (sk__kld(dt, x, base + j) - mu) * rstd;
      double g = sk__kld(dt, dy, base + j) * (gamma ? sk__kld(dt, gamma, j) : 1.0);
      sk__kst(dt, dx, base + j, rstd * (g - sg - xh * sgx));
    }
  }
  return SK_OK;
}

/* ---- RmsNorm ------------------------------------------------------------------------------- */

/* x seen as [rows, cols] as LayerNorm's; gamma [cols] is required, epsilon in (0, 1]. */
static sk_result sk__krms_prep(const char *fn, sk_dtype dt, int nd, const int64_t *shape, int begin, double eps,
                               const void *x, const void *gamma, int64_t *rows, int64_t *cols, sk_error *err) {
  sk_result r;
  if ((r = sk__kln_prep(fn, dt, nd, shape, begin, 0.0, x, rows, cols, err)) || (r = sk__kptr(err, fn, gamma, "gamma")))
    return r;
  if (!(eps > 0 && eps <= 1)) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: epsilon %g is not in (0, 1]", fn, eps);
  return SK_OK;
}

SK_API sk_result sk_kern_rms_norm(sk_dtype dt, int nd, const int64_t *shape, int begin_norm_axis, double epsilon,
                                  const void *x, const void *gamma, void *y, void *rstd, sk_error *err) {
  static const char *fn = "sk_kern_rms_norm";
  int64_t rows, cols;
  sk_result r;
  if ((r = sk__krms_prep(fn, dt, nd, shape, begin_norm_axis, epsilon, x, gamma, &rows, &cols, err)) ||
      (r = sk__kptr(err, fn, y, "y")))
    return r;
  for (int64_t row = 0; row < rows; row++) {
    int64_t base = row * cols;
    double ss = 0;
    for (int64_t j = 0; j < cols; j++) {
      double v = sk__kld(dt, x, base + j);
      ss = sk__krnd(dt, ss + v * v);
    }
    double rs = 1.0 / sqrt((cols ? ss / (double)cols : 0.0) + epsilon);
    for (int64_t j = 0; j < cols; j++) sk__kst(dt, y, base + j, sk__kld(dt, x, base + j) * rs * sk__kld(dt, gamma, j));
    if (rstd) sk__kst(dt, rstd, row, rs);
  }
  return SK_OK;
}

/* The backward reads rstd, not epsilon: the prep's epsilon is any valid one. */
SK_API sk_result sk_kern_rms_norm_bwd(sk_dtype dt, int nd, const int64_t *shape, int begin_norm_axis, const void *x,
                                      const void *dy, const void *rstd, const void *gamma, void *dx, void *dgamma,
                                      sk_error *err) {
  static const char *fn = "sk_kern_rms_norm_bwd";
  int64_t rows, cols;
  sk_result r;
  if ((r = sk__krms_prep(fn, dt, nd, shape, begin_norm_axis, 1.0, x, gamma, &rows, &cols, err)) ||
      (r = sk__kptr(err, fn, dy, "dy")) || (r = sk__kptr(err, fn, rstd, "rstd")))
    return r;
  if (dgamma) sk__kzero(dt, dgamma, cols);
  for (int64_t row = 0; row < rows; row++) {
    int64_t base = row * cols;
    double rs = sk__kld(dt, rstd, row), sgx = 0;
    for (int64_t j = 0; j < cols; j++) {
      double xh = sk__kld(dt, x, base + j) * rs, g = sk__kld(dt, dy, base + j);
      if (dgamma) sk__kadd(dt, dgamma, j, g * xh);
      sgx = sk__krnd(dt, sgx + g * sk__kld(dt, gamma, j) * xh);
    }
    if (!dx) continue;
    sgx /= (double)cols;
    for (int64_t j = 0; j < cols; j++) {
      double xh = sk__kld(dt, x, base + j) * rs, g = sk__kld(dt, dy, base + j) * sk__kld(dt, gamma, j);
      sk__kst(dt, dx, base + j, rs * (g - xh * sgx));
    }
  }
  return SK_OK;
}

/* ---- softmax cross-entropy ------------------------------------------------------------------- */

/* One row's cross-entropy -sum_c label_c log softmax_c, with dense labels (row `base` of
   labels) or, when labels is NULL, the one class cls; grad (if not NULL) receives
   scale (softmax - label) in the row. */
static double sk__kce_row(sk_dtype dt, int64_t C, const void *logits, const void *labels, int64_t cls, int64_t base,
                          double scale, void *grad) {
  sk__lane l = {dt, C, 1, 0, logits, NULL, NULL};
  double m = sk__klane_max(&l, logits, base), ls = log(sk__klane_sum(&l, logits, NULL, 1, m, base)), loss = 0;
  for (int64_t c = 0; c < C; c++) {
    double lp = sk__kld(dt, logits, base + c) - m - ls;
    double lab = labels ? sk__kld(dt, labels, base + c) : c == cls ? 1.0 : 0.0;
    loss = sk__krnd(dt, loss - lab * lp);
    if (grad) sk__kst(dt, grad, base + c, scale * (exp(lp) - lab));
  }
  return loss;
}

/* logits [B, C]; checks the buffers every CE kernel reads. */
static sk_result sk__kce_prep(const char *fn, sk_dtype dt, int nd, const int64_t *shape, const void *logits,
                              int64_t *B, int64_t *C, sk_error *err) {
  int64_t n;
  sk_result r;
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kshape(err, fn, "logits", nd, shape, &n)) ||
      (r = sk__kptr(err, fn, logits, "logits")))
    return r;
  if (nd != 2) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: logits have %d dims (takes [B, C])", fn, nd);
  *B = shape[0], *C = shape[1];
  return SK_OK;
}

SK_API sk_result sk_kern_softmax_ce_logits(sk_dtype dt, int nd, const int64_t *shape, const void *logits,
                                           const void *labels, void *loss, void *dlogits, sk_error *err) {
  static const char *fn = "sk_kern_softmax_ce_logits";
  int64_t B, C;
  sk_result r;
  if ((r = sk__kce_prep(fn, dt, nd, shape, logits, &B, &C, err)) || (r = sk__kptr(err, fn, labels, "labels")) ||
      (r = sk__kptr(err, fn, loss, "loss")))
    return r;
  for (int64_t b = 0; b < B; b++) sk__kst(dt, loss, b, sk__kce_row(dt, C, logits, labels, 0, b * C, 1.0, dlogits));
  return SK_OK;
}

SK_API sk_result sk_kern_softmax_ce_logits_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *dloss,
                                               const void *dlogits, void *dx, sk_error *err) {
  static const char *fn = "sk_kern_softmax_ce_logits_bwd";
  int64_t B, C;
  sk_result r;
  if ((r = sk__kce_prep(fn, dt, nd, shape, dlogits, &B, &C, err)) || (r = sk__kptr(err, fn, dloss, "dloss")) ||
      (r = sk__kptr(err, fn, dx, "dx")))
    return r;
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++)
      sk__kst(dt, dx, b * C + c, sk__kld(dt, dloss, b) * sk__kld(dt, dlogits, b * C + c));
  return SK_OK;
}

/* The fused loss, dense (label_dt SK_F32/SK_F64 = dt) or sparse (SK_I32 / SK_I64): validates,
   then either sums the rows' losses / global_batch into loss, or writes the gradient into dx. */
static sk_result sk__kce_fused(const char *fn, sk_dtype dt, int nd, const int64_t *shape, const void *logits,
                               bool sparse, sk_dtype label_dt, const void *labels, int64_t global_batch,
                               const void *dloss, void *loss, void *dx, sk_error *err) {
  int64_t B, C;
  sk_result r;
  if ((r = sk__kce_prep(fn, dt, nd, shape, logits, &B, &C, err)) || (r = sk__kptr(err, fn, labels, "labels")) ||
      (sparse && (r = sk__kidt(err, fn, label_dt))) || (r = sk__kptr(err, fn, loss ? loss : dx, loss ? "loss" : "dx")))
    return r;
  if (global_batch < 1 || global_batch < B)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: global_batch %lld is below the local batch %lld", fn,
                    (long long)global_batch, (long long)B);
  for (int64_t b = 0; sparse && b < B; b++) {
    int64_t c = sk__kidx(label_dt, labels, b);
    if (c < 0 || c >= C)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: label %lld of row %lld is outside [0, %lld)", fn,
                      (long long)c, (long long)b, (long long)C);
  }
  double scale = (dloss ? sk__kld(dt, dloss, 0) : 1.0) / (double)global_batch, sum = 0;
  for (int64_t b = 0; b < B; b++) {
    int64_t cls = sparse ? sk__kidx(label_dt, labels, b) : 0;
    double l = sk__kce_row(dt, C, logits, sparse ? NULL : labels, cls, b * C, scale, loss ? NULL : dx);
    sum = sk__krnd(dt, sum + l);
  }
  if (loss) sk__kst(dt, loss, 0, sum / (double)global_batch);
  return SK_OK;
}

SK_API sk_result sk_kern_softmax_ce(sk_dtype dt, int nd, const int64_t *shape, const void *logits, const void *labels,
                                    int64_t global_batch, void *loss, sk_error *err) {
  static const char *fn = "sk_kern_softmax_ce";
  sk_result r = sk__kptr(err, fn, loss, "loss");
  return r ? r : sk__kce_fused(fn, dt, nd, shape, logits, false, dt, labels, global_batch, NULL, loss, NULL, err);
}
SK_API sk_result sk_kern_softmax_ce_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *logits,
                                        const void *labels, int64_t global_batch, const void *dloss, void *dx,
                                        sk_error *err) {
  static const char *fn = "sk_kern_softmax_ce_bwd";
  sk_result r = sk__kptr(err, fn, dx, "dx");
  return r ? r : sk__kce_fused(fn, dt, nd, shape, logits, false, dt, labels, global_batch, dloss, NULL, dx, err);
}
SK_API sk_result sk_kern_sparse_softmax_ce(sk_dtype dt, int nd, const int64_t *shape, const void *logits,
                                           sk_dtype label_dt, const void *labels, int64_t global_batch, void *loss,
                                           sk_error *err) {
  static const char *fn = "sk_kern_sparse_softmax_ce";
  sk_result r = sk__kptr(err, fn, loss, "loss");
  return r ? r : sk__kce_fused(fn, dt, nd, shape, logits, true, label_dt, labels, global_batch, NULL, loss, NULL, err);
}
SK_API sk_result sk_kern_sparse_softmax_ce_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *logits,
                                               sk_dtype label_dt, const void *labels, int64_t global_batch,
                                               const void *dloss, void *dx, sk_error *err) {
  static const char *fn = "sk_kern_sparse_softmax_ce_bwd";
  sk_result r = sk__kptr(err, fn, dx, "dx");
  return r ? r : sk__kce_fused(fn, dt, nd, shape, logits, true, label_dt, labels, global_batch, dloss, NULL, dx, err);
}

/* ---- MAELoss, VirtualLoss ------------------------------------------------------------------ */

/* Checks both tensors and walks the prediction's shape (w: o0 the prediction's offset, o1 the
   label's, repeated along the dims it broadcasts); the label must broadcast TO the prediction. */
static sk_result sk__kmae_prep(const char *fn, sk_dtype dt, int nd, const int64_t *shape, const void *pred, int label_nd,
                               const int64_t *label_shape, const void *label, int64_t global_count, sk__walk *w,
                               int64_t *n, sk_error *err) {
  int64_t nl;
  sk_result r;
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kshape(err, fn, "prediction", nd, shape, n)) ||
      (r = sk__kshape(err, fn, "label", label_nd, label_shape, &nl)) || (r = sk__kptr(err, fn, pred, "prediction")) ||
      (r = sk__kptr(err, fn, label, "label")))
    return r;
  if (label_nd > nd)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: the label has more dims (%d) than the prediction (%d)", fn, label_nd, nd);
  for (int j = 0; j < label_nd; j++) {
    int64_t l = label_shape[j], p = shape[nd - label_nd + j];
    if (l != p && l != 1)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: label dim %d (%lld) does not broadcast to prediction dim %d (%lld)",
                      fn, j, (long long)l, nd - label_nd + j, (long long)p);
  }
  if (global_count < 1 || global_count < *n)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: global_count %lld is below the local count %lld", fn,
                    (long long)global_count, (long long)*n);
  return sk__kbcast(err, fn, nd, shape, label_nd, label_shape, w);
}

SK_API sk_result sk_kern_mae_loss(sk_dtype dt, int nd, const int64_t *shape, const void *pred, int label_nd,
                                  const int64_t *label_shape, const void *label, int64_t global_count, void *loss,
                                  sk_error *err) {
  static const char *fn = "sk_kern_mae_loss";
  int64_t n;
  sk__walk w;
  sk_result r;
  if ((r = sk__kmae_prep(fn, dt, nd, shape, pred, label_nd, label_shape, label, global_count, &w, &n, err)) ||
      (r = sk__kptr(err, fn, loss, "loss")))
    return r;
  double s = 0;
  for (int64_t i = 0; i < n; i++, sk__walk_next(&w))
    s = sk__krnd(dt, s + fabs(sk__kld(dt, pred, w.o0) - sk__kld(dt, label, w.o1)));
  sk__kst(dt, loss, 0, s / (double)global_count);
  return SK_OK;
}

SK_API sk_result sk_kern_mae_loss_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *pred, int label_nd,
                                      const int64_t *label_shape, const void *label, int64_t global_count,
                                      const void *dloss, void *dpred, void *dlabel, sk_error *err) {
  static const char *fn = "sk_kern_mae_loss_bwd";
  int64_t n;
  sk__walk w;
  sk_result r;
  if ((r = sk__kmae_prep(fn, dt, nd, shape, pred, label_nd, label_shape, label, global_count, &w, &n, err))) return r;
  double scale = (dloss ? sk__kld(dt, dloss, 0) : 1.0) / (double)global_count;
  if (dlabel) sk__kzero(dt, dlabel, sk__kprod(label_shape, 0, label_nd)); /* summed where it broadcasts */
  for (int64_t i = 0; i < n; i++, sk__walk_next(&w)) {
    double d = sk__kld(dt, pred, w.o0) - sk__kld(dt, label, w.o1), g = d > 0 ? scale : d < 0 ? -scale : 0.0;
    if (dpred) sk__kst(dt, dpred, w.o0, g);
    if (dlabel) sk__kadd(dt, dlabel, w.o1, -g);
  }
  return SK_OK;
}

SK_API sk_result sk_kern_virtual_loss(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *loss,
                                      sk_error *err) {
  static const char *fn = "sk_kern_virtual_loss";
  int64_t n;
  sk_result r;
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kshape(err, fn, "x", nd, shape, &n)) || (r = sk__kptr(err, fn, x, "x")) ||
      (r = sk__kptr(err, fn, loss, "loss")))
    return r;
  double s = 0;
  for (int64_t i = 0; i < n; i++) s = sk__krnd(dt, s + sk__kld(dt, x, i));
  sk__kst(dt, loss, 0, s);
  return SK_OK;
}

SK_API sk_result sk_kern_virtual_loss_bwd(sk_dtype dt, int nd, const int64_t *shape, const void *dloss, void *dx,
                                          sk_error *err) {
  static const char *fn = "sk_kern_virtual_loss_bwd";
  int64_t n;
  sk_result r;
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kshape(err, fn, "x", nd, shape, &n)) || (r = sk__kptr(err, fn, dx, "dx")))
    return r;
  double g = dloss ? sk__kld(dt, dloss, 0) : 1.0;
  for (int64_t i = 0; i < n; i++) sk__kst(dt, dx, i, g);
  return SK_OK;
}

/* ---- ReduceSum, ReduceMean, ReduceMax ------------------------------------------------------- */

/* The reduced dims as a mask (naxes 0: all). */
static sk_result sk__kaxes(sk_error *err, const char *fn, int nd, int naxes, const int *axes, bool *mask) {
  sk_result r;
  if (naxes < 0 || naxes > nd)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: naxes %d is not in 0..%d", fn, naxes, nd);
  if (naxes > 0 && (r = sk__kptr(err, fn, axes, "axes"))) return r;
  for (int d = 0; d < nd; d++) mask[d] = naxes == 0;
  for (int i = 0; i < naxes; i++) {
    int ax;
    if ((r = sk__kaxis(err, fn, "axis", nd, axes[i], &ax))) return r;
    if (mask[ax]) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: axis %d is given twice", fn, axes[i]);
    mask[ax] = true;
  }
  return SK_OK;
}

SK_API sk_result sk_kern_reduce_shape(int nd, const int64_t *shape, int naxes, const int *axes, bool keep_dims,
                                      int *out_nd, int64_t *out_shape, sk_error *err) {
  static const char *fn = "sk_kern_reduce_shape";
  bool mask[SK_MAX_DIMS];
  int64_t n;
  sk_result r;
  if ((r = sk__kshape(err, fn, "x", nd, shape, &n)) || (r = sk__kaxes(err, fn, nd, naxes, axes, mask)) ||
      (r = sk__kptr(err, fn, out_nd, "out_nd")) || (r = sk__kptr(err, fn, out_shape, "out_shape")))
    return r;
  int k = 0;
  for (int d = 0; d < nd; d++)
    if (!mask[d] || keep_dims) out_shape[k++] = mask[d] ? 1 : shape[d];
  *out_nd = k;
  return SK_OK;
}

/* A reduction's walk over x: o0 is the output slot of each input element. */
typedef struct sk__kred {
  sk__walk w;
  int64_t nin, nout, reduced; /* elements of x, of y, and reduced into each y */
} sk__kred;

static sk_result sk__kred_prep(const char *fn, sk_dtype dt, int nd, const int64_t *shape, int naxes, const int *axes,
                               sk__kred *p, sk_error *err) {
  bool mask[SK_MAX_DIMS];
  int64_t oshape[SK_MAX_DIMS] = {0}, ostr[SK_MAX_DIMS];
  sk_result r;
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kshape(err, fn, "x", nd, shape, &p->nin)) ||
      (r = sk__kaxes(err, fn, nd, naxes, axes, mask)))
    return r;
  for (int d = 0; d < nd; d++) oshape[d] = mask[d] ? 1 : shape[d];
  sk__kstrides(nd, oshape, ostr);
  sk__walk_init(&p->w, nd, shape);
  p->reduced = 1;
  for (int d = 0; d < nd; d++) {
    p->w.s0[d] = mask[d] ? 0 : ostr[d];
    if (mask[d]) p->reduced *= shape[d];
  }
  p->nout = sk__kprod(oshape, 0, nd);
  return SK_OK;
}

static sk_result sk__kredop(sk_error *err, const char *fn, sk_redop op, int64_t divisor) {
  if (op != SK_SUM && op != SK_AVG && op != SK_MAX)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: reduction %s is not supported (sum, avg, max)", fn,
                    sk_redop_name(op));
  if (divisor < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: divisor %lld is negative", fn, (long long)divisor);
  return SK_OK;
}

SK_API sk_result sk_kern_reduce(sk_redop op, sk_dtype dt, int nd, const int64_t *shape, int naxes, const int *axes,
                                int64_t divisor, const void *x, void *y, sk_error *err) {
  static const char *fn = "sk_kern_reduce";
  sk__kred p;
  sk_result r;
  if ((r = sk__kredop(err, fn, op, divisor)) || (r = sk__kred_prep(fn, dt, nd, shape, naxes, axes, &p, err)) ||
      (r = sk__kptr(err, fn, x, "x")) || (r = sk__kptr(err, fn, y, "y")))
    return r;
  for (int64_t j = 0; j < p.nout; j++) sk__kst(dt, y, j, op == SK_MAX ? -INFINITY : 0.0);
  for (int64_t i = 0; i < p.nin; i++, sk__walk_next(&p.w)) {
    double v = sk__kld(dt, x, i);
    if (op == SK_MAX)
      sk__kst(dt, y, p.w.o0, fmax(v, sk__kld(dt, y, p.w.o0)));
    else
      sk__kadd(dt, y, p.w.o0, v);
  }
  double div = (double)(divisor ? divisor : p.reduced);
  for (int64_t j = 0; op == SK_AVG && j < p.nout; j++) sk__kst(dt, y, j, sk__kld(dt, y, j) / div);
  return SK_OK;
}

/* count[j] = #{x == y[j]}; p's walk is consumed. */
static void sk__kties(sk_dtype dt, sk__kred *p, const void *x, const void *y, void *count) {
  sk__kzero(dt, count, p->nout);
  for (int64_t i = 0; i < p->nin; i++, sk__walk_next(&p->w))
    if (sk__kld(dt, x, i) == sk__kld(dt, y, p->w.o0)) sk__kadd(dt, count, p->w.o0, 1.0);
  sk__walk_rewind(&p->w);
}

SK_API sk_result sk_kern_reduce_max_ties(sk_dtype dt, int nd, const int64_t *shape, int naxes, const int *axes,
                                         const void *x, const void *y, void *count, sk_error *err) {
  static const char *fn = "sk_kern_reduce_max_ties";
  sk__kred p;
  sk_result r;
  if ((r = sk__kred_prep(fn, dt, nd, shape, naxes, axes, &p, err)) || (r = sk__kptr(err, fn, x, "x")) ||
      (r = sk__kptr(err, fn, y, "y")) || (r = sk__kptr(err, fn, count, "count")))
    return r;
  sk__kties(dt, &p, x, y, count);
  return SK_OK;
}

SK_API sk_result sk_kern_reduce_bwd(sk_redop op, sk_dtype dt, int nd, const int64_t *shape, int naxes,
                                    const int *axes, int64_t divisor, const void *x, const void *y,
                                    const void *count, const void *dy, void *dx, sk_error *err) {
  static const char *fn = "sk_kern_reduce_bwd";
  sk__kred p;
  sk_result r;
  if ((r = sk__kredop(err, fn, op, divisor)) || (r = sk__kred_prep(fn, dt, nd, shape, naxes, axes, &p, err)) ||
      (r = sk__kptr(err, fn, dy, "dy")) || (r = sk__kptr(err, fn, dx, "dx")) ||
      (op == SK_MAX && ((r = sk__kptr(err, fn, x, "x")) || (r = sk__kptr(err, fn, y, "y")))))
    return r;
  void *own = NULL; /* the local tie count when the caller gave none */
  if (op == SK_MAX && !count) {
    if (!(own = sk__alloc(NULL, (size_t)p.nout * sk_dtype_size(dt), 16)))
      return sk__fail(err, SK_ERR_OUT_OF_MEMORY, "%s: no memory for the tie count", fn);
    sk__kties(dt, &p, x, y, own);
    count = own;
  }
  double div = (double)(divisor ? divisor : p.reduced);
  for (int64_t i = 0; i < p.nin; i++, sk__walk_next(&p.w)) {
    double g = sk__kld(dt, dy, p.w.o0);
    if (op == SK_AVG) g /= div;
    if (op == SK_MAX)
      g = sk__kld(dt, x, i) == sk__kld(dt, y, p.w.o0) ? g / (sk__kld(dt, count, p.w.o0) + 1e-24) : 0.0;
    sk__kst(dt, dx, i, g);
  }
  sk__free(NULL, own);
  return SK_OK;
}

/* ---- Transpose, copies ------------------------------------------------------------------------ */

/* Any valid dtype: these kernels only move bytes. */
static sk_result sk__kany(sk_error *err, const char *fn, sk_dtype dt) {
  if (sk_dtype_valid(dt)) return SK_OK;
  return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: dtype %d is not a dtype", fn, (int)dt);
}

/* perm must hold each of 0..nd-1 once; inv receives the inverse permutation. */
static sk_result sk__kperm(sk_error *err, const char *fn, int nd, const int *perm, int *inv) {
  sk_result r;
  if (nd > 0 && (r = sk__kptr(err, fn, perm, "perm"))) return r;
  for (int d = 0; d < nd; d++) inv[d] = -1;
  for (int i = 0; i < nd; i++) {
    if (perm[i] < 0 || perm[i] >= nd || inv[perm[i]] >= 0)
      return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: perm[%d] = %d is not a permutation of 0..%d", fn, i, perm[i],
                      nd - 1);
    inv[perm[i]] = i;
  }
  return SK_OK;
}

/* y = x transposed by perm, x of shape `shape`; elements of es bytes. */
static void sk__ktranspose(size_t es, int nd, const int64_t *shape, const int *perm, const void *x, void *y) {
  int64_t st[SK_MAX_DIMS] = {0}, oshape[SK_MAX_DIMS] = {0};
  sk__walk w;
  sk__kstrides(nd, shape, st);
  for (int i = 0; i < nd; i++) oshape[i] = shape[perm[i]];
  sk__walk_init(&w, nd, oshape);
  for (int i = 0; i < nd; i++) w.s0[i] = st[perm[i]];
  int64_t n = sk__kprod(shape, 0, nd);
  for (int64_t j = 0; j < n; j++, sk__walk_next(&w)) memcpy(SK__KAT_W(y, j, es), SK__KAT(x, w.o0, es), es);
}

static sk_result sk__ktranspose_prep(const char *fn, sk_dtype dt, int nd, const int64_t *shape, const int *perm,
                                     const void *in, void *out, int *inv, sk_error *err) {
  int64_t n;
  sk_result r;
  if ((r = sk__kany(err, fn, dt)) || (r = sk__kshape(err, fn, "x", nd, shape, &n)) ||
      (r = sk__kperm(err, fn, nd, perm, inv)) || (r = sk__kptr(err, fn, in, "input")) ||
      (r = sk__kptr(err, fn, out, "output")))
    return r;
  if (in == out && n > 1) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: input and output overlap", fn);
  return SK_OK;
}

SK_API sk_result sk_kern_transpose(sk_dtype dt, int nd, const int64_t *shape, const int *perm, const void *x, void *y,
                                   sk_error *err) {
  int inv[SK_MAX_DIMS];
  sk_result r = sk__ktranspose_prep("sk_kern_transpose", dt, nd, shape, perm, x, y, inv, err);
  if (!r) sk__ktranspose(sk_dtype_size(dt), nd, shape, perm, x, y);
  return r;
}

SK_API sk_result sk_kern_transpose_bwd(sk_dtype dt, int nd, const int64_t *shape, const int *perm, const void *dy,
                                       void *dx, sk_error *err) {
  int inv[SK_MAX_DIMS];
  int64_t oshape[SK_MAX_DIMS] = {0};
  sk_result r = sk__ktranspose_prep("sk_kern_transpose_bwd", dt, nd, shape, perm, dy, dx, inv, err);
  if (r) return r;
  for (int i = 0; i < nd; i++) oshape[i] = shape[perm[i]];
  sk__ktranspose(sk_dtype_size(dt), nd, oshape, inv, dy, dx);
  return SK_OK;
}

SK_API sk_result sk_kern_copy(sk_dtype dt, int nd, const int64_t *shape, const void *x, void *y, sk_error *err) {
  static const char *fn = "sk_kern_copy";
  int64_t n;
  sk_result r;
  if ((r = sk__kany(err, fn, dt)) || (r = sk__kshape(err, fn, "x", nd, shape, &n))) return r;
  /* the NULL checks written out here, not through sk__kptr: the static analyzer stops inlining
     a few calls deep (the trainer reaches this through four), and then cannot see them */
  if (!x || !y) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, x ? "y" : "x");
  if (x != y) memmove(y, x, (size_t)n * sk_dtype_size(dt));
  return SK_OK;
}

/* ---- OneHot, Gather ------------------------------------------------------------------------- */

SK_API sk_result sk_kern_one_hot(sk_dtype idx_dt, int nd, const int64_t *shape, const void *indices, int64_t depth,
                                 int64_t class_offset, int64_t local_depth, int axis, sk_dtype dt, double on_value,
                                 double off_value, void *out, sk_error *err) {
  static const char *fn = "sk_kern_one_hot";
  int64_t n;
  sk_result r;
  if ((r = sk__kidt(err, fn, idx_dt)) || (r = sk__kdt(err, fn, dt)) ||
      (r = sk__kshape(err, fn, "indices", nd, shape, &n)) || (r = sk__kptr(err, fn, indices, "indices")) ||
      (r = sk__kptr(err, fn, out, "out")))
    return r;
  if (depth < 0 || class_offset < 0 || local_depth < 0 || class_offset > depth - local_depth)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: classes [%lld, %lld + %lld) are not within depth %lld", fn,
                    (long long)class_offset, (long long)class_offset, (long long)local_depth, (long long)depth);
  if (axis < -1 || axis > nd)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: axis %d is not in -1..%d", fn, axis, nd);
  int ax = axis < 0 ? nd : axis;
  int64_t outer = sk__kprod(shape, 0, ax), inner = sk__kprod(shape, ax, nd);
  for (int64_t o = 0, j = 0; o < outer; o++)
    for (int64_t c = 0; c < local_depth; c++)
      for (int64_t i = 0; i < inner; i++, j++)
        sk__kst(dt, out, j, sk__kidx(idx_dt, indices, o * inner + i) == class_offset + c ? on_value : off_value);
  return SK_OK;
}

/* The table as [outer, rows, inner] around axis; nidx = the indices' count. */
typedef struct sk__kgather {
  int64_t outer, rows, inner, nidx;
} sk__kgather;

static sk_result sk__kgather_prep(const char *fn, int tnd, const int64_t *tshape, const void *table, sk_dtype idx_dt,
                                  int ind, const int64_t *ishape, const void *indices, int axis, int64_t offset,
                                  const void *out, sk__kgather *g, sk_error *err) {
  int64_t nt;
  int ax;
  sk_result r;
  if ((r = sk__kidt(err, fn, idx_dt)) || (r = sk__kshape(err, fn, "table", tnd, tshape, &nt)) ||
      (r = sk__kshape(err, fn, "indices", ind, ishape, &g->nidx)) || (r = sk__kptr(err, fn, table, "table")) ||
      (r = sk__kptr(err, fn, indices, "indices")) || (r = sk__kptr(err, fn, out, "output")) ||
      (r = sk__kaxis(err, fn, "axis", tnd, axis, &ax)))
    return r;
  if (offset < 0) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: offset %lld is negative", fn, (long long)offset);
  if (tnd - 1 + ind > SK_MAX_DIMS)
    return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: the output would have %d dims (max %d)", fn, tnd - 1 + ind,
                    SK_MAX_DIMS);
  g->outer = sk__kprod(tshape, 0, ax), g->rows = tshape[ax], g->inner = sk__kprod(tshape, ax + 1, tnd);
  return SK_OK;
}

SK_API sk_result sk_kern_gather(sk_dtype dt, int tnd, const int64_t *tshape, const void *table, sk_dtype idx_dt,
                                int ind, const int64_t *ishape, const void *indices, int axis, int64_t offset,
                                void *out, sk_error *err) {
  static const char *fn = "sk_kern_gather";
  sk__kgather g;
  sk_result r;
  if ((r = sk__kany(err, fn, dt)) ||
      (r = sk__kgather_prep(fn, tnd, tshape, table, idx_dt, ind, ishape, indices, axis, offset, out, &g, err)))
    return r;
  /* sk__kgather_prep refused NULL buffers; said again where the static analyzer, which stops
     inlining a few calls deep, sees it */
  if (!table || !indices || !out) return sk__fail(err, SK_ERR_INVALID_ARGUMENT, "%s: a buffer is NULL", fn);
  size_t es = sk_dtype_size(dt), run = (size_t)g.inner * es; /* one index copies `inner` contiguous elements */
  for (int64_t o = 0; o < g.outer; o++)
    for (int64_t j = 0; j < g.nidx; j++) {
      int64_t row = sk__kidx(idx_dt, indices, j) - offset;
      char *dst = SK__KAT_W(out, (o * g.nidx + j) * g.inner, es);
      if (row >= 0 && row < g.rows)
        memcpy(dst, SK__KAT(table, (o * g.rows + row) * g.inner, es), run);
      else
        memset(dst, 0, run); /* another device holds this row (or none does) */
    }
  return SK_OK;
}

SK_API sk_result sk_kern_gather_bwd(sk_dtype dt, int tnd, const int64_t *tshape, sk_dtype idx_dt, int ind,
                                    const int64_t *ishape, const void *indices, int axis, int64_t offset,
                                    const void *dout, void *dtable, sk_error *err) {
  static const char *fn = "sk_kern_gather_bwd";
  sk__kgather g;
  sk_result r;
  if ((r = sk__kdt(err, fn, dt)) || (r = sk__kptr(err, fn, dtable, "dtable")) ||
      (r = sk__kgather_prep(fn, tnd, tshape, dout, idx_dt, ind, ishape, indices, axis, offset, dtable, &g, err)))
    return r;
  sk__kzero(dt, dtable, g.outer * g.rows * g.inner);
  for (int64_t o = 0; o < g.outer; o++)
    for (int64_t j = 0; j < g.nidx; j++) {
      int64_t row = sk__kidx(idx_dt, indices, j) - offset;
      if (row < 0 || row >= g.rows) continue;
      for (int64_t i = 0; i < g.inner; i++)
        sk__kadd(dt, dtable, (o * g.rows + row) * g.inner + i, sk__kld(dt, dout, (o * g.nidx + j) * g.inner + i));
    }
  return SK_OK;
}

#undef SK__KAT
#undef SK__KAT_W

SK_EXTERN_C_END

#endif /* SK_KERNELS_IMPL */
