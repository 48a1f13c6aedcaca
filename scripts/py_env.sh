#!/usr/bin/env bash
# Sets up the Python side of vdt (python/: data preparation, decoding, checkpoint formats, plots) in a venv next to the
# LibTorch cache, idempotently and quietly once done:
#   $VDT_CACHE/pyenv-<hash of python/pyproject.toml>   (VDT_CACHE defaults to ~/.cache/vdt)
# The venv sees the torch==2.11.0 wheel that scripts/setup.sh unpacked (a .pth file; no second torch is downloaded)
# and gets the pinned dependencies of python/pyproject.toml (and pytest) from PyPI. The vdt_py code itself runs from
# the checkout (PYTHONPATH=python/src, set by `vdt` and the tests), so several checkouts can share one venv.
# Prints the venv's python on its last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VDT_CACHE=${VDT_CACHE:-$HOME/.cache/vdt}
say() { echo "[vdt py_env] $*" >&2; }

torch_cmake=$("$root/scripts/setup.sh" | tail -n 1)              # .../torch-2.11.0/torch/share/cmake/Torch
torch_site=$(cd "$torch_cmake/../../../.." && pwd)               # the directory that holds the torch package
[ -d "$torch_site/torch" ] || { say "no torch package beside $torch_cmake; ---> HINT: rerun scripts/setup.sh"; exit 1; }
hash=$( (cat "$root/python/pyproject.toml"; echo "$torch_site"; python3 --version) | sha256sum | cut -c1-12)
VENV="$VDT_CACHE/pyenv-$hash"

if [ ! -f "$VENV/.complete" ]; then
  mkdir -p "$VDT_CACHE"
  exec 9>"$VDT_CACHE/.pyenv.lock"
  flock 9                                   # parallel callers (ctest -j) wait for one creator
fi
if [ ! -f "$VENV/.complete" ]; then
  command -v python3 >/dev/null || { say "no python3 on PATH; ---> HINT: install python3 (3.10 or newer)"; exit 1; }
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then   # Debian's python3 needs python3-venv for venvs
    say "installing Debian package python3-venv"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null \
      || { say "could not install python3-venv; ---> HINT: install it, or set VDT_PYTHON to a python with vdt's dependencies"; exit 1; }
  fi
  say "creating $VENV (once): torch from $torch_site, dependencies of python/pyproject.toml from PyPI"
  mkdir -p "$VDT_CACHE"
  tmp="$VENV.partial.$$"
  rm -rf "$tmp"
  python3 -m venv "$tmp" || { say "python3 -m venv failed; ---> HINT: install python3-venv"; exit 1; }
  site=$("$tmp/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$torch_site" > "$site/vdt_torch.pth"
  "$tmp/bin/python" -W ignore -c 'import torch' || { rm -rf "$tmp"; say "the venv cannot import torch from $torch_site"; exit 1; }
  deps=$("$tmp/bin/python" - "$root/python/pyproject.toml" <<'PY'
import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(p["dependencies"] + p.get("optional-dependencies", {}).get("test", [])))
PY
)
  # The venv python is moved after installing, so scripts' shebangs would point at the temporary name: use -m only.
  mapfile -t dep_list <<< "$deps"
  PIP_ROOT_USER_ACTION=ignore "$tmp/bin/python" -m pip install -q --disable-pip-version-check --no-warn-script-location \
      "${dep_list[@]}" || { rm -rf "$tmp"; say "pip could not install the dependencies; ---> HINT: check network access to PyPI"; exit 1; }
  touch "$tmp/.complete"
  if [ ! -f "$VENV/.complete" ]; then rm -rf "$VENV"; mv "$tmp" "$VENV"; else rm -rf "$tmp"; fi
fi
echo "$VENV/bin/python"
