#!/usr/bin/python3
"""Checkpoint save and load bandwidth against the disk's, measured in the same run.

  bench/checkpoint_benchmark.py [--binary build/bin/pretrain_gpt] [--directory DIR] [--ranks N]

1. dd: sequential write of a file as large as the checkpoint (buffered, fdatasync at the end, as a
   save is: write then fsync) and read of it with its pages evicted first (posix_fadvise DONTNEED,
   no privileges needed).
2. pretrain_gpt trains one iteration of a GPT-2 124M-shaped model (FP32: parameters and both Adam
   moments, 1.5 GB of state) on the CPU backend and saves; its log line gives the bytes and the
   seconds of the save (shard written and fsynced, index, rename, tracker).
3. The checkpoint's pages are evicted, and pretrain_gpt --load reads it back; the load line gives
   bytes and seconds.
Repetitions alternate the four measurements; prints the medians and the ratios (the target is >=
70% of dd).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODEL = [
    "--device", "cpu", "--mock-data", "--vocab-size", "50257", "--num-layers", "12", "--hidden-size", "768",
    "--num-attention-heads", "12", "--seq-length", "32", "--max-position-embeddings", "1024",
    "--micro-batch-size", "1", "--global-batch-size", "1", "--train-iters", "1", "--lr", "1e-4",
    "--log-interval", "1", "--eval-iters", "0",
]


def evict(path):
    """Drops the page cache of every file under path (clean pages only: call after fsync)."""
    files = [path] if os.path.isfile(path) else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for name in files:
        fd = os.open(name, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def dd(args):
    start = time.perf_counter()
    subprocess.run(["dd", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def run(command, env=None):
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return result.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.path.join(ROOT, "build", "bin", "pretrain_gpt"))
    parser.add_argument("--directory", default="/tmp/gpt_checkpoint_benchmark")
    parser.add_argument("--ranks", type=int, default=1, help="data-parallel ranks (mpirun) writing the shards")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    shutil.rmtree(args.directory, ignore_errors=True)
    os.makedirs(args.directory)
    launch = []
    if args.ranks > 1:
        launch = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(args.ranks)]

    # Repetitions alternate dd and the program, so that both see the same disk (a shared virtual
    # disk's bandwidth drifts); medians are reported.
    save_rates, load_rates, write_rates, read_rates = [], [], [], []
    for repetition in range(args.repetitions):
        save_dir = os.path.join(args.directory, f"ckpt{repetition}")
        out = run(launch + [args.binary, *MODEL, "--save", save_dir])
        saved = re.search(r"successfully saved checkpoint .*\[ ([0-9.]+) MB in ([0-9.]+) s", out)
        if not saved:
            sys.exit("no save line in the output:\n" + out[-2000:])
        save_mb = float(saved.group(1))
        save_rates.append(save_mb / float(saved.group(2)))
        on_disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(save_dir) for f in fs)
        # dd with a file of the checkpoint's size, in 16 MiB blocks.
        blocks = max(1, on_disk // (16 << 20))
        dd_file = os.path.join(args.directory, "dd.bin")
        write_rates.append(blocks * 16.0 / dd(["if=/dev/zero", f"of={dd_file}", "bs=16M", f"count={blocks}",
                                               "conv=fdatasync"]))
        evict(save_dir)
        out = run(launch + [args.binary, *MODEL, "--load", save_dir])
        loaded = re.search(r"successfully loaded checkpoint .*\[ ([0-9.]+) MB in ([0-9.]+) s \]", out)
        if not loaded:
            sys.exit("no load line in the output:\n" + out[-2000:])
        load_rates.append(float(loaded.group(1)) / float(loaded.group(2)))
        evict(dd_file)
        read_rates.append(blocks * 16.0 / dd([f"if={dd_file}", "of=/dev/null", "bs=16M"]))
        os.remove(dd_file)
        shutil.rmtree(save_dir)
        print(f"repetition {repetition}: save {save_rates[-1]:.0f} MB/s, dd write {write_rates[-1]:.0f} MB/s, "
              f"load {load_rates[-1]:.0f} MB/s, dd read {read_rates[-1]:.0f} MB/s", flush=True)

    median = statistics.median
    print(f"state: {save_mb:.1f} MB of tensors, {on_disk / 1048576:.1f} MB on disk ({args.ranks} writing rank(s)), "
          f"medians of {args.repetitions}")
    print(f"dd write: {median(write_rates):8.1f} MB/s (conv=fdatasync)")
    print(f"save:     {median(save_rates):8.1f} MB/s = {100 * median(save_rates) / median(write_rates):.0f}% of dd")
    print(f"dd read:  {median(read_rates):8.1f} MB/s (pages evicted)")
    print(f"load:     {median(load_rates):8.1f} MB/s = {100 * median(load_rates) / median(read_rates):.0f}% of dd")
    shutil.rmtree(args.directory, ignore_errors=True)


if __name__ == "__main__":
    main()
