// The drafters and the adaptive draft length on their own (no model): what
// the n-gram lookup proposes, and how DraftPace reacts to acceptance.

#include "scheduler/drafter.hpp"

#include <catch2/catch.hpp>

using namespace actorlm;
using Ids = std::vector<int32_t>;

TEST_CASE("N-gram lookup proposes what followed the latest earlier occurrence of the longest matching tail", "[drafter]") {
  NgramDrafter d(2, 4);
  // Tail "5 6": it occurred twice before; the latest is followed by 9 9.
  const Ids prompt{1, 5, 6, 7, 8, 2, 5, 6, 9, 9, 4};
  CHECK(d.draft(prompt, Ids{5, 6}, 3) == Ids{9, 9, 4});
  CHECK(d.draft(prompt, Ids{5, 6}, 1) == Ids{9});
  // A longer tail wins over a later, shorter match: "2 5 6" occurred at
  // the start (then 7 3), while the latest "5 6" is followed by 8.
  CHECK(d.draft(Ids{2, 5, 6, 7, 3, 5, 6, 8, 0}, Ids{2, 5, 6}, 2) == Ids{7, 3});
  // The output continues the prompt: a match may span both.
  CHECK(d.draft(Ids{10, 11, 12, 13}, Ids{10, 11}, 4) == Ids{12, 13, 10, 11});
  // No occurrence of any tail of min length or more: nothing.
  CHECK(d.draft(Ids{1, 2, 3, 4}, Ids{5, 6}, 4).empty());
  CHECK(NgramDrafter(3, 4).draft(Ids{1, 5, 6, 7}, Ids{9, 5, 6}, 4).empty());
  CHECK(NgramDrafter(1, 4).draft(Ids{1, 5, 6, 7}, Ids{9, 6}, 4) == Ids{7, 9, 6});
  CHECK(d.draft(Ids{1}, Ids{}, 4).empty());
  CHECK(d.draft(prompt, Ids{5, 6}, 0).empty());
}

TEST_CASE("A prediction is drafted front to back: its start first, then what follows the output's tail nearest after the last match", "[drafter]") {
  const PredictionLookup d(2, 4);
  const Ids prompt{90, 91, 92};
  // Two lines that begin alike ("1 2 3 ..."), each followed by its own rest.
  const Ids prediction{1, 2, 3, 4, 5, 1, 2, 3, 6, 7};
  size_t at = 0;
  // No output yet, or less than min_n of it: the prediction's start while
  // the output is a prefix of it.
  CHECK(d.draft(prediction, prompt, Ids{}, 3, at) == Ids{1, 2, 3});
  CHECK(at == 0);
  CHECK(d.draft(prediction, prompt, Ids{1}, 3, at) == Ids{2, 3, 4});
  CHECK(at == 1);
  CHECK(d.draft(prediction, prompt, Ids{8}, 3, at).empty());
  // Tail "1 2 3" matches at both lines: the first line's before the second.
  at = 0;
  CHECK(d.draft(prediction, prompt, Ids{1, 2, 3}, 4, at) == Ids{4, 5, 1, 2});
  CHECK(at == 3);
  // The output is on the second line: the match nearest after `at` is its.
  CHECK(d.draft(prediction, prompt, Ids{1, 2, 3, 4, 5, 1, 2, 3}, 4, at) == Ids{6, 7});
  CHECK(at == 8);
  // Back to text the prediction had earlier: the latest match before `at`.
  CHECK(d.draft(prediction, prompt, Ids{9, 4, 5}, 2, at) == Ids{1, 2});
  CHECK(at == 5);
  // The output's own edit: neither "2 3 9" nor "3 9" occurs, so nothing.
  // A match at the prediction's very end has nothing after it to draft.
  CHECK(d.draft(prediction, prompt, Ids{2, 3, 9}, 4, at).empty());
  CHECK(d.draft(prediction, prompt, Ids{6, 7}, 4, at).empty());
  // Short of min_n output tokens and not the prediction's start, the tail
  // may reach into the prompt; max_tokens bounds the draft.
  CHECK(d.draft(Ids{92, 1, 5, 5}, prompt, Ids{1}, 1, at) == Ids{5});
  CHECK(d.draft(prediction, prompt, Ids{1, 2}, 0, at).empty());
  CHECK(d.draft(Ids{}, prompt, Ids{1, 2}, 4, at).empty());
  // With a least context: "4 5" (two tokens) is not matched at three, "3 4
  // 5" is; the prediction's start is drafted whatever the least.
  at = 0;
  CHECK(d.draft(prediction, prompt, Ids{9, 9, 4, 5}, 2, at, 3).empty());
  CHECK(d.draft(prediction, prompt, Ids{9, 9, 4, 5}, 2, at, 2) == Ids{1, 2});
  CHECK(d.draft(prediction, prompt, Ids{9, 3, 4, 5}, 2, at, 3) == Ids{1, 2});
  CHECK(d.draft(prediction, prompt, Ids{1}, 2, at, 4) == Ids{2, 3});
}

TEST_CASE("Speculative settings out of range are refused with the range", "[drafter]") {
  SpeculativeConfig c;
  c.algorithm = SpeculativeAlgorithm::ngram;
  CHECK_FALSE(c.refusal());
  c.num_draft_tokens = 0;
  CHECK(c.refusal()->find("[1, 16]") != std::string::npos);
  c.num_draft_tokens = kMaxDraftTokens + 1;
  CHECK(c.refusal());
  c.num_draft_tokens = 4;
  c.ngram_min = 5;
  CHECK(c.refusal()->find("min 5, max 4") != std::string::npos);
  CHECK(parse_speculative_algorithm("ngram") == SpeculativeAlgorithm::ngram);
  CHECK(parse_speculative_algorithm("none") == SpeculativeAlgorithm::none);
  CHECK_FALSE(parse_speculative_algorithm("eagle"));
  CHECK(make_drafter(c) != nullptr);
  c.algorithm = SpeculativeAlgorithm::none;
  CHECK(make_drafter(c) == nullptr);
}

TEST_CASE("A request's draft rate follows what it kept, and drifts back to the engine's between verifies", "[drafter]") {
  DraftPace pace(4);
  CHECK(pace.want() == 4);
  CHECK(pace.rate(0.5) == Approx(0.5));  // nothing seen: the prior
  pace.observe(4, 4);                    // all kept
  CHECK(pace.rate(0.5) == Approx(5.0 / 6.0));
  pace.observe(4, 1);  // one kept, then a rejection
  const double after = pace.rate(0.5);
  CHECK(after < 5.0 / 6.0);
  CHECK(after > 0.5);
  for (int i = 0; i < 10; ++i) pace.observe(2, 0);  // rejected every time
  CHECK(pace.rate(0.5) < 0.25);
  // Rejected drafts make DraftCost keep none, so nothing is observed; the
  // steps between bring the rate back towards the prior.
  for (int i = 0; i < 100; ++i) CHECK(pace.want() == 4);
  CHECK(pace.rate(0.5) > 0.4);
  pace.observe(0, 0);  // nothing drafted: nothing learned
  CHECK(pace.rate(0.5) > 0.4);
  CHECK_FALSE(DraftPace().started());
  CHECK(DraftPace(1).started());
}
