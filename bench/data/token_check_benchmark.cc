// The cost of checking every token id of a dataset against the vocabulary when it is opened
// (data/token_check.h): seconds per GB of .bin, with the file's pages evicted first (a cold start)
// and again with them cached.
//
//   token_check_benchmark PREFIX VOCAB_SIZE [THREADS]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "data/indexed_dataset.h"
#include "data/token_check.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: token_check_benchmark PREFIX VOCAB_SIZE [THREADS]\n");
    return 2;
  }
  const std::string prefix = argv[1];
  gpt::TokenCheckOptions options;
  options.vocab_size = std::stoll(argv[2]);
  options.threads = argc > 3 ? std::stoi(argv[3]) : static_cast<int>(std::thread::hardware_concurrency());
  // Evict the .bin's pages (clean pages only; no privileges needed).
  const std::string bin = prefix + ".bin";
  const int fd = ::open(bin.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  for (const char* state : {"cold", "warm"}) {
    auto opened = gpt::IndexedDataset::open(prefix);
    if (!opened.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(opened.status().message()).c_str());
      return 1;
    }
    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = gpt::check_token_ids(**opened, options);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double gigabytes = static_cast<double>((*opened)->token_byte_count()) / 1e9;
    std::printf("%s: %.2f GB checked in %.3f s on %d threads: %.3f s per GB (%s)\n", state, gigabytes, seconds,
                options.threads, seconds / gigabytes, status.ok() ? "all ids in range" : "refused");
  }
  return 0;
}
