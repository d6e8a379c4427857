#pragma once
// One generation request's server-sent events: the chunks of every choice as
// their deltas arrive, then the tail (held-back tool calls, usage, [DONE]).
//
// The stream, and with it the 200, begins with the first delta that is not an
// error, so a request the engine refuses outright (a prompt longer than the
// context, a max_tokens it cannot give) is an HTTP error like a non-streamed
// one. Choices run on threads of their own: `forward` may be called from any
// of them at once.

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "server/http_connection.hpp"
#include "server/openai_api.hpp"
#include "server/stream_journal.hpp"
#include "tokenizer/tool_calls.hpp"

namespace actorlm {

// What every chunk of one response repeats, and how its choices are shaped.
struct ResponseShape {
  std::string id;     // "chatcmpl-N" or "cmpl-N"
  std::string model;
  bool chat = true;   // chat's chunk format, else completions'
  int64_t created = 0;
  int n = 1;          // choices per prompt: choice i answers prompt i / n
  bool logprobs = false;
  // Chat with tools: a choice's text goes out only as far as no tool call can
  // begin there; the rest is read for calls once the choice ends.
  bool reads_calls = false;
  ToolFormat tool_format{};
  // echo: each prompt's text, which leads its choices' first chunk.
  std::vector<std::string> echoed;
};

// The engine's failure as the HTTP error a client gets: 503 for a lost or
// missing worker (another try may land on a live node), 400 for what the
// request got wrong, else 500.
api::ApiError engine_error(const TextDeltaEvent& d);
http::Response error_response(const api::ApiError& e);

// Reads each finished choice's tool calls out of its text: calls into
// tool_calls, the text around them left as the content. Streamed, only what
// `sent` says was held back is read (what went out is content by
// construction), and what is left of it stays to be sent. A choice that
// failed is left as it is.
void read_tool_calls(std::vector<api::ChoiceResult>& results, const ResponseShape& shape,
                     const api::ToolRequest& tools, const std::vector<size_t>* sent);

class CompletionStream {
 public:
  // Events go to `sink` (the connection, or a journal a client can come
  // back to); an outright refusal is answered on `connection`.
  CompletionStream(std::shared_ptr<http::Connection> connection, std::shared_ptr<EventSink> sink,
                   const ResponseShape& shape, int choices);

  // Writes choice `index`'s delta; false when the client is gone or the
  // request was refused, so that choice should be aborted.
  bool forward(const TextDeltaEvent& d, int index);

  // After every choice has ended: answers an outright refusal as an HTTP
  // error, else reads held-back tool calls and writes the tail and [DONE].
  void finish(std::vector<api::ChoiceResult>& results, const api::ToolRequest& tools,
              bool include_usage);

 private:
  std::shared_ptr<http::Connection> connection_;
  std::shared_ptr<EventSink> sink_;
  const ResponseShape& shape_;
  std::mutex mu_;
  bool began_ = false;
  std::optional<TextDeltaEvent> refused_;  // the first error before the stream began
  std::vector<bool> first_;
  std::vector<size_t> offset_;       // completions' text_offset
  std::vector<std::string> answer_;  // reads_calls: the text so far
  std::vector<size_t> sent_;         // reads_calls: bytes of it sent
};

}  // namespace actorlm
