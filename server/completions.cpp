#include "server/completions.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "server/openai_api.hpp"

namespace actorlm {

namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Completions::Completions(Engine& engine, std::string model_id, int max_concurrent, ResumeLimits resume,
                         Tenants* tenants)
    : engine_(engine),
      tenants_(tenants),
      model_id_(std::move(model_id)),
      max_concurrent_(max_concurrent),
      ttft_{"actorlm_time_to_first_token_seconds",
            "Time from a request's arrival to its first generated text.",
            {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}},
      itl_{"actorlm_inter_token_latency_seconds",
           "Time between successive deltas of one request.",
           {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}},
      journals_(resume) {}

Completions::~Completions() {
  abort_all();
  wait_idle(std::chrono::seconds(30));
}

void Completions::start(const std::shared_ptr<http::Connection>& connection, Route route,
                        std::string body, const std::string& last_event_id, int32_t tenant) {
  if (!last_event_id.empty()) {
    // No new generation: no place taken.
    if (!journals_.enabled()) {
      return connection->respond(error_response(
          {400, "this server keeps no stream to come back to (it runs with --stream-resume-window 0)",
           "invalid_request_error", ""}));
    }
    if (auto refused = journals_.resume(connection, last_event_id, request_digest(static_cast<int>(route), body))) {
      return connection->respond(
          error_response({refused->first, refused->second, refused->first == 404 ? "not_found_error" : "invalid_request_error", ""}));
    }
    ++resumed_;
    return;
  }
  if (tenants_) {
    if (const std::optional<int> wait = tenants_->rate_refusal(tenant)) {
      ++rejected_;
      return connection->respond(error_response(
          {429, "tenant '" + tenants_->name(tenant) + "' is past its token rate limit; retry in " + std::to_string(*wait) + " s",
           "rate_limit_error", "", *wait}));
    }
  }
  if (++active_ > max_concurrent_) {
    --active_;
    ++rejected_;
    connection->respond(
        error_response({429,
                        "the server is at its limit of " + std::to_string(max_concurrent_) +
                            " concurrent requests (--max-concurrent-requests); retry later",
                        "rate_limit_error", "", 1}));
    return;
  }
  std::thread([this, connection, route, tenant, body = std::move(body)] {
    if (tenants_) tenants_->started(tenant);
    try {
      run(connection, route, body, tenant);
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

std::vector<std::string> Completions::adapter_names() const {
  std::vector<std::string> names;
  for (const AdapterInfo& a : engine_.adapters()) names.push_back(a.name);
  return names;
}

void Completions::run(const std::shared_ptr<http::Connection>& connection, Route route,
                      const std::string& body, int32_t tenant) {
  // The tenant's tokens are counted on every way out (nothing for a request
  // refused before it ran), and before the answer goes out: a client that
  // sends its next request at once must find the tokens taken.
  struct Count {
    Tenants* tenants;
    int32_t tenant;
    bool settled = false;
    void settle(int64_t prompt, int64_t completion) {
      if (tenants && !settled) tenants->finished(tenant, prompt, completion);
      settled = true;
    }
    ~Count() { settle(0, 0); }
  } count{tenants_, tenant};
  const auto arrival = Clock::now();
  const api::ServedModels models(model_id_, adapter_names());
  auto parsed = route == Route::native ? api::parse_generate_request(body, models)
                                       : api::parse_request(body, route == Route::chat, models);
  if (auto* e = std::get_if<api::ApiError>(&parsed)) {
    ++rejected_;
    return connection->respond(error_response(*e));
  }
  auto r = std::get<api::ParsedRequest>(std::move(parsed));
  ++accepted_;
  // One choice per (prompt, i); a batch of prompts gives choice p * n + i.
  std::vector<api::Prompt> prompts = r.prompts;
  if (prompts.empty()) prompts.push_back({r.options.prompt, r.options.input_ids});
  const int choices = static_cast<int>(prompts.size()) * r.n;
  ResponseShape shape = shape_of(route, r);
  if (r.echo) {
    for (const api::Prompt& p : prompts) {
      if (p.ids.empty()) {
        shape.echoed.push_back(p.text);
      } else if (auto text = engine_.detokenize(p.ids)) {
        shape.echoed.push_back(*text);
      } else {
        ++rejected_;
        return connection->respond(
            error_response({400, "'prompt' holds a token id outside the vocabulary", "invalid_request_error", "prompt"}));
      }
    }
  }
  // Function calling: a required or named call is constrained to a
  // well-formed call.
  if (shape.chat && (r.tools.choice == api::ToolChoice::required || r.tools.choice == api::ToolChoice::named)) {
    r.options.constraint = api::tool_call_constraint(r.tools, shape.tool_format);
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
  // A stream kept for its client to come back to outlives the connection;
  // any other request ends with it.
  std::shared_ptr<StreamJournal> journal;
  if (r.stream && journals_.enabled()) {
    journal = journals_.open(connection, request_digest(static_cast<int>(route), body), shape.chat ? "chatcmpl-" : "cmpl-");
  }
  if (journal) {
    shape.id = journal->id();
  } else {
    connection->set_on_gone([this, ids] {
      for (uint64_t i : ids) engine_.abort(i);
    });
  }
  struct End {  // a journal is ended on every way out, so that it expires
    std::shared_ptr<StreamJournal> journal;
    ~End() {
      if (journal) journal->end();
    }
  } end{journal};

  std::optional<CompletionStream> stream;
  if (r.stream) {
    std::shared_ptr<EventSink> sink = journal ? std::shared_ptr<EventSink>(journal) : std::make_shared<ConnectionSink>(connection);
    stream.emplace(connection, std::move(sink), shape, choices);
  }
  const Forward forward = [&](const TextDeltaEvent& d, int index) {
    return stream ? stream->forward(d, index) : !connection->gone();
  };
  std::vector<api::ChoiceResult> results(static_cast<size_t>(choices));
  auto run_choice = [&](int index) {
    GenerateOptions o = r.options;
    o.tenant = tenant;
    // Carried with the request: a cluster's engine nodes have no tenants
    // file of their own (Request::tenant_weight, tenant_kv_quota).
    if (tenants_ && tenant > 0) {
      o.tenant_weight = tenants_->weight(tenant);
      o.tenant_kv_quota = tenants_->kv_quota(tenant);
    }
    const api::Prompt& prompt = prompts[static_cast<size_t>(index / r.n)];
    o.prompt = prompt.text;
    o.input_ids = prompt.ids;
    o.request_id = ids[static_cast<size_t>(index)];
    // Choice i of a prompt samples with seed + i when a seed is given.
    if (index % r.n > 0 && o.sampling.has_seed) o.sampling.seed += static_cast<uint64_t>(index % r.n);
    results[static_cast<size_t>(index)] = generate_choice(o, index, forward, arrival);
  };
  std::vector<std::thread> others;
  for (int i = 1; i < choices; ++i) others.emplace_back(run_choice, i);
  run_choice(0);
  for (auto& t : others) t.join();
  {
    const nlohmann::json usage = api::usage_json(results, r.n);
    count.settle(usage.value("prompt_tokens", int64_t{0}), usage.value("completion_tokens", int64_t{0}));
  }

  if (stream) return stream->finish(results, r.tools, r.include_usage);
  for (const auto& c : results) {
    if (c.last.finish == FinishReason::error) return connection->respond(error_response(engine_error(c.last)));
  }
  if (shape.reads_calls) read_tool_calls(results, shape, r.tools, nullptr);
  for (size_t i = 0; i < results.size() && !shape.echoed.empty(); ++i) {
    results[i].text = shape.echoed[i / static_cast<size_t>(r.n)] + results[i].text;
  }
  const nlohmann::json answer = route == Route::native
                                    ? api::generate_response(results)
                                    : api::completion_response(shape.id, shape.model, shape.chat, results, r.n,
                                                               r.options.logprobs, shape.created);
  connection->respond(http::Response::json(200, api::dump(answer)));
}

ResponseShape Completions::shape_of(Route route, const api::ParsedRequest& r) {
  ResponseShape s;
  s.chat = route == Route::chat;
  s.id = (s.chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
  // An adapter's answers name the adapter (as vLLM's do).
  s.model = r.options.adapter.empty() ? model_id_ : r.options.adapter;
  s.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count();
  s.n = r.n;
  s.logprobs = r.options.logprobs;
  // With tool_choice other than "none" the answer is read back for calls.
  s.reads_calls = s.chat && r.tools.reads_calls();
  s.tool_format = engine_.tool_format();
  return s;
}

api::ChoiceResult Completions::generate_choice(const GenerateOptions& o, int index, const Forward& forward,
                                               Clock::time_point arrival) {
  api::ChoiceResult c;
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
      // Once the client is gone the request is aborted at the next delta
      // (again, in case the first abort reached the scheduler before it).
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
  return c;
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
  counter("actorlm_streams_resumed_total", "Clients that came back to a stream they lost (Last-Event-ID).", resumed_);
  out += "# HELP actorlm_streams_kept Streams kept for clients to come back to.\n# TYPE actorlm_streams_kept gauge\n"
         "actorlm_streams_kept " + std::to_string(journals_.streams()) + "\n";
  out += "# HELP actorlm_streams_kept_bytes Bytes of the events those streams keep.\n# TYPE actorlm_streams_kept_bytes gauge\n"
         "actorlm_streams_kept_bytes " + std::to_string(journals_.bytes()) + "\n";
  return out + ttft_.exposition() + itl_.exposition();
}

}  // namespace actorlm
