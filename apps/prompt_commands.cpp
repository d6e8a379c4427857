#include "apps/prompt_commands.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/cli_args.hpp"
#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace actorlm {
namespace {

constexpr const char* tokenize_usage =
    "usage: actorlm tokenize [--model FILE] (-p TEXT | -f FILE) [--no-parse-special] [--no-bos] [--pieces]\n"
    "  Prints the token ids of TEXT (or of FILE's bytes) on one line, space-separated.\n"
    "  Special-token text such as <|im_start|> becomes that token unless --no-parse-special;\n"
    "  BOS goes first when the model asks for it, unless --no-bos. --pieces prints one token\n"
    "  per line: its id, a tab and its text as a JSON string. Only the vocabulary is read.\n";

constexpr const char* template_usage =
    "usage: actorlm template [--model FILE | --template-file JINJA [--bos-token S] [--eos-token S]]\n"
    "                        (--messages JSON | --messages-file FILE) [--tools JSON]\n"
    "                        [--no-generation-prompt] [--var NAME=JSON]...\n"
    "  Prints exactly the prompt the chat template renders for the messages (an OpenAI-style\n"
    "  JSON array), and nothing else. The template is the model's own (the default model's when\n"
    "  none is named) or a Jinja file; --var passes more template variables (e.g. --var\n"
    "  enable_thinking=false).\n";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw cli::UsageError("cannot read '" + path + "'");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

nlohmann::ordered_json parse_json(const std::string& text, const std::string& what) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw cli::UsageError(what + " is not JSON: " + e.what());
  }
}

void write_all(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size()) throw std::runtime_error("writing stdout failed");
}

}  // namespace

int tokenize_command(int argc, char** argv, int first) {
  cli::Args args(argc, argv, first, {"--model", "--prompt", "--file"},
                 {"--no-parse-special", "--no-bos", "--pieces", "--help"},
                 {{"-m", "--model"}, {"-p", "--prompt"}, {"-f", "--file"}, {"-h", "--help"}});
  if (args.has("--help") || args.has("--prompt") == args.has("--file")) {
    std::fputs(tokenize_usage, args.has("--help") ? stdout : stderr);
    return args.has("--help") ? 0 : 2;
  }
  const std::string text = args.has("--prompt") ? *args.str("--prompt") : read_file(*args.str("--file"));
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(args.str("--model").value_or(default_model_path())));
  const std::vector<int32_t> ids =
      tok.encode(text, !args.has("--no-bos") && tok.add_bos_by_default(), !args.has("--no-parse-special"));
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (args.has("--pieces")) {
      out += std::to_string(ids[i]) + "\t" +
             nlohmann::json(tok.token_to_piece(ids[i])).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
             "\n";
    } else {
      out += (i ? " " : "") + std::to_string(ids[i]);
    }
  }
  if (!args.has("--pieces")) out += "\n";
  write_all(out);
  return 0;
}

int template_command(int argc, char** argv, int first) {
  cli::Args args(argc, argv, first,
                 {"--model", "--template-file", "--bos-token", "--eos-token", "--messages", "--messages-file", "--tools",
                  "--var"},
                 {"--no-generation-prompt", "--help"}, {{"-m", "--model"}, {"-h", "--help"}});
  const bool one_template = !(args.has("--model") && args.has("--template-file"));
  const bool one_messages = args.has("--messages") != args.has("--messages-file");
  if (args.has("--help") || !one_template || !one_messages) {
    std::fputs(template_usage, args.has("--help") ? stdout : stderr);
    return args.has("--help") ? 0 : 2;
  }
  if (args.has("--model") && (args.has("--bos-token") || args.has("--eos-token"))) {
    throw cli::UsageError("--bos-token and --eos-token go with --template-file (a model has its own)");
  }
  const auto messages = parse_json(args.has("--messages") ? *args.str("--messages") : read_file(*args.str("--messages-file")),
                                   "the messages");
  if (!messages.is_array()) throw cli::UsageError("the messages must be a JSON array of {\"role\", \"content\"} objects");
  ChatRenderOptions options;
  options.add_generation_prompt = !args.has("--no-generation-prompt");
  if (auto tools = args.str("--tools")) options.tools = parse_json(*tools, "--tools");
  for (const std::string& var : args.all("--var")) {
    const size_t eq = var.find('=');
    if (eq == std::string::npos || eq == 0) throw cli::UsageError("--var wants NAME=JSON, got '" + var + "'");
    options.extra[var.substr(0, eq)] = parse_json(var.substr(eq + 1), "--var " + var.substr(0, eq));
  }
  std::string warning;
  const ChatTemplate tpl =
      !args.has("--template-file")
          ? ChatTemplate::for_model(
                Tokenizer::from_gguf(GgufFile::open(args.str("--model").value_or(default_model_path()))), &warning)
          : ChatTemplate(read_file(*args.str("--template-file")), args.str("--bos-token").value_or(""),
                         args.str("--eos-token").value_or(""));
  if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());
  std::string out;
  for (const PromptSegment& s : tpl.render_segments(messages, options)) out += s.text;
  write_all(out);
  return 0;
}

}  // namespace actorlm
