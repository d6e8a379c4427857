#pragma once
// Streams a client can come back to (SSE resume, the EventSource
// convention). With a resume window, each event of a streamed response
// carries "id: <stream id>.<n>". A client whose connection broke sends the
// same request again with "Last-Event-ID: <the last id it received>" and gets
// the events after that one, then the rest as they come: the same generation
// goes on, it is not started again. While no client is attached the
// generation goes on for up to the window; a stream nobody came back to is
// then aborted at its next event. An ended stream is kept for the window
// too, for a client that lost only the tail.
//
// The stream id holds 128 random bits: knowing it is what lets a client
// attach, along with the request's own bytes (the server checks the body is
// the one that started the stream) and, where the server has one, its API
// key (checked before any of this).
//
// Thread safety: every member may be called from any thread.

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "server/http_connection.hpp"
#include "server/resume_limits.hpp"

namespace actorlm {

// Where a streamed response's events go.
class EventSink {
 public:
  virtual ~EventSink() = default;
  // The 200 and the SSE headers.
  virtual void begin() = 0;
  // Whole events ("data: ...\n\n" each); false when the generation should stop.
  virtual bool write(std::string events) = 0;
  // The response is complete.
  virtual void end() = 0;
  // Someone may still read what comes (before anything is written).
  virtual bool open() const = 0;
};

// The client's connection, and nothing kept: the stream ends with it.
class ConnectionSink final : public EventSink {
 public:
  explicit ConnectionSink(std::shared_ptr<http::Connection> c) : c_(std::move(c)) {}
  void begin() override;
  bool write(std::string events) override { return c_->stream_write(std::move(events)); }
  void end() override { c_->stream_end(); }
  bool open() const override { return !c_->gone(); }

 private:
  std::shared_ptr<http::Connection> c_;
};

class StreamJournals;

// One resumable stream: its events so far and the connection (if any) that
// reads them now.
class StreamJournal final : public EventSink, public std::enable_shared_from_this<StreamJournal> {
 public:
  using Clock = std::chrono::steady_clock;
  StreamJournal(std::string id, size_t digest, const ResumeLimits& limits, StreamJournals& owner);
  ~StreamJournal() override;

  void begin() override;
  bool write(std::string events) override;
  void end() override;
  bool open() const override;

  const std::string& id() const { return id_; }
  // A reader: the stream's first client, or one come back after event
  // `last_seen` (0: none) with a request whose digest is `digest`. Refused
  // (a reason) when the request differs, or the events after last_seen are
  // no longer kept.
  std::optional<std::string> attach(const std::shared_ptr<http::Connection>& c, size_t digest, uint64_t last_seen);
  // Nobody can use it any more: ended (or never begun) and unread past the window.
  bool expired(Clock::time_point now) const;

 private:
  void detach(const http::Connection* c);
  std::string replay_after(uint64_t last_seen) const;

  const std::string id_;
  const size_t digest_;
  const ResumeLimits limits_;
  StreamJournals& owner_;
  mutable std::mutex mu_;
  std::shared_ptr<http::Connection> reader_;
  bool begun_ = false, ended_ = false;
  std::deque<std::string> events_;  // with their id lines; events_[k] is event first_ + k
  uint64_t first_ = 1, next_ = 1;
  size_t bytes_ = 0;
  Clock::time_point since_;  // when the last reader left, or the stream ended
};

class StreamJournals {
 public:
  explicit StreamJournals(ResumeLimits limits) : limits_(limits) {}
  bool enabled() const { return limits_.window.count() > 0; }
  std::chrono::milliseconds window() const { return limits_.window; }

  // A journal for a new stream read first by `c`, its id `prefix` and 32
  // random hex digits; null when the streams kept are at their limit (the
  // stream then goes straight to its connection).
  std::shared_ptr<StreamJournal> open(const std::shared_ptr<http::Connection>& c, size_t digest,
                                      const std::string& prefix);
  // A client back with Last-Event-ID `last_event_id`: attached (nullopt), or
  // the HTTP status and message of why not.
  std::optional<std::pair<int, std::string>> resume(const std::shared_ptr<http::Connection>& c,
                                                    const std::string& last_event_id, size_t digest);
  // Streams kept now (the expired let go first), and their bytes.
  size_t streams() const;
  size_t bytes() const;

 private:
  friend class StreamJournal;
  void sweep_locked() const;

  const ResumeLimits limits_;
  std::atomic<size_t> bytes_{0};  // StreamJournal keeps it up to date (declared first: the journals in streams_ touch it as they go)
  mutable std::mutex mu_;
  mutable std::map<std::string, std::shared_ptr<StreamJournal>> streams_;  // swept on every use
};

// The digest a resumed request must match: its route and body.
size_t request_digest(int route, const std::string& body);

}  // namespace actorlm
