#include "server/completions.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "server/openai_api.hpp"
#include "tokenizer/tool_calls.hpp"

namespace actorlm {

namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The engine's own failures are 500s and a lost or missing worker node a 503
// (another try may land on a live node); everything else the engine refuses
// is the request's fault.
api::ApiError engine_error(const TextDeltaEvent& d) {
  switch (d.error_kind) {
    case ErrorKind::unavailable: return {503, d.error, "server_error", ""};
    case ErrorKind::invalid_request: return {400, d.error, "invalid_request_error", ""};
    default: return {500, d.error, "server_error", ""};
  }
}

http::Response error_response(const api::ApiError& e) {
  return http::Response::json(e.status, api::dump(e.body()));
}

}  // namespace

Completions::Completions(Engine& engine, std::string model_id, int max_concurrent)
    : engine_(engine),
      model_id_(std::move(model_id)),
      max_concurrent_(max_concurrent),
      ttft_{"actorlm_time_to_first_token_seconds",
            "Time from a request's arrival to its first generated text.",
            {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}},
      itl_{"actorlm_inter_token_latency_seconds",
           "Time between successive deltas of one request.",
           {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}} {}

Completions::~Completions() {
  abort_all();
  wait_idle(std::chrono::seconds(30));
}

void Completions::start(const std::shared_ptr<http::Connection>& connection, Route route,
                        std::string body) {
  if (++active_ > max_concurrent_) {
    --active_;
    ++rejected_;
    connection->respond(
        error_response({503,
                        "the server is at its limit of " + std::to_string(max_concurrent_) +
                            " concurrent requests; retry later",
                        "server_error", ""}));
    return;
  }
  std::thread([this, connection, route, body = std::move(body)] {
    try {
      run(connection, route, body);
    } catch (const std::exception&) {
      // Never the exception's text: it may quote the request or internals.
      connection->respond(error_response({500, "internal error", "server_error", ""}));
    }
    std::lock_guard<std::mutex> lock(mu_);
    --active_;
    idle_.notify_all();
  }).detach();
}

void Completions::abort_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t id : running_ids_) engine_.abort(id);
}

bool Completions::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_for(lock, timeout, [this] { return active_ == 0; });
}

