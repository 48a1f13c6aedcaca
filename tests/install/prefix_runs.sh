#!/usr/bin/env bash
# Install.PrefixRuns: `cmake --install` gives a relocatable prefix. Installs the binary and share/ (component vdt) into
# a temp prefix, puts LibTorch where the full install copies it (lib/vdt/torch/lib, lib/vdt/nvidia; linked here, not
# copied: it is ~4 GB with CUDA), moves the prefix, and runs vdt there: --version, a tiny data synth + check, the
# Python side found in the moved share/. Then checks the RPATH names no build-machine path, that the binary does not
# start once the libraries beside it are gone (so it is the relative path that finds them), and that
# LD_LIBRARY_PATH (the documented way for a `--component vdt` install) finds them instead.
# Usage: prefix_runs.sh BUILD_DIR TORCH_LIB_DIR
set -euo pipefail
build=$(cd "$1" && pwd) torch_lib=$(cd "$2" && pwd)
unset LD_LIBRARY_PATH  # only the RPATH may find LibTorch below (until the last check sets it)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "Install.PrefixRuns: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/first" --component vdt >/dev/null
mkdir -p "$tmp/first/lib/vdt/torch"
ln -s "$torch_lib" "$tmp/first/lib/vdt/torch/lib"
[ -d "$torch_lib/../../nvidia" ] && ln -s "$(cd "$torch_lib/../../nvidia" && pwd)" "$tmp/first/lib/vdt/nvidia"
mv "$tmp/first" "$tmp/moved"
p=$tmp/moved

"$p/bin/vdt" --version
"$p/bin/vdt" data synth "$tmp/root" --train_runs 1 --train_clips_per_run 1 --val_runs 1 --val_clips_per_run 1 \
  --n_drop 0 >/dev/null
"$p/bin/vdt" data check "$tmp/root" >/dev/null || fail "vdt data check failed on the synthetic root"
"$p/bin/vdt" data prepare --help >"$tmp/help.txt"
grep -q -- --text-encoder "$tmp/help.txt" || fail "data prepare --help lacks --text-encoder"
grep -q "vdt_py $p/share/vdt/python/src/vdt_py" "$tmp/help.txt" || fail "data prepare --help does not name the moved share/"

runpath=$(readelf -d "$p/bin/vdt" | grep -E 'R(UN)?PATH' || true)
echo "$runpath" | grep -q '\$ORIGIN/../lib/vdt/torch/lib' || fail "RPATH is not relative to the install: $runpath"
[ "$(echo "$runpath" | grep -c "$torch_lib")" = 0 ] || fail "RPATH names the build machine's LibTorch: $runpath"
[ "$(echo "$runpath" | grep -c "$build")" = 0 ] || fail "RPATH names the build directory: $runpath"

rm "$p/lib/vdt/torch/lib"
if "$p/bin/vdt" --version >/dev/null 2>&1; then fail "vdt started without LibTorch beside it (found through another path)"; fi
LD_LIBRARY_PATH=$torch_lib "$p/bin/vdt" --version >/dev/null || fail "vdt does not start with LD_LIBRARY_PATH=$torch_lib"
echo "Install.PrefixRuns: ok ($p)"
