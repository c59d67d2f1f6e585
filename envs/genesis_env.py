"""Genesis scenes built once for the whole batch (``scene.build(n_envs=N)``), torch tensors on the device.

Tasks:

* ``go2_walk``: the Unitree Go2 quadruped tracking a velocity command, as in Genesis' locomotion example
  (``examples/locomotion/go2_env.py``): PD position targets around the default pose, one step of action
  latency, the same 45-dimensional observation, reward terms (linear/angular velocity tracking, vertical
  velocity, base height, action rate, distance to the default pose; scaled by dt) and roll/pitch termination.
* ``cartpole_balance``: the classic cart-pole (force on the cart, +1 per step upright; terminated when the
  pole leaves ±0.2 rad or the cart ±2.4 m), modelled in MJCF here.

Genesis is initialised once per process, on its CPU backend for a CPU device and on CUDA otherwise. With
Genesis' zero-copy mode (its default when the torch device matches its backend) the joint positions and
velocities the observation is made from are views of Genesis' own state buffers
(:meth:`GenesisEnv.dof_state`), read without a copy, and so are the Go2's base pose and velocities; actions go
to Genesis as torch tensors on its device. Nothing crosses between host and device inside a step.

A step is three phases around Genesis' own work, each over tensors at fixed addresses:

1. ``before_physics`` (only where this step's action enters this step's physics): the action's NaN mapping and
   clip, the controls Genesis gets (PD targets, forces);
2. Genesis: the controls and ``scene.step()``;
3. ``after_physics``: the task's observation, reward and termination, its own buffers (last action, the next
   PD targets under action latency), and the episode rules of :mod:`gprl.envs.base` with a step counter on the
   device, written into one packed output buffer.

On a GPU a Genesis step is paced by the host (Python launching Genesis' kernels one by one, with synchronous
copies of its own), so every torch op of ours adds its launch time to the step. Phases 1 and 3 are therefore
captured as CUDA graphs at the first reset and replayed (``cuda_graphs=True``, the default): a step of ours
adds the action's copy into the graphs' input, one or two replays and one copy of the packed outputs (so the
caller's tensors are never rewritten by a later step). The GPU runs a graph's kernels one after another, a few
microseconds each however small, and the after-physics phase is some 100 ops: the graphs therefore record the
phases compiled by ``torch.compile`` into a few fused kernels (``fuse=True``, the default; they agree with the
ops one by one to float32 rounding). On the CPU, or with ``cuda_graphs=False``, the same functions run op by
op.
"""

import math
import os
import tempfile
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from ._deps import require
from .base import StepResult, VecEnv, episode_rules


def _genesis(device: torch.device | str | None) -> Any:
    gs = require("genesis", "genesis")
    want_cpu = device is not None and torch.device(device).type == "cpu"
    if not gs._initialized:
        use_cpu = want_cpu or not torch.cuda.is_available()
        gs.init(backend=gs.cpu if use_cpu else gs.gpu, logging_level="warning", seed=0)
    elif device is not None and torch.device(device).type != gs.device.type:
        raise ValueError(
            f"Genesis is already initialised on {gs.device} in this process; it cannot also run on {device}"
        )
    return gs


def _state_view(gs: Any, field: Any) -> torch.Tensor | None:
    """A zero-copy [n_envs, n, ...] view of a Genesis state field, or None without zero-copy mode."""
    if not gs.use_zerocopy:
        return None
    from genesis.utils.misc import qd_to_torch

    return qd_to_torch(field, transpose=True, copy=False)


