#include "server/completion_stream.hpp"

#include <algorithm>
#include <string_view>

namespace actorlm {

namespace {

// Echo with logprobs: the prompt's tokens lead the first delta's.
std::vector<TokenLogprobInfo> with_prompt(const TextDeltaEvent& d) {
  if (d.prompt_logprobs.empty()) return d.logprobs;
  std::vector<TokenLogprobInfo> all = d.prompt_logprobs;
  all.insert(all.end(), d.logprobs.begin(), d.logprobs.end());
  return all;
}

}  // namespace

api::ApiError engine_error(const TextDeltaEvent& d) {
  switch (d.error_kind) {
    case ErrorKind::unavailable: return {503, d.error, "server_error", ""};
    case ErrorKind::invalid_request: return {400, d.error, "invalid_request_error", ""};
    // A full queue (--max-queued-requests): come back shortly.
    case ErrorKind::overloaded: return {429, d.error, "rate_limit_error", "", 1};
    case ErrorKind::timeout: return {408, d.error, "timeout_error", ""};
    default: return {500, d.error, "server_error", ""};
  }
}

http::Response error_response(const api::ApiError& e) {
  http::Response r = http::Response::json(e.status, api::dump(e.body()));
  if (e.retry_after > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after));
  return r;
}

void read_tool_calls(std::vector<api::ChoiceResult>& results, const ResponseShape& shape,
                     const api::ToolRequest& tools, const std::vector<size_t>* sent) {
  for (size_t i = 0; i < results.size(); ++i) {
    api::ChoiceResult& c = results[i];
    if (c.last.finish == FinishReason::error) continue;
    const std::string_view unsent =
        sent ? std::string_view(c.text).substr(std::min((*sent)[i], c.text.size())) : std::string_view(c.text);
    ParsedToolCalls parsed = parse_tool_calls(shape.tool_format, unsent, tools.names);
    if (parsed.calls.empty()) {
      if (sent) c.text = std::string(unsent);
      continue;
    }
    if (!tools.parallel) parsed.calls.resize(1);
    c.tool_calls = std::move(parsed.calls);
    c.text = std::move(parsed.content);
  }
}

CompletionStream::CompletionStream(std::shared_ptr<http::Connection> connection, std::shared_ptr<EventSink> sink,
                                   const ResponseShape& shape, int choices)
    : connection_(std::move(connection)),
      sink_(std::move(sink)),
      shape_(shape),
      first_(static_cast<size_t>(choices), true),
      offset_(static_cast<size_t>(choices), 0),
      answer_(static_cast<size_t>(choices)),
      sent_(static_cast<size_t>(choices), 0) {}

bool CompletionStream::forward(const TextDeltaEvent& d, int index) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto i = static_cast<size_t>(index);
  const ResponseShape& s = shape_;
  if (!began_) {
    if (d.finish == FinishReason::error) {
      if (!refused_) refused_ = d;
      return false;  // the other choices are aborted
    }
    if (refused_ || !sink_->open()) return false;
    sink_->begin();
    began_ = true;
  }
  std::string out;
  if (d.finish == FinishReason::error) {
    out = "data: " + api::dump(engine_error(d).body()) + "\n\n";
  } else {
    // Chat's first chunk is the role alone, as OpenAI sends it.
    if (s.chat && first_[i]) out += api::stream_chunk(s.id, s.model, s.chat, index, "", std::nullopt, s.created, true, nullptr);
    std::string text = d.text;
    if (s.reads_calls) {
      answer_[i] += d.text;
      const size_t settled = settled_content(s.tool_format, answer_[i]);
      text = settled > sent_[i] ? answer_[i].substr(sent_[i], settled - sent_[i]) : std::string();
      sent_[i] = std::max(sent_[i], settled);
    }
    if (!s.echoed.empty() && first_[i]) text = s.echoed[i / static_cast<size_t>(s.n)] + text;
    if (!text.empty() || (!s.chat && first_[i]) || (s.logprobs && !d.logprobs.empty() && !s.reads_calls)) {
      nlohmann::json lp = s.logprobs ? api::logprobs_json(s.chat, with_prompt(d), offset_[i]) : nlohmann::json(nullptr);
      out += api::stream_chunk(s.id, s.model, s.chat, index, text, std::nullopt, s.created, false, lp);
    }
    if (d.finish != FinishReason::none && !s.reads_calls)
      out += api::stream_chunk(s.id, s.model, s.chat, index, "", d.finish, s.created, false, nullptr);
  }
  for (const auto& t : with_prompt(d)) offset_[i] += t.piece.size();
  first_[i] = false;
  return out.empty() ? sink_->open() : sink_->write(std::move(out));
}

void CompletionStream::finish(std::vector<api::ChoiceResult>& results, const api::ToolRequest& tools,
                              bool include_usage) {
  // Every choice has ended: no other thread writes any more.
  const ResponseShape& s = shape_;
  if (!began_) {
    if (refused_) return connection_->respond(error_response(engine_error(*refused_)));
    if (!sink_->open()) return;
    sink_->begin();
  }
  std::string tail;
  if (s.reads_calls) {
    read_tool_calls(results, s, tools, &sent_);
    for (size_t i = 0; i < results.size(); ++i) {
      const api::ChoiceResult& c = results[i];
      if (c.last.finish == FinishReason::error) continue;
      const int index = static_cast<int>(i);
      if (!c.text.empty()) tail += api::stream_chunk(s.id, s.model, s.chat, index, c.text, std::nullopt, s.created, false, nullptr);
      tail += c.tool_calls.empty() ? api::stream_chunk(s.id, s.model, s.chat, index, "", c.last.finish, s.created, false, nullptr)
                                   : api::tool_calls_chunk(s.id, s.model, index, c.tool_calls, s.created);
    }
  }
  const bool failed = std::any_of(results.begin(), results.end(),
                                  [](const api::ChoiceResult& c) { return c.last.finish == FinishReason::error; });
  if (include_usage && !failed) tail += api::usage_chunk(s.id, s.model, s.chat, results, s.n, s.created);
  tail += "data: [DONE]\n\n";
  sink_->write(std::move(tail));
  sink_->end();
}

}  // namespace actorlm
