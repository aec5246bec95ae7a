#!/usr/bin/env bash
# The Debian packages the test suite needs beyond Python: a real single-node SLURM
# (tests/e2e/test_slurm.py: slurm-wlm, munge), headless Chromium and its driver (the report read as a
# person sees it, tests/e2e/test_study_archive.py), tmux (what a person sees on the terminal,
# tests/workflow/test_terminal.py), and unshare and ip (a network namespace with loopback only: the
# GPU machine's and an offline node's terms, tests/e2e/test_gpu_smoke_offline.py,
# tests/workflow/test_offline_workflow.py). Both the README's test line and .ci/run call this script.
set -euo pipefail
PACKAGES=(slurm-wlm munge chromium chromium-driver tmux util-linux iproute2)
TOOLS=(slurmctld munged chromium chromedriver tmux unshare ip)

missing=()
for i in "${!TOOLS[@]}"; do
  command -v "${TOOLS[$i]}" >/dev/null 2>&1 || missing+=("${PACKAGES[$i]}")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "tests/system-packages.sh: missing ${missing[*]}, and this is no Debian/Ubuntu host (no apt-get):" \
       "install them with your system's package manager" >&2
  exit 1
fi
SUDO=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || {
    echo "tests/system-packages.sh: missing ${missing[*]}; run as root (or install sudo):" \
         "apt-get install ${missing[*]}" >&2
    exit 1
  }
  SUDO=(sudo)
fi
echo "tests/system-packages.sh: installing ${missing[*]}" >&2
"${SUDO[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
