/*
 * netfold.h - the C API of libnetfold: in-network collectives (allreduce,
 * reduce, bcast, barrier) offloaded to a netfold fabric, shaped like
 * libsharp_coll.
 *
 *   netfold_init_spec_t spec = NETFOLD_INIT_SPEC_INITIALIZER;
 *   spec.rank = my_rank;  spec.world_size = n;
 *   spec.oob.allgather = my_allgather; spec.oob.bcast = my_bcast;
 *   spec.oob.barrier = my_barrier;  spec.oob.ctx = my_comm;
 *   netfold_context_t ctx;
 *   int rc = netfold_init(&spec, &ctx);                     // collective
 *   netfold_group_spec_t gs = NETFOLD_GROUP_SPEC_INITIALIZER;
 *   gs.rank = my_rank; gs.size = n; gs.world_ranks = NULL;  // all ranks
 *   gs.oob = spec.oob;
 *   netfold_group_t group;
 *   rc = netfold_group_create(ctx, &gs, &group);            // collective
 *   rc = netfold_allreduce(group, in, out, count, NETFOLD_DTYPE_FP32,
 *                          NETFOLD_OP_SUM);
 *   if (rc != NETFOLD_SUCCESS) fprintf(stderr, "%s\n", netfold_last_error());
 *   netfold_group_destroy(group);                           // collective
 *   netfold_finalize(ctx);                                  // collective
 *
 * Return codes: every function returns NETFOLD_SUCCESS (0) or a negative
 * netfold_status_t; netfold_strerror() names it and netfold_last_error()
 * gives the detailed message of the calling thread's last failure.
 *
 * Threads: calls may come from several threads (each holds the
 * context's data-path lock while it touches the data path); collectives of
 * one group must be started in the same order on every rank. Progress
 * happens inside netfold calls and, while the application is out of the
 * library for more than 1 ms, in a progress thread of the library that
 * acknowledges the fabric's packets and moves operations in flight, as a
 * NIC would (docs/host.md). A control thread blocks on the manager
 * (events, heartbeats), and a clock thread wakes every 100 ms so that a
 * stop of the whole process (a paused VM) does not count against the
 * deadlines. None of them spins. A child of fork() must not use its
 * parent's context.
 *
 * Configuration: fields of the init spec, else environment variables:
 *   NETFOLD_MANAGER       manager address ip:port (default 127.0.0.1:47910)
 *   NETFOLD_HOST          this rank's host name in the fabric's topology
 *                         (default "h<rank>")
 *   NETFOLD_LOCAL_ADDRESS the data-plane IPv4 address to bind (127.0.0.1)
 *   NETFOLD_TIMEOUT_MS    per-operation deadline (30000)
 *   NETFOLD_CONNECT_TIMEOUT_MS  wait for an unanswering manager at init (1000)
 *   NETFOLD_PROGRESS_THREAD     0: no progress thread (1)
 *   NETFOLD_LOG_LEVEL     error|warning|info|debug|trace (warning)
 *   NETFOLD_FAULTS        link faults on this rank's port, e.g. "drop=0.01,seed=3"
 *   NETFOLD_SLOTS, NETFOLD_SLOT_BYTES, NETFOLD_DELIVERY (multicast|rc)
 */
#ifndef NETFOLD_NETFOLD_H_
#define NETFOLD_NETFOLD_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NETFOLD_API_VERSION 1

