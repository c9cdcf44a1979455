#include "parallel/comm/gloo_grid.h"

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "parallel/comm/gloo_communicator.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/comm/tcp_store.h"
#include "parallel/comm/world_agreement.h"
#include "parallel/grid_split.h"

namespace gpt {

struct GlooWorld {
  std::shared_ptr<gloo::transport::Device> device;
};

void GlooWorldDeleter::operator()(GlooWorld* world) const { delete world; }

bool gloo_available() { return true; }

namespace {

using Clock = std::chrono::steady_clock;

// Gloo's rendezvous over the job's store, under a prefix of its own per group. Gloo asks only for
// the members' addresses; a member that never sets its own ends the job naming the group.
class PrefixedStore final : public gloo::rendezvous::Store {
 public:
  PrefixedStore(TcpStoreClient& store, std::string prefix, std::string group, double timeout_seconds)
      : store_(store), prefix_(std::move(prefix)), group_(std::move(group)), timeout_(timeout_seconds) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const absl::Status status = store_.set(prefix_ + key, std::string(data.begin(), data.end()));
    if (!status.ok()) fail(status);
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> value = store_.get(prefix_ + key, deadline());
    if (!value.ok()) fail(value.status());
    return std::vector<char>(value->begin(), value->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::milliseconds(0)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    std::vector<std::string> full;
    for (const std::string& key : keys) full.push_back(prefix_ + key);
    const absl::Status status = store_.wait(full, deadline());
    if (!status.ok()) fail(status);
  }

 private:
  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_));
  }
  [[noreturn]] void fail(const absl::Status& status) const {
    GPT_FATAL() << "forming the Gloo group '" << group_ << "' on world rank " << world::rank() << " failed within "
                << timeout_ << " s (--distributed-timeout-minutes): " << status.message();
  }

  TcpStoreClient& store_;
  std::string prefix_, group_;
  double timeout_;
};

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

std::unique_ptr<Communicator> connect_group(GlooWorld& world, TcpStoreClient& store, const std::string& prefix,
                                            const std::string& name, std::vector<int> members, int world_rank,
                                            double timeout_seconds) {
  const int index = static_cast<int>(std::find(members.begin(), members.end(), world_rank) - members.begin());
  auto context = std::make_shared<gloo::rendezvous::Context>(index, static_cast<int>(members.size()));
  context->setTimeout(std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  PrefixedStore rendezvous(store, prefix, name, timeout_seconds);
  try {
    context->connectFullMesh(rendezvous, world.device);
  } catch (const std::exception& e) {
    GPT_FATAL() << "connecting the Gloo group '" << name << "' on world rank " << world_rank << " failed: " << e.what();
  }
  return std::make_unique<GlooCommunicator>(std::move(context), name, timeout_seconds, std::move(members));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlooWorld, GlooWorldDeleter>> connect_gloo_world(TcpStoreClient&,
                                                                               const TorchrunEnv& env) {
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface != nullptr && *iface != '\0') {
    attr.iface = iface;
  } else if (is_loopback(env.master_addr)) {
    attr.hostname = "127.0.0.1";
  } else {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    attr.hostname = host;
  }
  std::unique_ptr<GlooWorld, GlooWorldDeleter> world(new GlooWorld);
  try {
    world->device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("Gloo cannot listen on ",
                                               attr.iface.empty() ? attr.hostname : "interface " + attr.iface, ": ",
                                               e.what(), " (set GLOO_SOCKET_IFNAME to the interface to use)"));
  }
  return world;
}

std::unique_ptr<ProcessGrid> build_gloo_grid(GlooWorld& world, TcpStoreClient& store, const std::string& prefix,
                                             const GridShape& shape, int world_rank, double timeout_seconds) {
  const int world_size = world::size();
  GPT_CHECK_EQ(world_size, shape.world()) << "grid shape does not cover the world";
  std::vector<int> everyone(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) everyone[static_cast<size_t>(r)] = r;
  auto world_comm = connect_group(world, store, prefix + "world/", "world", everyone, world_rank, timeout_seconds);
  // As MPI_Comm_split: every rank's (color, key) over the world, then each group's members ordered
  // by key, and a Gloo context among them.
  const GroupSplit split = [&](int color, int key, const char* name) -> std::unique_ptr<Communicator> {
    const uint64_t mine = (static_cast<uint64_t>(color + 1) << 32) | static_cast<uint32_t>(key);
    const std::vector<uint64_t> all = world::all_gather(mine, absl::StrCat("the ", name, " groups"));
    if (color == kNotMember) return std::make_unique<SelfCommunicator>(name);
    std::vector<std::pair<uint32_t, int>> by_key;
    for (int r = 0; r < world_size; ++r) {
      if ((all[static_cast<size_t>(r)] >> 32) == static_cast<uint64_t>(color + 1)) {
        by_key.emplace_back(static_cast<uint32_t>(all[static_cast<size_t>(r)]), r);
      }
    }
    std::sort(by_key.begin(), by_key.end());
    if (by_key.size() == 1) return std::make_unique<SelfCommunicator>(name);
    std::vector<int> members;
    for (const auto& [k, r] : by_key) members.push_back(r);
    return connect_group(world, store, absl::StrCat(prefix, name, "/", color, "/"), name, std::move(members),
                         world_rank, timeout_seconds);
  };
  return build_split_grid(shape, world_rank, std::move(world_comm), split);
}

}  // namespace gpt
