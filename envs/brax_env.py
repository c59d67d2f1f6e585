"""Brax and MuJoCo Playground environments on JAX, with tensors crossing to torch through DLPack.

``jit(vmap(reset))`` and ``jit(vmap(step))`` run the whole batch; observations, rewards and done flags come
back as torch views of JAX's own buffers (``torch.from_dlpack``, no copy) and actions go in the same way
(jaxlib's own DLPack import: see :func:`_dlpack_importer`). Nothing syncs with the host per step: the
exchange orders the two libraries' GPU streams on the device.

On a GPU the jitted functions are compiled with every run of consecutive kernels as a CUDA graph (XLA's
command buffers, which by default only take runs of 5 or more: ``cuda_graphs=True``,
:data:`CUDA_GRAPH_OPTIONS`). A Brax step's while loops hold short runs, so with JAX's defaults XLA launches a
hopper step's ~750 kernels one at a time from the host: the host sets the pace (a step's dispatch returns when
the GPU is nearly done) and every microsecond of host work around a step, ours or the caller's, adds to it. As
graphs the step is queued in about half its time and host work overlaps it.

There is no auto-reset wrapper, so an ended episode is never reset into its start state during an evaluation;
the base class masks it (see :mod:`.base`). Observations returned by ``step`` are JAX's buffers: read them,
never write into them.

Names: Brax's own environments (``brax.envs``; pick its physics with ``pipeline="generalized" | "positional" |
"spring" | "mjx"``) and MuJoCo Playground's DM Control Suite tasks (``"CartpoleBalance"``, ``"CheetahRun"``,
..., run with MJX's JAX implementation), whose XMLs ship in the ``playground`` wheel.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.utils.dlpack

from ..backend.build import cache_dir
from ._deps import available, require
from .base import StepResult, VecEnv, canonical_device

BRAX_PIPELINES = ("generalized", "positional", "spring", "mjx")
# XLA's command buffers (CUDA graphs) for runs of consecutive kernels of any length, not only of 5 or more
CUDA_GRAPH_OPTIONS = {"xla_gpu_graph_min_graph_size": 1}


def _import_jax() -> Any:
    # JAX and torch share the GPU: JAX must not grab 75% of its memory when it starts
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = require("jax", "brax")
    if jax.config.jax_compilation_cache_dir is None:
        # compiled resets and steps persist across runs, beside gprl's kernels (a Brax step takes seconds to
        # compile, every run); a folder the user chose (JAX_COMPILATION_CACHE_DIR) is kept
        jax.config.update("jax_compilation_cache_dir", str(cache_dir() / "jax"))
    return jax


class ClipCompatNumpy:
    """``jax.numpy`` as one module sees it: every name is JAX's own, except a ``clip`` that also takes the
    ``a_min``/``a_max`` keywords (which JAX 0.10 no longer takes). Installed as one Brax module's ``jp``, so
    nothing else in JAX changes."""

    def __init__(self, jnp: Any) -> None:
        self._jnp = jnp

    def __getattr__(self, name: str) -> Any:
        return getattr(self._jnp, name)

    def clip(self, arr: Any = None, /, min: Any = None, max: Any = None, *, a_min: Any = None,
             a_max: Any = None) -> Any:
        if (min is not None and a_min is not None) or (max is not None and a_max is not None):
            raise TypeError("clip: pass min/max or a_min/a_max, not both")
        return self._jnp.clip(arr, a_min if min is None else min, a_max if max is None else max)


def _clip_takes_a_min(jnp: Any) -> bool:
    try:
        return "a_min" in inspect.signature(jnp.clip).parameters
    except (TypeError, ValueError):  # no signature to read: assume the old keywords still work
        return True


def patch_brax_for_jax() -> bool:
    """Lets Brax 0.14's fluid forces (the swimmer) run on a JAX without ``jnp.clip(a_min=...)``.

    ``brax.fluid`` calls ``jp.clip(x, a_min=1e-12)``, which JAX 0.10 rejects; its ``jp`` becomes a
    :class:`ClipCompatNumpy`. Only where the installed JAX rejects ``a_min`` and the module still uses plain
    ``jax.numpy``; idempotent. Returns whether the patch is in place."""
    jnp = _import_jax().numpy
    fluid = require("brax.fluid", "brax")
    if isinstance(getattr(fluid, "jp", None), ClipCompatNumpy):
        return True
    if getattr(fluid, "jp", None) is not jnp or _clip_takes_a_min(jnp):
        return False
    fluid.jp = ClipCompatNumpy(jnp)
    return True


def jax_has_gpu() -> bool:
    jax = _import_jax()
    try:
        return len(jax.devices("gpu")) > 0
    except RuntimeError:
        return False


def brax_names() -> list[str]:
    _import_jax()
    envs = require("brax.envs", "brax")
    return sorted(envs._envs)


def playground_names() -> list[str]:
    """MuJoCo Playground's DM Control Suite tasks (empty when ``playground`` is not installed)."""
    if not available("mujoco_playground"):
        return []
    _import_jax()
    from mujoco_playground import dm_control_suite

    return sorted(dm_control_suite.ALL_ENVS)


