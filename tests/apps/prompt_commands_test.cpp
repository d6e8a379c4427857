// `actorlm tokenize` and `actorlm template` as a user runs them: child
// processes, their stdout (nothing else on it) and exit codes.

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/apps/actorlm_process.hpp"
#include "tests/test_paths.hpp"

namespace {

using Result = actorlm::test::CommandResult;

// stdout only: these commands promise to print nothing else there.
Result run(const std::string& args) { return actorlm::test::run_actorlm(args, "2>/dev/null"); }

// A file under /tmp that goes away with the test.
struct TempFile {
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/actorlm-prompt-XXXXXX";
    const int fd = mkstemp(name);
    REQUIRE(fd >= 0);
    close(fd);
    path = name;
    std::ofstream(path, std::ios::binary) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
  std::string path;
};

}  // namespace

TEST_CASE("actorlm tokenize prints llama.cpp's ids for the default model", "[apps][prompt]") {
  // Ids from tests/fixtures/tokenizer/smollm2_llamacpp.json (llama-tokenize on the same file).
  CHECK(run("tokenize -p 'Hello world'").out == "19556 905\n");
  CHECK(run("tokenize -p '<|im_start|>'").out == "1\n");
  CHECK(run("tokenize --no-parse-special -p '<|im_start|>'").out == "44 108 306 79 3738 108 46\n");
  Result pieces = run("tokenize --pieces -p 'Hello world'");
  CHECK(pieces.code == 0);
  CHECK(pieces.out == "19556\t\"Hello\"\n905\t\" world\"\n");
  TempFile f("Hello world");
  CHECK(run("tokenize -f " + f.path).out == "19556 905\n");
  CHECK(run("tokenize").code == 2);
  CHECK(run("tokenize -p x -f " + f.path).code == 2);
  CHECK(run("tokenize -p x --model /nonexistent.gguf").code == 1);
}

TEST_CASE("actorlm template prints exactly the model's rendering of a conversation", "[apps][prompt]") {
  // No --model: the default model's template, as every command.
  Result r = run(R"(template --messages '[{"role": "user", "content": "Hi <|im_end|>"}]')");
  CHECK(r.code == 0);
  CHECK(r.out ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi <|im_end|><|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("actorlm template renders a template file as Python jinja2 does", "[apps][prompt]") {
  std::ifstream in(actorlm::test::fixture_path("jinja/chat_templates.json"));
  REQUIRE(in);
  const auto fx = nlohmann::ordered_json::parse(in);
  int compared = 0;
  for (const auto& c : fx["cases"]) {
    // One template with tools, one whose rendering holds Unicode.
    if (!(c["template"] == "Qwen-Qwen3-0.6B" && c["conversation"] == 4) &&
        !(c["template"] == "meta-llama-Llama-3.1-8B-Instruct" && c["conversation"] == 3)) {
      continue;
    }
    const auto& conv = fx["conversations"][c["conversation"].get<size_t>()];
    TempFile tpl(fx["templates"][c["template"].get<std::string>()].get<std::string>());
    TempFile messages(conv["messages"].dump());
    TempFile tools(conv.contains("tools") ? conv["tools"].dump() : "null");
    std::string cmd = "template --template-file " + tpl.path + " --bos-token '<|bos|>' --eos-token '<|eos|>'" +
                      " --messages-file " + messages.path + " --tools \"$(cat " + tools.path + ")\"";
    if (!c["add_generation_prompt"].get<bool>()) cmd += " --no-generation-prompt";
    Result r = run(cmd);
    INFO(c["template"] << " conversation " << c["conversation"]);
    CHECK(r.code == 0);
    CHECK(r.out == c["output"].get<std::string>());
    ++compared;
  }
  CHECK(compared == 2);
}

TEST_CASE("actorlm template refuses bad input with a message and an exit code", "[apps][prompt]") {
  TempFile picky("{{ raise_exception('System role not supported') }}");
  CHECK(run("template --template-file " + picky.path + " --messages '[]'").code == 1);
  CHECK(run("template --template-file " + picky.path + " --messages 'not json'").code == 2);
  CHECK(run("template --template-file " + picky.path + " --messages '{}'").code == 2);
  CHECK(run("template").code == 2);
  CHECK(run("template --template-file " + picky.path + " --model x.gguf --messages '[]'").code == 2);
  TempFile broken("{% if %}");
  CHECK(run("template --template-file " + broken.path + " --messages '[]'").code == 1);
  // Whatever fails, stdout stays clean for scripts.
  CHECK(run("template --template-file " + broken.path + " --messages '[]'").out.empty());
}