/* Return codes. */
typedef enum {
  NETFOLD_SUCCESS = 0,
  NETFOLD_ERR_INVALID_ARGUMENT = -1, /* a bad argument or configuration */
  NETFOLD_ERR_NOT_SUPPORTED = -2,    /* dtype/op not supported (MPI forbids it) */
  NETFOLD_ERR_NO_RESOURCES = -3,     /* the fabric has no room (quota, capacity) */
  NETFOLD_ERR_UNAVAILABLE = -4,      /* manager or switch unreachable, peer gone */
  NETFOLD_ERR_TIMEOUT = -5,          /* a deadline passed */
  NETFOLD_ERR_MISMATCH = -6,         /* the ranks disagree on the operation */
  NETFOLD_ERR_ABORTED = -7,          /* the group was revoked; recreate it */
  NETFOLD_ERR_IN_PROGRESS = -8,      /* netfold_request_test: not done yet */
  NETFOLD_ERR_PERMISSION = -9,       /* refused by the manager (job key, ...) */
  NETFOLD_ERR_DATA_LOSS = -10,       /* a result was lost for good */
  NETFOLD_ERR_OOB = -11,             /* an out-of-band callback failed */
  NETFOLD_ERR_INTERNAL = -12         /* a bug; please report it */
} netfold_status_t;

/* Element types; the values are the wire codes (docs/protocol.md). Pair
 * types are MPI's value/index structs, laid out as C lays them out. */
typedef enum {
  NETFOLD_DTYPE_INT8 = 1,
  NETFOLD_DTYPE_INT16 = 2,
  NETFOLD_DTYPE_INT32 = 3,
  NETFOLD_DTYPE_INT64 = 4,
  NETFOLD_DTYPE_UINT8 = 5,
  NETFOLD_DTYPE_UINT16 = 6,
  NETFOLD_DTYPE_UINT32 = 7,
  NETFOLD_DTYPE_UINT64 = 8,
  NETFOLD_DTYPE_FP16 = 9,
  NETFOLD_DTYPE_BF16 = 10,
  NETFOLD_DTYPE_FP32 = 11,
  NETFOLD_DTYPE_FP64 = 12,
  NETFOLD_DTYPE_FLOAT_INT = 13,  /* struct { float v; int32_t i; }   */
  NETFOLD_DTYPE_DOUBLE_INT = 14, /* struct { double v; int32_t i; }  */
  NETFOLD_DTYPE_LONG_INT = 15,   /* struct { int64_t v; int32_t i; } */
  NETFOLD_DTYPE_2INT = 16,       /* struct { int32_t v; int32_t i; } */
  NETFOLD_DTYPE_SHORT_INT = 17   /* struct { int16_t v; int32_t i; } */
} netfold_dtype_t;

typedef enum {
  NETFOLD_OP_SUM = 1,
  NETFOLD_OP_PROD = 2,
  NETFOLD_OP_MIN = 3,
  NETFOLD_OP_MAX = 4,
  NETFOLD_OP_BAND = 5,
  NETFOLD_OP_BOR = 6,
  NETFOLD_OP_BXOR = 7,
  NETFOLD_OP_LAND = 8,
  NETFOLD_OP_LOR = 9,
  NETFOLD_OP_LXOR = 10,
  NETFOLD_OP_MINLOC = 11,
  NETFOLD_OP_MAXLOC = 12
} netfold_op_t;

/* Pass as sendbuf to operate in place on recvbuf (like MPI_IN_PLACE). */
#define NETFOLD_IN_PLACE ((const void*)1)

/* Out-of-band collectives over the ranks of the world (init) or of a group
 * (group_create), supplied by the caller (MPI, a key-value store, threads).
 * Each returns 0 on success, anything else on failure. allgather: every
 * rank contributes `bytes` bytes; recvbuf receives size * bytes, in rank
 * order. bcast: `bytes` bytes from `root`. They are called from the thread
 * that called the netfold function, only during netfold_init,
 * netfold_group_create, netfold_group_destroy and netfold_finalize. */
typedef struct {
  int (*allgather)(void* ctx, const void* sendbuf, void* recvbuf, size_t bytes);
  int (*bcast)(void* ctx, void* buf, size_t bytes, int root);
  int (*barrier)(void* ctx);
  void* ctx;
} netfold_oob_t;

