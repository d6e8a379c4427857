// A cluster node's adapters as its heads change them: only files of the
// node's own --lora-dir, names and ids new on the node, the node's budget,
// one change at a time, and a list (the welcome's) that follows what was
// done and nothing else.

#include "cluster/roles/node_adapters.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "cluster/transport/cluster_handshake.hpp"
#include "model/model_fingerprint.hpp"

using namespace actorlm;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(ACTORLM_SOURCE_DIR) + "/tests/fixtures/lora";

fb::AdapterChangeT load(const std::string& name, int32_t id, const std::string& file) {
  fb::AdapterChangeT c;
  c.load = true;
  c.name = name;
  c.id = id;
  c.path = file;
  return c;
}

fb::AdapterChangeT drop(int32_t id) {
  fb::AdapterChangeT c;
  c.load = false;
  c.id = id;
  return c;
}

fb::AdapterReplyT done(int64_t bytes) {
  fb::AdapterReplyT r;
  r.bytes = bytes;
  return r;
}

std::string listed(const NodeAdapters& a) {
  fb::NodeWelcomeT w;
  a.describe(w);
  return adapter_list(w);
}

}  // namespace

TEST_CASE("A node takes a head's adapter change only for a file of its own folder, under a new name and id, within its budget", "[node_adapters]") {
  NodeAdapters adapters(AdapterDir(kFixtures), 10'000'000);
  adapters.started_with({{"a", 1, "f00d", 4'000'000}});
  const std::string fingerprint_b = model_fingerprint(kFixtures + "/smollm2_b.gguf");

  // Refused, the change untouched: the name or id taken, a bad name or id,
  // a file outside the folder or missing, a drop of what is not here.
  for (auto bad : {load("a", 2, "smollm2_b.gguf"), load("b", 1, "smollm2_b.gguf"), load("default", 2, "smollm2_b.gguf"),
                   load("b", 0, "smollm2_b.gguf"), load("b", 2, "../lora/../../CMakeLists.txt"), load("b", 2, "/etc/hostname"),
                   load("b", 2, "missing.gguf"), drop(7)}) {
    CAPTURE(bad.name, bad.id, bad.path);
    const std::string path = bad.path;
    CHECK_FALSE(adapters.admit(bad).empty());
    CHECK(bad.path == path);
  }

  // A good load: the real path, what the budget leaves; one change at a time.
  fb::AdapterChangeT b = load("b", 2, "smollm2_b.gguf");
  b.max_bytes = 1 << 30;  // the head's figure: the node's own decides
  REQUIRE(adapters.admit(b).empty());
  CHECK(b.path == fs::canonical(kFixtures + "/smollm2_b.gguf").string());
  CHECK(b.max_bytes == 6'000'000);
  fb::AdapterChangeT c = load("c", 3, "smollm2_a.gguf");
  CHECK(adapters.admit(c).find("under way") != std::string::npos);

  // The scheduler refused it: nothing changes, and the next may go.
  fb::AdapterReplyT refused;
  refused.error = "too big";
  adapters.settle(b, refused);
  CHECK(adapters.loaded().size() == 1);
  CHECK(refused.fingerprint.empty());

  // Done: listed, with its file's fingerprint in the answer and the welcome.
  b = load("b", 2, "smollm2_b.gguf");
  REQUIRE(adapters.admit(b).empty());
  fb::AdapterReplyT ok = done(5'000'000);
  adapters.settle(b, ok);
  CHECK(ok.fingerprint == fingerprint_b);
  CHECK(listed(adapters) == "a #1 (f00d), b #2 (" + fingerprint_b + ")");
  // The budget is spent: a third load may take nothing more.
  c = load("c", 3, "smollm2_a.gguf");
  REQUIRE(adapters.admit(c).empty());
  CHECK(c.max_bytes == 1'000'000);
  fb::AdapterReplyT too_big;
  too_big.error = "over the budget";
  adapters.settle(c, too_big);

  // A drop of one it holds; then the list has the other only.
  fb::AdapterChangeT d = drop(1);
  REQUIRE(adapters.admit(d).empty());
  fb::AdapterReplyT dropped;
  adapters.settle(d, dropped);
  CHECK(listed(adapters) == "b #2 (" + fingerprint_b + ")");
}

TEST_CASE("A node without a folder takes no adapter from a head", "[node_adapters]") {
  NodeAdapters adapters(AdapterDir(), 10'000'000);
  fb::AdapterChangeT c = load("b", 2, "smollm2_b.gguf");
  CHECK(adapters.admit(c).find("--lora-dir") != std::string::npos);
  CHECK(listed(adapters) == "none");
}
