// The `actorlm` command.
#include <cstdio>
#include <cstring>
#include <string>

#include "actorlm/version.hpp"
#include "actors/executor_factory.hpp"
#include "apps/chat_command.hpp"
#include "apps/cli_args.hpp"
#include "apps/kv_demo.hpp"
#include "apps/node_command.hpp"
#include "apps/prompt_commands.hpp"
#include "apps/run_command.hpp"
#include "apps/serve_command.hpp"
#include "model/gguf_file.hpp"

namespace {

int print_version() {
  std::printf("actorlm %s\n", actorlm::version_string);
  // Loads the CUDA module in a build that has one: `version` is the one
  // command that maps the CUDA libraries without --device cuda.
  const auto report = actorlm::probe_cuda_backend();
  if (!report.built) {
    std::printf("CUDA backend: not built\n");
  } else if (report.device_count > 0) {
    std::printf("CUDA backend: built (sm_90); device 0: %s (sm_%d%d, %.1f GiB)\n",
                report.first_device_name.c_str(), report.compute_major, report.compute_minor,
                report.total_memory_bytes / double(1 << 30));
  } else {
    std::printf("CUDA backend: built (sm_90); no usable device (%s)\n", report.error.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_version();
    return actorlm::run_kv_demo();
  }
  if (std::strcmp(argv[1], "version") == 0 || std::strcmp(argv[1], "--version") == 0) {
    return print_version();
  }
  try {
    if (std::strcmp(argv[1], "kv-demo") == 0) return actorlm::run_kv_demo();
    if (std::strcmp(argv[1], "run") == 0) return actorlm::run_command(argc, argv, 2);
    if (std::strcmp(argv[1], "chat") == 0) return actorlm::chat_command(argc, argv, 2);
    if (std::strcmp(argv[1], "serve") == 0) return actorlm::serve_command(argc, argv, 2);
    if (std::strcmp(argv[1], "node") == 0) return actorlm::node_command(argc, argv, 2);
    if (std::strcmp(argv[1], "tokenize") == 0) return actorlm::tokenize_command(argc, argv, 2);
    if (std::strcmp(argv[1], "template") == 0) return actorlm::template_command(argc, argv, 2);
  } catch (const actorlm::cli::UsageError& e) {
    std::fprintf(stderr, "actorlm %s: %s\n", argv[1], e.what());
    return 2;
  } catch (const actorlm::ModelError& e) {
    std::fprintf(stderr, "actorlm %s: %s\n", argv[1], e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "actorlm %s: error: %s\n", argv[1], e.what());
    return 1;
  }
  std::fprintf(stderr, "actorlm: unknown command '%s' (commands: chat, serve, node, run, tokenize, template, kv-demo, version)\n", argv[1]);
  return 2;
}
