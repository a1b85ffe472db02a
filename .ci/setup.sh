#!/usr/bin/env bash
# Set up wmrl on a fresh Debian bookworm machine with Python 3.11: apt packages for headless
# MuJoCo rendering (EGL, OSMesa fallback) and FFmpeg, a virtual environment in .venv, and the
# project installed in editable mode with its dev tools. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PKGS=(libegl1 libegl-mesa0 libgbm1 libgl1-mesa-dri libosmesa6 libglib2.0-0 ffmpeg)
missing=()
for p in "${APT_PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[dev]"
echo "wmrl is set up: .venv/bin/wmrl --help"
