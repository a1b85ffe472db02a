"""The built-in tabletop scene: one MJCF model shared by every task (so mixed-task batches step
together in one :class:`mujoco.batch.Batch`).

The scene holds a superset of objects; a task uses some and parks the rest out of view:

* a parallel-jaw gripper on x/y/z slide joints (position actuators; gravity compensated); its
  body origin is the tool centre point (TCP) between the fingertips;
* three 5 cm cubes (red, green, blue) on free joints;
* two flat target pads (mocap, visual only) and two square bowls (mocap, colliding);
* a fixed oblique agent-view camera and a wrist camera on the gripper.

Render settings follow PLATFORM_NOTES: no multisampling, coarse primitives, and by default no
shadows. ``shadows=True`` lets the overhead light cast them (a small shadow map fitted to the
workspace): the gripper's shadow marks its table-plane position, so depth and height, which both
move the gripper vertically in the oblique view, separate.
"""

from __future__ import annotations

import functools

import mujoco
import numpy as np

CUBE_HALF = 0.025
CUBE_COLORS: dict[str, tuple[float, float, float]] = {
    "red": (0.85, 0.1, 0.1),
    "green": (0.1, 0.75, 0.2),
    "blue": (0.15, 0.3, 0.9),
}
CUBE_NAMES = tuple(f"cube_{c}" for c in CUBE_COLORS)
PAD_NAMES = ("pad0", "pad1")
BOWL_NAMES = ("bowl0", "bowl1")
PAD_RADIUS = 0.05
BOWL_INNER_HALF = 0.055
BOWL_WALL_HEIGHT = 0.035
FINGER_MAX = 0.045  # finger joint travel (m): 0 = closed
TCP_LOW = np.array([-0.28, -0.25, 0.02])
TCP_HIGH = np.array([0.28, 0.25, 0.30])
TCP_HOME = np.array([0.0, -0.12, 0.18])
PARK_Y = -3.0  # parked objects sit behind the camera, out of view
SHADOW_MAP = 128  # shadow-map texels per side (software GL renders it for every frame: keep it small)
SHADOW_HALF_WIDTH = 0.45  # m: the overhead light's shadow frustum covers the workspace (TCP x +-0.28)
CONTROL_SUBSTEPS = 10
TIMESTEP = 0.005  # control period = 0.05 s (20 Hz)


def _bowl_geoms(rgba: str) -> str:
    t, h, w = 0.006, BOWL_WALL_HEIGHT / 2, BOWL_INNER_HALF + 0.006
    walls = [
        f'<geom type="box" size="{w} {w} 0.004" pos="0 0 0.004" rgba="{rgba}"/>',
        f'<geom type="box" size="{t} {w} {h}" pos="{w} 0 {h}" rgba="{rgba}"/>',
        f'<geom type="box" size="{t} {w} {h}" pos="{-w} 0 {h}" rgba="{rgba}"/>',
        f'<geom type="box" size="{w} {t} {h}" pos="0 {w} {h}" rgba="{rgba}"/>',
        f'<geom type="box" size="{w} {t} {h}" pos="0 {-w} {h}" rgba="{rgba}"/>',
    ]
    return "\n".join(walls)


