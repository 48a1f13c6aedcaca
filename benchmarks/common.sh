# shellcheck shell=bash
# Sourced by the benchmarks/*.sh scripts: the paths and settings they share. Not run on its own.
# OUT: where logs and summaries go (on a GPU machine, the folder the results are copied from); BUILD: the GPU build folder;
# VDT: the binary (default $BUILD/vdt; e.g. VDT=build/vdt on a CPU machine).
OUT=${OUT:-/tmp/vdt_out}
BUILD=${BUILD:-build-gpu}
VDT=${VDT:-$BUILD/vdt}
WORK=${WORK:-/tmp/vdt_bench_work}  # per-row work directories (synthetic roots, runs), removed before each use
SUMMARY="$OUT/summary.txt"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} NCCL_NVLS_ENABLE=0
mkdir -p "$OUT" "$WORK"

# say LINE...: print and append to the summary
say() { echo "$*" | tee -a "$SUMMARY"; }

# fresh_dir DIR: an empty directory (a traced step on a stale work directory once crashed before its setup)
fresh_dir() { rm -rf "$1"; mkdir -p "$1"; }

# launcher: the command prefix for NPROC ranks (torchrun) or one process
launcher() {
  if [ "${NPROC:-1}" -gt 1 ]; then
    echo "python3 -m torch.distributed.run --nproc-per-node $NPROC --no-python"
  fi
}

# commit_id: the code being measured; VDT_COMMIT wins (a copied tree may have no .git, or another checkout's)
commit_id() { [ -n "${VDT_COMMIT:-}" ] && echo "$VDT_COMMIT" || git rev-parse --short HEAD 2> /dev/null || echo unknown; }
