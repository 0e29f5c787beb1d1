/* llmk plugin ABI: what every plugin library exports.
 *
 * A plugin is a shared library named libllmk_<kind>_<impl>.so (the plugin
 * "attention.cpu" lives in libllmk_attention_cpu.so). It exports one function
 * under the Boost.DLL alias LLMK_PLUGIN_ENTRY_SYMBOL that returns a static
 * llmk_plugin_info. The host checks abi_version and the kind's api_version
 * before it touches anything else, and refuses a mismatch with both numbers.
 *
 * A kind's API version is major.minor (LLMK_API_VERSION). A minor release
 * only appends fields to the end of the kind's table, each with a documented
 * default, so the host accepts a plugin built against an older minor of its
 * major: it reads the plugin's table up to the plugin's struct_size and gives
 * every later field its default. A different major, or a newer minor than
 * the host's, is refused. A plugin builds against an older minor by defining
 * the kind's LLMK_<KIND>_API_BUILD_MINOR before including its header.
 *
 * This header is C-compatible: plugins may be written in any language that
 * can produce this table; C++ authors use plugin_helpers.hpp instead. */
#ifndef LLMK_PLUGIN_H
#define LLMK_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever llmk_plugin_info or llmk_error change incompatibly. */
#define LLMK_PLUGIN_ABI_VERSION 1u
#define LLMK_PLUGIN_ENTRY_SYMBOL llmk_plugin_entry

/* A kind's API version: major in the high 16 bits, minor in the low 16. */
#define LLMK_API_VERSION(major, minor) ((((uint32_t)(major)) << 16) | ((uint32_t)(minor)))
#define LLMK_API_VERSION_MAJOR(version) (((uint32_t)(version)) >> 16)
#define LLMK_API_VERSION_MINOR(version) (((uint32_t)(version)) & 0xffffu)

typedef enum llmk_plugin_kind {
  LLMK_PLUGIN_ATTENTION = 1,
  LLMK_PLUGIN_LINEAR = 2,
  LLMK_PLUGIN_KV_ALLOCATOR = 3,
  LLMK_PLUGIN_COMM = 4,
  LLMK_PLUGIN_PROPOSER = 5
} llmk_plugin_kind;

/* Status codes returned by every plugin call that can fail. */
typedef enum llmk_status {
  LLMK_OK = 0,
  LLMK_ERR_INVALID_ARGUMENT = 1, /* the caller broke the contract */
  LLMK_ERR_UNSUPPORTED = 2,      /* a configuration this plugin cannot serve */
  LLMK_ERR_OUT_OF_MEMORY = 3,    /* host or device allocation failed */
  LLMK_ERR_NO_SPACE = 4,         /* KV allocator: not enough free slots (not a failure) */
  LLMK_ERR_INTERNAL = 5,
  LLMK_ERR_PEER_LOST = 6         /* communicator: a peer died or stopped answering (the job cannot go on) */
} llmk_status;

/* Element types of tensors crossing the boundary. From LLMK_DTYPE_GGML_BASE
 * on, a dtype names a tensor stored as ggml's quantized blocks (GGUF's
 * tensor types): LLMK_DTYPE_GGML_BASE + the ggml type id, rows a whole
 * number of blocks, blocks as the file stores them. */
