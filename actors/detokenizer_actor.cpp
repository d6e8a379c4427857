#include "actors/detokenizer_actor.hpp"

#include <caf/all.hpp>
#include <map>

#include "actors/wire.hpp"
#include "messages/envelope.hpp"
#include "tokenizer/incremental_detokenizer.hpp"

namespace actorlm {
namespace {

struct Stream {
  caf::actor client;
  std::unique_ptr<IncrementalDetokenizer> detok;
};

struct DetokenizerState {
  std::shared_ptr<const Tokenizer> tok;
  caf::actor scheduler;
  std::map<uint64_t, Stream> streams;
  std::map<uint64_t, std::vector<std::vector<uint8_t>>> early;  // items that beat their registration
  static inline const char* name = "actorlm.detokenizer";
};

void deliver(caf::stateful_actor<DetokenizerState>* self, const fb::TokenStreamItem& item) {
  auto& s = self->state;
  auto it = s.streams.find(item.request_id());
  if (it == s.streams.end()) return;
  Stream& st = it->second;
  fb::TextDeltaT d;
  d.request_id = item.request_id();
  d.finish_reason = item.finish_reason();
  if (item.error()) d.error = item.error()->str();
  d.error_kind = item.error_kind();
  if (item.token_ids()) {
    const int32_t per = item.top_logprobs_per_token();
    for (uint32_t i = 0; i < item.token_ids()->size(); ++i) {
      const int32_t t = item.token_ids()->Get(i);
      if (st.detok->stopped()) break;
      d.token_ids.push_back(t);
      if (item.logprobs() && i < item.logprobs()->size()) d.logprobs.push_back(item.logprobs()->Get(i));
      if (item.top_logprobs() && per > 0 && (i + 1) * static_cast<uint32_t>(per) <= item.top_logprobs()->size()) {
        for (int32_t k = 0; k < per; ++k) d.top_logprobs.push_back(*item.top_logprobs()->Get(i * static_cast<uint32_t>(per) + k));
        d.top_logprobs_per_token = per;
      }
      auto delta = st.detok->push(t);
      d.text += delta.text;
      if (delta.stopped) {
        d.finish_reason = fb::FinishReason::Stop;
        d.matched_stop = delta.matched_stop;
        fb::AbortT stop;
        stop.request_ids = {item.request_id()};
        stop.reason = "stop string";
        self->send(s.scheduler, stop_atom::value, WireMessage{msg::pack(stop)});
      }
    }
  }
  if (item.prompt_logprobs()) {
    for (const fb::TokenLogprob* p : *item.prompt_logprobs()) d.prompt_logprobs.push_back(*p);
    if (item.prompt_top_logprobs()) {
      for (const fb::TokenLogprob* p : *item.prompt_top_logprobs()) d.prompt_top_logprobs.push_back(*p);
    }
    d.prompt_top_per_token = item.prompt_top_per_token();
  }
  if (d.finish_reason != fb::FinishReason::None) d.text += st.detok->flush();
  if (item.usage()) {
    d.usage = std::make_unique<fb::UsageT>();
    item.usage()->UnPackTo(d.usage.get());
  }
  bool done = d.finish_reason != fb::FinishReason::None;
  self->send(st.client, WireMessage{msg::pack(d)});
  if (done) s.streams.erase(it);
}

caf::behavior detokenizer_actor(caf::stateful_actor<DetokenizerState>* self, std::shared_ptr<const Tokenizer> tok) {
  self->state.tok = std::move(tok);
  return {
      [self](register_atom, const WireMessage& in, const caf::actor& client) {
        auto& s = self->state;
        auto t = msg::open<fb::TokenizedRequest>(in.bytes);
        if (!t) return;
        uint64_t id = t.message->request_id();
        std::vector<std::string> stops;
        int32_t min_tokens = 0;
        if (const fb::StopConditions* stop = t.message->stop()) {
          if (stop->stop_strings()) {
            for (const auto* str : *stop->stop_strings()) stops.push_back(str->str());
          }
          min_tokens = stop->min_new_tokens();
        }
        s.streams[id] = Stream{client, std::make_unique<IncrementalDetokenizer>(*s.tok, stops, false, min_tokens)};
        auto e = s.early.find(id);
        if (e == s.early.end()) return;
        auto items = std::move(e->second);
        s.early.erase(e);
        for (const auto& bytes : items) {
          auto st = msg::open<fb::TokenStream>(bytes);
          if (st && st.message->items()) {
            for (const fb::TokenStreamItem* item : *st.message->items()) {
              if (item->request_id() == id) deliver(self, *item);
            }
          }
        }
      },
      [self](stream_atom, const WireMessage& in) {
        auto opened = msg::open<fb::TokenStream>(in.bytes);
        if (!opened || !opened.message->items()) return;
        for (const fb::TokenStreamItem* item : *opened.message->items()) {
          if (self->state.streams.count(item->request_id())) {
            deliver(self, *item);
          } else {
            self->state.early[item->request_id()].push_back(in.bytes);
          }
        }
      },
      [self](caf::actor scheduler) { self->state.scheduler = std::move(scheduler); },
  };
}

}  // namespace

caf::actor spawn_detokenizer(caf::actor_system& system, std::shared_ptr<const Tokenizer> tok) {
  return system.spawn(detokenizer_actor, std::move(tok));
}

}  // namespace actorlm
