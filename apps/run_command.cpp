#include "apps/run_command.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include <unistd.h>

#include "apps/cli_args.hpp"
#include "actors/executor_factory.hpp"
#include "apps/device_flags.hpp"
#include "apps/engine_flags.hpp"
#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "model/model_runner.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/incremental_detokenizer.hpp"

namespace actorlm {
namespace {

constexpr const char* usage =
    "usage: actorlm run -p PROMPT [--max-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
    "                   [--min-p P] [--repetition-penalty R] [--seed S] [--stop STR]\n"
    "                   [--model PATH] [--threads N] [--raw] [--special-tokens-in-content] [--device cpu|cuda]\n"
    "                   [--chat-template-file FILE]\n"
    "  PROMPT is sent as one user message through the model's chat template, control tokens\n"
    "  such as <|im_start|> in it as plain text unless --special-tokens-in-content;\n"
    "  --raw sends it as plain text without the template.\n";

Tokenizer load_tokenizer(const std::string& model) {
  namespace fs = std::filesystem;
  if (fs::is_directory(model)) return Tokenizer::from_hf_json((fs::path(model) / "tokenizer.json").string());
  return Tokenizer::from_gguf(GgufFile::open(model));
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int run_command(int argc, char** argv, int first) {
  using cli::Args;
  Args args(argc, argv, first,
            with_device_flags({"--prompt", "--max-tokens", "--temperature", "--top-k", "--top-p", "--min-p",
                               "--repetition-penalty", "--seed", "--stop", "--model", "--threads",
                               chat_template_file_flag}),
            {"--raw", special_tokens_in_content_switch, "--help"}, {{"-p", "--prompt"}, {"-n", "--max-tokens"}, {"-m", "--model"}, {"-h", "--help"}});
  if (args.has("--help") || !args.str("--prompt")) {
    std::fputs(usage, args.has("--help") ? stdout : stderr);
    return args.has("--help") ? 0 : 2;
  }
  SamplingParams sp;
  sp.temperature = static_cast<float>(args.number("--temperature", 0.0, 0.0, 100.0));
  sp.top_k = static_cast<int32_t>(args.integer("--top-k", 0, -1, 1 << 20));
  sp.top_p = static_cast<float>(args.number("--top-p", 1.0, 1e-6, 1.0));
  sp.min_p = static_cast<float>(args.number("--min-p", 0.0, 0.0, 1.0));
  sp.repetition_penalty = static_cast<float>(args.number("--repetition-penalty", 1.0, 1e-3, 10.0));
  sp.has_seed = true;
  sp.seed = static_cast<uint64_t>(args.integer("--seed", 0, 0, INT64_MAX));
  if (auto err = sp.validate()) throw cli::UsageError(*err);
  const auto max_tokens = static_cast<int32_t>(args.integer("--max-tokens", 256, 1, 1 << 20));
  const int threads = static_cast<int>(args.integer("--threads", 0, 0, 1024));
  const std::string model = args.str("--model").value_or(default_model_path());
  const std::string chat_template = chat_template_from_flags(args);  // before the model loads: fail fast

  auto t0 = std::chrono::steady_clock::now();
  Tokenizer tok = load_tokenizer(model);
  const bool tty = isatty(fileno(stderr)) != 0;
  int shown = -1;
  LlamaWeights weights = load_llama_weights(model, [&](int done, int total) {
    int pct = done * 100 / total;
    if (!tty || pct == shown) return;
    shown = pct;
    std::fprintf(stderr, "\rloading %s: %3d%%%s", model.c_str(), pct, done == total ? "\n" : "");
  });
  const ModelConfig cfg = weights.config;

  const std::string text = *args.str("--prompt");
  std::vector<int32_t> prompt;
  std::vector<std::string> stops;
  if (auto s = args.str("--stop")) stops.push_back(*s);
  std::vector<int32_t> stop_ids;
  if (tok.eos_id()) stop_ids.push_back(*tok.eos_id());
  if (!args.has("--raw")) {
    std::string warning;
    ChatTemplate tpl = ChatTemplate::for_model(tok, &warning, chat_template);
    if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());
    ChatMessage user{"user", text};
    prompt = tpl.encode(tok, std::span<const ChatMessage>(&user, 1),
                        {.special_tokens_in_content = args.has(special_tokens_in_content_switch)});
    stop_ids = tok.end_of_generation_ids();
  } else {
    prompt = tok.encode(text, tok.add_bos_by_default(), /*parse_special=*/false);
  }
  if (prompt.empty()) throw cli::UsageError("the prompt is empty");
  const int64_t need = static_cast<int64_t>(prompt.size()) + max_tokens;
  if (static_cast<int64_t>(prompt.size()) >= cfg.max_context) {
    throw cli::UsageError("the prompt has " + std::to_string(prompt.size()) + " tokens; the model's context is " +
                          std::to_string(cfg.max_context));
  }
  const auto context = static_cast<int32_t>(std::min<int64_t>(need, cfg.max_context));

  EngineConfig ec;
  ec.threads = threads;
  apply_device_flags(args, ec, context);
  ec.kv_tokens = context;  // one request: its context is the whole pool
  MadeExecutor made = make_executor(std::move(weights), {ec.device, threads, ec.mem_fraction_static, ec.kv_cache_dtype},
                                    ec.kv_tokens, 1, 1, context);
  ModelRunner runner(std::move(made.executor), {.kv_pool_rows = context + 1, .max_requests = 1, .max_context = context});
  std::fprintf(stderr, "loaded in %.2f s (%d layers, %d KV rows, %s)\n", seconds_since(t0), cfg.n_layers, context,
               made.description.c_str());

  // Rows 1.. hold the request's KV in position order (row 0 is the dummy).
  std::vector<int32_t> rows(static_cast<size_t>(context));
  std::iota(rows.begin(), rows.end(), 1);
  IncrementalDetokenizer detok(tok, stops);
  std::vector<int32_t> output;
  auto t_prefill = std::chrono::steady_clock::now();
  ForwardBatch batch;
  batch.reqs = {{0, 0, static_cast<int32_t>(prompt.size())}};
  batch.token_ids = prompt;
  batch.out_cache_loc.assign(rows.begin(), rows.begin() + static_cast<ptrdiff_t>(prompt.size()));
  batch.writes = {{0, 0, batch.out_cache_loc}};
  double prefill_s = 0;
  auto t_decode = t_prefill;
  const char* finish = "length";
  for (int32_t step = 0; step < max_tokens; ++step) {
    ForwardOutput out = runner.forward(batch);
    if (step == 0) {
      prefill_s = seconds_since(t_prefill);
      t_decode = std::chrono::steady_clock::now();
    }
    SampleRequest req{sp, prompt, output, static_cast<uint64_t>(step), 0, {}};
    SampleResult s = runner.sample(out, std::span<const SampleRequest>(&req, 1))[0];
    if (std::find(stop_ids.begin(), stop_ids.end(), s.token) != stop_ids.end()) {
      finish = "stop";
      break;
    }
    output.push_back(s.token);
    auto delta = detok.push(s.token);
    std::fputs(delta.text.c_str(), stdout);
    std::fflush(stdout);
    if (delta.stopped) {
      finish = "stop";
      break;
    }
    auto pos = static_cast<int32_t>(prompt.size() + output.size()) - 1;
    if (pos + 1 >= context) break;
    batch.reqs = {{0, pos, 1}};
    batch.token_ids = {s.token};
    batch.out_cache_loc = {rows[static_cast<size_t>(pos)]};
    batch.writes = {{0, pos, batch.out_cache_loc}};
  }
  std::fputs(detok.flush().c_str(), stdout);
  std::fputc('\n', stdout);
  double decode_s = seconds_since(t_decode);
  std::fprintf(stderr, "[%zu prompt tokens in %.2f s (%.1f tok/s); %zu generated in %.2f s (%.1f tok/s); finish: %s]\n",
               prompt.size(), prefill_s, static_cast<double>(prompt.size()) / prefill_s, output.size(), decode_s,
               output.size() > 1 ? static_cast<double>(output.size() - 1) / decode_s : 0.0, finish);
  return 0;
}

}  // namespace actorlm