typedef enum llmk_dtype {
  LLMK_DTYPE_F32 = 0,
  LLMK_DTYPE_F16 = 1,
  LLMK_DTYPE_BF16 = 2,
  LLMK_DTYPE_I8 = 3,
  LLMK_DTYPE_U8 = 4,
  LLMK_DTYPE_I32 = 5,
  LLMK_DTYPE_GGML_BASE = 0x100,
  LLMK_DTYPE_GGML_Q4_0 = 0x100 + 2,
  LLMK_DTYPE_GGML_Q4_1 = 0x100 + 3,
  LLMK_DTYPE_GGML_Q5_0 = 0x100 + 6,
  LLMK_DTYPE_GGML_Q5_1 = 0x100 + 7,
  LLMK_DTYPE_GGML_Q8_0 = 0x100 + 8,
  LLMK_DTYPE_GGML_Q2_K = 0x100 + 10,
  LLMK_DTYPE_GGML_Q3_K = 0x100 + 11,
  LLMK_DTYPE_GGML_Q4_K = 0x100 + 12,
  LLMK_DTYPE_GGML_Q5_K = 0x100 + 13,
  LLMK_DTYPE_GGML_Q6_K = 0x100 + 14,
  LLMK_DTYPE_GGML_IQ4_NL = 0x100 + 20,
  LLMK_DTYPE_GGML_IQ4_XS = 0x100 + 23,
  LLMK_DTYPE_GGML_TQ1_0 = 0x100 + 34,
  LLMK_DTYPE_GGML_TQ2_0 = 0x100 + 35,
  LLMK_DTYPE_GGML_MXFP4 = 0x100 + 39
} llmk_dtype;

/* Where a plugin's tensors (activations, workspace, KV) live. */
typedef enum llmk_device {
  LLMK_DEVICE_CPU = 0,
  LLMK_DEVICE_CUDA = 1
} llmk_device;

/* Error detail filled by a plugin next to a non-OK status. */
typedef struct llmk_error {
  int32_t status;     /* an llmk_status */
  char message[512];  /* NUL-terminated, human readable */
} llmk_error;

/* capabilities is a JSON object. The keys the host and the conformance
 * suites (conformance/) read; others are the plugin's own documentation:
 *   "devices"          every kind: ["cpu", "cuda"], where its tensors may
 *                      live; absent: the CPU only
 *   "kv_dtypes"        attention: the caches it serves, of "f32", "f16",
 *                      "bf16", "i8"; absent: ["f32"]
 *   "kv_rounding_ulp"  attention: {"f16": u, "bf16": u}, a 16-bit cache
 *                      computed in its own type, off by up to u (0 < u <= 16)
 *                      units of that type's roundoff; absent: held to 2e-5
 *   "weight_dtypes"    linear: of "f32", "f16", "bf16" and (3.1) "ggml:NAME",
 *                      a GGUF block type by its ggml name ("ggml:Q4_K":
 *                      LLMK_DTYPE_GGML_Q4_K); absent: ["f32"]
 *   "scheme"           linear, what it rounds: "w8a8", "w8a32-zp", "w4a32",
 *                      "w4a8" ("options": {"group_size": n}, default 128),
 *                      "fp8_e4m3", or "ggml_a8" (ggml blocks used exactly,
 *                      activations rounded to int8 with one scale per weight
 *                      block; needed for "ggml:" weights); absent: float
 *                      weights and F32 activations
 *   "activation_rounding"  linear: {"<weight dtype>": "f16" | "bf16"}, F32
 *                      activations rounded to that format before the product
 *   "transport"        comm: "mpi", "nccl": what carries the data
 *   "block_size"       kv_allocator: {"min": a, "max": b} (blocks) or
 *                      "max_seq_len" (one range per sequence); booleans
 *                      "prefix_caching", "copy_on_write", "relocation"
 * The suites derive every error bound from these declarations and fail a
 * plugin whose declaration they cannot bound. */
typedef struct llmk_plugin_info {
  uint32_t abi_version;      /* LLMK_PLUGIN_ABI_VERSION the plugin was built against */
  uint32_t struct_size;      /* sizeof(llmk_plugin_info) in the plugin's build */
  uint32_t kind;             /* an llmk_plugin_kind */
  uint32_t api_version;      /* the kind's API version the plugin was built against, e.g. LLMK_ATTENTION_API_VERSION */
  const char* name;          /* "attention.cpu"; must match the library file name */
  const char* version;       /* the implementation's own semantic version, "1.0.0" */
  const char* description;   /* one line */
  const char* capabilities;  /* JSON object describing what it serves, e.g. {"kv_dtypes":["f32"]} */
  const void* api;           /* the kind's table: llmk_attention_api, llmk_linear_api, ..., llmk_proposer_api */
} llmk_plugin_info;

typedef const llmk_plugin_info* (*llmk_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* LLMK_PLUGIN_H */
