// Tokenizer throughput on the default model's vocabulary (SmolLM2, byte-level
// BPE): encode of ~4 MB of mixed text (prose, code, numbers, CJK) with a cold
// and a warm word cache, one 1 MB word with no split point (the merge loop
// alone), decode, and the streaming detokenizer.
//
//   ./build/bench/tokenizer_bench [model.gguf]

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "tokenizer/incremental_detokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actorlm;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string corpus(size_t bytes) {
  const char* words[] = {"the",    "model",  "cache",    "radix", "token", "actor",  "kernel", "Paris",   "don't",
                         "it's",   "while",  "return",   "int",   "x",     "+=",     "(",      ");",      "{",
                         "}",      "naïve",  "über",     "東京",  "код",   "λ",      "—",      "🙂",      "because",
                         "memory", "prefix", "requests", "batch", "GPU",   "schedule", "HTTP", "streaming", "é"};
  const char* seps[] = {" ", " ", " ", " ", ", ", ". ", "\n", "\n    ", "\t", "  "};
  std::mt19937 rng(3);
  std::string out;
  while (out.size() < bytes) {
    if (rng() % 10 == 0) {
      out += std::to_string(rng() % 100000);
    } else {
      out += words[rng() % std::size(words)];
    }
    out += seps[rng() % std::size(seps)];
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : default_model_path();
  const std::string text = corpus(4 << 20);
  const double mb = static_cast<double>(text.size()) / (1 << 20);

  auto t0 = Clock::now();
  Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(model));
  std::printf("load vocabulary: %.1f ms (%d tokens)\n", seconds_since(t0) * 1e3, tok.vocab_size());

  t0 = Clock::now();
  std::vector<int32_t> ids = tok.encode(text, false, true);
  double cold = seconds_since(t0);
  t0 = Clock::now();
  std::vector<int32_t> again = tok.encode(text, false, true);
  double warm = seconds_since(t0);
  std::printf("encode %.1f MB -> %zu tokens: cold cache %.1f MB/s (%.2f M tokens/s), warm %.1f MB/s%s\n", mb,
              ids.size(), mb / cold, static_cast<double>(ids.size()) / cold / 1e6, mb / warm,
              ids == again ? "" : "  [MISMATCH]");

  std::string word;
  std::mt19937 rng(5);
  for (int i = 0; i < (1 << 20); ++i) word += static_cast<char>('a' + rng() % 26);
  t0 = Clock::now();
  std::vector<int32_t> word_ids = tok.encode(word, false, false);
  std::printf("encode one 1 MB word (no split point): %.1f ms, %zu tokens\n", seconds_since(t0) * 1e3, word_ids.size());

  t0 = Clock::now();
  std::string back = tok.decode(ids);
  double dec = seconds_since(t0);
  std::printf("decode: %.1f MB/s%s\n", mb / dec, back == text ? "" : "  [MISMATCH]");

  t0 = Clock::now();
  IncrementalDetokenizer detok(tok, {"<|stop here|>", "\n\n\n\n"});
  size_t streamed = 0;
  for (int32_t id : ids) streamed += detok.push(id).text.size();
  streamed += detok.flush().size();
  double st = seconds_since(t0);
  std::printf("stream detokenize with 2 stop strings: %.2f M tokens/s (%zu bytes out)\n",
              static_cast<double>(ids.size()) / st / 1e6, streamed);
  return 0;
}
