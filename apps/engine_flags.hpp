#pragma once
// The engine flags that serve and node share (named as SGLang names them):
// --model, --threads, --kv-tokens, --page-size, --max-running-requests,
// --max-prefill-tokens, --chunked-prefill-size, --schedule-policy,
// --context-length, --disable-radix-cache, and the device flags; and
// --max-step-ms (a step's time budget, default 2000, 0: none) and
// --worker-timeout (seconds without a heartbeat before the worker is lost,
// default 30); --speculative-algorithm none|ngram with
// --speculative-num-draft-tokens and the n-gram match window sizes; the
// waiting queue's --enable-priority-scheduling (with
// --schedule-low-priority-values-first and
// --priority-scheduling-preemption-threshold), --schedule-max-overtakes,
// --max-queued-requests and --queue-timeout; --radix-eviction-policy
// lru|lfu|priority.

#include <set>
#include <string>

#include "actors/engine.hpp"
#include "apps/cli_args.hpp"

namespace actorlm {

extern const std::set<std::string> engine_flags;
inline const char* const disable_radix_switch = "--disable-radix-cache";
// serve and node: Request::priority orders the queue (QueuePolicy).
inline const char* const priority_scheduling_switch = "--enable-priority-scheduling";
inline const char* const low_priority_first_switch = "--schedule-low-priority-values-first";
// serve and node: a tenant below its share of the batch takes a place from
// one above its own (QueuePolicy::share_preemption).
inline const char* const tenant_preemption_switch = "--tenant-preemption";
// serve, chat and run (not node: nodes never see text). Off by default: see
// EngineConfig::special_tokens_in_content.
inline const char* const special_tokens_in_content_switch = "--special-tokens-in-content";
// serve, chat and run: a Jinja chat template used instead of the model's own.
inline const char* const chat_template_file_flag = "--chat-template-file";

// The --chat-template-file's text, checked to parse (cli::UsageError naming
// the file, line and construct); empty when the flag is absent.
std::string chat_template_from_flags(const cli::Args& args);

EngineConfig engine_from_flags(const cli::Args& args);

// Settings for an actor system that runs an engine (serve, chat, node): CAF's
// work-sharing scheduler, whose idle threads block on a condition variable,
// instead of its default work stealing, whose idle threads poll again every
// 50 us for some 25 ms after each message. With a token every few ms those
// polls never stop; on a 2-core machine they took ~13% of the CPU time the
// model's threads needed (serve, alternated: one stream's ITL 13-17 -> 8-12.5
// ms, 210 -> 240 output tokens/s at 32 clients).
void configure_engine_system(caf::actor_system_config& cfg);

}  // namespace actorlm
