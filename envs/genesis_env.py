"""Genesis scenes built once for the whole batch (``scene.build(n_envs=N)``), torch tensors on the device.

Tasks:

* ``go2_walk``: the Unitree Go2 quadruped tracking a velocity command, as in Genesis' locomotion example
  (``examples/locomotion/go2_env.py``): PD position targets around the default pose, one step of action latency,
  the same 45-dimensional observation, reward terms (linear/angular velocity tracking, vertical velocity, base
  height, action rate, distance to the default pose; scaled by dt) and roll/pitch termination.
* ``cartpole_balance``: the classic cart-pole (force on the cart, +1 per step upright; terminated when the pole
  leaves ±0.2 rad or the cart ±2.4 m), modelled in MJCF here.

Genesis is initialised once per process, on its CPU backend for a CPU device and on CUDA otherwise. With
Genesis' zero-copy mode (its default when the torch device matches its backend) the joint positions and
velocities the observation is made from are views of Genesis' own state buffers (:meth:`GenesisEnv.dof_state`),
read without a copy, and so are the Go2's base pose and velocities; actions go to Genesis as torch tensors on
its device. Nothing crosses between host and device inside a step.

On a GPU, a Genesis step is paced by the host (Python launching Genesis' kernels one by one), so every torch op
of the task's own adds its launch time to the step. ``go2_walk`` therefore computes its observation, reward and
termination (some 80 small ops) in one pure function over tensors at fixed addresses, and the action's clip
and PD targets in another, each captured once as a CUDA graph and replayed every step (``cuda_graphs=True``,
the default; ``False`` runs the ops one by one).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from ._deps import require
from .base import VecEnv


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
    """``fn(*tensors)``, a pure function of its arguments and of tensors at fixed addresses, run as is or, while
    ``enabled()``, replayed as a CUDA graph captured at the first such call: the arguments are copied into the
    graph's own buffers, and the outputs are the graph's (rewritten by every replay)."""

    def __init__(self, fn: Callable[..., tuple[torch.Tensor, ...]], enabled: Callable[[], bool]) -> None:
        self.fn, self.enabled = fn, enabled
        self.graph: torch.cuda.CUDAGraph | None = None

    def __call__(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if not self.enabled():
            return self.fn(*args)
        if self.graph is None:
            self.inputs = tuple(a.clone() for a in args)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.fn(*self.inputs)  # warm-up, uncaptured (lazy initialisation)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.outputs = self.fn(*self.inputs)
        for buf, a in zip(self.inputs, args, strict=True):
            buf.copy_(a)
        self.graph.replay()
        return self.outputs


class GenesisTask:
    name: ClassVar[str]
    defaults: ClassVar[dict[str, Any]]
    obs_dim: ClassVar[int]
    act_dim: ClassVar[int]
    episode_length: ClassVar[int]
    has_cuda_graphs: ClassVar[bool] = False  # the task can replay its own ops as CUDA graphs
    use_cuda_graph = False  # whether it does: set by GenesisEnv

    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(self.defaults)
        if unknown:
            raise TypeError(
                f"unknown keyword argument(s) {sorted(unknown)} for {self.name!r}; it takes {sorted(self.defaults)}"
            )
        self.cfg = {**self.defaults, **kwargs}

    def build(self, gs: Any, n: int) -> Any: ...

    def reset(self, gen: torch.Generator) -> torch.Tensor: ...

    def _bind_dof_views(self, gs: Any) -> None:
        """After ``scene.build``: views of Genesis' joint position/velocity buffers (None without zero-copy)."""
        state = self.robot.solver.dyn_state.dofs
        self.pos_view, self.vel_view = _state_view(gs, state.pos), _state_view(gs, state.vel)
        # indexing with a Python list would copy the list to the device at every read
        self.dof_index = torch.tensor(self.dofs, device=gs.device)

    def dof_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions and velocities [N, len(self.dofs)] of the task's joints (Genesis' buffers with zero-copy on)."""
        if self.pos_view is not None:
            return self.pos_view[:, self.dof_index], self.vel_view[:, self.dof_index]
        return self.robot.get_dofs_position(self.dofs), self.robot.get_dofs_velocity(self.dofs)

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


class Go2Walk(GenesisTask):
    name = "go2_walk"
    has_cuda_graphs = True
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
        ranges = torch.tensor([c["lin_vel_x_range"], c["lin_vel_y_range"], c["ang_vel_range"]], device=dev, dtype=f)
        self.command_low, self.command_span = ranges[:, 0], ranges[:, 1] - ranges[:, 0]
        self.command_gen = torch.Generator(device=dev)
        # state the step's graphs read, updated in place (a captured CUDA graph reads it at these addresses)
        self.commands = torch.zeros((n, 3), device=dev, dtype=f)
        self.last_actions = torch.zeros((n, self.act_dim), device=dev, dtype=f)
        self._bind_dof_views(gs)
        self._bind_base_views(gs)
        self._act = _Graphed(self._clip_and_target, lambda: self.use_cuda_graph)
        self._observe = _Graphed(self._evaluate, lambda: self.use_cuda_graph)
        return scene

    def _bind_base_views(self, gs: Any) -> None:
        """Views of Genesis' link buffers for the base's pose and velocities, where its getters would return
        the same values (zero-copy on, no offset on the base link); otherwise None and the getters are used."""
        solver, base = self.robot.solver, self.robot.base_link_idx
        self.base_link, self.link_views = base, None
        if gs.use_zerocopy and solver._links_offset_pos_is_identity[base] and solver._links_offset_quat_is_identity[base]:
            links = solver.dyn_state.links
            self.link_views = tuple(_state_view(gs, x) for x in (links.pos, links.quat, links.cd_vel, links.cd_ang,
                                                                  links.root_COM))  # fmt: skip

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
        self.actions = torch.zeros_like(self.last_actions)
        self.last_actions.zero_()
        self.t = 0
        self.command_gen.manual_seed(int(torch.randint(2**62, (1,), generator=gen)))
        self._sample_commands()
        return self._evaluate()[0]

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        c = self.cfg
        self.actions, targets = self._act(action)
        self.robot.control_dofs_position(targets, self.dofs)
        self.robot.solver.scene.step()
        self.t += 1
        if self.t % round(c["resampling_time_s"] / c["dt"]) == 0:
            self._sample_commands()
        obs, reward, terminated = self._observe()
        self.last_actions.copy_(self.actions)
        # a replay rewrites the graph's outputs: the observation goes to the caller as a copy; GenesisEnv's
        # step (VecEnv.step) makes new tensors of the reward and termination flags
        return obs.clone(), reward, terminated

    def _clip_and_target(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The clipped action and the PD targets Genesis gets (the previous action's with the latency on)."""
        c = self.cfg
        actions = torch.clamp(action, -c["clip_actions"], c["clip_actions"])
        executed = self.last_actions if c["simulate_action_latency"] else actions
        return actions, executed * c["action_scale"] + self.default_dof_pos

    def _evaluate(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
        <geom name="pole" type="capsule" fromto="0 0 0 0 0 1" size="0.045" mass="0.1" contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


class CartpoleBalance(GenesisTask):
    name = "cartpole_balance"
    obs_dim, act_dim, episode_length = 4, 1, 500
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
        return self._obs()

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        force = torch.zeros((self.n, 2), device=self.gs.device, dtype=self.gs.tc_float)
        force[:, 0] = action[:, 0].to(self.gs.tc_float) * self.cfg["max_force"]
        self.robot.control_dofs_force(force, self.dofs)
        self.robot.solver.scene.step()
        obs = self._obs()
        terminated = (obs[:, 0].abs() > self.cfg["x_threshold"]) | (
            obs[:, 1].abs() > self.cfg["theta_threshold"]
        )
        return obs, torch.ones(self.n, device=self.gs.device), terminated


GENESIS_TASKS: dict[str, type[GenesisTask]] = {t.name: t for t in (Go2Walk, CartpoleBalance)}


class GenesisEnv(VecEnv):
    backend = "genesis"

    def __init__(
        self,
        name: str,
        num_envs: int,
        device: torch.device | str | None = None,
        seed: int = 0,
        episode_length: int | None = None,
        cuda_graphs: bool = True,
        **task_kwargs: Any,
    ) -> None:
        if name not in GENESIS_TASKS:
            raise ValueError(f"unknown Genesis task {name!r}; choose one of {sorted(GENESIS_TASKS)}")
        if not isinstance(cuda_graphs, bool):
            raise TypeError(f"cuda_graphs must be True or False, got {cuda_graphs!r}")
        gs = _genesis(device)
        self.task = GENESIS_TASKS[name](**task_kwargs)
        self.scene = self.task.build(gs, num_envs)
        # the task's own ops as one CUDA graph a step (go2_walk; see the module docstring)
        self.task.use_cuda_graph = cuda_graphs and gs.device.type == "cuda" and self.task.has_cuda_graphs
        self._gen = torch.Generator().manual_seed(seed)
        act = self.task.act_dim
        low, high = (
            (-1.0, 1.0)
            if name == "cartpole_balance"
            else (-self.task.cfg["clip_actions"], self.task.cfg["clip_actions"])
        )
        super().__init__(
            name=name,
            num_envs=num_envs,
            obs_dim=self.task.obs_dim,
            act_dim=act,
            device=gs.device,
            episode_length=episode_length or self.task.episode_length,
            seed=seed,
            action_low=torch.full((act,), low),
            action_high=torch.full((act,), high),
            obs_names=self.task.obs_names(),
        )

    def dof_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Joint positions and velocities as Genesis holds them (zero-copy views when Genesis allows)."""
        return self.task.dof_state()

    def _reset(self, seed: int | None) -> torch.Tensor:
        if seed is not None:
            self._gen.manual_seed(seed)
        return self.task.reset(self._gen)

    def _step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        obs, reward, terminated = self.task.step(action)
        return obs, reward, terminated, None