def scene_xml(image_size: int = 64, shadows: bool = False) -> str:
    """MJCF text of the tabletop scene (offscreen buffer large enough for a tiled batch render);
    ``shadows``: the overhead light casts shadows (see the module docstring)."""
    cubes = []
    for i, (name, rgb) in enumerate(CUBE_COLORS.items()):
        r, g, b = rgb
        cubes.append(
            f'<body name="cube_{name}" pos="{0.5 + 0.2 * i} {PARK_Y} {CUBE_HALF}">'
            f'<freejoint name="cube_{name}_joint"/>'
            f'<geom name="cube_{name}_geom" type="box" size="{CUBE_HALF} {CUBE_HALF} {CUBE_HALF}" '
            f'rgba="{r} {g} {b} 1" mass="0.05" condim="4" friction="1.0 0.02 0.001"/></body>'
        )
    pads = [
        f'<body name="{n}" mocap="true" pos="{-0.5 - 0.2 * i} {PARK_Y} 0.0005">'
        f'<geom type="cylinder" size="{PAD_RADIUS} 0.0005" rgba="0.95 0.85 0.2 1" contype="0" conaffinity="0"/>'
        f"</body>"
        for i, n in enumerate(PAD_NAMES)
    ]
    bowls = [
        f'<body name="{n}" mocap="true" pos="{-1.2 - 0.3 * i} {PARK_Y} 0">{_bowl_geoms("0.55 0.35 0.2 1")}</body>'
        for i, n in enumerate(BOWL_NAMES)
    ]
    off = 16 * max(image_size, 64)
    shadow_map = SHADOW_MAP if shadows else 0
    return f"""
<mujoco model="wmrl_tabletop">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{TIMESTEP}" integrator="implicitfast" cone="elliptic" impratio="10"/>
  <visual>
    <quality shadowsize="{shadow_map}" offsamples="0" numslices="8" numstacks="6" numquads="1"/>
    <global offwidth="{off}" offheight="{off}"/>
    <headlight ambient="0.45 0.45 0.45" diffuse="0.5 0.5 0.5" specular="0 0 0"/>
  </visual>
  <default>
    <geom friction="1.0 0.005 0.0001" solref="0.01 1" solimp="0.95 0.99 0.001"/>
  </default>
  <worldbody>
    <light name="top" pos="0 0 1.5" dir="0 0 -1" directional="true" castshadow="{str(bool(shadows)).lower()}" diffuse="0.35 0.35 0.35"/>
    <geom name="table" type="plane" size="3 3 0.1" rgba="0.72 0.72 0.7 1"/>
    <geom name="table_edge" type="box" size="0.34 0.005 0.001" pos="0 0.3 0.001" rgba="0.3 0.3 0.3 1"
          contype="0" conaffinity="0"/>
    <camera name="agentview" pos="0 -0.42 0.42" xyaxes="1 0 0 0 0.69 0.723" fovy="45"/>
    <body name="gripper" pos="0 0 0" gravcomp="1">
      <joint name="gx" type="slide" axis="1 0 0" range="{TCP_LOW[0]} {TCP_HIGH[0]}" damping="40"/>
      <joint name="gy" type="slide" axis="0 1 0" range="{TCP_LOW[1]} {TCP_HIGH[1]}" damping="40"/>
      <joint name="gz" type="slide" axis="0 0 1" range="{TCP_LOW[2]} {TCP_HIGH[2]}" damping="40"/>
      <site name="tcp" pos="0 0 0" size="0.005" rgba="1 1 1 0"/>
      <geom name="palm" type="box" size="0.035 0.014 0.012" pos="0 0 0.052" rgba="0.2 0.2 0.22 1" mass="0.3"/>
      <geom name="wrist" type="cylinder" size="0.012 0.04" pos="0 0 0.1" rgba="0.35 0.35 0.38 1" mass="0.05"
            contype="0" conaffinity="0"/>
      <camera name="wrist" pos="0 -0.04 0.07" xyaxes="1 0 0 0 0.94 0.34" fovy="70"/>
      <body name="left_finger" pos="-0.006 0 0" gravcomp="1">
        <joint name="lf" type="slide" axis="-1 0 0" range="0 {FINGER_MAX}" damping="5"/>
        <geom name="left_pad" type="box" size="0.005 0.013 0.026" pos="0 0 0.016" rgba="0.9 0.9 0.92 1"
              mass="0.02" condim="4" friction="1.5 0.02 0.001"/>
      </body>
      <body name="right_finger" pos="0.006 0 0" gravcomp="1">
        <joint name="rf" type="slide" axis="1 0 0" range="0 {FINGER_MAX}" damping="5"/>
        <geom name="right_pad" type="box" size="0.005 0.013 0.026" pos="0 0 0.016" rgba="0.9 0.9 0.92 1"
              mass="0.02" condim="4" friction="1.5 0.02 0.001"/>
      </body>
    </body>
    {"".join(cubes)}
    {"".join(pads)}
    {"".join(bowls)}
  </worldbody>
  <equality>
    <joint joint1="rf" joint2="lf" polycoef="0 1 0 0 0" solref="0.005 1"/>
  </equality>
  <contact>
    <exclude body1="gripper" body2="left_finger"/>
    <exclude body1="gripper" body2="right_finger"/>
    <exclude body1="left_finger" body2="right_finger"/>
  </contact>
  <actuator>
    <position name="ax" joint="gx" kp="1500" ctrlrange="{TCP_LOW[0]} {TCP_HIGH[0]}"/>
    <position name="ay" joint="gy" kp="1500" ctrlrange="{TCP_LOW[1]} {TCP_HIGH[1]}"/>
    <position name="az" joint="gz" kp="1500" ctrlrange="{TCP_LOW[2]} {TCP_HIGH[2]}"/>
    <position name="fingers" joint="lf" kp="400" ctrlrange="0 {FINGER_MAX}" forcerange="-12 12"/>
  </actuator>
</mujoco>
"""


@functools.lru_cache(maxsize=8)
def _compiled(image_size: int, shadows: bool = False) -> mujoco.MjModel:
    model = mujoco.MjModel.from_xml_string(scene_xml(image_size, shadows))
    if shadows:
        # A directional light's shadow frustum spans shadowclip * extent; the parked objects make
        # the extent metres wide, so the clip is set to cover just the workspace.
        model.vis.map.shadowclip = SHADOW_HALF_WIDTH / model.stat.extent
    return model


def build_model(image_size: int = 64, shadows: bool = False) -> mujoco.MjModel:
    """A fresh copy of the compiled scene model (``shadows``: see :func:`scene_xml`)."""
    return _compiled(image_size, bool(shadows)).__copy__()


class SceneIndex:
    """Addresses (qpos/qvel offsets, body and mocap ids) of the scene's parts in ``model``."""

    def __init__(self, model: mujoco.MjModel):
        def jadr(name: str) -> int:
            return int(model.jnt_qposadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)])

        def vadr(name: str) -> int:
            return int(model.jnt_dofadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)])

        def bid(name: str) -> int:
            return mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)

        self.tcp_qpos = np.array([jadr("gx"), jadr("gy"), jadr("gz")])
        self.tcp_qvel = np.array([vadr("gx"), vadr("gy"), vadr("gz")])
        self.finger_qpos = np.array([jadr("lf"), jadr("rf")])
        self.cube_qpos = np.array([jadr(f"{n}_joint") for n in CUBE_NAMES])  # (3,) start of 7
        self.cube_qvel = np.array([vadr(f"{n}_joint") for n in CUBE_NAMES])  # (3,) start of 6
        self.pad_mocap = np.array([model.body_mocapid[bid(n)] for n in PAD_NAMES])
        self.bowl_mocap = np.array([model.body_mocapid[bid(n)] for n in BOWL_NAMES])
        self.cube_geoms = np.array(
            [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, f"{n}_geom") for n in CUBE_NAMES]
        )
        self.finger_geoms = np.array(
            [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, n) for n in ("left_pad", "right_pad")]
        )
        self.nq, self.nv, self.nu = model.nq, model.nv, model.nu
        self.nmocap = model.nmocap
