// The shared n-gram table on its own (no model): what it drafts from what
// finished requests wrote, its confidence rule, and its bound.

#include "scheduler/ngram_table.hpp"

#include <catch2/catch.hpp>

using namespace actorlm;
using Ids = std::vector<int32_t>;

TEST_CASE("The n-gram table drafts what other requests wrote after the same words, while one continuation dominates", "[drafter][ngram_table]") {
  NgramTable t(2, 3, 1000);
  CHECK(t.draft(Ids{1, 2}, Ids{}, 4).empty());  // nothing seen yet
  // Two requests wrote "7 8 9 10 11" after "... 5 6".
  t.observe(Ids{1, 5, 6, 7, 8, 9, 10, 11});
  t.observe(Ids{2, 5, 6, 7, 8, 9, 10, 11});
  // Another request reaching "5 6" is drafted the rest, up to max_tokens;
  // the context may span prompt and output.
  CHECK(t.draft(Ids{40, 5}, Ids{6}, 3) == Ids{7, 8, 9});
  CHECK(t.draft(Ids{40, 41}, Ids{5, 6, 7}, 10) == Ids{8, 9, 10, 11});
  CHECK(t.draft(Ids{40, 5, 6}, Ids{}, 0).empty());
  // Only contexts of min_n or more: "6" alone is not one, "3 6" never seen.
  CHECK(t.draft(Ids{3, 6}, Ids{}, 4).empty());
  // A context followed by different tokens equally often: no draft there.
  t.observe(Ids{20, 21, 30});
  t.observe(Ids{20, 21, 31});
  CHECK(t.draft(Ids{20, 21}, Ids{}, 4).empty());
  // Once one is seen more than half the time, it is drafted.
  t.observe(Ids{20, 21, 30});
  CHECK(t.draft(Ids{20, 21}, Ids{}, 1) == Ids{30});
  // The longest context wins: after "9 5 6" came 99, after "x 5 6" 7.
  t.observe(Ids{9, 5, 6, 99});
  CHECK(t.draft(Ids{9, 5, 6}, Ids{}, 1) == Ids{99});
  CHECK(t.draft(Ids{1, 5, 6}, Ids{}, 1) == Ids{7});
}

TEST_CASE("The n-gram table keeps each space's text to itself", "[drafter][ngram_table]") {
  NgramTable t(2, 3, 1000);
  t.observe(Ids{1, 5, 6, 7, 8, 9}, 3);
  t.observe(Ids{1, 5, 6, 7, 8, 9}, 3);
  // Tenant 3 is drafted what tenant 3 wrote; tenant 4 and the default
  // space nothing, though the words are the same.
  CHECK(t.draft(Ids{5, 6}, Ids{}, 3, 0, 3) == Ids{7, 8, 9});
  CHECK(t.draft(Ids{5, 6}, Ids{}, 3, 0, 4).empty());
  CHECK(t.draft(Ids{5, 6}, Ids{}, 3).empty());
  t.observe(Ids{5, 6, 70, 80}, 4);
  CHECK(t.draft(Ids{5, 6}, Ids{}, 2, 0, 4) == Ids{70, 80});
  CHECK(t.draft(Ids{5, 6}, Ids{}, 3, 0, 3) == Ids{7, 8, 9});
}

TEST_CASE("The n-gram table holds at most its capacity, keeping what it saw last", "[drafter][ngram_table]") {
  NgramTable t(2, 2, 100);
  Ids text;
  for (int32_t i = 0; i < 10000; ++i) text.push_back(i);
  t.observe(text);
  CHECK(t.size() <= 100);
  CHECK(t.draft(Ids{9997, 9998}, Ids{}, 4) == Ids{9999});  // recent: kept
  CHECK(t.draft(Ids{10, 11}, Ids{}, 4).empty());          // long ago: dropped
  // A context seen again in the newer generation keeps its counts.
  NgramTable u(2, 2, 4);
  u.observe(Ids{1, 2, 3});
  u.observe(Ids{1, 2, 3});
  u.observe(Ids{50, 51, 52, 53});  // fills the generation: {1 2} moves to the older one
  u.observe(Ids{1, 2, 4});         // comes back with 3 seen twice, 4 once
  CHECK(u.draft(Ids{1, 2}, Ids{}, 1) == Ids{3});
  CHECK(NgramTable(2, 4, 0).size() == 0);  // a capacity under 2 still holds one context per generation
}
