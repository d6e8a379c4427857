#include "grammar/constraint.hpp"

#include <dlpack/dlpack.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <utility>
#include <xgrammar/xgrammar.h>

namespace actorlm {

namespace {

// xgrammar's messages can quote a whole schema back; a client sees the start.
constexpr size_t kMessageBytes = 400;

std::string short_message(const char* what) {
  std::string m(what);
  // Some refusals come from below without a word (constraint_fuzz found a
  // JSON schema of junk after a huge number): the client still gets one.
  if (m.empty()) m = "the structured-output engine refused it without saying why";
  if (m.size() > kMessageBytes) m = m.substr(0, kMessageBytes) + "...";
  return m;
}

// `text` as an EBNF string literal: quotes, backslashes and control
// characters escaped, UTF-8 as it is.
std::string ebnf_literal(const std::string& text) {
  static const char* hex = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

// xgrammar 0.2.8 sums an escape's hex digits into a signed int, which
// overflows (undefined behaviour) above 0x7FFFFFFF: an 8-digit \U escape, and
// a \x escape, which takes every hex digit that follows. constraint_fuzz
// found both (tests/fuzz/known_crashes/, tests/fuzz/corpus/constraint_fuzz/).
// No code point lies above U+10FFFF, so such an escape is refused before
// xgrammar reads the text: in a regex, an EBNF grammar, or a JSON schema's
// pattern (whose JSON source writes the backslash twice, which this sees as
// one followed by another).
static void refuse_wide_escapes(const std::string& text) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  for (size_t i = 0; i + 2 < text.size(); ++i) {
    if (text[i] != '\\' || (text[i + 1] != 'U' && text[i + 1] != 'x')) continue;
    const size_t most = text[i + 1] == 'U' ? 8 : text.size();
    uint64_t v = 0;
    for (size_t k = 0; k < most && i + 2 + k < text.size() && hex(text[i + 2 + k]) >= 0; ++k) {
      v = std::min<uint64_t>(v * 16 + static_cast<uint64_t>(hex(text[i + 2 + k])), uint64_t{1} << 32);
    }
    if (v > 0x10FFFF) {
      throw ConstraintError(std::string("a \\") + text[i + 1] + " escape beyond U+10FFFF at byte " + std::to_string(i));
    }
  }
}

struct ConstraintCompiler::Impl {
  int32_t vocab;
  xgrammar::GrammarCompiler compiler;

  Impl(const xgrammar::TokenizerInfo& info, int threads, int32_t vocab_size)
      : vocab(vocab_size), compiler(info, threads, /*cache_enabled=*/true) {}

  xgrammar::CompiledGrammar compile(const ConstraintSpec& spec) {
    refuse_wide_escapes(spec.text);
    switch (spec.kind) {
      case ConstraintKind::json_object:
        return compiler.CompileBuiltinJSONGrammar();
      case ConstraintKind::json_schema: {
        // One space after ',' and ':' and no other whitespace: how models
        // write JSON inline, and no room to pad the output with newlines
        // until max_tokens.
        if (spec.prefix.empty() && spec.suffix.empty()) {
          return compiler.CompileJSONSchema(spec.text, /*any_whitespace=*/false, std::nullopt,
                                            std::make_pair(std::string(", "), std::string(": ")),
                                            /*strict_mode=*/true);
        }
        std::vector<xgrammar::Grammar> parts;
        if (!spec.prefix.empty()) parts.push_back(xgrammar::Grammar::FromEBNF("root ::= " + ebnf_literal(spec.prefix)));
        parts.push_back(xgrammar::Grammar::FromJSONSchema(spec.text, /*any_whitespace=*/false, std::nullopt,
                                                          std::make_pair(std::string(", "), std::string(": ")),
                                                          /*strict_mode=*/true));
        if (!spec.suffix.empty()) parts.push_back(xgrammar::Grammar::FromEBNF("root ::= " + ebnf_literal(spec.suffix)));
        return compiler.CompileGrammar(xgrammar::Grammar::Concat(parts));
      }
      case ConstraintKind::regex:
        return compiler.CompileRegex(spec.text);
      case ConstraintKind::ebnf:
        return compiler.CompileGrammar(spec.text, "root");
      case ConstraintKind::none:
        break;
    }
    throw ConstraintError("no constraint to compile");
  }
};

struct ConstraintState::Impl {
  xgrammar::GrammarMatcher matcher;
  int32_t vocab;
};

ConstraintCompiler::ConstraintCompiler(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids,
                                       int threads) {
  const auto vocab = static_cast<int32_t>(token_bytes.size());
  // RAW: each string is exactly the token's bytes (our tokenizer already
  // undid byte-level and SentencePiece encodings).
  xgrammar::TokenizerInfo info(token_bytes, xgrammar::VocabType::RAW, vocab, std::move(stop_ids));
  impl_ = std::make_unique<Impl>(info, std::max(1, threads), vocab);
}

ConstraintCompiler::~ConstraintCompiler() = default;

int32_t ConstraintCompiler::vocab_size() const { return impl_->vocab; }

std::unique_ptr<ConstraintState> ConstraintCompiler::start(const ConstraintSpec& spec) {
  try {
    xgrammar::CompiledGrammar compiled = impl_->compile(spec);
    auto state = std::make_unique<ConstraintState::Impl>(ConstraintState::Impl{xgrammar::GrammarMatcher(compiled), impl_->vocab});
    return std::unique_ptr<ConstraintState>(new ConstraintState(std::move(state)));
  } catch (const ConstraintError&) {
    throw;
  } catch (const std::exception& e) {
    throw ConstraintError(short_message(e.what()));
  }
}

void ConstraintCompiler::prepare(const ConstraintSpec& spec) {
  try {
    impl_->compile(spec);
  } catch (const ConstraintError&) {
    throw;
  } catch (const std::exception& e) {
    throw ConstraintError(short_message(e.what()));
  }
}

ConstraintState::ConstraintState(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ConstraintState::~ConstraintState() = default;

void ConstraintState::allowed(std::span<uint32_t> mask) {
  int64_t shape[1] = {static_cast<int64_t>(mask.size())};
  DLTensor t{};
  t.data = mask.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  impl_->matcher.FillNextTokenBitmask(&t);
}

bool ConstraintState::accept(int32_t token) {
  if (token < 0 || token >= impl_->vocab) return false;
  return impl_->matcher.AcceptToken(token);
}

bool ConstraintState::complete() const { return impl_->matcher.IsTerminated(); }

void ConstraintState::rollback(int tokens) {
  if (tokens > 0) impl_->matcher.Rollback(tokens);
}

}  // namespace actorlm
