/* sk_device_matrix: MindSpore's DeviceMatrix over any list of device ids.

   The expected groups are those of MindSpore's tests/ut/cpp/parallel/device_matrix_test.cc
   (repository mindspore-ai/mindspore, commit 4ef439e27ba0bfd191194a1fd3590dbd74444fc4); each
   test names the MindSpore test it pins. Its GroupList is one group per matrix dim: sk_device_matrix_group with
   that dim's bit. */
#include <criterion/criterion.h>
#include <string.h>

#include "sk_layout.h"

static sk_device_matrix dm; /* ~16 KiB: kept off the stack */

static void init_ok(int rank, const int *devs, int ndevs, int ndims, const int *shape) {
  sk_error e;
  sk_result r = sk_device_matrix_init(&dm, rank, devs, ndevs, ndims, shape, &e);
  cr_assert_eq(r, SK_OK, "%s", e.msg);
}

static void iota(int *v, int n) {
  for (int i = 0; i < n; i++) v[i] = i;
}

/* dm's group along each dim, compared with want (groups of sizes given by the shape). */
static void expect_group_list(const int *want) {
  int ids[SK_MAX_DEVICES], n = 0, at = 0;
  sk_error e;
  for (int k = 0; k < dm.mesh.naxes; k++) {
    cr_assert_eq(sk_device_matrix_group(&dm, 1u << k, ids, SK_MAX_DEVICES, &n, &e), SK_OK, "%s", e.msg);
    cr_assert_eq(n, dm.mesh.dims[k], "dim %d", k);
    for (int i = 0; i < n; i++)
      cr_expect_eq(ids[i], want[at + i], "dim %d entry %d: %d, want %d", k, i, ids[i], want[at + i]);
    at += n;
  }
}