typedef struct {
  uint32_t struct_size;      /* sizeof(netfold_init_spec_t) */
  int rank;                  /* 0 .. world_size-1 */
  int world_size;
  netfold_oob_t oob;
  const char* manager;       /* NULL: $NETFOLD_MANAGER */
  const char* host_name;     /* NULL: $NETFOLD_HOST, else "h<rank>" */
  const char* local_address; /* NULL: $NETFOLD_LOCAL_ADDRESS, else 127.0.0.1 */
  const char* job_name;      /* NULL: "netfold" */
  int timeout_ms;            /* 0: $NETFOLD_TIMEOUT_MS, else 30000 */
  int integrity;             /* 1: every aggregation message of the job carries
                                a keyed integrity tag (docs/security.md); 0:
                                $NETFOLD_INTEGRITY. The job has it if any rank
                                asks. Added after 0.1: a struct_size that ends
                                before it reads as 0. */
} netfold_init_spec_t;

#define NETFOLD_INIT_SPEC_INITIALIZER \
  { sizeof(netfold_init_spec_t), 0, 0, {0, 0, 0, 0}, 0, 0, 0, 0, 0, 0 }

typedef struct netfold_context* netfold_context_t;
typedef struct netfold_group* netfold_group_t;
typedef struct netfold_request* netfold_request_t;

/* Joins the fabric: rank 0 creates the job at the manager, every rank
 * connects its queue pair to its leaf switch. Collective over the world.
 * Returns SUCCESS, INVALID_ARGUMENT, UNAVAILABLE (no manager, leaf down),
 * NO_RESOURCES, PERMISSION, OOB, TIMEOUT. On failure *ctx is NULL and
 * nothing is left behind on this rank. */
int netfold_init(const netfold_init_spec_t* spec, netfold_context_t* ctx);

/* Leaves the fabric and frees everything (destroys remaining groups; rank 0
 * destroys the job after a barrier). Collective over the world. Returns
 * SUCCESS or the first error met while cleaning up (everything is freed
 * anyway). */
int netfold_finalize(netfold_context_t ctx);

typedef struct {
  uint32_t num_slots;       /* K: chunks in flight per group (K of each of its
                               channels: NETFOLD_CHANNELS) */
  uint32_t slot_bytes;      /* P: payload per slot (vectors are chunked to it) */
  uint32_t max_groups;      /* groups this job may hold at once */
  uint64_t dtype_mask;      /* bit d set: netfold_dtype_t d is supported */
  uint32_t op_mask;         /* bit o set: netfold_op_t o is supported */
  uint32_t max_count;       /* largest count per call (elements) */
} netfold_caps_t;

/* Fills *caps. Returns SUCCESS or INVALID_ARGUMENT. */
int netfold_query_caps(netfold_context_t ctx, netfold_caps_t* caps);

/* 1 if `op` is defined on `dtype` (MPI's rules), else 0. */
int netfold_op_supported(netfold_dtype_t dtype, netfold_op_t op);

typedef struct {
  uint32_t struct_size;    /* sizeof(netfold_group_spec_t) */
  int rank;                /* this process's rank in the group */
  int size;                /* members */
  const int* world_ranks;  /* world rank of each group rank; NULL: identity */
  netfold_oob_t oob;       /* collectives over the group's members */
} netfold_group_spec_t;

#define NETFOLD_GROUP_SPEC_INITIALIZER \
  { sizeof(netfold_group_spec_t), 0, 0, 0, {0, 0, 0, 0} }

/* Creates a group over spec->size ranks (e.g. an MPI communicator): group
 * rank 0 asks the manager, which reserves slots on every switch of the
 * trimmed subtree. Collective over the members. Returns SUCCESS,
 * INVALID_ARGUMENT, NO_RESOURCES (netfold_last_error() says which switch
 * and resource), UNAVAILABLE, OOB, TIMEOUT. */
int netfold_group_create(netfold_context_t ctx, const netfold_group_spec_t* spec,
                         netfold_group_t* group);

/* Releases the group's resources in the fabric. Collective over the
 * members. Pending requests of the group fail with ABORTED. A group on
 * the fabric with nothing pending is kept instead, when every member may
 * (NETFOLD_KEEP_GROUPS, default 4 per rank): the next group created over
 * the same world ranks in the same order gets it back without asking the
 * manager (docs/host.md, "Kept groups"). */
