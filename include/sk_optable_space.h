/* sk_optable_space.h -- the operator table's search column: each operator's joint dims
   (sk_op_space), the dims its strategy tuples share. A search candidate cuts every joint dim;
   tuple k entry e takes the cut of joint dim src[k][e]. sk_search_cost.h enumerates the cuts.
     MatMul, BatchMatMul, Dense   the broadcast batch dims, then m, k, n (Dense: w is [n, k] and
                                  the bias [n] takes n's cut)
     element-wise operators       the output's dims, every input aligned from the right (a dim of
                                  size 1 against a larger one broadcasts: cut 1); PReLU's w [C]
                                  takes x's dim 1
     operators that reshape       input 0's dims (the reductions, the losses, Flatten,
                                  Transpose, ExpandDims; an element-wise operator whose output
                                  has fewer dims than its input); sparse labels [B] take the batch
     OneHot                       the output's dims (its indices' tuple is written over them)
     Gather                       the table's dims, then the indices', independent
     GetNext, VirtualDataset      none: they keep their default
     Reshape                      none: it follows its input's cut, as MindSpore's does in a
                                  network (its own strategy would leave its output whole)

   Part of sk_optable.h's implementation (it includes this file): include sk_optable.h.
   License: MIT. */
#include "sk_optable.h"

#if defined(SK_OPTABLE_IMPL) && defined(SK_OPTABLE_IMPL_DONE) && !defined(SK_OPTABLE_SPACE_DONE)
#define SK_OPTABLE_SPACE_DONE

SK_EXTERN_C_BEGIN

/* Joint dims 0..n-1 of the given sizes, each input aligned with them from the right. */
static void sk__ops_align_all(const sk_op_desc *d, int n, const int64_t *size, sk_op_space *j) {
  for (int e = 0; e < n; e++) j->size[e] = size[e];
  j->n = n;
  for (int k = 0; k < d->ninputs; k++) {
    j->len[k] = d->ndims[k];
    for (int e = 0; e < d->ndims[k]; e++) {
      int jd = n - d->ndims[k] + e;
      j->src[k][e] = jd >= 0 && d->shape[k][e] == size[jd] ? jd : -1;
    }
  }
}

static void sk__ops_space_aligned(const sk_op_desc *d, int out_ndims, const int64_t *out_shape, sk_op_space *j) {
  bool fewer = out_ndims < d->ndims[0]; /* the output dropped dims: input 0's stand */
  sk__ops_align_all(d, fewer ? d->ndims[0] : out_ndims, fewer ? d->shape[0] : out_shape, j);
}

static void sk__ops_space_reshaping(const sk_op_desc *d, int out_ndims, const int64_t *out_shape, sk_op_space *j) {
  (void)out_ndims, (void)out_shape;
  sk__ops_align_all(d, d->ndims[0], d->shape[0], j);
}

/* w [C]: x's dim 1, the channels. */
static void sk__ops_space_prelu(const sk_op_desc *d, int out_ndims, const int64_t *out_shape, sk_op_space *j) {
  sk__ops_space_aligned(d, out_ndims, out_shape, j);
  if (d->ninputs > 1 && d->ndims[1] == 1 && j->n > 1) j->src[1][0] = d->shape[1][0] == j->size[1] ? 1 : -1;
}

/* Class-index labels [B]: the batch. */
static void sk__ops_space_softmax_ce(const sk_op_desc *d, int out_ndims, const int64_t *out_shape, sk_op_space *j) {
  sk__ops_space_reshaping(d, out_ndims, out_shape, j);
  if (d->ninputs > 1 && d->ndims[1] == 1) j->src[1][0] = 0;
}

/* x [.., m, k] (transpose_a: [.., k, m]), w [.., k, n] (w_nk: [.., n, k]): the broadcast batch
   dims, then m, k, n. */
static void sk__ops_matmul_dims(const sk_op_desc *d, bool w_nk, sk_op_space *j) {
  int nx = d->ndims[0], nw = d->ndims[1], nb = (nx > nw ? nx : nw) - 2;
  for (int b = 0; b < nb; b++) {
    int ex = nx - 2 - nb + b, ew = nw - 2 - nb + b;
    int64_t sx = ex >= 0 ? d->shape[0][ex] : 1, sw = ew >= 0 ? d->shape[1][ew] : 1;
    j->size[b] = sx > sw ? sx : sw;
    if (ex >= 0) j->src[0][ex] = sx == j->size[b] ? b : -1;
    if (ew >= 0) j->src[1][ew] = sw == j->size[b] ? b : -1;
  }
  int im = nb, ik = nb + 1, in = nb + 2;
  j->size[im] = d->shape[0][d->transpose_a ? nx - 1 : nx - 2];
  j->size[ik] = d->shape[0][d->transpose_a ? nx - 2 : nx - 1];
  j->size[in] = d->shape[1][w_nk ? nw - 2 : nw - 1];
  j->src[0][nx - 2] = d->transpose_a ? ik : im, j->src[0][nx - 1] = d->transpose_a ? im : ik;
  j->src[1][nw - 2] = w_nk ? in : ik, j->src[1][nw - 1] = w_nk ? ik : in;
  j->n = nb + 3, j->len[0] = nx, j->len[1] = nw;
}

static void sk__ops_space_matmul(const sk_op_desc *d, int out_ndims, const int64_t *out_shape, sk_op_space *j) {
  (void)out_ndims, (void)out_shape;
  sk__ops_matmul_dims(d, d->transpose_b, j);
}

static void sk__ops_space_dense(const sk_op_desc *d, int out_ndims, const int64_t *out_shape, sk_op_space *j) {
  (void)out_ndims, (void)out_shape;
  sk__ops_matmul_dims(d, true, j);
  if (d->ninputs > 2) j->len[2] = 1, j->src[2][0] = j->n - 1;
}

static void sk__ops_space_one_hot(const sk_op_desc *d, int out_ndims, const int64_t *out_shape, sk_op_space *j) {
  (void)d;
  j->n = out_ndims, j->len[0] = out_ndims;
  for (int e = 0; e < out_ndims; e++) j->size[e] = out_shape[e], j->src[0][e] = e;
}

/* Every input's dims, one joint dim each. */
static void sk__ops_space_separate(const sk_op_desc *d, int out_ndims, const int64_t *out_shape, sk_op_space *j) {
  (void)out_ndims, (void)out_shape;
  for (int k = 0; k < d->ninputs; k++) {
    j->len[k] = d->ndims[k];
    for (int e = 0; e < d->ndims[k] && j->n < SK_OP_MAX_JOINT; e++) j->size[j->n] = d->shape[k][e], j->src[k][e] = j->n++;
  }
}

static void sk__ops_space_none(const sk_op_desc *d, int out_ndims, const int64_t *out_shape, sk_op_space *j) {
  (void)d, (void)out_ndims, (void)out_shape;
  j->n = 0;
}

SK_EXTERN_C_END

#endif /* SK_OPTABLE_SPACE */
