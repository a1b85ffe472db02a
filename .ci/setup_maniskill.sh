#!/usr/bin/env bash
# Install the ManiSkill3 backend: its own virtual environment + a software Vulkan driver.
#
# Idempotent and self-contained: a fresh Debian bookworm machine with python3.11 gets a working
# backend. Everything lands under <repo>/.cache (git-ignored):
#   .cache/venvs/maniskill   python venv: mani-skill 3.0.1, sapien 3.0.3, CPU torch, numpy<2
#   .cache/vulkan            Mesa 25.0.7 lavapipe (bookworm-backports) unpacked with dpkg -x,
#                            plus lvp_icd.json whose library_path is absolute
#   .cache/maniskill_assets  MS_ASSET_DIR (the four supported tasks need no download)
# Why a separate venv: mplib 0.1.1 (motion-planning demos) segfaults with numpy 2, while the
# core venv has numpy 2; the backend runs in worker processes launched with this venv's python.
# Why a private Mesa: bookworm's Mesa 22 lavapipe is too old for SAPIEN ("failed to find a
# rendering device"); the backports one is unpacked rather than installed so the system's
# OpenGL/EGL stack (used by MuJoCo rendering) is untouched.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${WMRL_CACHE:-$ROOT/.cache}"
VENV="$CACHE/venvs/maniskill"
VK="$CACHE/vulkan"
PY="${PYTHON:-python3.11}"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
start=$(date +%s)

# 1. system packages: the Vulkan loader and the X/wayland libs lavapipe links against.
need_apt=()
for p in libvulkan1 libx11-xcb1 libxcb-dri3-0 libxcb-present0 libxcb-randr0 libxcb-shm0 libxcb-sync1 \
         libxcb-xfixes0 libxshmfence1 libwayland-client0 libdrm2 libzstd1 libelf1 libedit2 libxml2 libz3-4 \
         ffmpeg; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    "${need_apt[@]}" >/dev/null
fi

# 2. Mesa lavapipe 25 from bookworm-backports, unpacked privately.
if [ ! -f "$VK/lvp_icd.json" ]; then
  if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "deb http://deb.debian.org/debian bookworm-backports main" | $SUDO tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
  fi
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download -t bookworm-backports mesa-vulkan-drivers libllvm19 libdrm2 libdrm-amdgpu1 2>/dev/null \
     || apt-get download -t bookworm-backports mesa-vulkan-drivers libllvm19)
  mkdir -p "$VK"
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$VK"; done
  rm -rf "$tmp"
  lib="$(find "$VK" -name 'libvulkan_lvp.so' | head -1)"
  [ -n "$lib" ] || { echo "error: libvulkan_lvp.so not found in mesa-vulkan-drivers" >&2; exit 1; }
  cat > "$VK/lvp_icd.json" <<JSON
{"file_format_version": "1.0.1", "ICD": {"library_path": "$lib", "api_version": "1.4.305"}}
JSON
fi

# 3. the venv.
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import mani_skill, sapien, mplib" >/dev/null 2>&1; then
  "$VENV/bin/pip" install -q --upgrade pip
  # torch==2.13.0: the CPU wheel (a range would pull the 3.5 GB CUDA build); numpy<2 for mplib.
  "$VENV/bin/pip" install -q "mani-skill==3.0.1" "sapien==3.0.3" "torch==2.13.0" "numpy<2" \
      "opencv-python<4.12" "imageio[ffmpeg]" tqdm
fi
mkdir -p "$CACHE/maniskill_assets"

# 4. smoke test: one rendered step of PickCube on the CPU backend.
export VK_ICD_FILENAMES="$VK/lvp_icd.json"
export LD_LIBRARY_PATH="$(dirname "$(find "$VK" -name 'libLLVM*.so*' | head -1)")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MS_ASSET_DIR="$CACHE/maniskill_assets"
"$VENV/bin/python" - <<'PYEOF'
import gymnasium as gym, mani_skill.envs  # noqa: F401
env = gym.make("PickCube-v1", obs_mode="rgb", control_mode="pd_ee_delta_pose", num_envs=1,
               sim_backend="cpu", sensor_configs=dict(width=64, height=64))
obs, _ = env.reset(seed=0)
obs, *_ = env.step(env.action_space.sample())
print("maniskill ok:", obs["sensor_data"]["base_camera"]["rgb"].shape)
env.close()
PYEOF
echo "setup_maniskill.sh done in $(( $(date +%s) - start )) s"
