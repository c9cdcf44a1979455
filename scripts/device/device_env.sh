# Sourced on the GPU machine by run.sh and gpu_check.sh: unpacks the packed runtime (pack.sh) once
# and sets the environment our binaries need. Expects DEVRT (default .devrt); sets
#   bin                  the packed executables
#   clean_library_path   LD_LIBRARY_PATH as it was (PyTorch must run without ours)
#   torch_cudnn          the cuDNN of the machine's PyTorch, empty where there is none
# Our binaries are built against cuDNN 9.19 headers: the cuDNN of the machine's PyTorch (9.19 on
# 2026-11-23) goes before the system one (9.14), which env.sh finds first.
DEVRT=${DEVRT:-.devrt}
[ -d "$DEVRT/runtime/bin" ] || { mkdir -p "$DEVRT/runtime" && tar -C "$DEVRT/runtime" -xJf "$DEVRT/runtime.tar.xz"; }
clean_library_path=${LD_LIBRARY_PATH:-}
source "$DEVRT/runtime/env.sh"
torch_cudnn=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$torch_cudnn" ] && export LD_LIBRARY_PATH=$torch_cudnn:$LD_LIBRARY_PATH
bin=$DEVRT/runtime/bin
