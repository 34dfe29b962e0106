/* blas_gemm.h -- the kernels' GEMM hook on OpenBLAS, for the example programs that link it
   (-lopenblas): sk_kernels.h never links a BLAS itself. Row-major cblas_dgemm / cblas_sgemm; a
   dimension that does not fit BLAS's integer is refused rather than truncated. The programs set
   one BLAS thread (openblas_set_num_threads(1)): their devices are the threads. */
#ifndef SK_EXAMPLES_BLAS_GEMM_H
#define SK_EXAMPLES_BLAS_GEMM_H

#include <cblas.h>

#include "sk_kernels.h"

static sk_result blas_gemm(void *user, sk_dtype dt, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           double alpha, const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                           int64_t ldc) {
  (void)user;
  int64_t dims[] = {m, n, k, lda, ldb, ldc};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if ((int64_t)(blasint)dims[i] != dims[i]) return SK_ERR_INVALID_ARGUMENT;
  CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  if (dt == SK_F64)
    cblas_dgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, alpha, (const double *)a, (blasint)lda,
                (const double *)b, (blasint)ldb, beta, (double *)c, (blasint)ldc);
  else if (dt == SK_F32)
    cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, (float)alpha, (const float *)a,
                (blasint)lda, (const float *)b, (blasint)ldb, (float)beta, (float *)c, (blasint)ldc);
  else
    return SK_ERR_INVALID_ARGUMENT;
  return SK_OK;
}

static const sk_kernel_ctx BLAS = {blas_gemm, NULL};

#endif /* SK_EXAMPLES_BLAS_GEMM_H */
