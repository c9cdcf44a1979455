// Prints a Megatron indexed dataset read by the project's reader: one line per sequence, its token
// ids separated by spaces. For the format-compatibility test against an independent writer.
//   indexed_dataset_dump PREFIX
#include <cstdio>
#include <vector>

#include "data/indexed_dataset.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: indexed_dataset_dump PREFIX\n");
    return 2;
  }
  auto dataset = gpt::IndexedDataset::open(argv[1]);
  if (!dataset.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(dataset.status().message()).c_str());
    return 1;
  }
  std::vector<int32_t> tokens;
  for (int64_t s = 0; s < (*dataset)->num_sequences(); ++s) {
    tokens.resize(static_cast<size_t>((*dataset)->document_length(s)));
    (*dataset)->read(s, 0, static_cast<int64_t>(tokens.size()), tokens.data());
    for (size_t i = 0; i < tokens.size(); ++i) std::printf(i ? " %d" : "%d", tokens[i]);
    std::printf("\n");
  }
  return 0;
}
