/* llmk communicator plugin API (kind LLMK_PLUGIN_COMM): the collectives and
 * point-to-point transfers tensor and pipeline parallelism run on.
 *
 * A communicator is a group of ranks (processes). create() joins the world:
 * every process of the job (an mpirun launch), initializing the transport on
 * the first call; split() makes sub-groups of it (a tensor-parallel group,
 * the ranks of one pipeline stage). Every call below is collective over its
 * communicator, except send/recv, which pair one sender with one receiver.
 *
 * Buffers live on desc.device: host memory on the CPU; device memory on
 * CUDA, where each call enqueues on `queue` (the executor's cudaStream_t)
 * and returns without waiting. On the CPU `queue` is NULL and a call returns
 * once its buffers may be read and reused.
 *
 * Calls come from any host thread, one at a time per world: a plugin whose
 * transport must be driven from one thread (MPI) moves the work there.
 *
 * Failures: a peer that died or stopped answering makes a call return
 * LLMK_ERR_PEER_LOST within desc.timeout_s, its message naming the rank;
 * the job cannot go on after that (abort() ends it). */
#ifndef LLMK_COMM_H
#define LLMK_COMM_H

#include "llmk_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* No majors or minors beyond 1.0 yet (see llmk_plugin.h for how they grow). */
#define LLMK_COMM_API_MAJOR 1u
#define LLMK_COMM_API_MINOR 0u
#ifndef LLMK_COMM_API_BUILD_MINOR
#define LLMK_COMM_API_BUILD_MINOR LLMK_COMM_API_MINOR
#endif
#define LLMK_COMM_API_VERSION LLMK_API_VERSION(LLMK_COMM_API_MAJOR, LLMK_COMM_API_BUILD_MINOR)

typedef enum llmk_reduce_op { LLMK_REDUCE_SUM = 0 } llmk_reduce_op;

typedef struct llmk_comm_desc {
  uint32_t struct_size;
  uint32_t device;       /* llmk_device where buffers live */
  int32_t device_index;  /* CUDA device ordinal; -1: the plugin picks (its rank on its node) */
  double timeout_s;      /* a call waiting on a peer longer than this fails with LLMK_ERR_PEER_LOST; 0: never */
  const char* options;   /* JSON object of plugin options from config, "{}" when none */
} llmk_comm_desc;

typedef struct llmk_comm_api {
  uint32_t api_version; /* LLMK_COMM_API_VERSION */
  uint32_t struct_size;
  int (*supports)(const llmk_comm_desc* desc, char* why, size_t why_len);
  /* The world communicator. */
  void* (*create)(const llmk_comm_desc* desc, llmk_error* err);
  /* Leaves the communicator; destroying the world's last handle shuts the
   * transport down (MPI_Finalize). */
  void (*destroy)(void* self);
  int (*rank)(const void* self, int32_t* rank, int32_t* size, llmk_error* err);
  /* The ranks that pass the same color form one new communicator, ranked by
   * key then by rank here (MPI_Comm_split). Collective over self. */
  int (*split)(void* self, int32_t color, int32_t key, void** out, llmk_error* err);
  /* recv[i] = op over ranks of send[i], on every rank; send == recv is in place.
   * dtype: F32, F16 or BF16 (16-bit types summed in F32 and rounded once per step of the reduction). */
  int (*all_reduce)(void* self, const void* send, void* recv, uint64_t count, uint32_t dtype, uint32_t op,
                    void* queue, llmk_error* err);
  /* recv = the ranks' send buffers of count elements each, in rank order. Any dtype. */
  int (*all_gather)(void* self, const void* send, void* recv, uint64_t count, uint32_t dtype, void* queue,
                    llmk_error* err);
  /* buf on every rank = buf on root. */
  int (*broadcast)(void* self, void* buf, uint64_t count, uint32_t dtype, int32_t root, void* queue,
                   llmk_error* err);
  /* One message to or from peer. Between group_start and group_end, sends
   * and receives are only posted, and group_end completes them all, so two
   * ranks may exchange in either order without deadlock. */
  int (*send)(void* self, const void* buf, uint64_t count, uint32_t dtype, int32_t peer, void* queue,
              llmk_error* err);
  int (*recv)(void* self, void* buf, uint64_t count, uint32_t dtype, int32_t peer, void* queue,
              llmk_error* err);
  int (*group_start)(void* self, llmk_error* err);
  int (*group_end)(void* self, void* queue, llmk_error* err);
  int (*barrier)(void* self, void* queue, llmk_error* err);
  /* Ends every process of the job with exit code `code` (MPI_Abort); for a
   * rank that cannot go on. Returns only if the transport could not. */
  void (*abort)(void* self, int32_t code);
} llmk_comm_api;

#ifdef __cplusplus
}
#endif

#endif /* LLMK_COMM_H */