def known_names() -> list[str]:
    return brax_names() + playground_names()


def _strongly_typed(jax: Any, tree: Any) -> Any:
    """``tree`` with its weakly typed leaves made strongly typed (same dtype and values).

    Brax's step returns some leaves weakly typed (``done``, metrics) that its reset returns strongly typed, so
    the state after a step has other abstract types than the state after reset: every jitted step would be
    compiled twice, once for each (seconds to minutes per environment)."""
    return jax.tree.map(lambda x: jax.lax.convert_element_type(x, x.dtype) if x.weak_type else x, tree)


def _dlpack_importer(jax: Any, jax_device: Any, device: torch.device) -> Callable[[torch.Tensor], Any] | None:
    """jaxlib's own DLPack import, ``tensor -> jax.Array`` (a view), or None where it is not usable.

    ``jax.dlpack.from_dlpack`` wraps this call in Python (the ready-stream lookup, torch's ``__dlpack__``
    making an event and stream objects, ``jnp.asarray``): 118–128 µs of host time an import against 43 µs
    here on the H100 (``results/h100_brax_jaxlib_import/``), and a Brax step holds the host, so that time
    adds to every step. Here the ordering is the same (torch's pending
    work, then an event that one of JAX's external-ready streams waits on, then JAX's ready event there) with
    the stream and event objects made once. jaxlib takes only its own streams there: handing it torch's
    stream crashed jaxlib 0.11.2 on the H100. The call is private jaxlib API, so it is used only when it gives
    what the public import gives for a probe tensor (same values, memory, placement and type).
    """
    try:
        from jax._src.lib import _jax, jaxlib_extension_version

        if jaxlib_extension_version < 467:  # before the call took the DLPack device type
            return None
        convert = _jax.dlpack_managed_tensor_to_buffer
        if jax_device.platform == "gpu":
            ready = jax_device.get_stream_for_external_ready_events()
            ready_stream, written = torch.cuda.ExternalStream(ready, device=device), torch.cuda.Event()

            def importer(t: torch.Tensor) -> Any:
                written.record()  # on torch's current stream, after the work that wrote t
                ready_stream.wait_event(written)
                return convert(torch.utils.dlpack.to_dlpack(t), jax_device, ready, None, 2)  # 2: kDLCUDA

        else:

            def importer(t: torch.Tensor) -> Any:
                return convert(torch.utils.dlpack.to_dlpack(t), jax_device, None, None, 1)  # 1: kDLCPU

        probe = torch.arange(6, dtype=torch.float32, device=device)
        ours, public = importer(probe), jax.dlpack.from_dlpack(probe)
        same = (
            ours.unsafe_buffer_pointer() == public.unsafe_buffer_pointer() == probe.data_ptr()
            and (ours.aval, ours.sharding, ours.committed) == (public.aval, public.sharding, public.committed)
            and np.array_equal(np.asarray(ours), probe.cpu().numpy())
        )
    except (ImportError, AttributeError, TypeError, ValueError, RuntimeError):
        return None  # a jaxlib without it, or changed
    return importer if same else None


