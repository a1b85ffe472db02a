"""Configuration shared by every world-model family (backbone, conditioning, heads, training)."""

from __future__ import annotations

from dataclasses import dataclass, field

from wmrl.errors import ConfigError


@dataclass
class WorldModelConfig:
    """Fields common to all world-model families.

    Args:
        image_size: side of the square RGB frames (H = W), divisible by 2**(len(block_out_channels)-1).
        context_frames: T, number of past frames (and proprio states) the model conditions on.
        chunk_size: K, number of actions consumed and frames predicted per model call.
        action_dim: A, action size (7 for the wmrl env contract).
        state_dim: D, proprio state size (8 for the built-in suite); 0 disables state input/output.
        env_state_dim: S, how many leading dims of a dataset's ``observation.environment_state``
            the model also reads and predicts (the built-in suite: 9, the three cubes' xyz; see
            :mod:`envs.tabletop.environment_state`), as the last S of its ``state_dim`` dims, so an
            imagined episode carries the objects' poses and can be judged by the task's own success
            test (``imagination.success_source=state``). The head predicts them as a change from
            the last context state. The model's state is then ``D + S`` dims
            (:attr:`full_state_dim`): contexts take, and steps return, the proprio state followed
            by these S dims. 0: off.
        env_state_loss_scale: the environment-state dims' loss is the squared error in units of
            this (metres for the built-in cubes: 0.01 = centimetres), not in units of the data's
            spread: a cube parked out of view spreads the positions over a metre, and an error of a
            few centimetres (the built-in success tests allow 1-3.5 cm) would cost almost nothing.
        env_state_contact_radius: a contact gate on the environment-state dims (metres; 0: off).
            They are read as objects' xyz triples and the first three proprio dims as the tcp xyz
            (the built-in layout). An object's predicted change over a chunk is kept only when the
            tcp comes within this distance of it (at any context or predicted step of the chunk)
            or the object was already moving (:attr:`env_state_momentum`); otherwise the object
            stays where it was. A learned head alone lets far-away cubes creep a few millimetres
            per step, which compounds over an imagined episode into poses tens of centimetres off.
        residual_states: the head predicts the proprio state dims too as a change from the last
            context state (the environment-state dims always are). Off: it predicts them directly,
            which a short-trained head pulls toward the data's mean (the tcp then sits centimetres
            from where the actions took it, and a policy in imagination reads a wrong state).
        env_state_momentum: an object that moved more than this (metres) between the last two
            context states keeps its gate open (sliding or falling after a contact ends).
        state_conditioned_frames: the frame generator also reads the K states of the chunk it draws
            (as changes from the last context state: proprio dims in units of their spread,
            environment-state dims in ``env_state_loss_scale`` units, and a flag saying they are
            given). Training gives it the real states of the target chunk (except for a
            ``state_cond_dropout`` share of windows, which get zeros and the flag off); in an
            imagined rollout with an attached state model that has an arm
            (:meth:`WorldModel.attach_object_dynamics`, ``ObjectDynamics`` with ``arm``) it gets that
            model's states, so the frames the policy sees draw the arm and the objects where the state
            model moved them (and the state-rule success reads the same world). Without such a model it
            runs with the flag off, as an ordinary world model. Built-in suite: needs a ~5 mm state
            model; see ``benchmarks.rl_headroom``.
        state_cond_dropout: share of training windows whose chunk states are withheld (flag off), so
            the model also works without a state model.
        state_heatmaps: with ``state_conditioned_frames``, the chunk's object positions also enter the
            frame generator as images, where a global conditioning vector cannot say "here": one
            Gaussian blob (``heatmap_sigma`` px) per object and chunk step, at the pixel where the
            object's state puts it (a quadratic projection of its xyz fitted on the training frames'
            ``object_colors`` masks, :mod:`worldmodels.object_projection`; saved with the weights).
            Needs ``env_state_dim`` = 3 x the number of ``object_colors`` (in the same order).
        tcp_heatmap: with ``state_heatmaps``, the gripper gets a blob per chunk step too, at the pixel
            where its tcp xyz (proprio dims ``tcp_dims``) puts it: a quadratic projection fitted on the
            centroid of the training frames' dark pixels (every channel <= ``tcp_dark_max``; the
            built-in gripper is the only dark thing in its frames without shadows). Without it the
            gripper is drawn from the actions and a conditioning vector alone, and a policy in
            imagination sees a faint ghost of it.
        tcp_dims: the proprio dims of the tcp xyz (``tcp_heatmap``).
        tcp_dark_max: a pixel with every channel at most this (in [0, 1]) is the gripper's (``tcp_heatmap``).
        heatmap_sigma: width of those blobs (pixels).
        heatmap_workspace_m: an object whose x or y is farther than this from the origin (metres) is
            out of the workspace (the built-in suite parks the objects a task does not use at
            y = -3 m): such frames are left out of the projection fit and such an object gets no blob.
        instruction_dim: E, size of an optional instruction embedding (0: no instruction input).
        patch_size: space-to-depth factor p: the UNet runs at (H/p, W/p) on 3p^2 channels per frame.
        block_out_channels: UNet channels per resolution level (diffusers ``UNet2DModel``).
        layers_per_block: ResNet layers per UNet level.
        norm_num_groups: GroupNorm groups (must divide every entry of ``block_out_channels``).
        head_hidden: hidden width of the state / reward / success head.
        context_noise_max: context frames get Gaussian noise of std ~ U(0, max) during training
            (in [-1, 1] pixel units), against compounding errors in autoregressive rollouts.
        inference_context_noise: noise level the model is told at inference (no noise is added).
        self_forcing_prob: share of training windows whose context is the model's own previous chunk
            (predicted without gradient from the real context, then the next chunk is the target):
            trains the model on the inputs it sees in autoregressive rollouts. Costs one extra
            no-grad forward pass per step when > 0.
        moving_weight: extra loss weight on pixels that change between the last context frame and
            the target (focuses the budget on the moving objects rather than the static background).
        object_colors: RGB colours (in [0, 1]) of the manipulated objects (the built-in cubes);
            pixels whose chroma (colour minus its grey level) points the way of one of these
            colours' chroma (cosine >= ``object_color_cos``) and is at least half as strong are
            "object pixels". Empty: no object masks (``object_weight`` and ``object_oversample``
            then do nothing).
        object_color_cos: cosine threshold of the object colour masks.
        object_weight: extra loss weight on object pixels of the target frames and of the last
            context frame (where an object may move away from): objects are a few pixels of a
            64x64 frame and their motion is what a simulator must get right.
        object_oversample: share of training windows drawn from windows in which object pixels
            change (object masks of the target frames differ from the last context frame's),
            proportionally to how many change; the rest are drawn as usual. Object contacts are
            rare and small in scripted data, so uniform sampling rarely shows them.
        episode_start_windows: also train on the T-1 windows per episode whose context starts
            before the episode, left-padded by repeating the first frame and state, exactly as a
            rollout from a reset (or from a keyframe near the start) fills its context. Without
            them a model never sees a padded context nor predicts an episode's first frames, and
            imagined episodes from t=0 blur from the first chunk.
        head_reads_cond: the outcome head (states, rewards, success) also reads the raw
            conditioning vector (normalised context states and actions), not only the UNet's mid
            features and the 128-wide conditioning embedding the UNet shares. Proprio and object
            poses then need not squeeze through that embedding.
        state_loss_weight / reward_loss_weight / success_loss_weight: head loss weights.
        autocast_bf16: run forward passes under ``torch.autocast(dtype=bfloat16)`` where the
            device computes bf16 natively (``worldmodels.modeling_common.native_bf16``); fp32
            elsewhere, where emulated bf16 is many times slower.
        seed: seed for the weight initialisation.
    """

    image_size: int = 64
    context_frames: int = 4
    chunk_size: int = 4
    action_dim: int = 7
    state_dim: int = 8
    env_state_dim: int = 0
    env_state_loss_scale: float = 0.01
    env_state_contact_radius: float = 0.0
    env_state_momentum: float = 0.004
    residual_states: bool = False
    state_conditioned_frames: bool = False
    state_cond_dropout: float = 0.2
    state_heatmaps: bool = False
    tcp_heatmap: bool = False
    tcp_dims: tuple[int, ...] = (0, 1, 2)
    tcp_dark_max: float = 0.3
    heatmap_sigma: float = 1.5
    heatmap_workspace_m: float = 1.0
    instruction_dim: int = 0
    patch_size: int = 2
    block_out_channels: tuple[int, ...] = (32, 64, 128)
    layers_per_block: int = 1
    norm_num_groups: int = 8
    head_hidden: int = 256
    head_reads_cond: bool = False
    context_noise_max: float = 0.3
    inference_context_noise: float = 0.0
    self_forcing_prob: float = 0.0
    moving_weight: float = 3.0
    object_colors: tuple[tuple[float, float, float], ...] = ()
    object_color_cos: float = 0.97
    object_weight: float = 0.0
    object_oversample: float = 0.0
    episode_start_windows: bool = True
    state_loss_weight: float = 1.0
    reward_loss_weight: float = 1.0
    success_loss_weight: float = 0.1
    autocast_bf16: bool = True
    seed: int = 0
    family: str = field(default="", init=False)

    def __post_init__(self) -> None:
        self.block_out_channels = tuple(int(c) for c in self.block_out_channels)
        for name in (
            "image_size",
            "context_frames",
            "chunk_size",
            "action_dim",
            "layers_per_block",
            "norm_num_groups",
            "head_hidden",
            "patch_size",
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{name}={v!r} must be an integer >= 1")
        for name in ("state_dim", "env_state_dim", "instruction_dim"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"{name}={v!r} must be an integer >= 0")
        if not isinstance(self.env_state_loss_scale, (int, float)) or not self.env_state_loss_scale > 0:
            raise ConfigError(f"env_state_loss_scale={self.env_state_loss_scale!r} must be a number > 0")
        for name in ("env_state_contact_radius", "env_state_momentum"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ConfigError(f"{name}={v!r} must be a number >= 0 (metres)")
        if self.env_state_contact_radius and (not self.env_state_dim or self.env_state_dim % 3 or self.state_dim < 3):
            raise ConfigError(
                f"env_state_contact_radius={self.env_state_contact_radius} needs env_state_dim > 0 and a multiple "
                f"of 3 (object xyz triples; got {self.env_state_dim}) and state_dim >= 3 (tcp xyz; got {self.state_dim})"
            )
        if self.state_conditioned_frames and not self.full_state_dim:
            raise ConfigError("state_conditioned_frames=true needs state_dim > 0 (the states the frames follow)")
        if isinstance(self.state_cond_dropout, bool) or not 0.0 <= self.state_cond_dropout <= 1.0:
            raise ConfigError(f"state_cond_dropout={self.state_cond_dropout!r} must be in [0, 1]")
        if self.state_heatmaps and (
            not self.state_conditioned_frames or not self.object_colors or self.env_state_dim != 3 * len(self.object_colors)
        ):
            raise ConfigError(
                f"state_heatmaps=true needs state_conditioned_frames=true and env_state_dim = 3 x the "
                f"{len(self.object_colors)} object_colors (got state_conditioned_frames={self.state_conditioned_frames}, "
                f"env_state_dim={self.env_state_dim})"
            )
        try:
            self.tcp_dims = tuple(int(d) for d in self.tcp_dims)
        except (TypeError, ValueError):
            raise ConfigError(f"tcp_dims={self.tcp_dims!r} must be 3 proprio dim indices") from None
        if self.tcp_heatmap and not self.state_heatmaps:
            raise ConfigError("tcp_heatmap=true needs state_heatmaps=true (the gripper's blob joins the objects')")
        if self.tcp_heatmap and (len(self.tcp_dims) != 3 or not all(0 <= d < self.state_dim for d in self.tcp_dims)):
            raise ConfigError(f"tcp_dims={list(self.tcp_dims)} must name 3 proprio dims in [0, {self.state_dim})")
        if self.tcp_heatmap and not 0.0 < self.tcp_dark_max < 1.0:
            raise ConfigError(f"tcp_dark_max={self.tcp_dark_max!r} must be in (0, 1)")
        if isinstance(self.heatmap_sigma, bool) or not isinstance(self.heatmap_sigma, (int, float)) or not self.heatmap_sigma > 0:
            raise ConfigError(f"heatmap_sigma={self.heatmap_sigma!r} must be a number > 0 (pixels)")
        if isinstance(self.heatmap_workspace_m, bool) or not isinstance(self.heatmap_workspace_m, (int, float)) or not self.heatmap_workspace_m > 0:
            raise ConfigError(f"heatmap_workspace_m={self.heatmap_workspace_m!r} must be a number > 0 (metres)")
        if self.env_state_dim and not self.state_dim:
            raise ConfigError(f"env_state_dim={self.env_state_dim} needs state_dim > 0 (the proprio state)")
        if not self.block_out_channels or min(self.block_out_channels) < 1:
            raise ConfigError(f"block_out_channels={self.block_out_channels!r} must be positive integers")
        bad = [c for c in self.block_out_channels if c % self.norm_num_groups]
        if bad:
            raise ConfigError(
                f"norm_num_groups={self.norm_num_groups} does not divide block_out_channels entries {bad}"
            )
        factor = 2 ** (len(self.block_out_channels) - 1) * self.patch_size
        if self.image_size % factor:
            raise ConfigError(
                f"image_size={self.image_size} must be divisible by {factor} "
                f"(patch_size * 2**(len(block_out_channels)-1) for patch_size={self.patch_size}, "
                f"block_out_channels={self.block_out_channels})"
            )
        try:
            self.object_colors = tuple(tuple(float(v) for v in col) for col in self.object_colors)
        except (TypeError, ValueError):
            raise ConfigError(
                f"object_colors={self.object_colors!r} must be a list of [r, g, b] in [0, 1]"
            ) from None
        for col in self.object_colors:
            if len(col) != 3 or min(col) < 0 or max(col) > 1 or max(col) - min(col) < 0.1:
                raise ConfigError(f"object_colors entry {list(col)} must be [r, g, b] in [0, 1] and not grey")
        if not 0.0 < self.object_color_cos <= 1.0:
            raise ConfigError(f"object_color_cos={self.object_color_cos!r} must be in (0, 1]")
        if not 0.0 <= self.object_oversample <= 1.0:
            raise ConfigError(f"object_oversample={self.object_oversample!r} must be in [0, 1]")
        if not 0.0 <= self.self_forcing_prob <= 1.0:
            raise ConfigError(f"self_forcing_prob={self.self_forcing_prob!r} must be in [0, 1]")
        for name in (
            "context_noise_max",
            "inference_context_noise",
            "moving_weight",
            "object_weight",
            "state_loss_weight",
            "reward_loss_weight",
            "success_loss_weight",
        ):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"{name}={v!r} must be a number >= 0")

    @property
    def full_state_dim(self) -> int:
        """Size of the state the model reads and predicts: proprio ``state_dim`` + ``env_state_dim``."""
        return self.state_dim + self.env_state_dim
