#include "server/stream_journal.hpp"

#include <charconv>
#include <cstdio>
#include <functional>
#include <random>

namespace actorlm {

namespace {

void begin_events(http::Connection& c) { c.stream_begin("text/event-stream", {{"Cache-Control", "no-cache"}}); }

std::string random_hex(size_t digits) {
  std::random_device rd;  // the kernel's generator: stream ids are capabilities
  std::string out;
  while (out.size() < digits) {
    char part[9];
    std::snprintf(part, sizeof part, "%08x", rd());
    out += part;
  }
  out.resize(digits);
  return out;
}

}  // namespace

void ConnectionSink::begin() { begin_events(*c_); }

size_t request_digest(int route, const std::string& body) {
  return std::hash<std::string>{}(std::to_string(route) + '\n' + body);
}

StreamJournal::StreamJournal(std::string id, size_t digest, const ResumeLimits& limits, StreamJournals& owner)
    : id_(std::move(id)), digest_(digest), limits_(limits), owner_(owner), since_(Clock::now()) {}

StreamJournal::~StreamJournal() { owner_.bytes_ -= bytes_; }

void StreamJournal::begin() {
  std::lock_guard<std::mutex> lock(mu_);
  begun_ = true;
  if (reader_) begin_events(*reader_);
}

bool StreamJournal::write(std::string events) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) return false;
  // One id per event, so that a client's Last-Event-ID names exactly the
  // last event it has whole (JSON escapes newlines: "\n\n" ends an event).
  std::string out;
  for (size_t at = 0; at < events.size();) {
    size_t end = events.find("\n\n", at);
    end = end == std::string::npos ? events.size() : end + 2;
    std::string e = "id: " + id_ + "." + std::to_string(next_++) + "\n" + events.substr(at, end - at);
    out += e;
    bytes_ += e.size();
    owner_.bytes_ += e.size();
    events_.push_back(std::move(e));
    at = end;
  }
  while (bytes_ > limits_.max_stream_bytes && events_.size() > 1) {
    bytes_ -= events_.front().size();
    owner_.bytes_ -= events_.front().size();
    events_.pop_front();
    ++first_;
  }
  if (reader_ && !reader_->stream_write(std::move(out))) {
    reader_ = nullptr;
    since_ = Clock::now();
  }
  return reader_ || Clock::now() - since_ <= limits_.window;
}

void StreamJournal::end() {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) return;
  ended_ = true;
  since_ = Clock::now();
  if (reader_ && begun_) reader_->stream_end();
  reader_ = nullptr;
}

bool StreamJournal::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !ended_ && (reader_ || Clock::now() - since_ <= limits_.window);
}

std::optional<std::string> StreamJournal::attach(const std::shared_ptr<http::Connection>& c, size_t digest,
                                                 uint64_t last_seen) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string named = id_ + "." + std::to_string(last_seen);
  if (digest != digest_) return "the request is not the one that started stream " + id_ + ": send the same body again";
  if (last_seen >= next_) return "stream " + id_ + " has sent no event " + named;
  if (last_seen + 1 < first_) {
    return "the events after " + named + " are no longer kept (a stream keeps its last " +
           std::to_string(limits_.max_stream_bytes) + " bytes)";
  }
  if (ended_ && !begun_) return "stream " + id_ + " was refused before its first event";
  // A client that comes back has given up on its old connection.
  if (reader_ && reader_ != c) reader_->close();
  reader_ = nullptr;
  if (begun_) {
    begin_events(*c);
    const std::string missed = replay_after(last_seen);
    if (!missed.empty()) c->stream_write(missed);
  }
  if (ended_) {
    c->stream_end();
    return std::nullopt;
  }
  reader_ = c;
  c->set_on_gone([self = weak_from_this(), raw = c.get()] {
    if (auto j = self.lock()) j->detach(raw);
  });
  return std::nullopt;
}

void StreamJournal::detach(const http::Connection* c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reader_.get() != c) return;
  reader_ = nullptr;
  since_ = Clock::now();
}

std::string StreamJournal::replay_after(uint64_t last_seen) const {
  std::string out;
  for (uint64_t k = std::max(last_seen + 1, first_); k < next_; ++k) out += events_[static_cast<size_t>(k - first_)];
  return out;
}

bool StreamJournal::expired(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_ && now - since_ > limits_.window;
}

std::shared_ptr<StreamJournal> StreamJournals::open(const std::shared_ptr<http::Connection>& c, size_t digest,
                                                    const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  sweep_locked();
  if (bytes_ >= limits_.max_total_bytes) return nullptr;
  auto j = std::make_shared<StreamJournal>(prefix + random_hex(32), digest, limits_, *this);
  streams_[j->id()] = j;
  j->attach(c, digest, 0);
  return j;
}

std::optional<std::pair<int, std::string>> StreamJournals::resume(const std::shared_ptr<http::Connection>& c,
                                                                  const std::string& last_event_id, size_t digest) {
  const size_t dot = last_event_id.rfind('.');
  uint64_t seen = 0;
  const char* tail = last_event_id.data() + (dot == std::string::npos ? 0 : dot + 1);
  const char* end = last_event_id.data() + last_event_id.size();
  if (dot == std::string::npos || tail == end || std::from_chars(tail, end, seen).ptr != end) {
    return std::make_pair(400, std::string("Last-Event-ID must be an event id this server sent (<stream>.<n>)"));
  }
  const std::string id = last_event_id.substr(0, dot);
  std::shared_ptr<StreamJournal> j;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sweep_locked();
    auto it = streams_.find(id);
    if (it != streams_.end()) j = it->second;
  }
  if (!j) {
    return std::make_pair(404, "stream " + id + " is not kept here: it ended more than " +
                                   std::to_string(limits_.window.count() / 1000.0) +
                                   " s ago, nobody came back to it in time, or this server never had it");
  }
  if (auto why = j->attach(c, digest, seen)) return std::make_pair(409, *why);
  return std::nullopt;
}

size_t StreamJournals::streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  sweep_locked();
  return streams_.size();
}

size_t StreamJournals::bytes() const { return bytes_; }

void StreamJournals::sweep_locked() const {
  const auto now = StreamJournal::Clock::now();
  for (auto it = streams_.begin(); it != streams_.end();) {
    it = it->second->expired(now) ? streams_.erase(it) : std::next(it);
  }
}

}  // namespace actorlm
