#!/usr/bin/env bash
# Installs the Python tools the tests consume vdt's outputs with (today: the PyPI package `tensorboard`, whose
# EventAccumulator is the real reader of our event files) into a cache outside the checkout
# ($VDT_CACHE/pytools, default ~/.cache/vdt/pytools), idempotently and quietly once done.
# Prints that directory on its last line; use it as PYTHONPATH.
set -euo pipefail
VDT_CACHE=${VDT_CACHE:-$HOME/.cache/vdt}
PYTOOLS="$VDT_CACHE/pytools"
say() { echo "[vdt py_tools] $*" >&2; }

if [ ! -f "$PYTOOLS/.complete" ]; then
  PIP=$(command -v pip3 || command -v pip || true)
  [ -n "$PIP" ] || { say "no pip on PATH; ---> HINT: install python3-pip"; exit 1; }
  mkdir -p "$VDT_CACHE"
  # One installer at a time (tests run in parallel): the others wait here and find it complete. The directory is
  # never replaced while a reader may be importing from it.
  exec 9>"$VDT_CACHE/pytools.lock"
  flock 9
  if [ ! -f "$PYTOOLS/.complete" ]; then
    say "installing tensorboard into $PYTOOLS (once)"
    rm -rf "$PYTOOLS.partial" "$PYTOOLS"
    PIP_ROOT_USER_ACTION=ignore "$PIP" install -q --disable-pip-version-check --no-warn-script-location --target "$PYTOOLS.partial" tensorboard \
      || { rm -rf "$PYTOOLS.partial"; say "pip could not install tensorboard; ---> HINT: check network access to PyPI"; exit 1; }
    touch "$PYTOOLS.partial/.complete"
    mv "$PYTOOLS.partial" "$PYTOOLS"
  fi
  flock -u 9
fi
echo "$PYTOOLS"