int netfold_group_destroy(netfold_group_t group);

/* Something of the caller's (`data`, which may be NULL) to keep with the
 * group if netfold_group_destroy keeps it, and to hand back with it (an MPI
 * library's private communicator of the same members, say): the group
 * created from the kept one returns it from netfold_group_take_data. When
 * the group is released instead (by netfold_group_destroy, when a kept
 * group is dropped, or by netfold_finalize), release(data) is called once,
 * if `release` is not NULL, after the group's last use of its OOB: on the
 * thread releasing the group, inside netfold_group_create,
 * netfold_group_destroy or netfold_finalize, without netfold's locks held;
 * it must not call netfold. Every member should keep data with a group or
 * none: a group given again then has data at every member or at none. A
 * second call replaces the first's data without releasing it (as does a
 * call on a group given again whose data was not taken). Returns SUCCESS
 * or INVALID_ARGUMENT. */
int netfold_group_keep_data(netfold_group_t group, void* data, void (*release)(void* data));

/* The data kept with the group (netfold_group_keep_data, on this group or,
 * for a group given a kept one, on the group it was), or NULL: the caller
 * owns it again, and release will not be called. */
void* netfold_group_take_data(netfold_group_t group);

/* Blocking collectives. `count` elements of `dtype`; root is a group rank.
 * sendbuf may be NETFOLD_IN_PLACE. Returns SUCCESS, INVALID_ARGUMENT,
 * NOT_SUPPORTED, MISMATCH (ranks called with different arguments; every rank
 * gets it), ABORTED (group revoked: destroy and recreate it, or fall back),
 * TIMEOUT, UNAVAILABLE, DATA_LOSS. On failure recvbuf is unspecified;
 * sendbuf is untouched (so the caller can re-run the operation elsewhere). */
int netfold_allreduce(netfold_group_t group, const void* sendbuf, void* recvbuf, size_t count,
                      netfold_dtype_t dtype, netfold_op_t op);
int netfold_reduce(netfold_group_t group, const void* sendbuf, void* recvbuf, size_t count,
                   netfold_dtype_t dtype, netfold_op_t op, int root);
int netfold_bcast(netfold_group_t group, void* buf, size_t count, netfold_dtype_t dtype,
                  int root);
int netfold_barrier(netfold_group_t group);

/* Allgather: every rank contributes `count` elements (sendbuf; with
 * NETFOLD_IN_PLACE, its block already in recvbuf at rank * count) and
 * recvbuf receives size * count elements, the blocks in group-rank order.
 * allgatherv: rank r contributes counts[r] elements (counts[] the same on
 * every rank), packed in rank order in recvbuf. In the fabric: a bcast per
 * block, rooted at its rank (docs/host.md). */
int netfold_allgather(netfold_group_t group, const void* sendbuf, void* recvbuf, size_t count,
                      netfold_dtype_t dtype);
int netfold_allgatherv(netfold_group_t group, const void* sendbuf, void* recvbuf,
                       const size_t* counts, netfold_dtype_t dtype);

/* Reduce-scatter: sendbuf holds size * recvcount elements (reduce_scatter:
 * the sum of recvcounts[], the same on every rank); the elementwise
 * reduction over the ranks is computed and rank r receives its block, the
 * r-th, in recvbuf (recvcount or recvcounts[r] elements). With
 * NETFOLD_IN_PLACE the input is in recvbuf and the result goes to its first
 * elements (as MPI_IN_PLACE in MPI_Reduce_scatter). Bitwise equal to the
 * same block of netfold_allreduce's result. In the fabric: a reduce per
 * block, rooted at its rank. */
int netfold_reduce_scatter_block(netfold_group_t group, const void* sendbuf, void* recvbuf,
                                 size_t recvcount, netfold_dtype_t dtype, netfold_op_t op);
