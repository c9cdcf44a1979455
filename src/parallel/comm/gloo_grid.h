// Gloo's side of a torchrun world: the TCP device, and the groups of the process grid, each a Gloo
// context connected through the key-value store. Built only with libgloo-dev (GPT_WITH_GLOO);
// without it gloo_available() is false and connect_gloo_world() says so.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "parallel/comm/torchrun_env.h"
#include "parallel/comm/torchrun_runtime.h"
#include "parallel/process_grid.h"

namespace gpt {

bool gloo_available();

// The device this rank's Gloo pairs listen on: GLOO_SOCKET_IFNAME's interface when set (as in
// PyTorch), 127.0.0.1 when MASTER_ADDR is this machine's loopback, else this host's name.
absl::StatusOr<std::unique_ptr<GlooWorld, GlooWorldDeleter>> connect_gloo_world(TcpStoreClient& store,
                                                                               const TorchrunEnv& env);

// The grid's groups as Gloo contexts, formed through the store under `prefix`. Collective.
std::unique_ptr<ProcessGrid> build_gloo_grid(GlooWorld& world, TcpStoreClient& store, const std::string& prefix,
                                             const GridShape& shape, int world_rank, double timeout_seconds);

}  // namespace gpt
