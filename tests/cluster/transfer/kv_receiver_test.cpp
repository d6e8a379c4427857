// A decode node's open transfers: chunks are taken only under a ticket the
// node issued, each becomes the write of its own reserved rows, and a commit
// starts nothing until every layer of every token has arrived.

#include "cluster/transfer/kv_receiver.hpp"

#include <catch2/catch.hpp>
#include <numeric>

using namespace actorlm;

namespace {

const KvLayout kLayout{"model digest", "f32", 3, 16};

std::vector<uint8_t> bytes_for(const KvChunkRange& r, uint8_t fill) {
  return std::vector<uint8_t>(static_cast<size_t>(r.bytes(kLayout)), fill);
}

}  // namespace

TEST_CASE("A receiver turns the chunks of a ticket into writes of that request's rows, once each", "[cluster]") {
  KvReceiver rx(kLayout);
  std::vector<int32_t> rows(10);
  std::iota(rows.begin(), rows.end(), 100);
  const uint64_t ticket = rx.open(7, rows);
  const uint64_t other = rx.open(8, {1, 2});
  CHECK(ticket != 0);
  CHECK(ticket != other);
  CHECK(rx.open_transfers() == 2);

  // Plan with room for one layer's tokens at a time, in token runs.
  const auto plan = plan_kv_chunks(10, kLayout, 4 * kLayout.token_bytes);
  REQUIRE(plan.size() == 9);  // 3 layers x runs of 4, 4, 2 tokens
  for (size_t i = 0; i < plan.size(); ++i) {
    const KvChunkRange& r = plan[i];
    CHECK(rx.expects_more(ticket));  // a data port waits for the next chunk as for a peer gone
    auto taken = rx.take(encode_kv_chunk(ticket, kLayout, 10, r, bytes_for(r, static_cast<uint8_t>(i))));
    REQUIRE(taken.write);
    CHECK(taken.request_id == 7);
    CHECK(taken.write->first_layer == r.first_layer);
    CHECK(taken.write->last_layer == r.last_layer);
    CHECK(taken.write->rows == std::vector<int32_t>(rows.begin() + r.first_token, rows.begin() + r.last_token));
    CHECK(taken.write->data == bytes_for(r, static_cast<uint8_t>(i)));
    CHECK_FALSE(rx.landed(ticket));  // written; the transfer stays open
    if (i == 0) {
      // A commit before the end is refused, and closes the ticket.
      KvReceiver early(kLayout);
      const uint64_t t = early.open(9, rows);
      REQUIRE(early.take(encode_kv_chunk(t, kLayout, 10, r, bytes_for(r, 0))).write);
      CHECK_FALSE(early.landed(t));
      auto c = early.commit(t);
      CHECK(c.request_id == 9);
      CHECK_FALSE(c.error.empty());
      CHECK(early.open_transfers() == 0);
    }
  }
  CHECK_FALSE(rx.expects_more(ticket));  // all in: the connection may go quiet until the next transfer
  CHECK(rx.expects_more(other));
  CHECK_FALSE(rx.expects_more(ticket ^ other ^ 1));  // never issued
  // The same range again, a ticket never issued, a transfer of another size,
  // another model's chunk, a damaged byte: refused.
  auto again = rx.take(encode_kv_chunk(ticket, kLayout, 10, plan[0], bytes_for(plan[0], 0)));
  CHECK_FALSE(again.write);
  CHECK(again.request_id == 7);  // the caller fails request 7
  auto unknown = rx.take(encode_kv_chunk(ticket ^ other ^ 1, kLayout, 10, plan[0], bytes_for(plan[0], 0)));
  CHECK_FALSE(unknown.write);
  CHECK(unknown.request_id == 0);
  const KvChunkRange two{0, 1, 0, 2};
  CHECK_FALSE(rx.take(encode_kv_chunk(other, kLayout, 3, two, bytes_for(two, 0))).write);
  KvLayout foreign = kLayout;
  foreign.model_digest = "another model";
  CHECK_FALSE(rx.take(encode_kv_chunk(other, foreign, 2, two, bytes_for(two, 0))).write);
  auto damaged = encode_kv_chunk(other, kLayout, 2, two, bytes_for(two, 0));
  damaged[damaged.size() / 2] ^= 1;
  CHECK_FALSE(rx.take(damaged).write);

  auto done = rx.commit(ticket);
  CHECK(done.error.empty());
  CHECK(done.request_id == 7);
  CHECK_FALSE(rx.commit(ticket).error.empty());  // once
  CHECK(rx.drop_request(8));  // no write of it in flight
  CHECK_FALSE(rx.expects_more(other));  // closed
  CHECK(rx.open_transfers() == 0);
  CHECK_FALSE(rx.take(encode_kv_chunk(other, kLayout, 2, two, bytes_for(two, 0))).write);
}

TEST_CASE("A transfer dropped with writes in flight refuses chunks and holds its request until they land", "[cluster]") {
  KvReceiver rx(kLayout);
  const uint64_t ticket = rx.open(7, {10, 11, 12, 13});
  const KvChunkRange first{0, 1, 0, 2}, second{0, 1, 2, 4}, third{1, 2, 0, 4};
  auto a = rx.admit(ticket, 4, first, static_cast<uint64_t>(first.bytes(kLayout)));
  auto b = rx.admit(ticket, 4, second, static_cast<uint64_t>(second.bytes(kLayout)));
  REQUIRE(a.write);
  REQUIRE(b.write);
  CHECK(a.ticket == ticket);
  CHECK(rx.writes_in_flight() == 2);
  // One lands before the abort: nothing to report yet.
  CHECK_FALSE(rx.landed(ticket));
  // Aborted with one write still coming: not yet.
  CHECK_FALSE(rx.drop_request(7));
  CHECK(rx.open_transfers() == 1);
  // Closed to new chunks and to its commit meanwhile.
  auto late = rx.admit(ticket, 4, third, static_cast<uint64_t>(third.bytes(kLayout)));
  CHECK_FALSE(late.write);
  CHECK(late.error.find("has closed") != std::string::npos);
  CHECK(rx.commit(ticket).error.find("has closed") != std::string::npos);
  // The last write lands: now the request may go, once.
  CHECK(rx.landed(ticket));
  CHECK(rx.open_transfers() == 0);
  CHECK(rx.writes_in_flight() == 0);
  CHECK_FALSE(rx.landed(ticket));

  // A commit while a write is in flight is refused and fences the same way.
  const uint64_t t2 = rx.open(8, {1, 2});
  const KvChunkRange all{0, kLayout.n_layers, 0, 2};
  REQUIRE(rx.admit(t2, 2, all, static_cast<uint64_t>(all.bytes(kLayout))).write);
  auto c = rx.commit(t2);
  CHECK(c.request_id == 8);
  CHECK(c.error.find("still being written") != std::string::npos);
  CHECK_FALSE(rx.drop_request(8));
  CHECK(rx.landed(t2));
  CHECK(rx.open_transfers() == 0);
}
