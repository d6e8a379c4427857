#include "server/http_connection.hpp"

#include <cstring>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>

#include "server/http_guard.hpp"

namespace actorlm::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace {

// Refusals for framing errors: the body is OpenAI's error object so every
// client library can show it.
Response framing_error(int status, std::string_view message) {
  return Response::json(status, R"({"error":{"message":")" + std::string(message) +
                                    R"(","type":"invalid_request_error","param":null,"code":)" +
                                    std::to_string(status) + "}}");
}

// Bytes a lingering close reads and throws away before it gives up.
constexpr std::chrono::milliseconds linger_time{2000};

}  // namespace

Connection::Connection(asio::ip::tcp::socket socket, const ConnectionLimits& limits,
                       RequestHandler& handler)
    : socket_(std::move(socket)),
      limits_(limits),
      handler_(handler),
      read_deadline_(socket_.get_executor()),
      write_deadline_(socket_.get_executor()) {
  set_phase(Phase::idle);
}

Connection::~Connection() = default;

void Connection::start() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->new_parser();
    self->arm_read_deadline(self->limits_.keep_alive_timeout);
    self->read_more();
  });
}

void Connection::set_phase(Phase p) {
  phase_ = p;
  phase_since_ = Clock::now().time_since_epoch().count();
}

void Connection::new_parser() {
  parser_.emplace();
  parser_->header_limit(
      static_cast<uint32_t>(std::min<size_t>(limits_.max_header_bytes, UINT32_MAX)));
  parser_->body_limit(limits_.max_body_bytes);
  screened_ = false;
}

void Connection::read_more() {
  if (reading_ || closed_) return;
  // While a request is handled only a little of the next one is read
  // ahead; otherwise the buffer holds at most one header (the parser keeps
  // the body it has read in the request itself).
  const size_t cap = lingering_                  ? 64 << 10
                     : phase_ == Phase::handling ? limits_.max_pipelined_bytes
                                                 : limits_.max_header_bytes + (16 << 10);
  if (buffer_.size() >= cap) return;  // resumes when the buffer is consumed
  reading_ = true;
  socket_.async_read_some(
      asio::buffer(scratch_.data(), std::min<size_t>(scratch_.size(), cap - buffer_.size())),
      [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_read(ec, n); });
}

void Connection::on_read(beast::error_code ec, size_t n) {
  reading_ = false;
  if (closed_) return;
  if (ec) {
    // The client closed or reset the socket.
    if (phase_ == Phase::handling && !lingering_) return client_gone();
    return close_now();
  }
  if (lingering_) {
    buffer_.consume(buffer_.size());  // bytes after a refusal are dropped unread
    return read_more();
  }
  const auto into = buffer_.prepare(n);
  std::memcpy(into.data(), scratch_.data(), n);
  buffer_.commit(n);
  process_input();
}

void Connection::process_input() {
  while (!closed_ && !lingering_ && phase_ != Phase::handling && buffer_.size() > 0) {
    if (phase_ == Phase::idle) {
      set_phase(Phase::receiving);
      arm_read_deadline(limits_.header_timeout);
    }
    beast::error_code ec;
    const size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == bhttp::error::need_more) break;
    if (ec == bhttp::error::header_limit)
      return refuse(framing_error(431, "the request header is too large"));
    if (ec == bhttp::error::body_limit) return refuse(framing_error(413, "request body too large"));
    if (ec) return refuse(framing_error(400, "malformed HTTP request"));
    if (!screened_ && parser_->is_header_done()) {
      screened_ = true;
      const auto& header = parser_->get().base();
      if (static_cast<size_t>(std::distance(header.begin(), header.end())) >
          limits_.max_header_fields) {
        return refuse(framing_error(431, "too many header fields"));
      }
      std::optional<Response> refusal;
      try {
        refusal = handler_.screen(header);
      } catch (const std::exception&) {
        refusal = framing_error(500, "internal error");
      }
      if (refusal) return refuse(std::move(*refusal));
      // A client that waits for permission to send its body gets it only
      // now, after the key and the route were checked.
      auto expect = header[bhttp::field::expect];
      if (!expect.empty()) {
        if (!beast::iequals(expect, "100-continue"))
          return refuse(framing_error(417, "unsupported Expect header"));
        queue("HTTP/1.1 100 Continue\r\n\r\n");
      }
      arm_read_deadline(limits_.body_timeout);
    }
    if (parser_->is_done()) return dispatch();
    if (used == 0) break;
  }
  read_more();
}

void Connection::dispatch() {
  disarm_read_deadline();
  set_phase(Phase::handling);
  Request request = parser_->release();
  keep_alive_ = request.keep_alive() && !draining_;
  try {
    handler_.handle(shared_from_this(), std::move(request));
  } catch (const std::exception&) {
    // A handler that throws must not take the I/O thread (and the server)
    // down; the client gets a plain 500, never the exception's text.
    keep_alive_ = false;
    queue(serialize(framing_error(500, "internal error"), false), [this] { linger_close(); });
  }
  read_more();  // notice a client that goes away while its request runs
}

