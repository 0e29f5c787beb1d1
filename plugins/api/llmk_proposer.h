/* llmk speculative-decoding proposer plugin API (kind LLMK_PLUGIN_PROPOSER).
 *
 * A proposer guesses the tokens that follow each decoding sequence (drafts);
 * the target model checks them all in one step and keeps those it would
 * have produced itself (docs/speculative.md). A wrong guess costs a
 * verification row, never a wrong token: the output is the target's exactly
 * whatever a proposer answers, so a proposer needs no model of its own
 * (prompt lookup, "proposer.ngram") but may run one.
 *
 * Once per planned step the host asks for the drafts of every sequence that
 * may speculate in one call (propose), so a proposer that computes can batch
 * them; it tells the proposer when a sequence has ended (release), so that
 * whatever the proposer keeps per sequence can go. Sequence ids are the
 * host's, unique among live sequences; a released id may come back later as
 * a new sequence. Calls on one proposer come from one thread at a time.
 *
 * An answer is a token tree in tree order: node j holds tokens[j] and is a
 * child of node parents[j] (parents[j] < j), or of the sequence's newest
 * token where parents[j] is -1. A chain of k drafts has parents -1, 0, ...,
 * k - 2. Every answer must be well formed (the conformance suite,
 * `llmk plugins --conformance`, checks each rule, and the host drops an
 * answer that breaks one, logging why):
 *   - num_nodes <= capacity (the request's max_nodes, or max_depth for a
 *     chain); nothing is written past num_nodes;
 *   - parents come before their children: -1 <= parents[j] < j;
 *   - no node is deeper than max_depth (the newest token's children are at
 *     depth 1);
 *   - a chain where the request's max_nodes is 0: parents[j] == j - 1;
 *   - siblings (nodes of one parent) hold distinct tokens;
 *   - every token is in [0, vocab_size) (where the desc's vocab_size is 0,
 *     the host does not know it, and only tokens already in the sequence
 *     are safe);
 *   - answers are deterministic: the same requests to a proposer in the same
 *     state, or to a new one made from the same desc, give the same answers,
 *     and one call for many sequences answers each as a call for it alone.
 * num_nodes 0 (no guess) is always a valid answer.
 *
 * Drafts are proposals made with certainty: the target accepts a draft
 * exactly when it equals its own choice there (greedy), or by the rejection
 * rule for a point mass (sampled requests). A proposer that draws its drafts
 * from a distribution q and wants them verified against q (min(1, p/q)) has
 * no way to say so in 1.0; a later minor would append to llmk_propose_batch
 * the requests' sampling parameters and an output array for q.
 *
 * Proposers that read the target's hidden states (Medusa heads, EAGLE) need
 * an input 1.0 does not carry. The path is a later minor: the plugin declares
 * "inputs": ["hidden_states"] in its capabilities (so the host computes them
 * only for it), llmk_proposer_desc gains hidden_size and the hidden states'
 * dtype, and llmk_propose_batch gains hidden_states, one row of hidden_size
 * per request (the target's final hidden state at the newest token), as a
 * parallel array like the rest of the batch. Arrays of llmk_draft_request
 * and llmk_draft_tree keep their layout for the whole major: a minor adds
 * per-request data as new arrays of llmk_propose_batch, never fields of
 * those two structs. */
#ifndef LLMK_PROPOSER_H
#define LLMK_PROPOSER_H

#include "llmk_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* No minors beyond 1.0 yet (see llmk_plugin.h for how they grow). */
#define LLMK_PROPOSER_API_MAJOR 1u
#define LLMK_PROPOSER_API_MINOR 0u
#ifndef LLMK_PROPOSER_API_BUILD_MINOR
#define LLMK_PROPOSER_API_BUILD_MINOR LLMK_PROPOSER_API_MINOR
#endif
#define LLMK_PROPOSER_API_VERSION LLMK_API_VERSION(LLMK_PROPOSER_API_MAJOR, LLMK_PROPOSER_API_BUILD_MINOR)

typedef struct llmk_proposer_desc {
  uint32_t struct_size;
  uint32_t vocab_size;  /* every proposed token is below it; 0: unknown (see above) */
  uint32_t max_depth;   /* no request asks for longer chains or deeper trees (speculative.num_tokens) */
  uint32_t max_nodes;   /* no request asks for a tree of more nodes; 0: only chains are asked */
  uint32_t tree_width;  /* speculative.tree_width: candidate branches merged into a tree (1: answer chains) */
  /* JSON object: speculative.proposer_options, with the engine's prompt
   * lookup settings added as "prompt_lookup_min" and "prompt_lookup_max"
   * (every proposer accepts these two keys; those that match no suffixes
   * ignore them). */
  const char* options;
} llmk_proposer_desc;

/* One sequence's wish for drafts. Fixed for the major (see above). */
typedef struct llmk_draft_request {
  uint64_t seq_id;
  const int32_t* tokens;  /* [num_tokens] prompt, then generated, the newest last; valid during the call only */
  uint32_t num_tokens;    /* >= 1 */
  uint32_t max_depth;     /* 1 <= max_depth <= desc max_depth */
  /* 0: a chain of up to max_depth drafts; else a tree of up to max_nodes
   * nodes (max_depth <= max_nodes <= desc max_nodes) no deeper than
   * max_depth. A chain answers a tree request too. */
  uint32_t max_nodes;
  uint32_t reserved;      /* 0 */
} llmk_draft_request;

/* One answer, in host memory the host owns. Fixed for the major. */
typedef struct llmk_draft_tree {
  int32_t* tokens;     /* [capacity] */
  int32_t* parents;    /* [capacity] */
  uint32_t capacity;   /* the request's max_nodes, or max_depth for a chain */
  uint32_t num_nodes;  /* the plugin writes how many nodes it answers (0 on entry) */
} llmk_draft_tree;

typedef struct llmk_propose_batch {
  uint32_t struct_size;
  uint32_t num_requests;                /* may be 0 */
  const llmk_draft_request* requests;   /* [num_requests] */
  llmk_draft_tree* drafts;              /* [num_requests] drafts[i] answers requests[i] */
} llmk_propose_batch;

typedef struct llmk_proposer_api {
  uint32_t api_version; /* LLMK_PROPOSER_API_VERSION */
  uint32_t struct_size;
  int (*supports)(const llmk_proposer_desc* desc, char* why, size_t why_len);
  void* (*create)(const llmk_proposer_desc* desc, llmk_error* err);
  void (*destroy)(void* self);
  /* Answers every request of the batch. A non-OK status (with err filled)
   * drops the whole call's answers: those sequences decode without drafts
   * this step, and the host logs the message and carries on. */
  int (*propose)(void* self, const llmk_propose_batch* batch, llmk_error* err);
  /* The sequence has ended. An id the proposer never saw, or one already
   * released, is no error. */
  int (*release)(void* self, uint64_t seq_id, llmk_error* err);
} llmk_proposer_api;

#ifdef __cplusplus
}
#endif

#endif /* LLMK_PROPOSER_H */
