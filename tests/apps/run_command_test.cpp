// `actorlm run` as a user runs it: a child process, stdout and exit code.

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/apps/actorlm_process.hpp"

namespace {

using Result = actorlm::test::CommandResult;

Result run(const std::string& args) { return actorlm::test::run_actorlm(args, "2>&1"); }

}  // namespace

TEST_CASE("actorlm run answers a question on the default model", "[apps]") {
  Result r = run("run -p 'Name the capital of France.' --max-tokens 20 --threads 2");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(r.out.find("Paris") != std::string::npos);
  CHECK(r.out.find("finish: stop") != std::string::npos);  // ended by the end-of-turn token
}

TEST_CASE("actorlm run keeps its KV cache in f16 when asked, and refuses a dtype the CPU has not", "[apps]") {
  Result r = run("run -p 'Name the capital of France.' --max-tokens 20 --threads 2 --kv-cache-dtype f16");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(r.out.find("Paris") != std::string::npos);
  r = run("run -p hi --kv-cache-dtype bf16");
  CHECK(r.code == 1);
  CHECK(r.out.find("float32 or f16, not bf16") != std::string::npos);
  r = run("run -p hi --kv-cache-dtype q4");
  CHECK(r.code == 2);
  CHECK(r.out.find("--kv-cache-dtype must be") != std::string::npos);
}

TEST_CASE("actorlm run is deterministic for a seed and honours --max-tokens", "[apps]") {
  std::string args = "run --raw -p 'Once upon a time' --max-tokens 12 --temperature 0.9 --seed 11 --threads 2";
  Result a = run(args), b = run(args);
  CHECK(a.code == 0);
  auto text = [](const std::string& s) { return s.substr(0, s.find("loaded in")); };
  CHECK(text(a.out) == text(b.out));
  CHECK(a.out.find("12 generated") != std::string::npos);
  CHECK(a.out.find("finish: length") != std::string::npos);
}

TEST_CASE("actorlm run rejects bad input with a message and an exit code", "[apps]") {
  Result r = run("run -p hi --temperature -1");
  CHECK(r.code == 2);
  CHECK(r.out.find("--temperature must be") != std::string::npos);
  r = run("run -p hi --model /nonexistent.gguf");
  CHECK(r.code == 1);
  CHECK(r.out.find("/nonexistent.gguf") != std::string::npos);
  r = run("run");
  CHECK(r.code == 2);
  CHECK(r.out.find("usage") != std::string::npos);
  r = run("run -p hi --bogus 1");
  CHECK(r.code == 2);
  CHECK(r.out.find("unknown argument '--bogus'") != std::string::npos);
  r = run("frobnicate");
  CHECK(r.code == 2);
}

TEST_CASE("actorlm run uses a --chat-template-file instead of the model's template", "[apps]") {
  char path[] = "/tmp/actorlm-template-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  // A template that refuses every conversation: its words reach the user, so
  // the file (not the model's ChatML) rendered the prompt.
  const std::string refusing = "{{ raise_exception('this template takes no questions') }}";
  REQUIRE(write(fd, refusing.data(), refusing.size()) == static_cast<ssize_t>(refusing.size()));
  close(fd);
  Result r = run("run -p hi --max-tokens 4 --chat-template-file " + std::string(path));
  CHECK(r.code == 1);
  CHECK(r.out.find("this template takes no questions") != std::string::npos);
  // One that does not parse is refused before the model loads, naming its line.
  FILE* f = fopen(path, "w");
  REQUIRE(f);
  fputs("{% for m in messages %}\n{{ m.content }\n", f);
  fclose(f);
  r = run("run -p hi --chat-template-file " + std::string(path));
  CHECK(r.code == 2);
  CHECK(r.out.find("line 2") != std::string::npos);
  CHECK(r.out.find("loaded") == std::string::npos);
  std::remove(path);
  CHECK(run("run -p hi --chat-template-file /nonexistent.jinja").code == 2);
}

TEST_CASE("actorlm run refuses a vocabulary-only file and an architecture it does not run, naming what is missing",
          "[apps]") {
  // llama.cpp's vocabulary files (scripts/fetch_vocabularies.sh, run by setup).
  const std::string vocab = "\"${ACTORLM_CACHE:-$HOME/.cache/actorlm}/llama-vocab/ggml-vocab-";
  Result r = run("run -p hi -m " + vocab + "qwen2.gguf\"");
  CHECK(r.code == 1);
  CHECK(r.out.find("vocabulary-only") != std::string::npos);
  r = run("run -p hi -m " + vocab + "falcon.gguf\"");
  CHECK(r.code == 1);
  CHECK(r.out.find("unsupported architecture 'falcon'") != std::string::npos);
}

TEST_CASE("actorlm run runs a GGUF of every architecture it supports", "[apps]") {
  // Tiny random-weight files (scripts/reference/architectures_fixture.py):
  // the text is noise, but the whole path (load, tokenize, prefill, decode,
  // detokenize) runs for each.
  for (const char* arch :
       {"llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "smollm3", "qwen3moe", "mixtral"}) {
    INFO(arch);
    const std::string model = ACTORLM_SOURCE_DIR "/tests/fixtures/architectures/" + std::string(arch) + ".gguf";
    Result r = run("run --raw -p 'hello world' --max-tokens 40 --temperature 0 --threads 2 -m " + model);
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find(" generated") != std::string::npos);
  }
  // Without --raw: no template in the file, so ChatML, with a warning.
  Result r = run("run -p hi --max-tokens 4 --threads 2 -m " ACTORLM_SOURCE_DIR "/tests/fixtures/architectures/gemma3.gguf");
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(r.out.find("ChatML") != std::string::npos);
}