static void expect_replicas(const char *map_text, const int *want, int nwant) {
  sk_dim_map ms[SK_MAX_DIMS];
  int nd = 0, ids[SK_MAX_DEVICES], n = 0;
  sk_error e;
  cr_assert_eq(sk_ms_map_parse(map_text, ms, &nd, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(sk_device_matrix_replica_group(&dm, ms, nd, ids, SK_MAX_DEVICES, &n, &e), SK_OK, "%s", e.msg);
  cr_assert_eq(n, nwant, "%s: %d devices, want %d", map_text, n, nwant);
  for (int i = 0; i < n; i++) cr_expect_eq(ids[i], want[i], "%s entry %d: %d, want %d", map_text, i, ids[i], want[i]);
}

/* TestDeviceMatrix.Test2Dgroup_list */
Test(device_matrix, ms_2d_group_list) {
  int devs[6], shape[] = {2, 3}, want[] = {0, 3, 0, 1, 2};
  iota(devs, 6);
  init_ok(0, devs, 6, 2, shape);
  expect_group_list(want);
}

/* TestDeviceMatrix.Test3Dgroup_list */
Test(device_matrix, ms_3d_group_list) {
  int devs[12], shape[] = {2, 2, 3}, want[] = {5, 11, 2, 5, 3, 4, 5};
  iota(devs, 12);
  init_ok(5, devs, 12, 3, shape);
  expect_group_list(want);
}

/* TestDeviceMatrix.Test4DGetAlongDim */
Test(device_matrix, ms_4d_group_list) {
  int devs[16], shape[] = {2, 1, 4, 2}, want[] = {5, 13, 5, 1, 3, 5, 7, 4, 5};
  iota(devs, 16);
  init_ok(5, devs, 16, 4, shape);
  expect_group_list(want);
}

/* TestDeviceMatrix.Test5DGetAlongDim */
Test(device_matrix, ms_5d_group_list) {
  int devs[144], shape[] = {3, 4, 2, 3, 2}, want[] = {5, 53, 101, 5, 17, 29, 41, 5, 11, 1, 3, 5, 4, 5};
  iota(devs, 144);
  init_ok(5, devs, 144, 5, shape);
  expect_group_list(want);
}

/* TestDeviceMatrix.TestGetDeviceByTensorMapRandomOrderSliceOne and ...SliceTwo */
Test(device_matrix, ms_tensor_map_random_order) {
  int devs[] = {10, 3, 2, 9, 11, 100, 1, 0}, shape[] = {4, 2};
  int one[] = {3, 9, 100, 0}, two[] = {0};
  init_ok(0, devs, 8, 2, shape);
  expect_replicas("(-1,0)", one, 4);
  expect_replicas("(1,0)", two, 1);
}

/* TestDeviceMatrix.TestGetDeviceByTensorMapNoramalOrder2D */
Test(device_matrix, ms_tensor_map_normal_order) {
  int devs[8], shape[] = {4, 2}, want[] = {0, 2, 4, 6};
  iota(devs, 8);
  init_ok(6, devs, 8, 2, shape);
  expect_replicas("(-1,0)", want, 4);
}

/* Not MindSpore's: a stage's devices 8..11, the case --dev-list exposes; an unsplit map
   replicates over the whole list, value 1 (dim 0) leaves the row of 9, a tuple dim
   uses both matrix dims. */
Test(device_matrix, stage_devices_and_tuple_map) {
  int devs[] = {8, 9, 10, 11}, shape[] = {2, 2}, all[] = {8, 9, 10, 11}, row[] = {8, 9}, self[] = {9};
  init_ok(9, devs, 4, 2, shape);
  expect_replicas("(-1,-1)", all, 4);
  expect_replicas("(1,-1)", row, 2);
  expect_replicas("((1,0),)", self, 1);
}

static void expect_init_fails(int rank, const int *devs, int ndevs, int ndims, const int *shape, const char *msg) {
  sk_error e;
  memset(&e, 0, sizeof e);
  cr_assert_eq(sk_device_matrix_init(&dm, rank, devs, ndevs, ndims, shape, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, msg) != NULL, "message '%s' lacks '%s'", e.msg, msg);
}

/* TestDeviceMatrix.TestCornerCaseGetAlongDim (shape against list size) and
   TestCornerCase2GetAlongDim (rank not in the list); the others are ours. */
Test(device_matrix, refusals) {
  int devs[9], shape3[] = {2, 2, 2}, bad[] = {2, 0}, dup[] = {1, 2, 1, 3}, neg[] = {0, -1};
  int sh4[] = {4}, sh2[] = {2};
  iota(devs, 9);
  expect_init_fails(3, devs, 9, 3, shape3, "not the device list's 9 entries");
  expect_init_fails(8, devs, 8, 3, shape3, "rank 8 is not in the device list");
  expect_init_fails(0, devs, 2, 2, bad, "dim 1 is 0");
  expect_init_fails(1, dup, 4, 1, sh4, "device 1 is listed twice");
  expect_init_fails(0, neg, 2, 1, sh2, "entry 1 is -1");
  expect_init_fails(0, devs, 0, 1, sh2, "0 entries");
}

Test(device_matrix, bad_maps_and_room) {
  int devs[8], shape[] = {4, 2}, ids[8], n = 0;
  sk_dim_map ms[2];
  sk_error e;
  iota(devs, 8);
  init_ok(0, devs, 8, 2, shape);
  memset(ms, 0, sizeof ms);
  ms[0].naxes = 1, ms[0].axes[0] = 2;
  cr_expect_eq(sk_device_matrix_replica_group(&dm, ms, 1, ids, 8, &n, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "value 2 (dim 0) is outside") != NULL, "%s", e.msg);
  ms[0].axes[0] = 0, ms[1].naxes = 1, ms[1].axes[0] = 0;
  cr_expect_eq(sk_device_matrix_replica_group(&dm, ms, 2, ids, 8, &n, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "value 0 is used twice") != NULL, "%s", e.msg);
  cr_expect_eq(sk_device_matrix_group(&dm, 1u, ids, 3, &n, &e), SK_ERR_INVALID_ARGUMENT);
  cr_expect(strstr(e.msg, "room for 3") != NULL, "%s", e.msg);
  cr_expect_eq(sk_device_matrix_group(&dm, 4u, ids, 8, &n, &e), SK_ERR_INVALID_ARGUMENT);
}