class _Graphed:
    """``fn()`` then ``then()``, which read tensors at fixed addresses and update some of them in place, run
    op by op or replayed as a CUDA graph once :meth:`capture` has recorded them. With ``fuse`` the graph
    records ``fn`` compiled by ``torch.compile``: a few fused kernels instead of one per op (a GPU runs a
    graph's tiny kernels one after another, some microseconds each, and a Genesis step waits for them).
    ``then`` is never compiled (Inductor cannot write through views of another dtype, as packing outputs into
    bytes does)."""

    def __init__(self, fn: Callable[[], object], fuse: bool,
                 then: Callable[[], object] | None = None) -> None:
        self.fn, self.fuse, self.then = fn, fuse, then
        self.graph: torch.cuda.CUDAGraph | None = None
        self._compiled: Callable[[], object] | None = None

    def compiled(self) -> Callable[[], object]:
        """``fn`` as the graph records it: compiled when ``fuse`` (once; ``fn`` itself, with a warning, where
        compiling fails), else ``fn``. The first call compiles and runs it."""
        if self._compiled is None:
            compiled = self.fn
            if self.fuse:
                compiled = torch.compile(self.fn, dynamic=False)
                try:
                    compiled()
                except Exception as e:  # noqa: BLE001 (no Triton or C compiler, say): the graph replays the ops
                    warnings.warn(f"gprl.envs: torch.compile failed on the Genesis step "
                                  f"({type(e).__name__}: {e}); its CUDA graph replays the ops one by one",
                                  stacklevel=3)  # fmt: skip
                    compiled = self.fn
            self._compiled = compiled
        return self._compiled

    def capture(self) -> None:
        """Record the graph (once). The functions run first, uncaptured (compilation, lazy initialisation of
        kernels and allocator): the caller must re-initialise whatever they write, as a reset does."""
        if self.graph is not None:
            return
        self._run(self.compiled())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # recording runs nothing: no state changes
            self._run(self.compiled())
        self.graph = graph

    def __call__(self, replay: bool) -> None:
        if replay and self.graph is not None:
            self.graph.replay()
        else:
            self._run(self.fn)

    def _run(self, fn: Callable[[], object]) -> None:
        fn()
        if self.then is not None:
            self.then()


