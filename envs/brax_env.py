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

Ended episodes stop costing simulation (``compact=True``): a vmapped step costs the same for a fallen walker
as for a live one, so every :data:`COMPACT_EVERY` steps, once the live episodes fit a smaller batch of
:data:`COMPACT_FRACTIONS` of ``num_envs``, they go on alone in that batch (one compilation per size) and the
ended ones keep their last observation. The step's inputs and outputs stay ``[num_envs, ...]``.

Names: Brax's own environments (``brax.envs``; pick its physics with ``pipeline="generalized" | "positional" |
"spring" | "mjx"``) and MuJoCo Playground's DM Control Suite tasks (``"CartpoleBalance"``, ``"CheetahRun"``,
..., run with MJX's JAX implementation), whose XMLs ship in the ``playground`` wheel.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import os
import threading
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
# compaction (module docstring): how often the live episodes are counted (a host sync; the rollout's own
# check of its done flags comes at the same steps) and the batch sizes they may move to, as shares of num_envs
COMPACT_EVERY = 32
COMPACT_FRACTIONS = (3 / 4, 1 / 2, 1 / 4, 1 / 8)
# the smallest batch worth a compilation of its own, by platform: on a GPU a step of 1,024 environments costs
# little more than one of 32 (the kernels' launches dominate)
COMPACT_MIN_ENVS = {"gpu": 1024, "cpu": 32}


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


def register_object(env: Any) -> str:
    """A name for a Brax environment object, in this process's Brax registry (``gprl_<Class>_<n>``)."""
    brax_envs = require("brax.envs", "brax")
    for name, factory in brax_envs._envs.items():
        if getattr(factory, "gprl_object", None) is env:
            return name
    name = f"gprl_{type(env).__name__}_{sum(n.startswith('gprl_') for n in brax_envs._envs)}"

    def factory(**kwargs: Any) -> Any:  # the object as it is (Brax passes its pipeline as backend=)
        return env

    factory.gprl_object = env
    brax_envs.register_environment(name, factory)
    return name


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
    here, measured on an H100, and a Brax step holds the host, so that time
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


def action_names(model: Any, act_dim: int) -> list[str] | None:
    """Each actuator's name, or the name of the joint it drives."""
    if model is None or model.nu != act_dim:
        return None
    names = []
    for i in range(model.nu):
        name = model.actuator(i).name
        if not name and model.actuator_trntype[i] == 0:  # mjTRN_JOINT
            name = model.joint(int(model.actuator_trnid[i, 0])).name
        names.append(name or f"a{i}")
    return names


def model_quantities(model: Any, sim: Any) -> tuple[np.ndarray, list[str]]:
    """Columns ``[B, K]`` of what a batch of simulator states ``sim`` holds, with their names: joint
    positions, their cosine and sine, joint velocities, body positions and orientations, sensor readings
    (those the state carries: Brax's pipelines keep ``q``/``qd`` and link transforms, MJX ``qpos``/``qvel``,
    ``xpos``, ``xmat`` and ``sensordata``)."""
    from .mujoco_tasks import qpos_names, qvel_names

    cols: list[np.ndarray] = []
    names: list[str] = []

    def add(values: Any, labels: list[str]) -> None:
        values = np.asarray(values, dtype=np.float64)
        values = values.reshape(values.shape[0], -1)
        if values.shape[1] == len(labels):
            cols.append(values)
            names.extend(labels)

    q, qd = getattr(sim, "qpos", getattr(sim, "q", None)), getattr(sim, "qvel", getattr(sim, "qd", None))
    qn = qpos_names(model)
    if q is not None:
        add(q, qn)
        add(np.cos(np.asarray(q)), [f"cos_{n}" for n in qn])
        add(np.sin(np.asarray(q)), [f"sin_{n}" for n in qn])
    if qd is not None:
        add(qd, qvel_names(model))
    bodies = [model.body(i).name or f"body{i}" for i in range(model.nbody)]
    xpos = getattr(sim, "xpos", None)
    if xpos is None and hasattr(getattr(sim, "x", None), "pos"):  # Brax: links, the world body left out
        xpos, bodies = sim.x.pos, bodies[1:]
    if xpos is not None:
        add(xpos, [f"{b}_{c}" for b in bodies for c in "xyz"])
    if getattr(sim, "xmat", None) is not None:
        add(sim.xmat, [f"{b}_xmat_{r}{c}" for b in bodies for r in "xyz" for c in "xyz"])
    if getattr(sim, "sensordata", None) is not None:
        add(sim.sensordata, [name for i in range(model.nsensor) for name in (
            [model.sensor(i).name or f"sensor{i}"] if model.sensor_dim[i] == 1 else
            [f"{model.sensor(i).name or f'sensor{i}'}_{k}" for k in range(model.sensor_dim[i])])])
    return (np.concatenate(cols, axis=1) if cols else np.zeros((0, 0))), names


