/*
 * hello_netfold.c - the smallest program using the installed libnetfold:
 * one process joins a running fabric, creates a group of itself and runs an
 * allreduce, a bcast and a barrier through the switches.
 *
 *   eval "$(build/tools/netfold up --hosts 1 | grep '^export ')"
 *   cc hello_netfold.c $(pkg-config --cflags --libs netfold) -o hello_netfold
 *   ./hello_netfold
 *
 * (pkg-config finds netfold once installed, `meson install -C build`; from
 * the build tree: PKG_CONFIG_PATH=build/meson-uninstalled and the package
 * netfold-uninstalled, plus -Wl,-rpath,$PWD/build/host.)
 *
 * With more processes, pass out-of-band callbacks that really exchange data
 * (MPI, a key-value store); a single process can answer them itself.
 */
#include <netfold/netfold.h>
#include <stdio.h>
#include <string.h>

static int self_allgather(void* ctx, const void* send, void* recv, size_t bytes) {
  (void)ctx;
  memcpy(recv, send, bytes);
  return 0;
}
static int self_bcast(void* ctx, void* buf, size_t bytes, int root) {
  (void)ctx; (void)buf; (void)bytes; (void)root;
  return 0;
}
static int self_barrier(void* ctx) {
  (void)ctx;
  return 0;
}

int main(void) {
  netfold_init_spec_t spec = NETFOLD_INIT_SPEC_INITIALIZER;
  spec.rank = 0;
  spec.world_size = 1;
  spec.oob.allgather = self_allgather;
  spec.oob.bcast = self_bcast;
  spec.oob.barrier = self_barrier;
  spec.host_name = "h0";
  netfold_context_t ctx;
  int rc = netfold_init(&spec, &ctx);
  if (rc != NETFOLD_SUCCESS) {
    fprintf(stderr, "netfold_init: %s: %s\n", netfold_strerror(rc), netfold_last_error());
    return 1;
  }
  netfold_group_spec_t gs = NETFOLD_GROUP_SPEC_INITIALIZER;
  gs.rank = 0;
  gs.size = 1;
  gs.oob = spec.oob;
  netfold_group_t group;
  rc = netfold_group_create(ctx, &gs, &group);
  if (rc != NETFOLD_SUCCESS) {
    fprintf(stderr, "netfold_group_create: %s: %s\n", netfold_strerror(rc), netfold_last_error());
    netfold_finalize(ctx);
    return 1;
  }
  double x[3] = {1.5, -2.0, 3.25}, y[3] = {0, 0, 0};
  rc = netfold_allreduce(group, x, y, 3, NETFOLD_DTYPE_FP64, NETFOLD_OP_SUM);
  int ok = rc == NETFOLD_SUCCESS && y[0] == 1.5 && y[1] == -2.0 && y[2] == 3.25;
  int v = 42;
  if (ok) ok = netfold_bcast(group, &v, 1, NETFOLD_DTYPE_INT32, 0) == NETFOLD_SUCCESS && v == 42;
  if (ok) ok = netfold_barrier(group) == NETFOLD_SUCCESS;
  printf("allreduce through the fabric: %g %g %g -> %s\n", y[0], y[1], y[2], ok ? "ok" : "FAILED");
  if (!ok) fprintf(stderr, "%s\n", netfold_last_error());
  netfold_group_destroy(group);
  netfold_finalize(ctx);
  return ok ? 0 : 1;
}