class GenesisTask:
    """A task on one Genesis scene for the whole batch.

    ``build`` makes the scene and every buffer the step's phases read or write (at fixed addresses, so that
    CUDA graphs can replay them), ``action`` [N, act_dim] float32 among them: the step's action as given;
    ``reset`` re-initialises all of those buffers. ``before_physics`` (run only where
    ``acts_before_physics``), ``physics`` and ``after_physics`` are the phases of a step (module docstring).
    """

    name: ClassVar[str]
    defaults: ClassVar[dict[str, Any]]
    obs_dim: ClassVar[int]
    act_dim: ClassVar[int]
    episode_length: ClassVar[int]
    action_bound: float  # actions are clipped to [-action_bound, action_bound]
    acts_before_physics = True  # this step's action enters this step's physics (no action latency)

    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(self.defaults)
        if unknown:
            raise TypeError(
                f"unknown keyword argument(s) {sorted(unknown)} for {self.name!r}; "
                f"it takes {sorted(self.defaults)}"
            )
        self.cfg = {**self.defaults, **kwargs}

    def build(self, gs: Any, n: int) -> Any: ...

    def reset(self, gen: torch.Generator) -> torch.Tensor: ...

    def before_physics(self) -> None:
        """From ``action`` to the controls Genesis gets this step (in place)."""

    def physics(self) -> None:
        """Genesis' own work: hand over the controls, ``scene.step()``."""

    def after_physics(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Observation [N, obs_dim], reward [N] float32 and termination [N] bool;
        updates the task's buffers."""
        raise NotImplementedError

    def clipped_action(self) -> torch.Tensor:
        """``action`` as :meth:`VecEnv.prepare_action` maps it: NaN → 0, clipped to ±``action_bound``."""
        return torch.clamp(torch.nan_to_num(self.action, nan=0.0), -self.action_bound, self.action_bound)

    def reads_state_in_place(self) -> bool:
        """Whether every read of Genesis' state is through views of its buffers (what a CUDA graph can replay;
        Genesis' getters launch its own kernels)."""
        return self.pos_view is not None

    def _bind_dof_views(self, gs: Any) -> None:
        """After ``scene.build``: views of Genesis' joint position/velocity buffers
        (None without zero-copy)."""
        state = self.robot.solver.dyn_state.dofs
        self.pos_view, self.vel_view = _state_view(gs, state.pos), _state_view(gs, state.vel)
        # indexing with a Python list would copy the list to the device at every read
        self.dof_index = torch.tensor(self.dofs, device=gs.device)

    def dof_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions and velocities [N, len(self.dofs)] of the task's joints
        (Genesis' buffers with zero-copy on)."""
        if self.pos_view is not None:
            return self.pos_view[:, self.dof_index], self.vel_view[:, self.dof_index]
        return self.robot.get_dofs_position(self.dofs), self.robot.get_dofs_velocity(self.dofs)


class Go2Walk(GenesisTask):
    name = "go2_walk"
    obs_dim, act_dim = 45, 12
    defaults: ClassVar[dict[str, Any]] = {
        "dt": 0.02,
        "kp": 20.0,
        "kd": 0.5,
        "action_scale": 0.25,
        "clip_actions": 100.0,
        "simulate_action_latency": True,
        "termination_if_roll_greater_than": 10.0,  # degrees
        "termination_if_pitch_greater_than": 10.0,
        "base_init_pos": (0.0, 0.0, 0.42),
        "base_init_quat": (1.0, 0.0, 0.0, 0.0),
        "episode_length_s": 20.0,
        "resampling_time_s": 4.0,
        "lin_vel_x_range": (0.5, 0.5),
        "lin_vel_y_range": (0.0, 0.0),
        "ang_vel_range": (0.0, 0.0),
        "tracking_sigma": 0.25,
        "base_height_target": 0.3,
        "reward_scales": {
            "tracking_lin_vel": 1.0,
            "tracking_ang_vel": 0.2,
            "lin_vel_z": -1.0,
            "base_height": -50.0,
            "action_rate": -0.005,
            "similar_to_default": -0.1,
        },
        "obs_scales": {"lin_vel": 2.0, "ang_vel": 0.25, "dof_pos": 1.0, "dof_vel": 0.05},
    }
    # the example's joint order (actions and observations) and default pose
    joint_names = (
        "FR_hip_joint", "FR_thigh_joint", "FR_calf_joint", "FL_hip_joint", "FL_thigh_joint", "FL_calf_joint",
        "RR_hip_joint", "RR_thigh_joint", "RR_calf_joint", "RL_hip_joint", "RL_thigh_joint", "RL_calf_joint",
    )  # fmt: skip
    default_angles: ClassVar[dict[str, float]] = {"hip": 0.0, "F_thigh": 0.8, "R_thigh": 1.0, "calf": -1.5}

    @property
    def episode_length(self) -> int:  # type: ignore[override]
        return math.ceil(self.cfg["episode_length_s"] / self.cfg["dt"])

    @property
    def action_bound(self) -> float:  # type: ignore[override]
        return self.cfg["clip_actions"]

    @property
    def acts_before_physics(self) -> bool:  # type: ignore[override]
        # with latency the robot executes the previous step's action: this one's is handled after the physics
        return not self.cfg["simulate_action_latency"]

    def obs_names(self) -> list[str]:
        j = [n.removesuffix("_joint") for n in self.joint_names]
        return (
            ["base_ang_vel_x", "base_ang_vel_y", "base_ang_vel_z", "gravity_x", "gravity_y", "gravity_z",
             "cmd_lin_vel_x", "cmd_lin_vel_y", "cmd_ang_vel_z"]
            + [f"{n}_pos" for n in j] + [f"{n}_vel" for n in j] + [f"{n}_last_action" for n in j]
        )  # fmt: skip

    def _default_angle(self, joint: str) -> float:
        if "hip" in joint:
            return self.default_angles["hip"]
        if "thigh" in joint:
            return self.default_angles["F_thigh" if joint.startswith("F") else "R_thigh"]
        return self.default_angles["calf"]

    def build(self, gs: Any, n: int) -> Any:
        c = self.cfg
        self.gs, self.n = gs, n
        scene = gs.Scene(
            sim_options=gs.options.SimOptions(dt=c["dt"], substeps=2),
            rigid_options=gs.options.RigidOptions(
                constraint_solver=gs.constraint_solver.Newton, enable_collision=True,
                enable_joint_limit=True,
            ),
            show_viewer=False,
        )  # fmt: skip
        scene.add_entity(gs.morphs.URDF(file="urdf/plane/plane.urdf", fixed=True))
        self.robot = scene.add_entity(
            gs.morphs.URDF(file="urdf/go2/urdf/go2.urdf", pos=c["base_init_pos"], quat=c["base_init_quat"])
        )
        scene.build(n_envs=n)
        dev, f = gs.device, gs.tc_float
        self.dofs = [self.robot.get_joint(j).dof_start for j in self.joint_names]
        self.robot.set_dofs_kp([c["kp"]] * self.act_dim, self.dofs)
        self.robot.set_dofs_kv([c["kd"]] * self.act_dim, self.dofs)
        self.default_dof_pos = torch.tensor(
            [self._default_angle(j) for j in self.joint_names], device=dev, dtype=f
        )
        self.base_init_pos = torch.tensor(c["base_init_pos"], device=dev, dtype=f)
        self.base_init_quat = torch.tensor(c["base_init_quat"], device=dev, dtype=f)
        self.gravity = torch.tensor([0.0, 0.0, -1.0], device=dev, dtype=f).expand(n, 3)
        s = c["obs_scales"]
        self.commands_scale = torch.tensor([s["lin_vel"], s["lin_vel"], s["ang_vel"]], device=dev, dtype=f)
        self.reward_scales = {k: v * c["dt"] for k, v in c["reward_scales"].items()}
        ranges = torch.tensor([c["lin_vel_x_range"], c["lin_vel_y_range"], c["ang_vel_range"]],
                              device=dev, dtype=f)
        self.command_low, self.command_span = ranges[:, 0], ranges[:, 1] - ranges[:, 0]
        self.command_gen = torch.Generator(device=dev)
        self.resample_every = round(c["resampling_time_s"] / c["dt"])
        # the phases' state, updated in place (a captured CUDA graph reads it at these addresses)
        self.action = torch.zeros((n, self.act_dim), device=dev, dtype=torch.float32)
        self.actions = torch.zeros((n, self.act_dim), device=dev, dtype=f)  # clipped
        self.last_actions = torch.zeros_like(self.actions)
        self.targets = torch.zeros_like(self.actions)  # PD targets of the next physics step
        self.commands = torch.zeros((n, 3), device=dev, dtype=f)
        self._bind_dof_views(gs)
        self._bind_base_views(gs)
        # Genesis' PD targets, written in place by the phases (None without zero-copy: its API then, per step)
        self.ctrl_pos = _state_view(gs, self.robot.solver.dyn_state.dofs.ctrl_pos)
        return scene

    def reads_state_in_place(self) -> bool:
        return super().reads_state_in_place() and self.link_views is not None

    def _bind_base_views(self, gs: Any) -> None:
        """Views of Genesis' link buffers for the base's pose and velocities, where its getters would return
        the same values (zero-copy on, no offset on the base link); otherwise None and the getters are
        used."""
        solver, base = self.robot.solver, self.robot.base_link_idx
        self.base_link, self.link_views = base, None
        if (gs.use_zerocopy and solver._links_offset_pos_is_identity[base]
                and solver._links_offset_quat_is_identity[base]):
            links = solver.dyn_state.links
            self.link_views = tuple(_state_view(gs, x) for x in (links.pos, links.quat, links.cd_vel,
                                                                  links.cd_ang, links.root_COM))  # fmt: skip

    def base_state(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """World position, orientation, linear and angular velocity of the base, as ``robot.get_pos()``,
        ``get_quat()``, ``get_vel()`` and ``get_ang()`` give them."""
        if self.link_views is None:
            r = self.robot
            return r.get_pos(), r.get_quat(), r.get_vel(), r.get_ang()
        pos, quat, cd_vel, cd_ang, root_com = (v[:, self.base_link] for v in self.link_views)
        return pos, quat, cd_vel + torch.cross(cd_ang, pos - root_com, dim=-1), cd_ang

    def _sample_commands(self) -> None:
        # drawn on the simulator's device: no host transfer inside the step loop
        u = torch.rand((self.n, 3), generator=self.command_gen, device=self.gs.device, dtype=self.gs.tc_float)
        self.commands.copy_(self.command_low + u * self.command_span)

    def reset(self, gen: torch.Generator) -> torch.Tensor:
        n = self.n
        self.robot.set_dofs_position(self.default_dof_pos.expand(n, -1), self.dofs, zero_velocity=True)
        self.robot.set_pos(self.base_init_pos.expand(n, -1), zero_velocity=False)
        self.robot.set_quat(self.base_init_quat.expand(n, -1), zero_velocity=False)
        self.robot.zero_all_dofs_velocity()
        for buf in (self.action, self.actions, self.last_actions):
            buf.zero_()
        self._set_targets(self.last_actions)
        # position control of the joints, from Genesis
        self.robot.control_dofs_position(self.targets, self.dofs)
        self.t = 0
        self.command_gen.manual_seed(int(torch.randint(2**62, (1,), generator=gen)))
        self._sample_commands()
        return self.observe()[0]

    def before_physics(self) -> None:
        self.actions.copy_(self.clipped_action())
        self._set_targets(self.actions)

    def physics(self) -> None:
        if self.ctrl_pos is None:
            self.robot.control_dofs_position(self.targets, self.dofs)
        self.robot.solver.scene.step()
        self.t += 1
        if self.t % self.resample_every == 0:
            self._sample_commands()

    def after_physics(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        latency = self.cfg["simulate_action_latency"]
        if latency:
            self.actions.copy_(self.clipped_action())
        obs, reward, terminated = self.observe()
        self.last_actions.copy_(self.actions)
        if latency:  # this step's action is the next step's PD target
            self._set_targets(self.actions)
        return obs, reward, terminated

    def _set_targets(self, actions: torch.Tensor) -> None:
        targets = actions * self.cfg["action_scale"] + self.default_dof_pos
        self.targets.copy_(targets)
        if self.ctrl_pos is not None:
            # what robot.control_dofs_position(targets) writes, without its host work (~50 us a step: index
            # tensors made from Python lists, three indexing ops), which a host-paced GPU step pays in full
            self.ctrl_pos[:, self.dof_index] = targets

    def observe(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Observation, reward (float32) and termination from Genesis' state and the task's buffers; pure."""
        from genesis.utils.geom import inv_quat, quat_to_xyz, transform_by_quat, transform_quat_by_quat

        c, s = self.cfg, self.cfg["obs_scales"]
        base_pos, base_quat, vel, ang = self.base_state()
        inv_init = inv_quat(self.base_init_quat).expand(self.n, -1)
        base_euler = quat_to_xyz(transform_quat_by_quat(inv_init, base_quat), rpy=True, degrees=True)
        inv_base = inv_quat(base_quat)
        lin_vel, ang_vel = transform_by_quat(vel, inv_base), transform_by_quat(ang, inv_base)
        projected_gravity = transform_by_quat(self.gravity, inv_base)
        dof_pos, dof_vel = self.dof_state()
        obs = torch.cat(
            [
                ang_vel * s["ang_vel"],
                projected_gravity,
                self.commands * self.commands_scale,
                (dof_pos - self.default_dof_pos) * s["dof_pos"],
                dof_vel * s["dof_vel"],
                self.actions,
            ],
            dim=-1,
        )
        terminated = (base_euler[:, 1].abs() > c["termination_if_pitch_greater_than"]) | (
            base_euler[:, 0].abs() > c["termination_if_roll_greater_than"]
        )
        sig = c["tracking_sigma"]
        terms = {
            "tracking_lin_vel": torch.exp(-((self.commands[:, :2] - lin_vel[:, :2]) ** 2).sum(1) / sig),
            "tracking_ang_vel": torch.exp(-((self.commands[:, 2] - ang_vel[:, 2]) ** 2) / sig),
            "lin_vel_z": lin_vel[:, 2] ** 2,
            "base_height": (base_pos[:, 2] - c["base_height_target"]) ** 2,
            "action_rate": ((self.last_actions - self.actions) ** 2).sum(1),
            "similar_to_default": (dof_pos - self.default_dof_pos).abs().sum(1),
        }
        reward = sum(terms[k] * w for k, w in self.reward_scales.items())
        return obs, reward.to(torch.float32), terminated


_CARTPOLE_XML = """<mujoco model="cartpole">
  <option timestep="0.01"/>
  <worldbody>
    <body name="cart" pos="0 0 0">
      <joint name="slider" type="slide" axis="1 0 0" limited="false" damping="0"/>
      <geom name="cart" type="box" size="0.2 0.15 0.1" mass="1" contype="0" conaffinity="0"/>
      <body name="pole" pos="0 0 0">
        <joint name="hinge" type="hinge" axis="0 1 0" damping="0"/>
        <geom name="pole" type="capsule" fromto="0 0 0 0 0 1" size="0.045" mass="0.1" \
contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


class CartpoleBalance(GenesisTask):
    name = "cartpole_balance"
    obs_dim, act_dim, episode_length = 4, 1, 500
    action_bound = 1.0  # × max_force on the cart
    defaults: ClassVar[dict[str, Any]] = {
        "dt": 0.02, "max_force": 10.0, "reset_noise_scale": 0.05, "x_threshold": 2.4, "theta_threshold": 0.2,
    }  # fmt: skip

    def obs_names(self) -> list[str]:
        return ["cart_position", "pole_angle", "cart_velocity", "pole_angular_velocity"]

    def build(self, gs: Any, n: int) -> Any:
        self.gs, self.n = gs, n
        path = os.path.join(tempfile.gettempdir(), "gprl_genesis_cartpole.xml")
        with open(path, "w") as fh:
            fh.write(_CARTPOLE_XML)
        scene = gs.Scene(
            sim_options=gs.options.SimOptions(dt=self.cfg["dt"], substeps=2, gravity=(0.0, 0.0, -9.81)),
            rigid_options=gs.options.RigidOptions(enable_collision=False, enable_joint_limit=False),
            show_viewer=False,
        )
        self.robot = scene.add_entity(gs.morphs.MJCF(file=path))
        scene.build(n_envs=n)
        self.dofs = [self.robot.get_joint("slider").dof_start, self.robot.get_joint("hinge").dof_start]
        self.action = torch.zeros((n, self.act_dim), device=gs.device, dtype=torch.float32)
        # the force on the slider (the hinge is free)
        self.force = torch.zeros((n, 2), device=gs.device, dtype=gs.tc_float)
        self._bind_dof_views(gs)
        return scene

    def _obs(self) -> torch.Tensor:
        pos, vel = self.dof_state()
        return torch.cat([pos, vel], dim=-1)

    def reset(self, gen: torch.Generator) -> torch.Tensor:
        s = self.cfg["reset_noise_scale"]
        noise = ((torch.rand((self.n, 4), generator=gen) * 2 - 1) * s).to(self.gs.device, self.gs.tc_float)
        self.robot.set_dofs_position(noise[:, :2], self.dofs, zero_velocity=True)
        self.robot.set_dofs_velocity(noise[:, 2:], self.dofs)
        self.action.zero_()
        self.force.zero_()
        return self._obs()

    def before_physics(self) -> None:
        self.force[:, 0] = self.clipped_action()[:, 0] * self.cfg["max_force"]

    def physics(self) -> None:
        self.robot.control_dofs_force(self.force, self.dofs)
        self.robot.solver.scene.step()

    def after_physics(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        obs = self._obs()
        terminated = (obs[:, 0].abs() > self.cfg["x_threshold"]) | (
            obs[:, 1].abs() > self.cfg["theta_threshold"]
        )
        return obs, torch.ones_like(obs[:, 0], dtype=torch.float32), terminated


GENESIS_TASKS: dict[str, type[GenesisTask]] = {t.name: t for t in (Go2Walk, CartpoleBalance)}


class GenesisEnv(VecEnv):
    backend = "genesis"
    common_starts = False  # one generator draws the whole batch's starts

    def __init__(
        self,
        name: str,
        num_envs: int,
        device: torch.device | str | None = None,
        seed: int = 0,
        episode_length: int | None = None,
        cuda_graphs: bool = True,
        fuse: bool = True,
        **task_kwargs: Any,
    ) -> None:
        if name not in GENESIS_TASKS:
            raise ValueError(f"unknown Genesis task {name!r}; choose one of {sorted(GENESIS_TASKS)}")
        for arg, value in (("cuda_graphs", cuda_graphs), ("fuse", fuse)):
            if not isinstance(value, bool):
                raise TypeError(f"{arg} must be True or False, got {value!r}")
        gs = _genesis(device)
        self.task = task = GENESIS_TASKS[name](**task_kwargs)
        self.scene = task.build(gs, num_envs)
        self._gen = torch.Generator().manual_seed(seed)
        act, bound = task.act_dim, task.action_bound
        super().__init__(
            name=name,
            num_envs=num_envs,
            obs_dim=task.obs_dim,
            act_dim=act,
            device=gs.device,
            episode_length=episode_length or task.episode_length,
            seed=seed,
            action_low=torch.full((act,), -bound),
            action_high=torch.full((act,), bound),
            obs_names=task.obs_names(),
        )
        n, dev = self.num_envs, self.device
        # the episodes' state and the last step's outputs, updated in place by the after-physics phase
        self._values = torch.zeros(n * (self.obs_dim + 1), device=dev)  # observations, then rewards
        self._flags = torch.zeros((2, n), dtype=torch.bool, device=dev)  # terminated, truncated
        self._steps = torch.zeros((), dtype=torch.int64, device=dev)  # since the reset
        self._limit = torch.zeros_like(self._steps)  # episode_length, read by the graph
        # ... and their copy packed in one byte buffer: the fresh tensors a step hands out cost one copy
        values_end = self._values.numel() * 4
        self._out_ends = (n * self.obs_dim * 4, values_end, values_end + n)
        self._out = torch.zeros(values_end + 2 * n, dtype=torch.uint8, device=dev)
        self._packed = (self._out[:values_end].view(torch.float32), self._out.view(torch.bool)[values_end:])
        self._before = _Graphed(task.before_physics, fuse)
        self._after = _Graphed(self._advance_episodes, fuse, then=self._pack)
        #: replay the phases as CUDA graphs (captured at the first reset); False runs them op by op
        self.cuda_graphs = cuda_graphs and dev.type == "cuda" and task.reads_state_in_place()

    def dof_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Joint positions and velocities as Genesis holds them (zero-copy views when Genesis allows)."""
        return self.task.dof_state()

    def step(self, action: torch.Tensor) -> StepResult:
        """:meth:`VecEnv.step` in the three phases of the module docstring: the same checks, action mapping
        and episode rules; per step one copy of the action in, one or two graph replays, one copy out."""
        self._check_reset_called()
        self._check_action_tensor(action)
        self._check_continuous_action(action)
        task, replay = self.task, self.cuda_graphs
        task.action.copy_(action)
        if task.acts_before_physics:
            self._before(replay)
        task.physics()
        self._after(replay)
        self._t += 1
        obs, reward, self._terminated, self._truncated = self._unpack(self._out.clone())
        return obs, reward, self._terminated, self._truncated

    def _advance_episodes(self) -> None:
        """The after-physics phase but the packing: the task's part, then the episode rules."""
        obs, reward, terminated = self.task.after_physics()
        self._steps += 1
        terminated_before, truncated_before = self._flags
        reward, terminated, truncated = episode_rules(
            terminated_before, truncated_before, reward, terminated, None, self._steps >= self._limit
        )
        self._values[: obs.numel()].copy_(obs.reshape(-1))
        self._values[obs.numel() :].copy_(reward)
        self._flags.copy_(torch.stack([terminated, truncated]))

    def _pack(self) -> None:
        values, flags = self._packed
        values.copy_(self._values)
        flags.copy_(self._flags.view(-1))

    def _unpack(self, buf: torch.Tensor) -> StepResult:
        """Views of a packed output buffer (slices: half the host time of ``split``, which a step pays)."""
        a, b, c = self._out_ends
        obs, reward, flags = buf[:a].view(torch.float32), buf[a:b].view(torch.float32), buf.view(torch.bool)
        return obs.view(self.num_envs, self.obs_dim), reward, flags[b:c], flags[c:]

    def _reset(self, seed: int | None, starts: int | None = None) -> torch.Tensor:
        if seed is not None:
            self._gen.manual_seed(seed)
        if self.cuda_graphs:  # once; the reset below re-initialises what the capture's warm-up runs wrote
            if self.task.acts_before_physics:
                self._before.capture()
            self._after.capture()
        return self.task.reset(self._gen)

    def _begin_episodes(self) -> None:
        super()._begin_episodes()
        for buf in (self._values, self._flags, self._steps, self._out):
            buf.zero_()
        self._limit.fill_(self.episode_length)

    def _step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        # the base class's path (VecEnv.step, op by op with its own bookkeeping): the reference the tests
        # compare the fused step with
        task = self.task
        task.action.copy_(action)
        if task.acts_before_physics:
            task.before_physics()
        task.physics()
        return (*task.after_physics(), None)