def match_columns(obs: np.ndarray, bank: np.ndarray, names: list[str]) -> list[str | None]:
    """For each column of ``obs`` ``[S, n]``, the first name of a column of ``bank`` ``[S, K]`` equal to it on
    every sample (float32 rounding aside), or None; columns that never vary are not matched."""
    scale = 1e-5 * (1.0 + np.abs(bank).max(axis=0))
    varies = np.ptp(bank, axis=0) > 1e-6
    out: list[str | None] = []
    for i in range(obs.shape[1]):
        col = obs[:, i : i + 1]
        same = (np.abs(bank - col).max(axis=0) <= scale) & varies
        out.append(names[int(np.argmax(same))] if np.ptp(col) > 1e-6 and same.any() else None)
    return out


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
        compact: bool = True,
        **env_kwargs: Any,
    ) -> None:
        self._jax = jax = _import_jax()
        brax_envs = require("brax.envs", "brax")
        for arg, value in (("cuda_graphs", cuda_graphs), ("compact", compact)):
            if not isinstance(value, bool):
                raise TypeError(f"{arg} must be True or False, got {value!r}")
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
        # the MuJoCo model the task simulates (Brax: its system's; Playground: its own)
        self.mj_model = getattr(getattr(self.env, "sys", None), "mj_model", None) \
            or getattr(self.env, "mj_model", None)
        self._named: list[str] | None = None
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
            action_names=action_names(self.mj_model, act_dim),
            act_dim=act_dim,
            device=device,
            episode_length=episode_length or limit,
            seed=seed,
            action_low=low,
            action_high=high,
        )
        self._fused_fn, self._fused_rows_fn = self._make_fused_steps(low.numpy(), high.numpy())
        # compaction: the smaller batch sizes, largest first (empty: off), the environment each row of a
        # compacted state simulates (None: all of them, in order), and every environment's last observation
        smallest = COMPACT_MIN_ENVS.get(self.jax_device.platform, COMPACT_MIN_ENVS["cpu"])
        sizes = {int(num_envs * f) for f in COMPACT_FRACTIONS if num_envs * f >= smallest}
        self.compact_sizes = sorted(sizes, reverse=True) if compact else []
        self._rows: Any = None
        self._obs_all: Any = None
        # on a GPU the compacted steps compile in a thread once the first episodes end (the host mostly waits
        # for the GPU there); elsewhere each compiles when first needed
        self._compile_ahead = self.jax_device.platform == "gpu"
        self._compiled_rows: dict[int, concurrent.futures.Future] = {}
        with jax.default_device(self.jax_device):
            self._compact_fn = jax.jit(self._compact, static_argnames="size")
            # the time-limit flag, on the device once (no per-step copy)
            self._at_limit = {b: jax.device_put(np.bool_(b), self.jax_device) for b in (False, True)}
        # (terminated, truncated) as JAX arrays and the torch views of them made from them at the last step
        self._flags_jax: tuple[Any, Any, torch.Tensor, torch.Tensor] | None = None

    def _jit(self, fn: Any) -> Any:
        return self._jax.jit(fn, compiler_options=self.compiler_options)

    def observation_names(self, steps: int = 12, seed: int = 0) -> list[str] | None:
        """``obs_names``, else names read off the simulated model: over a short rollout of random actions
        from fresh starts (this resets the batch), each observation entry matched to a joint position, its
        cosine or sine, a joint velocity, a body position or orientation entry or a sensor reading
        (:func:`model_quantities`); an entry that matches none is ``obs<i>``. None where none matches."""
        if self.obs_names is not None or self.mj_model is None:
            return self.obs_names
        if self._named is None:
            generator = torch.Generator().manual_seed(seed)
            low, high = self.action_low.cpu(), self.action_high.cpu()
            self.reset(seed)
            obs_rows, bank_rows, names = [], [], []
            for _ in range(min(steps, COMPACT_EVERY - 1)):  # the batch stays whole: rows are environments
                action = low + (high - low) * torch.rand(self.num_envs, self.act_dim, generator=generator)
                obs, _, terminated, truncated = self.step(action.to(self.device))
                live = (~(terminated | truncated)).cpu().numpy()
                sim = getattr(self._state, "pipeline_state", None) or getattr(self._state, "data", None)
                bank, names = model_quantities(self.mj_model, sim)
                obs_rows.append(obs.cpu().numpy()[live][:64])
                bank_rows.append(bank[live][:64])
            matched = match_columns(np.concatenate(obs_rows).astype(np.float64), np.concatenate(bank_rows),
                                    names) if names else []
            self._named = [m or f"obs{i}" for i, m in enumerate(matched)] if any(matched) else []
        return self._named or None

    def _make_fused_steps(self, low: np.ndarray, high: np.ndarray) -> tuple[Any, Any]:
        """``jit`` of action clipping + ``vmap(env.step)`` + the base class's masking, in one XLA program: for
        the whole batch, and for a compacted one (its ``rows`` of the batch; ``num_envs`` marks padding).

        The same rules as :meth:`VecEnv.step` (NaN → 0, ±inf → the bounds, reward 0 and flags kept after the
        end, the time limit for episodes not terminated), so that a step is one dispatch and no torch ops.
        """
        jax = self._jax
        jnp = jax.numpy
        step = jax.vmap(self.env.step)
        lo, hi = jnp.asarray(low, jnp.float32), jnp.asarray(high, jnp.float32)

        def simulate(state: Any, was_done: Any, term: Any, action: Any) -> tuple[Any, Any, Any]:
            action = jnp.clip(jnp.nan_to_num(action.astype(jnp.float32), nan=0.0), lo, hi)
            state = _strongly_typed(jax, step(state, action))
            reward = jnp.where(was_done, jnp.float32(0), state.reward.astype(jnp.float32))
            # Brax's done is 1 - healthy (or NaN detection in Playground): the task's termination
            return state, reward, term | ((state.done > 0.5) & ~was_done)

        def pack(reward: Any, term: Any, trunc: Any) -> Any:
            # reward's bytes and both flags in one uint8 buffer: one DLPack export instead of three (each
            # costs host time, and a Brax step holds the host, so the adapter's host time adds to every step)
            return jnp.concatenate([jax.lax.bitcast_convert_type(reward, jnp.uint8).reshape(-1),
                                    term.astype(jnp.uint8), trunc.astype(jnp.uint8)])

        def fused(state: Any, term: Any, trunc: Any, at_limit: Any, action: Any) -> tuple[Any, ...]:
            state, reward, term = simulate(state, term | trunc, term, action)
            trunc = trunc | (at_limit & ~term)
            return state, term, trunc, pack(reward, term, trunc)  # obs: state.obs itself (no copy)

        def fused_rows(state: Any, rows: Any, obs_all: Any, term: Any, trunc: Any, at_limit: Any,
                       action: Any) -> tuple[Any, ...]:
            # padding rows (index num_envs) simulate a copy of some state; what they give is dropped
            ended = jnp.take(term | trunc, rows, mode="fill", fill_value=True)
            state, reward, term_rows = simulate(state, ended,
                                                jnp.take(term, rows, mode="fill", fill_value=True),
                                                jnp.take(action, rows, axis=0, mode="clip"))
            term = term.at[rows].set(term_rows, mode="drop")
            trunc = trunc | (at_limit & ~term)
            reward = jnp.zeros(term.shape, jnp.float32).at[rows].set(reward, mode="drop")
            obs_all = obs_all.at[rows].set(state.obs, mode="drop")
            return state, obs_all, term, trunc, pack(reward, term, trunc)

        with jax.default_device(self.jax_device):
            return self._jit(fused), self._jit(fused_rows)

    def _compact(self, state: Any, rows: Any, term: Any, trunc: Any, size: int) -> tuple[Any, Any]:
        """The live rows of ``state`` as a state of ``size`` rows (in their order; padded with copies of the
        last row, marked ``num_envs`` in the rows returned)."""
        jnp = self._jax.numpy
        live = ~jnp.take(term | trunc, rows, mode="fill", fill_value=True)
        (keep,) = jnp.nonzero(live, size=size, fill_value=rows.shape[0])
        state = self._jax.tree.map(lambda x: jnp.take(x, keep, axis=0, mode="clip"), state)
        return state, jnp.take(rows, keep, mode="fill", fill_value=term.shape[0])

    def _compile_rows_steps(self) -> None:
        """Compiles the compacted step for every size of :attr:`compact_sizes`, largest first, one after the
        other in a daemon thread (one XLA compilation at a time leaves the host's other cores to the run)."""
        jax, state, n = self._jax, self._state, self.num_envs
        on = jax.sharding.SingleDeviceSharding(self.jax_device)

        def spec(shape: tuple[int, ...], dtype: Any, weak: bool = False) -> Any:
            return jax.ShapeDtypeStruct(shape, dtype, sharding=on, weak_type=weak)

        flags, limit = spec((n,), np.bool_), spec((), np.bool_)
        obs, action = spec((n, self.obs_dim), state.obs.dtype), spec((n, self.act_dim), np.float32)
        futures = {m: concurrent.futures.Future() for m in self.compact_sizes}

        def compile_all() -> None:
            for m, future in futures.items():
                try:
                    rows_state = jax.tree.map(lambda x, m=m: spec((m, *x.shape[1:]), x.dtype, x.weak_type),
                                              state)
                    future.set_result(self._fused_rows_fn.lower(rows_state, spec((m,), np.int32), obs, flags,
                                                                flags, limit, action).compile())
                except Exception as err:  # noqa: BLE001  (raised by the step that needs this size)
                    future.set_exception(err)

        self._compiled_rows = futures
        threading.Thread(target=compile_all, name="gprl-brax-compile", daemon=True).start()

    def _maybe_compact(self, term: Any, trunc: Any) -> None:
        """Moves the live episodes to the smallest batch size of :attr:`compact_sizes` that holds them."""
        size = self.batch_size
        smaller = [m for m in self.compact_sizes if m < size]
        if not smaller:
            return
        live = int((~self.done).sum())  # the one host sync, every COMPACT_EVERY steps
        if live == 0:
            return  # nothing left to simulate: the rollout ends here
        if self._compile_ahead and not self._compiled_rows and live < size:
            self._compile_rows_steps()
        # a size still compiling ahead is not waited for: the batch goes on as it is meanwhile
        ahead = self._compiled_rows
        fits = [m for m in smaller if m >= live and (m not in ahead or ahead[m].done())]
        if not fits:
            return
        jax = self._jax
        with jax.default_device(self.jax_device):
            if self._rows is None:
                self._obs_all = self._state.obs
                self._rows = jax.device_put(np.arange(self.num_envs, dtype=np.int32), self.jax_device)
            self._state, self._rows = self._compact_fn(self._state, self._rows, term, trunc, size=fits[-1])

    def _begin_episodes(self) -> None:
        super()._begin_episodes()
        self._flags_jax = None  # made from the torch flags at the next fused step

    @property
    def batch_size(self) -> int:
        """Environments the simulator steps now: ``num_envs``, or fewer once ended episodes were dropped."""
        return self.num_envs if self._rows is None else int(self._rows.shape[0])

    def step(self, action: torch.Tensor) -> StepResult:
        """:meth:`VecEnv.step` fused into one jitted call:
        validation on the host, everything else on the device.

        Per step: one DLPack import (the action), one dispatch, two DLPack exports (the observation, and the
        reward and flags packed in one buffer that torch views as float32 and bool); no torch kernels, and
        no host sync but the count of live episodes every :data:`COMPACT_EVERY` steps where compaction is on.
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
        if self._rows is None:
            self._state, term_j, trunc_j, packed = self._fused_fn(
                self._state, term_j, trunc_j, at_limit, self.to_jax(action)
            )
            obs = self._state.obs
        else:
            ahead = self._compiled_rows.get(self.batch_size)
            self._state, self._obs_all, term_j, trunc_j, packed = (
                self._fused_rows_fn if ahead is None else ahead.result())(
                self._state, self._rows, self._obs_all, term_j, trunc_j, at_limit, self.to_jax(action)
            )
            obs = self._obs_all
        self._t += 1
        stream = self._torch_stream()
        n = self.num_envs
        buf = self.to_torch(packed, stream)  # uint8 [6 N]: reward bytes, terminated, truncated
        reward = buf[: 4 * n].view(torch.float32)
        self._terminated, self._truncated = buf[4 * n : 5 * n].view(torch.bool), buf[5 * n :].view(torch.bool)
        self._flags_jax = (term_j, trunc_j, self._terminated, self._truncated)
        obs = self.to_torch(obs, stream)
        if self.compact_sizes and self._t % COMPACT_EVERY == 0:
            self._maybe_compact(term_j, trunc_j)
        return obs, reward, self._terminated, self._truncated

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

    def _reset(self, seed: int | None, starts: int | None = None) -> torch.Tensor:
        jax = self._jax
        with jax.default_device(self.jax_device):
            if seed is not None or self._keys is None:
                # environment i from its own key PRNGKey(seed + i) (the protocol's seed + i rule; with
                # starts=k, seed + i % k): a batch of environments [a, b) of a larger batch, reset with
                # seed + a, starts exactly as they would there
                seeds = np.array(self.env_seeds(self.seed if seed is None else seed, starts), np.int64)
                seeds %= 2**32
                # committed to the device, as the step's outputs are (they come from committed DLPack
                # imports): a state of other placement would compile every jitted step a second time
                self._keys = self._keys_fn(jax.device_put(seeds.astype(np.uint32), self.jax_device))
            keys = self._split_fn(self._keys)  # [N, 2, key]: the next stream and this reset's key
            self._keys = keys[:, 0]
            self._state = self._reset_fn(keys[:, 1])
            self._rows = self._obs_all = None  # every environment simulated again
        return self._outputs()[0]

    def _step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        if self._rows is not None:
            raise RuntimeError("the simulator-only step (VecEnv.step) cannot go on from a compacted batch; "
                               "call reset() first, or make the environment with compact=False")
        self._state = self._step_fn(self._state, self.to_jax(action))
        obs, reward, done = self._outputs()
        # Brax's done is 1 - healthy (or NaN detection in Playground): the task's termination
        return obs, reward.to(torch.float32), done > 0.5, None