def _jax_device(jax: Any, device: torch.device) -> Any:
    if device.type == "cuda":
        gpus = jax.devices("gpu")
        return gpus[device.index or 0]
    if device.type == "cpu":
        return jax.devices("cpu")[0]
    raise ValueError(f"device must be 'cpu' or 'cuda[:i]' for the brax backend, got {device}")


# Brax tasks whose observation is Gymnasium v5's layout (positions but the first, then velocities)
_NAMED_LIKE_MUJOCO = ("hopper", "walker2d", "halfcheetah", "swimmer")


def _obs_names(name: str, env: Any, obs_dim: int) -> list[str] | None:
    """The native MuJoCo task's observation names, read off the model Brax simulates (its joint order), for
    the tasks laid out alike; None elsewhere (formulas then say obs0, obs1, ...)."""
    model = getattr(getattr(env, "sys", None), "mj_model", None)
    if name not in _NAMED_LIKE_MUJOCO or model is None:
        return None
    from .mujoco_tasks import TASKS

    names = TASKS[name]().obs_names(model)
    return names if len(names) == obs_dim else None


class BraxEnv(VecEnv):
    backend = "brax"

    def __init__(
        self,
        name: str,
        num_envs: int,
        device: torch.device | str | None = None,
        seed: int = 0,
        episode_length: int | None = None,
        pipeline: str | None = None,
        cuda_graphs: bool = True,
        **env_kwargs: Any,
    ) -> None:
        self._jax = jax = _import_jax()
        brax_envs = require("brax.envs", "brax")
        if not isinstance(cuda_graphs, bool):
            raise TypeError(f"cuda_graphs must be True or False, got {cuda_graphs!r}")
        if device is None:
            device = "cuda" if jax_has_gpu() and torch.cuda.is_available() else "cpu"
        device = canonical_device(device)
        self.jax_device = _jax_device(jax, device)
        self._import = _dlpack_importer(jax, self.jax_device, device)
        # compile options of every jitted function here (None: JAX's defaults, and XLA_FLAGS)
        self.compiler_options = (CUDA_GRAPH_OPTIONS if cuda_graphs and self.jax_device.platform == "gpu"
                                 else None)

        if name in brax_envs._envs:
            pipeline = pipeline or "generalized"
            if pipeline not in BRAX_PIPELINES:
                raise ValueError(f"pipeline must be one of {BRAX_PIPELINES}, got {pipeline!r}")
            patch_brax_for_jax()
            self.env = brax_envs.get_environment(name, backend=pipeline, **env_kwargs)
            limit = 1000
            ctrl = getattr(getattr(self.env.sys, "actuator", None), "ctrl_range", None)
        elif name in playground_names():
            if pipeline is not None:
                raise ValueError("pipeline= applies to Brax environments; Playground tasks run on MJX (JAX)")
            from mujoco_playground import registry

            # the JAX implementation of MJX (Playground defaults to Warp, which needs its own toolchain)
            self.env = registry.load(name, config_overrides={"impl": "jax", **env_kwargs})
            limit = int(registry.get_default_config(name).episode_length)
            ctrl = self.env.mj_model.actuator_ctrlrange
        else:
            raise ValueError(f"unknown Brax/Playground environment {name!r}; choose one of {known_names()}")
        self.pipeline = pipeline
        act_dim = int(self.env.action_size)
        low, high = torch.full((act_dim,), -1.0), torch.full((act_dim,), 1.0)
        if ctrl is not None and len(ctrl) == act_dim:
            # a copy: JAX/MuJoCo arrays are read-only
            ctrl_t = torch.from_numpy(np.array(ctrl, dtype=np.float32))
            low, high = ctrl_t[:, 0], ctrl_t[:, 1]
        # the shape of a reset's observation, traced only (Brax's observation_size runs a reset op by op)
        obs = jax.eval_shape(self.env.reset, jax.ShapeDtypeStruct((2,), jax.numpy.uint32)).obs
        if not hasattr(obs, "shape"):
            raise TypeError(f"{name}: dict observations ({obs}) are not supported")
        obs_size = int(obs.shape[-1])

        with jax.default_device(self.jax_device):
            reset, step = jax.vmap(self.env.reset), jax.vmap(self.env.step)
            self._reset_fn = self._jit(lambda keys: _strongly_typed(jax, reset(keys)))
            # the simulator alone (base-class path, benchmarks), and unjitted for other compile options
            self._sim_step = lambda state, action: _strongly_typed(jax, step(state, action))
            self._step_fn = self._jit(self._sim_step)
            self._keys_fn = self._jit(jax.vmap(jax.random.PRNGKey))
            self._split_fn = self._jit(jax.vmap(jax.random.split))
        self._keys: Any = None
        self._state: Any = None
        super().__init__(
            name=name,
            num_envs=num_envs,
            obs_dim=obs_size,
            obs_names=_obs_names(name, self.env, obs_size),
            act_dim=act_dim,
            device=device,
            episode_length=episode_length or limit,
            seed=seed,
            action_low=low,
            action_high=high,
        )
        self._fused_fn = self._make_fused_step(low.numpy(), high.numpy())
        # the time-limit flag, on the device once (no per-step copy)
        with jax.default_device(self.jax_device):
            self._at_limit = {b: jax.device_put(np.bool_(b), self.jax_device) for b in (False, True)}
        # (terminated, truncated) as JAX arrays and the torch views of them made from them at the last step
        self._flags_jax: tuple[Any, Any, torch.Tensor, torch.Tensor] | None = None

    def _jit(self, fn: Any) -> Any:
        return self._jax.jit(fn, compiler_options=self.compiler_options)

    def _make_fused_step(self, low: np.ndarray, high: np.ndarray) -> Any:
        """``jit`` of action clipping + ``vmap(env.step)`` + the base class's masking, in one XLA program.

        The same rules as :meth:`VecEnv.step` (NaN → 0, ±inf → the bounds, reward 0 and flags kept after the
        end, the time limit for episodes not terminated), so that a step is one dispatch and no torch ops.
        """
        jax = self._jax
        jnp = jax.numpy
        step = jax.vmap(self.env.step)
        lo, hi = jnp.asarray(low, jnp.float32), jnp.asarray(high, jnp.float32)

        def fused(state: Any, term: Any, trunc: Any, at_limit: Any, action: Any) -> tuple[Any, ...]:
            action = jnp.clip(jnp.nan_to_num(action.astype(jnp.float32), nan=0.0), lo, hi)
            state = _strongly_typed(jax, step(state, action))
            was_done = term | trunc
            reward = jnp.where(was_done, jnp.float32(0), state.reward.astype(jnp.float32))
            # Brax's done is 1 - healthy (or NaN detection in Playground): the task's termination
            term = term | ((state.done > 0.5) & ~was_done)
            trunc = trunc | (at_limit & ~term)
            # reward's bytes and both flags in one uint8 buffer: one DLPack export instead of three (each
            # costs host time, and a Brax step holds the host, so the adapter's host time adds to every step)
            packed = jnp.concatenate([jax.lax.bitcast_convert_type(reward, jnp.uint8).reshape(-1),
                                      term.astype(jnp.uint8), trunc.astype(jnp.uint8)])
            return state, term, trunc, packed  # obs: state.obs itself (a second output would be a copy)

        with jax.default_device(self.jax_device):
            return self._jit(fused)

    def _begin_episodes(self) -> None:
        super()._begin_episodes()
        self._flags_jax = None  # made from the torch flags at the next fused step

    def step(self, action: torch.Tensor) -> StepResult:
        """:meth:`VecEnv.step` fused into one jitted call:
        validation on the host, everything else on the device.

        Per step: one DLPack import (the action), one dispatch, two DLPack exports (the observation, and the
        reward and flags packed in one buffer that torch views as float32 and bool); no torch kernels and no
        host sync.
        """
        self._check_reset_called()
        self._check_action_tensor(action)
        self._check_continuous_action(action)
        if action.dtype != torch.float32:
            action = action.to(torch.float32)
        flags = self._flags_jax
        if flags is None or flags[2] is not self._terminated or flags[3] is not self._truncated:
            # first step of the episodes, or the flags were set by another path: start from the torch flags
            term_j, trunc_j = self.to_jax(self._terminated), self.to_jax(self._truncated)
        else:
            term_j, trunc_j = flags[0], flags[1]
        at_limit = self._at_limit[self._t + 1 >= self.episode_length]
        self._state, term_j, trunc_j, packed = self._fused_fn(
            self._state, term_j, trunc_j, at_limit, self.to_jax(action)
        )
        self._t += 1
        stream = self._torch_stream()
        n = self.num_envs
        buf = self.to_torch(packed, stream)  # uint8 [6 N]: reward bytes, terminated, truncated
        reward = buf[: 4 * n].view(torch.float32)
        self._terminated, self._truncated = buf[4 * n : 5 * n].view(torch.bool), buf[5 * n :].view(torch.bool)
        self._flags_jax = (term_j, trunc_j, self._terminated, self._truncated)
        return self.to_torch(self._state.obs, stream), reward, self._terminated, self._truncated

    # --- DLPack in both directions, no copies
    def _torch_stream(self) -> int | None:
        """The DLPack stream argument for exports to torch: torch's current stream on a GPU (its legacy
        default stream passed as 1, as torch.from_dlpack does: 0 is not valid DLPack), None on the CPU."""
        return (torch.cuda.current_stream().cuda_stream or 1) if self.jax_device.platform == "gpu" else None

    @staticmethod
    def to_torch(x: Any, stream: int | None) -> torch.Tensor:
        """A torch view of JAX array ``x``; ``stream`` from :meth:`_torch_stream` (looked up once per step).

        The legacy (unversioned) capsule: JAX marks its versioned capsules read-only, which torch refuses.
        The view is only ever read. Passing torch's stream makes it wait for JAX's pending work.
        """
        return torch.utils.dlpack.from_dlpack(x.__dlpack__(stream=stream))

    def to_jax(self, t: torch.Tensor) -> Any:
        """A JAX view of torch tensor ``t`` (made contiguous first),
        ready after torch's pending work on it."""
        t = t.contiguous()
        return self._jax.dlpack.from_dlpack(t) if self._import is None else self._import(t)

    def _outputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s, stream = self._state, self._torch_stream()
        return self.to_torch(s.obs, stream), self.to_torch(s.reward, stream), self.to_torch(s.done, stream)

    def _reset(self, seed: int | None) -> torch.Tensor:
        jax = self._jax
        with jax.default_device(self.jax_device):
            if seed is not None or self._keys is None:
                # environment i from its own key PRNGKey(seed + i) (the protocol's seed + i rule): a batch of
                # environments [a, b) of a larger batch, reset with seed + a, starts exactly as they would
                # there
                base = self.seed if seed is None else seed
                seeds = (np.arange(self.num_envs, dtype=np.int64) + base) % 2**32
                # committed to the device, as the step's outputs are (they come from committed DLPack
                # imports): a state of other placement would compile every jitted step a second time
                self._keys = self._keys_fn(jax.device_put(seeds.astype(np.uint32), self.jax_device))
            keys = self._split_fn(self._keys)  # [N, 2, key]: the next stream and this reset's key
            self._keys = keys[:, 0]
            self._state = self._reset_fn(keys[:, 1])
        return self._outputs()[0]

    def _step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        self._state = self._step_fn(self._state, self.to_jax(action))
        obs, reward, done = self._outputs()
        # Brax's done is 1 - healthy (or NaN detection in Playground): the task's termination
        return obs, reward.to(torch.float32), done > 0.5, None
