/*
 * Internals of the agents shared by the loop (loop.c) and the LLM generation agent
 * (llm_agent.c). Not installed.
 */
#ifndef KF_AGENT_INT_H
#define KF_AGENT_INT_H

#include "kforge/agent.h"
#include "kforge/llm.h"

/* The LLM generation agent: one conversation with a model for one task on one platform.
 * Prompts come from files (the .md files of prompts/ and prompts/examples/); the whole exchange is
 * appended to a JSON-lines transcript. */
typedef struct kf_llm_agent kf_llm_agent;

typedef struct kf_llm_agent_setup {
    const kf_graph *g;
    const kf_loop_opts *o;
    const kf_run_result *r;      /* device, roofline (read at each call) */
    const char *transcript_path; /* appended; NULL = none */
    const char *reference;       /* a correct kernel to start from (NULL = none) */
    const char *reference_origin;/* where it came from, for the prompt */
} kf_llm_agent_setup;

/* Read the prompts and open the client. KF_ERR_IO naming a missing prompt file;
 * KF_ERR_ARG when the endpoint is not configured (the message says how to set it). */
kf_status kf_llm_agent_new(const kf_llm_agent_setup *su, kf_llm_agent **out, kf_error *err);

/* Ask the model for the next kernel (the conversation so far, with the feedback on the
 * last round). Returns:
 *   KF_OK with *code (malloc'd) set: a candidate to evaluate;
 *   KF_OK with *code NULL: no candidate this round; *vs is KF_V_NO_CODE or
 *     KF_V_AGENT_ERROR and detail says why (it is fed back, or recorded);
 *   KF_ERR_UNSUPPORTED: a budget (--max-calls, --max-tokens) is spent; stop asking. */
kf_status kf_llm_agent_ask(kf_llm_agent *a, char **code, kf_vstatus *vs, char *detail, size_t cap,
                           kf_error *err);

/* Tell the agent how the last round went: the record of the model's own kernel and the
 * best record among its tunable variants (may be the same). Builds the next feedback
 * message (compile log, runtime failure, mismatch summary without reference values, or
 * speed and roofline position). */
void kf_llm_agent_feedback(kf_llm_agent *a, const kf_iter_record *first, const kf_iter_record *best);

/* Calls made and tokens used. */
void kf_llm_agent_usage(const kf_llm_agent *a, int *calls, long *prompt_tokens, long *completion_tokens);

void kf_llm_agent_free(kf_llm_agent *a);

/* The code-block languages a platform's kernels are written in, best first. */
const char *kf_llm_agent_langs(const char *platform);

#endif
