#include "apps/chat_command.hpp"

#include <editline/readline.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "actors/engine.hpp"
#include "apps/cli_args.hpp"
#include "apps/cluster_flags.hpp"
#include "apps/device_flags.hpp"
#include "apps/engine_flags.hpp"
#include "cluster/roles/head.hpp"
#include "cluster/transport/remote_setup.hpp"
#include "model/default_model.hpp"

namespace actorlm {
namespace {

constexpr const char* usage =
    "usage: actorlm chat [--model PATH] [--system TEXT] [--temperature T] [--max-tokens N]\n"
    "                    [--threads N] [--kv-tokens N] [--seed S]\n"
    "                    [--device cpu|cuda] [--mem-fraction-static F] [--kv-cache-dtype auto|f16|bf16]\n"
    "                    [--node HOST:PORT ... | --topology FILE.json] [--secret-file FILE]\n"
    "                    [--tls-cert PEM --tls-key PEM --tls-ca PEM] [--allow-plain-remote]\n"
    "                    [--special-tokens-in-content]   (control tokens typed in a message are\n"
    "                                                     tokens, not text: they can open turns)\n"
    "                    [--chat-template-file FILE]     (a Jinja template instead of the model's)\n";

constexpr const char* help =
    "commands:\n"
    "  /temp T      sampling temperature (0 = greedy)\n"
    "  /max N       most tokens per answer\n"
    "  /system TEXT set the system prompt (and start over)\n"
    "  /reset       forget the conversation\n"
    "  /stats       engine statistics\n"
    "  /quit        leave (Ctrl-D too); Ctrl-C stops the current answer\n";

volatile std::sig_atomic_t interrupted = 0;
void on_sigint(int) { interrupted = 1; }

std::string history_path() {
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.actorlm_history";
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

}  // namespace

int chat_command(int argc, char** argv, int first) {
  cli::Args args(argc, argv, first,
                 with_flags(with_device_flags({"--model", "--system", "--temperature", "--max-tokens", "--threads",
                                               "--kv-tokens", "--seed", chat_template_file_flag}),
                            with_flags(head_flags, security_flags)),
                 {"--help", allow_plain_switch, special_tokens_in_content_switch}, {{"-m", "--model"}, {"-h", "--help"}});
  if (args.has("--help")) {
    std::fputs(usage, stdout);
    return 0;
  }
  const bool tty = isatty(fileno(stderr)) != 0;
  EngineConfig config;
  config.model_path = args.str("--model").value_or(default_model_path());
  config.threads = static_cast<int>(args.integer("--threads", 0, 0, 1024));
  apply_device_flags(args, config, 16384);
  config.scheduler.max_context = 0;  // the model's
  const ClusterConfig cluster = cluster_from_flags(args);
  config.special_tokens_in_content = args.has(special_tokens_in_content_switch);
  config.chat_template = chat_template_from_flags(args);
  int shown = -1;
  config.progress = [&](int done, int total) {
    int pct = done * 100 / total;
    if (pct == shown) return;
    shown = pct;
    if (tty) std::fprintf(stderr, "\rloading %s: %3d%%%s", config.model_path.c_str(), pct, done == total ? "\n" : "");
  };
  float temperature = static_cast<float>(args.number("--temperature", 0.7, 0.0, 100.0));
  auto max_tokens = static_cast<int32_t>(args.integer("--max-tokens", 512, 1, 1 << 20));
  uint64_t seed = static_cast<uint64_t>(args.integer("--seed", 0, 0, INT64_MAX));
  std::optional<std::string> system_prompt = args.str("--system");

  caf::actor_system_config cfg;
  configure_engine_system(cfg);
  if (cluster.remote()) configure_remote(cfg, cluster.security);
  caf::actor_system actors{cfg};
  std::unique_ptr<Engine> made = make_engine(actors, config, cluster);
  Engine& engine = *made;
  std::fprintf(stderr, "actorlm chat: %s (%d layers). /help for commands.\n", config.model_path.c_str(),
               engine.model_config().n_layers);

  std::vector<ChatMessage> conversation;
  auto reset = [&] {
    conversation.clear();
    if (system_prompt) conversation.push_back({"system", *system_prompt});
  };
  reset();
  using_history();
  read_history(history_path().c_str());
  int turn = 0;
  for (;;) {
    char* raw = readline("> ");
    if (!raw) {  // Ctrl-D
      std::fputc('\n', stdout);
      break;
    }
    std::string line(raw);
    std::free(raw);
    if (line.empty()) continue;
    add_history(line.c_str());
    if (line == "/quit" || line == "/exit") break;
    if (line == "/help") {
      std::fputs(help, stdout);
      continue;
    }
    if (line == "/reset") {
      reset();
      std::puts("(conversation cleared)");
      continue;
    }
    if (line == "/stats") {
      std::fputs(stats_text(engine.stats()).c_str(), stdout);
      continue;
    }
    if (starts_with(line, "/temp ") || starts_with(line, "/max ") || starts_with(line, "/system ")) {
      std::string value = line.substr(line.find(' ') + 1);
      try {
        if (starts_with(line, "/temp ")) {
          float t = std::stof(value);
          if (!(t >= 0 && t <= 100)) throw std::out_of_range("temperature");
          temperature = t;
        } else if (starts_with(line, "/max ")) {
          int n = std::stoi(value);
          if (n < 1) throw std::out_of_range("max");
          max_tokens = n;
        } else {
          system_prompt = value;
          reset();
        }
        std::puts("(ok)");
      } catch (const std::exception&) {
        std::puts("(invalid value: /temp takes 0..100, /max a positive integer)");
      }
      continue;
    }
    if (line[0] == '/') {
      std::puts("(unknown command; /help lists them)");
      continue;
    }

    conversation.push_back({"user", line});
    GenerateOptions o;
    o.messages = conversation;
    o.sampling.temperature = temperature;
    o.sampling.has_seed = true;
    o.sampling.seed = seed + static_cast<uint64_t>(turn++);
    o.max_new_tokens = max_tokens;
    interrupted = 0;
    auto old = std::signal(SIGINT, on_sigint);
    std::string answer;
    auto t0 = std::chrono::steady_clock::now();
    double ttft = -1;
    bool aborted = false;
    TextDeltaEvent last = engine.generate(o, [&](const TextDeltaEvent& d) {
      if (ttft < 0 && !d.text.empty()) ttft = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fputs(d.text.c_str(), stdout);
      std::fflush(stdout);
      answer += d.text;
      if (interrupted && !aborted) {
        engine.abort(d.request_id);
        aborted = true;
      }
    });
    std::signal(SIGINT, old);
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fputc('\n', stdout);
    if (last.finish == FinishReason::error) {
      std::printf("(error: %s)\n", last.error.c_str());
      conversation.pop_back();
      continue;
    }
    conversation.push_back({"assistant", answer});
    std::fprintf(stderr, "[%d tokens, %.1f tok/s, first token %.0f ms%s]\n", last.completion_tokens,
                 total > ttft && last.completion_tokens > 1 ? (last.completion_tokens - 1) / (total - ttft) : 0.0,
                 1000 * std::max(ttft, 0.0), last.finish == FinishReason::abort ? ", stopped" : "");
  }
  write_history(history_path().c_str());
  return 0;
}

}  // namespace actorlm