void Connection::refuse(Response r) {
  disarm_read_deadline();
  set_phase(Phase::handling);
  keep_alive_ = false;
  queue(serialize(r, false), [this] { linger_close(); });
}

void Connection::respond(Response r) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), r = std::move(r)]() mutable {
    if (self->closed_ || self->phase_ != Phase::handling) return;
    self->on_gone_ = nullptr;
    if (self->streaming_) {
      // A failure after a stream began: end the chunked body and close, so
      // the client sees a cut stream rather than a second response.
      self->keep_alive_ = false;
      self->queue(std::string(last_chunk), [s = self.get()] { s->finish_response(); });
      return;
    }
    self->queue(serialize(r, self->keep_alive_ && !self->draining_),
                [s = self.get()] { s->finish_response(); });
  });
}

void Connection::stream_begin(std::string content_type,
                              std::vector<std::pair<std::string, std::string>> headers) {
  asio::post(socket_.get_executor(),
             [self = shared_from_this(), ct = std::move(content_type), h = std::move(headers)] {
               if (self->closed_) return;
               self->streaming_ = true;
               self->queue(stream_head(ct, h, self->keep_alive_ && !self->draining_));
             });
}

bool Connection::stream_write(std::string data) {
  if (gone_) return false;
  asio::post(socket_.get_executor(), [self = shared_from_this(), d = std::move(data)] {
    if (self->closed_) return;
    self->queue(chunk(d));
    // A client that stops reading must not make the server hold its output.
    if (self->out_bytes_ > self->limits_.max_pending_output) self->client_gone();
  });
  return !gone_;
}

void Connection::stream_end() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->closed_) return;
    self->on_gone_ = nullptr;
    self->queue(std::string(last_chunk), [s = self.get()] { s->finish_response(); });
  });
}

void Connection::set_on_gone(std::function<void()> f) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), f = std::move(f)]() mutable {
    if (self->gone_) {
      f();  // gone before the handler could say how to stop it
      return;
    }
    self->on_gone_ = std::move(f);
  });
}

void Connection::finish_response() {
  if (closed_) return;
  streaming_ = false;
  if (!keep_alive_ || draining_) return linger_close();
  new_parser();
  set_phase(Phase::idle);
  arm_read_deadline(limits_.keep_alive_timeout);
  process_input();  // a pipelined request may be waiting in the buffer
}

void Connection::drain() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->draining_ = true;
    if (self->phase_ == Phase::idle || self->phase_ == Phase::receiving) self->close_now();
  });
}

void Connection::close() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->close_now(); });
}

void Connection::arm_read_deadline(std::chrono::milliseconds d) {
  read_deadline_.expires_after(d);
  read_deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->on_read_deadline();
  });
}

void Connection::disarm_read_deadline() {
  read_deadline_.cancel();
}

void Connection::on_read_deadline() {
  // A deadline re-armed after this wait fired is not yet due.
  if (closed_ || read_deadline_.expiry() > Clock::now()) return;
  if (phase_ != Phase::handling || lingering_) close_now();
}

void Connection::queue(std::string bytes, std::function<void()> then) {
  if (bytes.empty() && !then) return;
  out_bytes_ += bytes.size();
  out_.push_back({std::move(bytes), std::move(then)});
  if (!writing_) write_next();
}

void Connection::write_next() {
  if (closed_) return;
  if (out_.empty()) {
    writing_ = false;
    write_deadline_.cancel();
    return;
  }
  writing_ = true;
  write_deadline_.expires_after(limits_.write_timeout);
  write_deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || self->closed_ || self->write_deadline_.expiry() > Clock::now()) return;
    self->client_gone();  // the client stopped reading
  });
  asio::async_write(socket_, asio::buffer(out_.front().bytes),
                    [self = shared_from_this()](beast::error_code ec, size_t) {
                      if (self->closed_) return;
                      if (ec) return self->client_gone();
                      Pending done = std::move(self->out_.front());
                      self->out_.pop_front();
                      self->out_bytes_ -= done.bytes.size();
                      if (done.then) done.then();
                      self->write_next();
                    });
}

void Connection::client_gone() {
  if (gone_.exchange(true)) return;
  if (auto f = std::move(on_gone_)) f();
  on_gone_ = nullptr;
  close_now();
}

void Connection::linger_close() {
  // Closing a socket with unread input resets it, and the reset can reach
  // the client before it has read the answer; so send FIN first and read
  // (and drop) what the client still sends, for a short while.
  if (closed_ || lingering_) return;
  lingering_ = true;
  beast::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  buffer_.consume(buffer_.size());
  arm_read_deadline(linger_time);
  read_more();
}

void Connection::close_now() {
  if (closed_) return;
  closed_ = true;
  set_phase(Phase::closed);
  read_deadline_.cancel();
  write_deadline_.cancel();
  beast::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  out_.clear();
  handler_.closed(*this);
}

}  // namespace actorlm::http
