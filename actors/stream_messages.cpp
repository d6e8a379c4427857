#include "actors/stream_messages.hpp"

namespace actorlm {

fb::FinishReason to_fb(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return fb::FinishReason::Stop;
    case FinishReason::length: return fb::FinishReason::Length;
    case FinishReason::abort: return fb::FinishReason::Abort;
    case FinishReason::error: return fb::FinishReason::Error;
    default: return fb::FinishReason::None;
  }
}

FinishReason from_fb(fb::FinishReason r) {
  switch (r) {
    case fb::FinishReason::Stop: return FinishReason::stop;
    case fb::FinishReason::Length: return FinishReason::length;
    case fb::FinishReason::Abort: return FinishReason::abort;
    case fb::FinishReason::Error: return FinishReason::error;
    default: return FinishReason::none;
  }
}

fb::ErrorKind to_fb(ErrorKind k) {
  switch (k) {
    case ErrorKind::invalid_request: return fb::ErrorKind::InvalidRequest;
    case ErrorKind::unavailable: return fb::ErrorKind::Unavailable;
    case ErrorKind::internal: return fb::ErrorKind::Internal;
    case ErrorKind::overloaded: return fb::ErrorKind::Overloaded;
    case ErrorKind::timeout: return fb::ErrorKind::Timeout;
    default: return fb::ErrorKind::None;
  }
}

ErrorKind from_fb(fb::ErrorKind k) {
  switch (k) {
    case fb::ErrorKind::InvalidRequest: return ErrorKind::invalid_request;
    case fb::ErrorKind::Unavailable: return ErrorKind::unavailable;
    case fb::ErrorKind::Internal: return ErrorKind::internal;
    case fb::ErrorKind::Overloaded: return ErrorKind::overloaded;
    case fb::ErrorKind::Timeout: return ErrorKind::timeout;
    default: return ErrorKind::none;
  }
}

std::vector<uint8_t> error_delta(uint64_t id, ErrorKind kind, const std::string& error) {
  fb::TextDeltaT d;
  d.request_id = id;
  d.finish_reason = fb::FinishReason::Error;
  d.error = error;
  d.error_kind = to_fb(kind);
  return msg::pack(d);
}

std::vector<uint8_t> token_stream(const std::vector<TokenEvent>& events) {
  fb::TokenStreamT ts;
  for (const auto& e : events) {
    auto item = std::make_unique<fb::TokenStreamItemT>();
    item->request_id = e.id;
    if (e.token >= 0) {
      item->token_ids.push_back(e.token);
      item->logprobs.push_back(e.logprob);
      for (const auto& [tok, lp] : e.top) item->top_logprobs.emplace_back(tok, lp);
      item->top_logprobs_per_token = static_cast<int32_t>(e.top.size());
    }
    for (const SampleResult& p : e.prompt_logprobs) {
      item->prompt_logprobs.emplace_back(p.token, p.logprob);
      for (const auto& [tok, lp] : p.top) item->prompt_top_logprobs.emplace_back(tok, lp);
    }
    // The first prompt token has no alternatives; every other the same count.
    if (e.prompt_logprobs.size() > 1) item->prompt_top_per_token = static_cast<int32_t>(e.prompt_logprobs[1].top.size());
    item->finish_reason = to_fb(e.finish);
    item->error = e.error;
    item->error_kind = to_fb(e.error_kind);
    item->held = e.held;
    item->held_rows = e.held_rows;
    item->held_progress = e.held_progress;
    item->held_step = e.held_step;
    item->usage = std::make_unique<fb::UsageT>();
    item->usage->prompt_tokens = e.prompt_tokens;
    item->usage->completion_tokens = e.completion_tokens;
    item->usage->cached_tokens = e.cached_tokens;
    item->usage->draft_tokens = e.draft_tokens;
    item->usage->accepted_draft_tokens = e.accepted_draft_tokens;
    ts.items.push_back(std::move(item));
  }
  return msg::pack(ts);
}

std::vector<uint8_t> error_stream(const std::vector<uint64_t>& ids, ErrorKind kind, const std::string& error) {
  std::vector<TokenEvent> events;
  for (uint64_t id : ids) {
    TokenEvent e;
    e.id = id;
    e.finish = FinishReason::error;
    e.error = error;
    e.error_kind = kind;
    events.push_back(e);
  }
  return token_stream(events);
}

}  // namespace actorlm
