// What the data-parallel strategies (data_parallel/strategy.h) do besides the shard plan's layout:
// the component's config, built once from the flags (train/configs.h), as Megatron-Core's
// DistributedDataParallelConfig. Kept apart so the memory plan can size ZeRO-2/3's working
// buffers without the strategies.
#pragma once

namespace gpt {

struct DataParallelConfig {
  bool overlap_grad_reduce = false;   // start a bucket's reduction when its gradients are final
  bool overlap_param_gather = false;  // gather a bucket's parameters when the next forward needs them
  bool tied_across_stages = false;    // the word embedding's two copies (first, last stage) summed
  // ZeRO-2 (the shard plan's sharded gradients): fixed working buffers of the largest bucket, two
  // (a unit's own bucket and the tied embedding's), three with --overlap-grad-reduce or
  // --fsdp-double-buffer (a reduce-scatter in flight while the next unit computes).
  int gradient_buffers = 2;
  // ZeRO-3 (sharded values): the gathered values' working buffers, two, three with
  // --overlap-param-gather or --fsdp-double-buffer (the next unit's gather while one computes).
  int parameter_buffers = 2;
};

}  // namespace gpt
