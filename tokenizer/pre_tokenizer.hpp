#pragma once
// Splits text into the pieces a byte-level BPE merges within, following the
// regular expressions the model families were trained with, written out by
// hand over Unicode character classes (no regex engine):
//
//   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   smollm: every \p{N} split off on its own first, then gpt2 (as llama.cpp's
//           "smollm" pre-tokenizer, shared with StarCoder)
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:  llama3 with single digits (\p{N} instead of \p{N}{1,3})
//   qwen35: qwen2 with combining marks counted as letters
// and, as llama.cpp applies them, families written as several patterns in a
// row, each splitting what the previous left: default_bpe (files with no
// tokenizer.ggml.pre: GPT-NeoX, Aquila), falcon, deepseek_llm, deepseek_coder.

#include <string>
#include <string_view>
#include <vector>

namespace actorlm {

enum class PreTokenizer { gpt2, smollm, llama3, qwen2, qwen35, default_bpe, falcon, deepseek_llm, deepseek_coder };

// Maps llama.cpp's tokenizer.ggml.pre names (empty: no name in the file);
// unknown names give gpt2 and set *known = false.
PreTokenizer pre_tokenizer_from_name(const std::string& name, bool* known);

// Pieces in order; concatenated they give back text exactly.
std::vector<std::string_view> pre_tokenize(PreTokenizer kind, std::string_view text);

}  // namespace actorlm
