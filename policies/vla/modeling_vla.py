"""Small vision-language-action policy: conv encoder (FiLM by the instruction) + state -> action chunk head."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from policies.base import Policy, PolicyEval, PolicyOutput, images_to_float, to_tensor_obs
from policies.heads import HEADS, GaussianHead, TokenHead
from policies.row_stable import RowStableConv2d, RowStableLinear
from policies.text import InstructionEncoder, check_instructions
from policies.vla.configuration_vla import VLAConfig

INSTRUCTION_CACHE = "instructions.safetensors"


class ConvEncoder(nn.Module):
    """Image encoder with CoordConv input and per-stage FiLM.

    ``forward(images (B,C,H,W) float in [-1,1], film (B, 2*sum(channels)) | None) -> (B, out_dim)``.
    """

    def __init__(self, image_size: int, channels: tuple[int, ...], out_dim: int, in_channels: int = 3):
        super().__init__()
        self.channels = channels
        convs, norms = [], []
        c_in, size = in_channels + 2, image_size
        for i, c in enumerate(channels):
            stride = 2 if i < 3 else 1
            convs.append(RowStableConv2d(c_in, c, 3, stride=stride, padding=1))
            norms.append(nn.GroupNorm(min(8, c), c, affine=False))
            c_in, size = c, (size + stride - 1) // stride
        self.convs, self.norms = nn.ModuleList(convs), nn.ModuleList(norms)
        self.proj = RowStableLinear(c_in * size * size, out_dim)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, image_size), torch.linspace(-1, 1, image_size), indexing="ij")
        self.register_buffer("coords", torch.stack([xs, ys])[None], persistent=False)

    @property
    def film_dim(self) -> int:
        return 2 * sum(self.channels)

    def forward(self, x: Tensor, film: Tensor | None = None) -> Tensor:
        x = torch.cat([x, self.coords.expand(x.shape[0], -1, -1, -1)], dim=1)
        offset = 0
        for conv, norm, c in zip(self.convs, self.norms, self.channels):
            x = norm(conv(x))
            if film is not None:
                gamma, beta = film[:, offset : offset + c], film[:, offset + c : offset + 2 * c]
                x = x * (1 + gamma[:, :, None, None]) + beta[:, :, None, None]
                offset += 2 * c
            x = F.relu(x)
        return F.relu(self.proj(x.flatten(1)))


class VLANet(nn.Module):
    """Inner network: obs tensors + text embedding -> feature ``(B, hidden_dim)`` and value ``(B,)``."""

    def __init__(self, cfg: VLAConfig):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_dim
        self.image_enc = ConvEncoder(cfg.image_size, cfg.channels, h)
        self.wrist_enc = ConvEncoder(cfg.image_size, cfg.channels, h) if cfg.use_wrist else None
        self.text_proj = nn.Sequential(RowStableLinear(cfg.text_dim, 128), nn.ReLU())
        n_film = self.image_enc.film_dim * (2 if cfg.use_wrist else 1)
        self.film = RowStableLinear(128, n_film) if cfg.fusion == "film" else None
        if self.film is not None:
            nn.init.zeros_(self.film.weight)
            nn.init.zeros_(self.film.bias)
        self.state_proj = nn.Sequential(RowStableLinear(cfg.state_dim, 64), nn.ReLU())
        n_in = h * (2 if cfg.use_wrist else 1) + 64 + 128
        self.trunk = nn.Sequential(RowStableLinear(n_in, h), nn.ReLU(), RowStableLinear(h, h), nn.ReLU())
        self.value = nn.Sequential(RowStableLinear(h, 128), nn.Tanh(), RowStableLinear(128, 1)) if cfg.value_head else None
        self.register_buffer("state_mean", torch.zeros(cfg.state_dim))
        self.register_buffer("state_std", torch.ones(cfg.state_dim))

    def forward(self, obs: dict[str, Tensor], text: Tensor) -> tuple[Tensor, Tensor | None]:
        """obs: ``image`` uint8 (B,H,W,3), ``state`` (B,D), [``wrist_image``]; text (B,384) -> feat (B,h), value (B,)|None."""
        t = self.text_proj(text)
        film = self.film(t) if self.film is not None else None
        n = self.image_enc.film_dim
        parts = [self.image_enc(images_to_float(obs["image"]), None if film is None else film[:, :n])]
        if self.wrist_enc is not None:
            parts.append(self.wrist_enc(images_to_float(obs["wrist_image"]), None if film is None else film[:, n:]))
        state = (obs["state"] - self.state_mean) / self.state_std
        parts += [self.state_proj(state), t]
        feat = self.trunk(torch.cat(parts, dim=1))
        value = self.value(feat).squeeze(-1) if self.value is not None else None
        return feat, value


class VLAPolicy(Policy):
    """The small VLA policy. See :class:`VLAConfig` for the knobs and docs/interfaces.md for the contract.

    ``act`` runs without gradients (rollouts); ``evaluate_actions`` and ``forward`` are differentiable.
    """

    config_class = VLAConfig
    name = "vla"

    def __init__(self, config: VLAConfig):
        super().__init__(config)
        self.net = VLANet(config)
        c = config
        if c.head == "gaussian":
            self.head = GaussianHead(c.hidden_dim, c.chunk_size, c.action_dim, c.log_std_mode, c.squash, c.init_log_std)
        elif c.head == "tokens":
            self.head = TokenHead(c.hidden_dim, c.chunk_size, c.action_dim, c.num_bins, c.temperature)
        else:  # pragma: no cover - config validates
            self.head = HEADS[c.head](c.hidden_dim, c.chunk_size, c.action_dim)
        self.text_encoder = InstructionEncoder()
        self.known_instructions: list[str] = []

    # ----------------------------------------------------------------- inputs
    def set_normalization(self, state_mean: Tensor, state_std: Tensor) -> None:
        """Store the proprio-state statistics (D,) used to normalise ``obs['state']``."""
        self.net.state_mean.copy_(torch.as_tensor(state_mean, dtype=torch.float32))
        self.net.state_std.copy_(torch.as_tensor(state_std, dtype=torch.float32).clamp_min(1e-3))

    def encode_instructions(self, instructions: list[str]) -> Tensor:
        """list of B strings -> float32 (B, 384) on the policy's device (cached)."""
        return self.text_encoder.encode(instructions).to(self.device)

    def _prepare(self, obs: dict, instructions: list[str]) -> tuple[dict[str, Tensor], Tensor]:
        o = to_tensor_obs(obs, self.image_size, self.config.state_dim, self.config.use_wrist, self.device)
        instructions = check_instructions(instructions, o["image"].shape[0])
        return o, self.encode_instructions(instructions)

    # ----------------------------------------------------------------- contract
    @torch.no_grad()
    def act(self, obs: dict, instructions: list[str], deterministic: bool = False) -> PolicyOutput:
        """obs (B, ...) + B instructions -> chunk (B, K, A) in [-1, 1], log_prob (B,), entropy (B,), value (B,)|None."""
        o, text = self._prepare(obs, instructions)
        feat, value = self.net(o, text)
        actions, log_prob, entropy = self.head.sample(feat, deterministic)
        return PolicyOutput(actions, log_prob, entropy, value)

    def evaluate_actions(self, obs: dict, instructions: list[str], actions: Tensor) -> PolicyEval:
        """Differentiable log_prob (B,) and entropy (B,) of given chunks ``actions`` (B, K, A), value (B,)|None,
        with the per-dim terms ``log_prob_dims`` (B, K, A) and the head's active-dim mask (A,)."""
        o, text = self._prepare(obs, instructions)
        actions = self.check_chunk(actions, o["image"].shape[0])
        feat, value = self.net(o, text)
        lp_dims, entropy = self.head.evaluate_dims(feat, actions)
        return PolicyEval(lp_dims.flatten(1).sum(-1), entropy, value, lp_dims, self.head.dim_mask)

    def forward(self, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """SFT loss. batch: ``image`` uint8 (B,H,W,3), ``state`` (B,D), [``wrist_image``], ``text`` (B,384),
        ``actions`` (B,K,A), ``mask`` (B,K) bool (False past the episode end). Returns (loss, logs)."""
        feat, _ = self.net(batch, batch["text"])
        return self.head.bc_loss(feat, batch["actions"], batch["mask"])

    # ----------------------------------------------------------------- save/load extras
    def _save_extra(self, path: Path) -> None:
        if self.known_instructions:
            self.text_encoder.save_cache(path / INSTRUCTION_CACHE, self.known_instructions)

    def _load_extra(self, path: Path) -> None:
        if (path / INSTRUCTION_CACHE).exists():
            self.known_instructions = self.text_encoder.load_cache(path / INSTRUCTION_CACHE)