int netfold_reduce_scatter(netfold_group_t group, const void* sendbuf, void* recvbuf,
                           const size_t* recvcounts, netfold_dtype_t dtype, netfold_op_t op);

/* Nonblocking forms: start the operation and return a request (SUCCESS) or
 * an error as above. The buffers must stay valid, and the send buffer
 * unchanged, until the request completes (as MPI requires): the link sends
 * from the send buffer and may read it again until then. */
int netfold_allreduce_nb(netfold_group_t group, const void* sendbuf, void* recvbuf,
                         size_t count, netfold_dtype_t dtype, netfold_op_t op,
                         netfold_request_t* request);
int netfold_reduce_nb(netfold_group_t group, const void* sendbuf, void* recvbuf, size_t count,
                      netfold_dtype_t dtype, netfold_op_t op, int root,
                      netfold_request_t* request);
int netfold_bcast_nb(netfold_group_t group, void* buf, size_t count, netfold_dtype_t dtype,
                     int root, netfold_request_t* request);
int netfold_barrier_nb(netfold_group_t group, netfold_request_t* request);
int netfold_allgather_nb(netfold_group_t group, const void* sendbuf, void* recvbuf, size_t count,
                         netfold_dtype_t dtype, netfold_request_t* request);
int netfold_allgatherv_nb(netfold_group_t group, const void* sendbuf, void* recvbuf,
                          const size_t* counts, netfold_dtype_t dtype,
                          netfold_request_t* request);
int netfold_reduce_scatter_block_nb(netfold_group_t group, const void* sendbuf, void* recvbuf,
                                    size_t recvcount, netfold_dtype_t dtype, netfold_op_t op,
                                    netfold_request_t* request);
int netfold_reduce_scatter_nb(netfold_group_t group, const void* sendbuf, void* recvbuf,
                              const size_t* recvcounts, netfold_dtype_t dtype, netfold_op_t op,
                              netfold_request_t* request);

/* Makes progress; returns SUCCESS if the request completed successfully,
 * IN_PROGRESS if not yet, or the operation's error. */
int netfold_request_test(netfold_request_t request);
/* Waits (with the context's deadline) until the request completes and
 * returns its outcome. */
int netfold_request_wait(netfold_request_t request);
/* Frees a request. A request still in progress is waited for first. */
int netfold_request_free(netfold_request_t request);
/* Moves the context's data path for up to timeout_us microseconds
 * (0..1000000): acknowledgments, results into their buffers, the next
 * chunks of the fabric's operations in flight, of every group. Returns
 * once traffic or a timer was handled, timeout_us passed, or another
 * thread of the application entered the library for a call (which is not
 * kept waiting; two threads in netfold_progress take turns). It may first
 * wait for the data path behind another thread's call (a wait hands it
 * over at its next packet, at most 10 ms later). For a thread of the
 * application's own that completes requests while others compute: waiting
 * in here and testing after each return, it moves the fabric's operations
 * as a blocking wait does, where netfold_request_test alone moves them
 * only while it runs (docs/host.md, "Progress and threads"). Operations
 * that run on the hosts (NETFOLD_ALGORITHM=ring..., or after a failover)
 * move in netfold_request_test/wait and the progress thread only. Every
 * call must have returned before netfold_finalize. SUCCESS,
 * INVALID_ARGUMENT, or UNAVAILABLE in a child of fork(). */
int netfold_progress(netfold_context_t ctx, int timeout_us);

/* For a failover that runs again only what the fabric did not deliver (the
 * MPI interposer's; docs/host.md, "Failover"): which chunks of a failed
 * allreduce's result the fabric had written into recvbuf. Chunk i is bytes
 * [i * chunk_bytes, (i + 1) * chunk_bytes) of recvbuf (the last one
 * shorter), written whole or not at all; every chunk before first_missing
 * was written, and chunk first_missing + i if bit i % 64 of window[i / 64]
 * is set. The other chunks' bytes are as the caller left them in an
 * in-place allreduce; otherwise unspecified (results are written straight
 * into recvbuf, and a chunk without its result may hold another's bytes:
 * docs/host.md, "Results straight into the caller's buffer"). */