void Completions::run(const std::shared_ptr<http::Connection>& connection, Route route,
                      const std::string& body) {
  const auto arrival = Clock::now();
  auto parsed = route == Route::native ? api::parse_generate_request(body, model_id_)
                                       : api::parse_request(body, route == Route::chat, model_id_);
  if (auto* e = std::get_if<api::ApiError>(&parsed)) {
    ++rejected_;
    return connection->respond(error_response(*e));
  }
  auto r = std::get<api::ParsedRequest>(std::move(parsed));
  ++accepted_;
  const bool chat = route == Route::chat;
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();

  // One choice per (prompt, i); a batch of prompts gives choice p * n + i.
  std::vector<api::Prompt> prompts = r.prompts;
  if (prompts.empty()) prompts.push_back({r.options.prompt, r.options.input_ids});
  const int choices = static_cast<int>(prompts.size()) * r.n;
  // echo: the prompt's text leads each choice's.
  std::vector<std::string> echoed(prompts.size());
  if (r.echo) {
    for (size_t p = 0; p < prompts.size(); ++p) {
      if (prompts[p].ids.empty()) {
        echoed[p] = prompts[p].text;
      } else if (auto text = engine_.detokenize(prompts[p].ids)) {
        echoed[p] = *text;
      } else {
        ++rejected_;
        return connection->respond(
            error_response({400, "'prompt' holds a token id outside the vocabulary", "invalid_request_error", "prompt"}));
      }
    }
  }

  // Every choice's engine id is known before it starts, so a client that
  // leaves (or a shutdown) can abort even requests still waiting in the queue.
  std::vector<uint64_t> ids;
  for (int i = 0; i < choices; ++i) ids.push_back(engine_.new_request_id());
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ids_.insert(ids.begin(), ids.end());
  }
  struct Forget {  // on every way out, exceptions included
    Completions* self;
    const std::vector<uint64_t>& ids;
    ~Forget() {
      std::lock_guard<std::mutex> lock(self->mu_);
      for (uint64_t i : ids) self->running_ids_.erase(i);
    }
  } forget{this, ids};
  connection->set_on_gone([this, ids] {
    for (uint64_t i : ids) engine_.abort(i);
  });

  // Function calling: a required or named call is constrained to a
  // well-formed call; with tool_choice other than "none" the answer is read
  // back for calls.
  const ToolFormat tool_format = engine_.tool_format();
  const bool reads_calls = chat && r.tools.reads_calls();
  if (chat && (r.tools.choice == api::ToolChoice::required || r.tools.choice == api::ToolChoice::named)) {
    r.options.constraint = api::tool_call_constraint(r.tools, tool_format);
  }

  // Streams write from every choice's thread. The stream (and its 200)
  // begins with the first delta that is not an error: a request the engine
  // refuses outright (a prompt longer than the context, a max_tokens it
  // cannot give) is then an HTTP error like a non-streamed one.
  std::mutex mu;
  bool began = false;
  std::optional<TextDeltaEvent> refused;  // the first error before the stream began
  std::vector<bool> first(static_cast<size_t>(choices), true);
  std::vector<size_t> offset(static_cast<size_t>(choices), 0);  // completions' text_offset
  std::vector<std::string> answer(static_cast<size_t>(choices));  // reads_calls: the text so far
  std::vector<size_t> sent(static_cast<size_t>(choices), 0);      // reads_calls: bytes of it sent
  // Echo with logprobs: the prompt's tokens lead the first delta's.
  auto with_prompt = [](const TextDeltaEvent& d) {
    if (d.prompt_logprobs.empty()) return d.logprobs;
    std::vector<TokenLogprobInfo> all = d.prompt_logprobs;
    all.insert(all.end(), d.logprobs.begin(), d.logprobs.end());
    return all;
  };
  auto forward_stream = [&](const TextDeltaEvent& d, int index) {
    std::lock_guard<std::mutex> lock(mu);
    const auto i = static_cast<size_t>(index);
    if (!began) {
      if (d.finish == FinishReason::error) {
        if (!refused) refused = d;
        return false;  // the other choices are aborted
      }
      if (refused || connection->gone()) return false;
      connection->stream_begin("text/event-stream", {{"Cache-Control", "no-cache"}});
      began = true;
    }
    std::string out;
    if (d.finish == FinishReason::error) {
      out = "data: " + api::dump(engine_error(d).body()) + "\n\n";
    } else {
      // Chat's first chunk is the role alone, as OpenAI sends it.
      if (chat && first[i]) out += api::stream_chunk(id, model_id_, chat, index, "", std::nullopt, created, true, nullptr);
      // An answer that may hold tool calls: its text goes out as far as no
      // call can begin there; the rest waits until it can be read (below).
      std::string text = d.text;
      if (reads_calls) {
        answer[i] += d.text;
        const size_t settled = settled_content(tool_format, answer[i]);
        text = settled > sent[i] ? answer[i].substr(sent[i], settled - sent[i]) : std::string();
        sent[i] = std::max(sent[i], settled);
      }
      if (r.echo && first[i]) text = echoed[i / static_cast<size_t>(r.n)] + text;
      if (!text.empty() || (!chat && first[i]) || (r.options.logprobs && !d.logprobs.empty() && !reads_calls)) {
        nlohmann::json lp = r.options.logprobs ? api::logprobs_json(chat, with_prompt(d), offset[i])
                                               : nlohmann::json(nullptr);
        out += api::stream_chunk(id, model_id_, chat, index, text, std::nullopt, created, false, lp);
      }
      if (d.finish != FinishReason::none && !reads_calls)
        out += api::stream_chunk(id, model_id_, chat, index, "", d.finish, created, false, nullptr);
    }
    for (const auto& t : with_prompt(d)) offset[i] += t.piece.size();
    first[i] = false;
    return out.empty() ? !connection->gone() : connection->stream_write(std::move(out));
  };
  auto forward_whole = [&](const TextDeltaEvent&, int) { return !connection->gone(); };
  const std::function<bool(const TextDeltaEvent&, int)> forward =
      r.stream ? std::function<bool(const TextDeltaEvent&, int)>(forward_stream) : forward_whole;

  // Choice `index` samples with seed + index when a seed is given; once the
  // client is gone its request is aborted at the next delta (again, in case
  // the first abort reached the scheduler before the request did).
  std::vector<api::ChoiceResult> results(static_cast<size_t>(choices));
  auto run_choice = [&](int index) {
    GenerateOptions o = r.options;
    const api::Prompt& prompt = prompts[static_cast<size_t>(index / r.n)];
    o.prompt = prompt.text;
    o.input_ids = prompt.ids;
    o.request_id = ids[static_cast<size_t>(index)];
    if (index % r.n > 0 && o.sampling.has_seed) o.sampling.seed += static_cast<uint64_t>(index % r.n);
    api::ChoiceResult& c = results[static_cast<size_t>(index)];
    bool first_delta = true, stopped = false;
    Clock::time_point prev = arrival;
    // A choice may run on a thread of its own, where an escaping exception
    // would end the process.
    try {
      c.last = engine_.generate(o, [&](const TextDeltaEvent& d) {
        const auto now = Clock::now();
        if (!d.text.empty() || !d.logprobs.empty()) {
          (first_delta ? ttft_ : itl_).observe(seconds(prev, now));
          first_delta = false;
          prev = now;
        }
        c.text += d.text;
        c.logprobs.insert(c.logprobs.end(), d.prompt_logprobs.begin(), d.prompt_logprobs.end());
        c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
        if (!stopped && !forward(d, index)) {
          stopped = true;
          engine_.abort(d.request_id);
        }
      });
    } catch (const std::exception&) {
      engine_.abort(o.request_id);
      c.last.finish = FinishReason::error;
      c.last.error = "engine failure: internal error";
      c.last.error_kind = ErrorKind::internal;
    }
  };
  std::vector<std::thread> others;
  for (int i = 1; i < choices; ++i) others.emplace_back(run_choice, i);
  run_choice(0);
  for (auto& t : others) t.join();

  if (r.stream && !began) {
    if (refused) return connection->respond(error_response(engine_error(*refused)));
    if (connection->gone()) return;
    connection->stream_begin("text/event-stream", {{"Cache-Control", "no-cache"}});
  }
  if (reads_calls) {
    for (size_t i = 0; i < results.size(); ++i) {
      api::ChoiceResult& c = results[i];
      if (c.last.finish == FinishReason::error) continue;
      // Streamed: the calls are read from what was held back (what was sent
      // is content by construction), and c.text becomes what is left to send.
      const std::string_view unsent = r.stream ? std::string_view(c.text).substr(std::min(sent[i], c.text.size()))
                                               : std::string_view(c.text);
      ParsedToolCalls parsed = parse_tool_calls(tool_format, unsent, r.tools.names);
      if (parsed.calls.empty()) {
        if (r.stream) c.text = std::string(unsent);
        continue;
      }
      if (!r.tools.parallel) parsed.calls.resize(1);
      c.tool_calls = std::move(parsed.calls);
      c.text = std::move(parsed.content);
    }
  }
  if (r.stream) {
    bool failed = false;
    for (const auto& c : results) failed = failed || c.last.finish == FinishReason::error;
    std::string tail;
    for (size_t i = 0; reads_calls && i < results.size(); ++i) {
      const api::ChoiceResult& c = results[i];
      if (c.last.finish == FinishReason::error) continue;
      const int index = static_cast<int>(i);
      if (!c.text.empty()) tail += api::stream_chunk(id, model_id_, chat, index, c.text, std::nullopt, created, false, nullptr);
      tail += c.tool_calls.empty() ? api::stream_chunk(id, model_id_, chat, index, "", c.last.finish, created, false, nullptr)
                                   : api::tool_calls_chunk(id, model_id_, index, c.tool_calls, created);
    }
    if (r.include_usage && !failed) tail += api::usage_chunk(id, model_id_, chat, results, r.n, created);
    tail += "data: [DONE]\n\n";
    connection->stream_write(std::move(tail));
    connection->stream_end();
    return;
  }
  for (const auto& c : results) {
    if (c.last.finish == FinishReason::error)
      return connection->respond(error_response(engine_error(c.last)));
  }
  if (r.echo) {
    for (size_t i = 0; i < results.size(); ++i) results[i].text = echoed[i / static_cast<size_t>(r.n)] + results[i].text;
  }
  if (route == Route::native) {
    return connection->respond(
        http::Response::json(200, api::dump(api::generate_response(results))));
  }
  connection->respond(
      http::Response::json(200, api::dump(api::completion_response(id, model_id_, chat, results, r.n,
                                                                   r.options.logprobs, created))));
}

std::string Completions::exposition() const {
  std::string out;
  auto counter = [&](const char* name, const char* help, int64_t value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name +
           " " + std::to_string(value) + "\n";
  };
  counter("actorlm_requests_total", "Generation requests accepted.", accepted_);
  counter("actorlm_requests_rejected_total",
          "Generation requests rejected as invalid or over the limit.", rejected_);
  return out + ttft_.exposition() + itl_.exposition();
}

}  // namespace actorlm
