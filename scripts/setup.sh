#!/usr/bin/env bash
# Sets up everything vdt needs to build, idempotently and quietly once done:
#   Debian packages (cmake, ninja, ccache, CLI11, nlohmann-json, GoogleTest) and LibTorch 2.11 from the PyPI wheel
#   torch==2.11.0, installed into a cache outside the checkout ($VDT_CACHE, default ~/.cache/vdt) and reused.
# A user with their own LibTorch sets Torch_DIR (or CMAKE_PREFIX_PATH) and this script skips the download.
# Prints the Torch CMake directory on its last line.
set -euo pipefail
VDT_CACHE=${VDT_CACHE:-$HOME/.cache/vdt}
TORCH_VERSION=2.11.0
say() { echo "[vdt setup] $*" >&2; }

need_pkgs=()
for p in cmake ninja-build ccache g++ libcli11-dev nlohmann-json3-dev libgtest-dev zlib1g-dev python3-pip; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
# python3-pip: any pip works; skip the Debian one when a pip is already on PATH.
if command -v pip3 >/dev/null 2>&1 || command -v pip >/dev/null 2>&1; then
  need_pkgs=("${need_pkgs[@]/python3-pip}")
fi
need_pkgs=($(printf '%s\n' "${need_pkgs[@]}" | grep -v '^$' || true))
if [ ${#need_pkgs[@]} -gt 0 ]; then
  say "installing Debian packages: ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if [ -n "${Torch_DIR:-}" ]; then
  [ -f "$Torch_DIR/TorchConfig.cmake" ] || { say "Torch_DIR=$Torch_DIR has no TorchConfig.cmake; point it at <libtorch>/share/cmake/Torch"; exit 1; }
  echo "$Torch_DIR"; exit 0
fi

TORCH_HOME_DIR="$VDT_CACHE/torch-$TORCH_VERSION"
TORCH_CMAKE="$TORCH_HOME_DIR/torch/share/cmake/Torch"
if [ ! -f "$TORCH_HOME_DIR/.complete" ]; then
  say "installing LibTorch $TORCH_VERSION (PyPI wheel torch==$TORCH_VERSION) into $TORCH_HOME_DIR (once; ~4 GB)"
  rm -rf "$TORCH_HOME_DIR.partial"
  PIP=$(command -v pip3 || command -v pip)
  "$PIP" install -q --disable-pip-version-check --no-warn-script-location --target "$TORCH_HOME_DIR.partial" "torch==$TORCH_VERSION" \
    || { say "pip could not install torch==$TORCH_VERSION; ---> HINT: set Torch_DIR to an existing LibTorch 2.11"; exit 1; }
  rm -rf "$TORCH_HOME_DIR"; mv "$TORCH_HOME_DIR.partial" "$TORCH_HOME_DIR"
  touch "$TORCH_HOME_DIR/.complete"
fi
[ -f "$TORCH_CMAKE/TorchConfig.cmake" ] || { say "broken LibTorch cache at $TORCH_HOME_DIR; delete it and rerun"; exit 1; }
echo "$TORCH_CMAKE"