#define NETFOLD_WRITTEN_WINDOW 1024
typedef struct {
  size_t chunk_bytes;
  size_t first_missing;
  uint64_t window[NETFOLD_WRITTEN_WINDOW / 64];
} netfold_written_t;
/* Fills `written` for a completed request of an allreduce that ran on the
 * fabric (every chunk, if it succeeded). INVALID_ARGUMENT for a request not
 * completed, of another kind, or whose chunks are not known (it ran on the
 * hosts, or never settled on the fabric); NOT_SUPPORTED if a chunk beyond
 * first_missing + NETFOLD_WRITTEN_WINDOW was written (never: chunks are
 * written at most K x channels apart, K <= 256 by the manager's limit, and
 * the library takes no more channels than keep that within the window). */
int netfold_request_written(netfold_request_t request, netfold_written_t* written);

/* Reduces on this process with the fabric's own arithmetic (deterministic,
 * bitwise the same on every machine): out = ((in[0] op in[1]) op in[2])
 * ... op in[n-1], element by element, left to right. `out` may be in[0]
 * but must not otherwise overlap an input. For the steps of a collective
 * that stay on a host (the MPI interposer's node hierarchy). Returns
 * SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED (op not defined on dtype). */
int netfold_reduce_local(const void* const* inputs, int num_inputs, void* out, size_t count,
                         netfold_dtype_t dtype, netfold_op_t op);

/* A static string naming the code ("invalid argument", ...). */
const char* netfold_strerror(int code);
/* The detailed message of the calling thread's last failure ("" if none);
 * valid until the thread's next netfold call. */
const char* netfold_last_error(void);

typedef struct {
  uint64_t ops_completed;
  uint64_t ops_failed;
  uint64_t chunks_posted;
  uint64_t repairs_sent;       /* lost multicast results asked for again */
  uint64_t bytes_sent;         /* payload bytes sent to the fabric */
  uint64_t bytes_received;     /* payload bytes of results */
  uint64_t link_tx_bytes;      /* bytes on this rank's link, both directions, */
  uint64_t link_rx_bytes;      /*   all headers included */
  uint64_t retransmissions;    /* RC packets sent again */
  uint64_t packets_dropped;    /* received and dropped, any reason */
  uint64_t host_ops;           /* operations the hosts ran (host algorithms:
                                  NETFOLD_ALGORITHM, no fabric, failover) */
  uint64_t failovers;          /* groups moved from the fabric to the hosts */
  uint64_t foreign_packets_dropped; /* of packets_dropped, those not from the
                                  fabric's switch (another address or UDP
                                  port): forged results or data */
} netfold_stats_t;

/* Counters of this rank since init. Returns SUCCESS or INVALID_ARGUMENT. */
int netfold_get_stats(netfold_context_t ctx, netfold_stats_t* stats);

/* One counter of this rank since init, by name: every field of
 * netfold_stats_t by its own name, and counters added since that struct's
 * layout was fixed (it is part of the ABI):
 *   "results_placed"        multicast results the rank's port read
 *                           straight into their place in the operation's
 *                           result buffer (as a NIC writes into posted
 *                           memory); always 0 with the verbs transport
 *   "results_place_missed"  multicast datagrams read into a place that
 *                           turned out not to be theirs, then copied
 *   "groups_requested"      fabric groups created for groups this rank is
 *                           a member of (the manager asked by rank 0)
 *   "groups_reused"         groups given a kept fabric group instead
 *   "groups_kept"           fabric groups this rank keeps now
 *                           (NETFOLD_KEEP_GROUPS, docs/host.md)
 * Returns SUCCESS, INVALID_ARGUMENT (NULL argument, unknown name), or
 * UNAVAILABLE in a forked child. */
int netfold_get_counter(netfold_context_t ctx, const char* name, uint64_t* value);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* NETFOLD_NETFOLD_H_ */
