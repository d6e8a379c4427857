#pragma once
// One client connection of the HTTP server, on Boost.Beast's parser and an
// Asio strand. It owns every limit that protects the server from the bytes a
// client sends before it is authenticated:
//   - the request line and headers: at most max_header_bytes and
//     max_header_fields (431 beyond), all of them within header_timeout of
//     the request's first byte (a client trickling bytes is cut off);
//   - the body: read only after the header passed the server's screen (API
//     key, Host, route, media type), at most max_body_bytes (413), within
//     body_timeout;
//   - idle keep-alive connections close after keep_alive_timeout;
//   - output a client does not read: at most max_pending_output queued and
//     write_timeout per write, beyond which the client counts as gone.
// Requests on one connection are answered in order (pipelining): bytes of
// the next request wait in the buffer while one is handled. While a request
// is handled the connection keeps reading, so a client that closes its
// socket is noticed at once and its generation aborted (on_gone).
//
// Thread safety: respond/stream_* may be called from any thread (they post
// to the strand); everything else runs on the strand.

#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/http_response.hpp"

namespace actorlm::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using RequestHeader = boost::beast::http::request_header<>;

struct ConnectionLimits {
  size_t max_header_bytes = 16 << 10;
  size_t max_header_fields = 100;
  size_t max_body_bytes = 8 << 20;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{60'000};
  std::chrono::milliseconds keep_alive_timeout{30'000};
  std::chrono::milliseconds write_timeout{30'000};
  size_t max_pending_output = 8 << 20;
  size_t max_pipelined_bytes = 64 << 10;  // read ahead while a request is handled
};

class Connection;

// What the server decides; called on the connection's strand.
class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // After the header, before the body is read: a response refuses the
  // request (the connection then closes, the body unread).
  virtual std::optional<Response> screen(const RequestHeader& header) = 0;
  // A whole request. The handler answers exactly once, with respond() or
  // stream_begin()...stream_end(), from any thread.
  virtual void handle(const std::shared_ptr<Connection>& connection, Request request) = 0;
  // The connection is closed for good (called once).
  virtual void closed(Connection& connection) = 0;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Clock = std::chrono::steady_clock;
  // idle: waiting for a request's first byte; receiving: header or body
  // under way; handling: the server works on it; closed.
  enum class Phase { idle, receiving, handling, closed };

  Connection(boost::asio::ip::tcp::socket socket, const ConnectionLimits& limits,
             RequestHandler& handler);
  ~Connection();
  void start();

  void respond(Response r);
  void stream_begin(std::string content_type,
                    std::vector<std::pair<std::string, std::string>> headers);
  // Returns false once the client is gone (the caller should stop).
  bool stream_write(std::string data);
  void stream_end();

  // Called once, on the strand, when the client goes away while a request
  // is handled (closed socket, write timeout, output not read). Set it from
  // handle() before the work starts; it is cleared when the answer is sent.
  void set_on_gone(std::function<void()> f);
  bool gone() const { return gone_; }

  // Server shutdown: answer the request in hand (if any), then close;
  // close an idle or half-received connection now.
  void drain();
  void close();  // at once, from any thread

  Phase phase() const { return phase_; }
  Clock::time_point phase_since() const {
    return Clock::time_point(Clock::duration(phase_since_.load()));
  }

 private:
  void set_phase(Phase p);
  void read_more();
  void on_read(boost::beast::error_code ec, size_t n);
  void process_input();
  void new_parser();
  void refuse(Response r);
  void dispatch();
  void finish_response();
  void arm_read_deadline(std::chrono::milliseconds d);
  void disarm_read_deadline();
  void queue(std::string bytes, std::function<void()> then = {});
  void write_next();
  void client_gone();
  void close_now();
  void linger_close();
  void on_read_deadline();

  boost::asio::ip::tcp::socket socket_;  // its executor is the connection's strand
  ConnectionLimits limits_;
  RequestHandler& handler_;
  boost::beast::flat_buffer buffer_;
  // Where a pending read lands; on_read appends it to buffer_. Reading into
  // buffer_.prepare() directly would race: parsing consumes buffer_ while a
  // read is pending (a pipelined request, or one sent the moment a response
  // arrived), and a flat_buffer emptied by consume() moves its write area,
  // so the pending read's bytes would land outside what commit() then takes.
  std::array<char, 16 << 10> scratch_{};
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  boost::asio::steady_timer read_deadline_, write_deadline_;
  bool reading_ = false, screened_ = false, keep_alive_ = true, draining_ = false,
       lingering_ = false, closed_ = false, streaming_ = false;
  struct Pending {
    std::string bytes;
    std::function<void()> then;
  };
  std::deque<Pending> out_;
  size_t out_bytes_ = 0;
  bool writing_ = false;
  std::function<void()> on_gone_;
  std::atomic<bool> gone_{false};
  std::atomic<Phase> phase_{Phase::idle};
  std::atomic<Clock::rep> phase_since_{0};
};

}  // namespace actorlm::http
