"""Control policies: multi-output trees scored by their episode returns in vectorised environments."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import torch

from gprl import envs
from gprl.core.population import Population
from gprl.core.seeds import mix_seed
from gprl.evolve.draws import Draws
from gprl.evolve.simplify import simplify
from gprl.rl.export import export_policy
from gprl.rl.policy import ActionMap, ObsNormalizer, PolicyEvaluation, evaluate_policies
from gprl.rl.refine import (
    RefineSettings,
    feedback_scale,
    fold,
    linear_policy,
    pruned_feedback,
    refine,
    tree_numbers,
    with_numbers,
)
from gprl.train.checkpoint import population_from_state, population_state
from gprl.train.distributed import Dist
from gprl.train.tasks.base import Task

SIMPLIFY_SHARE = 0.02  # task.simplify's default: the share of the best validated return it may lose
# how far (root mean square, in units of each action's half range) the simplified trees' actions may move from
# the exported tree's on its own episodes; a candidate per tolerance, each going on from the last
SIMPLIFY_TOLERANCES = (0.005, 0.01, 0.02, 0.04, 0.08)
SIMPLIFY_EPISODES = 16  # episodes whose observations the simplification compares actions on
SIMPLIFY_ROWS = 2048  # of their observations, drawn at random
SIMPLIFY_SECONDS = 30.0  # per tolerance: the tree reached by then is the candidate
STARTS_STEPS = 2**18  # env.episodes null: starts per tree up to a generation of this many steps
MAX_STARTS = 8
FRONT_SIZE = 16  # of the last generation's front of length against score, the best this many are validated


def racing_shares(racing: dict[str, Any] | None) -> tuple[float, float, int | None]:
    """``env.racing`` as (horizon, finalists, episodes); null or ``{}``: (1, 1, None), no racing."""
    racing = dict(racing or {})
    unknown = set(racing) - {"horizon", "finalists", "episodes"}
    if unknown:
        raise ValueError(f"env.racing takes horizon, finalists and episodes, got {sorted(unknown)}")
    episodes = racing.get("episodes")
    if episodes is not None and (isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1):
        raise ValueError(f"env.racing.episodes must be a positive integer (whole episodes per finalist) or "
                         f"null (env.episodes), got {episodes!r}")
    shares = (float(racing.get("horizon", 1.0)), float(racing.get("finalists", 1.0)))
    for name, value in zip(("horizon", "finalists"), shares):
        if not 0 < value <= 1:
            raise ValueError(f"env.racing.{name} must be in (0, 1] (a share of the episode / population), "
                             f"got {value}")
    return (*shares, episodes)


def episode_schedule(schedule: dict[str, Any] | None, final: int) -> tuple[int, int]:
    """``env.episode_schedule`` as (start, ramp_generations) for episodes of ``final`` steps; null or ``{}``:
    (final, 0)."""
    schedule = dict(schedule or {})
    lowest = {"start": 1, "ramp_generations": 0}  # a ramp of 0 generations: none
    unknown = set(schedule) - set(lowest)
    if unknown:
        raise ValueError(f"env.episode_schedule takes start and ramp_generations, got {sorted(unknown)}")
    for name, low in lowest.items():
        v = schedule.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < low):
            what = "a positive integer" if low else "an integer >= 0 (0: no ramp)"
            raise ValueError(f"env.episode_schedule.{name} must be {what} or null, got {v!r}")
    return min(schedule.get("start") or final, final), schedule.get("ramp_generations") or 0


def episode_length_at(generation: int, start: int, final: int, ramp_generations: int) -> int:
    """Linear schedule of the training episode length: ``start`` at generation 0, ``final`` from the ramp's
    end."""
    if ramp_generations <= 0 or start >= final:
        return final
    return min(final, int(start + (final - start) * generation / ramp_generations))


def starts_per_tree(pop_size: int, episode_length: int) -> int:
    """``env.episodes`` null: as many starts per tree (a power of two, at most :data:`MAX_STARTS`) as keep a
    generation's full-length episodes within :data:`STARTS_STEPS` environment steps. Short, cheap episodes
    (Pendulum, Reacher) get several, whose mean ranks a tree by how it does from any start; long ones one,
    which buys generations."""
    fit = STARTS_STEPS // (pop_size * episode_length)
    return min(MAX_STARTS, 1 << max(0, fit.bit_length() - 1))


def length_front(lengths: torch.Tensor, score: torch.Tensor, most: int = FRONT_SIZE) -> torch.Tensor:
    """Indices of the trees that score higher than every shorter tree (ties: the first), shortest first; of
    a longer front the ``most`` highest scorers."""
    score = torch.nan_to_num(score.double(), nan=-math.inf)
    order = torch.argsort(-score, stable=True)  # then by length: the best of each length first
    order = order[torch.argsort(lengths[order], stable=True)]
    score = score[order]
    best_before = torch.cat([score.new_full((1,), -math.inf), score.cummax(0).values[:-1]])
    front = torch.nonzero(score > best_before).flatten()
    front = front[torch.topk(score[front], min(most, len(front))).indices.sort().values]
    return order[front]


class PolicyTask(Task):
    """Control policies: fitness is the mean return of ``episodes`` episodes per individual (one batched
    rollout of P·E environments); observations are normalised (frozen per generation) and outputs mapped to
    actions (:mod:`gprl.rl.policy`).

    Every individual of a generation plays the same ``episodes`` starts (common random numbers: episode ``e``
    of every tree starts from ``seed_g + e``, new seeds each generation; on Genesis, whose batch draws its
    starts from one generator, each environment its own). Where a return depends on the start (Pendulum's
    angle, Reacher's target) trees on starts of their own are ranked by their luck: a tree that swung up
    from an easy start would beat a better one, and selection would keep it.

    Racing (``env.racing: {horizon, finalists, episodes}``) scores everyone on the first ``horizon`` share of
    the episode and plays only the best ``finalists`` share of the population whole episodes (``episodes``
    each, default ``env.episodes``), on fresh initial states in a second batch of environments; the others
    keep their short-episode returns, which rank them below nearly every finalist. Where the cost grows with
    the episode length (HalfCheetah never ends early) this buys more generations for the same time; several
    final episodes average the finalists' returns over initial states. ``mean_return`` then mixes short and
    whole episodes; ``best_return`` is always a finalist's.

    ``env.reward_shift`` is subtracted from every live step's reward in the search's fitness only (the
    survival-bonus shift of Mania et al. 2018: where standing still earns a bonus per step, as on Hopper and
    Walker2d, it stops being a resting point of the search; a negative shift adds to the bonus, so that a fall
    costs more against speed); returns reported, validated and exported are the environment's own.

    A hall of fame keeps the best tree of each generation with the normaliser it was scored under; at the end
    its trees, the last generation's best ``final_candidates`` (the most robust of a good generation is often
    not its best) and that generation's front of length against score (:func:`length_front`: trees that beat
    every shorter one on the same starts) are validated on fresh episodes of full length (with
    ``validation_keep``, the best share again on other fresh starts), and the best mean return is exported.
    With ``task.refine`` (:mod:`gprl.rl.refine`) the validated best also gets a linear feedback term, or its
    numbers, tuned by random search in the last ``share`` of the time limit, and joins the candidates.

    Distributed (``dist``): a rank steps only the environments of its shard of individuals (environment
    ``p * E + e`` of the whole batch resets from ``seed + e``, or on Genesis ``seed + p * E + e``, wherever it
    runs); returns and the per-environment observation sums are gathered in global order, so every rank holds
    the same returns, normaliser and hall of fame as a single process.
    """

    def __init__(self, env_cfg: dict[str, Any], pop_size: int, seed: int, device: torch.device,
                 parsimony: float = 0.0, hall_of_fame: int = 8, validation_episodes: int | None = 10,
                 final_candidates: int = 0, digits: int = 4, dist: Dist | None = None,
                 refine: dict[str, Any] | None = None, validation_keep: float | None = None,
                 draws: Draws | None = None, simplify: float | None = None):
        name = env_cfg["name"]
        self.draws = draws or Draws()  # each draw of gp.draws plays its own episode schedule
        backend = env_cfg.get("backend", "auto")
        episodes = env_cfg.get("episodes")
        if episodes is not None and (isinstance(episodes, bool) or not isinstance(episodes, int)
                                     or episodes < 1):
            raise ValueError(f"env.episodes must be a positive integer (episodes per individual) or null (as "
                             f"many as fit, starts_per_tree), got {episodes!r}")
        self.episodes = episodes or 1
        self.dist = dist or Dist()
        if self.dist.enabled and backend == "genesis":
            raise ValueError("env.backend=genesis cannot be split across processes (it draws the reset noise "
                             "of the whole batch from one generator); run it in a single process")
        self.reward_shift = float(env_cfg.get("reward_shift") or 0.0)
        if not math.isfinite(self.reward_shift):
            raise ValueError(f"env.reward_shift must be a finite number (subtracted from every step's reward "
                             f"in training), got {self.reward_shift}")
        self.horizon, self.finalists, final_episodes = racing_shares(env_cfg.get("racing"))
        self.n_finalists = max(1, math.ceil(self.finalists * pop_size))
        self.racing = self.horizon < 1 and self.finalists < 1
        if self.racing:
            self.dist.check_shardable(self.n_finalists, "env.racing.finalists * gp.population_size",
                                      "finalist")
        self.final_env = None  # racing: the finalists' environments, made on first use
        self.shard = self.dist.bounds(pop_size)  # the individuals this rank evaluates
        kwargs = dict(env_cfg.get("kwargs") or {})
        # e.g. {reset_noise_scale: ...}: the search sees wider initial states, validation the env's own
        self.train_kwargs = {**kwargs, **(env_cfg.get("train_kwargs") or {})}

        def make_env() -> envs.VecEnv:
            return envs.make(name, backend=backend, num_envs=(self.shard[1] - self.shard[0]) * self.episodes,
                             device=device, seed=int(seed), episode_length=env_cfg.get("episode_length"),
                             **self.train_kwargs)

        self.env = make_env()
        if episodes is None and starts_per_tree(pop_size, self.env.episode_length) > 1:
            self.episodes = starts_per_tree(pop_size, self.env.episode_length)
            self.env.close()
            self.env = make_env()
        self.final_episodes = int(final_episodes or self.episodes)
        self.total_envs = pop_size * self.episodes
        self.name, self.backend, self.seed, self.pop_size = name, self.env.backend, int(seed), pop_size
        # every tree of a generation on the same starts (common random numbers): a tree is ranked by how it
        # plays, not by the luck of its start (where the backend can repeat starts)
        self.common = self.env.common_starts
        self.device = self.env.device
        self.final_length = int(self.env.episode_length)
        self.start_length, self.ramp = episode_schedule(env_cfg.get("episode_schedule"), self.final_length)
        self.action_map = ActionMap.for_env(self.env, env_cfg.get("action_transform", "auto"))
        self.n_in = self.env.obs_dim
        self.n_out = self.env.num_actions if self.env.discrete else self.env.act_dim
        self.obs_names = self.env.obs_names
        self.action_names = self.env.action_names
        self.normalizer = ObsNormalizer(self.n_in, self.device,
                                        enabled=env_cfg.get("normalize_obs") is not False)
        self.parsimony, self.hof_size, self.digits = float(parsimony), int(hall_of_fame), int(digits)
        if hall_of_fame < 1:
            raise ValueError("task.hall_of_fame must be >= 1 (candidates validated at the end), "
                             f"got {hall_of_fame}")
        if validation_episodes is not None and validation_episodes < 0:
            raise ValueError("task.validation_episodes must be >= 0 (0: fill the training batch), "
                             f"got {validation_episodes}")
        if isinstance(final_candidates, bool) or not isinstance(final_candidates, int) \
                or final_candidates < 0:
            raise ValueError("task.final_candidates must be an integer >= 0 (the last generation's best "
                             f"trees validated beside the hall of fame), got {final_candidates!r}")
        if validation_keep is False:  # off where a per-backend default turns it on
            validation_keep = None
        if validation_keep is not None and (isinstance(validation_keep, bool)
                                            or not isinstance(validation_keep, (int, float))
                                            or not 0 < validation_keep < 1):
            raise ValueError("task.validation_keep must be a share in (0, 1) (the candidates that play a "
                             f"second validation round), false or null (one round), got {validation_keep!r}")
        self.validation_episodes, self.final_candidates = validation_episodes, final_candidates
        self.validation_keep = validation_keep
        if simplify is False:  # off where a per-backend default turns it on
            simplify = None
        if simplify is not None and (isinstance(simplify, bool) or not isinstance(simplify, (int, float))
                                     or not 0 <= simplify < 1):
            raise ValueError("task.simplify must be a share in [0, 1) (of the best validated return that a "
                             f"tree simplified by evaluation may give up), false or null, got {simplify!r}")
        self.simplify = simplify
        self.refine_settings = RefineSettings.from_config(refine)
        horizon = self.refine_settings and self.refine_settings.horizon
        if horizon and horizon > self.final_length:
            self.env.close()
            raise ValueError(f"task.refine.horizon ({horizon}) must be at most env.episode_length "
                             f"({self.final_length}): the steps of each perturbation's episodes")
        self.refine_share = self.refine_settings.share if self.refine_settings else 0.0
        self.validated: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None  # by refine()
        self.env_kwargs = kwargs
        # best per generation: tree state, mean, std, fitness (the search's), return, generation
        self.hof: list[dict[str, Any]] = []
        self.last: dict[str, Any] | None = None  # the last generation's best trees, in one tree state

    @classmethod
    def from_config(cls, cfg: dict[str, Any], device: str | None, dist: Dist | None = None) -> PolicyTask:
        gp, task = cfg["gp"], cfg["task"]
        if (cfg.get("dist") or {}).get("shard", "population") != "population":
            raise ValueError("dist.shard=data applies to task=sr|classification; policies shard the "
                             "population (dist.shard=population)")
        return cls(cfg["env"], pop_size=int(gp["population_size"]), seed=int(cfg["seed"]), device=device,
                   parsimony=float(gp.get("parsimony") or 0.0), hall_of_fame=int(task.get("hall_of_fame", 8)),
                   validation_episodes=task.get("validation_episodes"),
                   final_candidates=int(task.get("final_candidates") or 0), digits=int(task.get("digits", 4)),
                   dist=dist, refine=task.get("refine"), validation_keep=task.get("validation_keep"),
                   draws=Draws.from_config(gp),
                   simplify=SIMPLIFY_SHARE if task.get("simplify") is None else task["simplify"])

    def fingerprint(self) -> dict[str, Any]:
        return {"task": "policy", "env": self.name, "obs_dim": self.n_in, "n_out": self.n_out,
                "episodes": self.episodes}

    def _seed(self, *parts: int) -> int:
        # Gymnasium-style per-environment seeds seed + i must stay below 2**31
        envs_per_reset = max(self.total_envs, self.n_finalists * self.final_episodes)
        return mix_seed(self.seed, *parts) % (2**31 - 1 - envs_per_reset)

    def _first_seed(self, seed: int, first_env: int) -> int:
        """The reset seed of a shard whose first environment is ``first_env`` of the whole batch: with common
        starts every shard resets from ``seed`` (environment ``p * E + e`` from ``seed + e``)."""
        return seed if self.common else seed + first_env

    def evaluate(self, population: Population, generation: int) -> tuple[torch.Tensor, dict[str, Any]]:
        length = episode_length_at(self.draws.schedule_generation(generation), self.start_length,
                                   self.final_length, self.ramp)
        short = max(1, round(length * self.horizon)) if self.racing else length
        mean, std = self.normalizer.mean.clone(), self.normalizer.std.clone()
        (a, b), P, E, dist = self.shard, len(population), self.episodes, self.dist
        with dist.agree("evaluating the population"):
            ev = evaluate_policies(population[a:b], self.env, self.action_map, mean, std, E, short,
                                   seed=self._first_seed(self._seed(generation, 7), a * E),
                                   collect_stats=self.normalizer.enabled, common_starts=self.common)
        if ev.obs_stats is not None:
            self.normalizer.merge_envs(*(dist.gather(x, P, "gathering observation statistics", per=E)
                                         for x in ev.obs_stats))
        ret = dist.gather(ev.returns, P, "gathering the returns").to(population.device)
        score = self._score(ret, ev, P, "")
        steps = dist.sum(ev.env_steps, "adding up env steps")
        scored = torch.arange(P, device=ret.device)  # the individuals whose return covers `length` steps
        if short < length:
            ret, score, scored, final_steps = self._race(population, ret, score, mean, std, length,
                                                         generation)
            steps = steps + final_steps.to(steps.device)
        self.normalizer.freeze()  # the next generation sees this generation's observations too
        ranked = torch.nan_to_num(score[scored], nan=-math.inf)
        i = int(scored[torch.argmax(ranked)])
        self._remember(population[i], mean, std, float(score[i]), float(ret[i]), generation)
        # the last generation's best trees and its front of length against score (every tree on the same
        # starts: a fair comparison), validated at the end, where the shortest near the best is exported
        top = scored[torch.topk(ranked, min(self.final_candidates, len(scored))).indices]
        front = scored[length_front(population.lengths()[scored.to(population.device)].cpu(), ranked.cpu())
                       .to(scored.device)]
        top = torch.cat([top, front[~torch.isin(front, top)]])
        self.last = {"tree": population_state(population[top.to(population.device)]), "mean": mean.cpu(),
                     "std": std.cpu(), "fitness": score[top].tolist(), "return": ret[top].tolist(),
                     "generation": generation}
        fitness = score.float()
        if self.parsimony:
            fitness = fitness - self.parsimony * population.lengths().float()
        metrics = {"best_return": float(ret[i]), "mean_return": float(ret.mean()),
                   "episode_length": length, "env_steps": int(steps)}
        if short < length:
            metrics["racing_length"] = short
        return fitness, metrics

    def _score(self, ret: torch.Tensor, ev: PolicyEvaluation, n: int, what: str) -> torch.Tensor:
        """The search's fitness of gathered returns: each live step's reward less ``env.reward_shift``."""
        if not self.reward_shift:
            return ret
        lengths = self.dist.gather(ev.lengths, n, f"gathering the{what} episode lengths").to(ret.device)
        return ret - self.reward_shift * lengths.to(ret.dtype)

    def _race(self, population: Population, ret: torch.Tensor, score: torch.Tensor, mean: torch.Tensor,
              std: torch.Tensor, length: int, generation: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Plays the best short-episode scorers whole episodes; returns (returns, scores, finalists, env
        steps).

        Every rank holds the same gathered returns, hence the same finalists; a rank plays its contiguous
        share of them (every finalist's episode ``e`` resets from ``seed + e``, on Genesis finalist ``k``'s
        from ``seed + k * episodes + e``, wherever it runs)."""
        K, E, dist = self.n_finalists, self.final_episodes, self.dist
        top = torch.topk(torch.nan_to_num(score, nan=-math.inf), K).indices
        a, b = dist.bounds(K)
        if self.final_env is None:
            self.final_env = envs.make(self.name, backend=self.backend, num_envs=(b - a) * E,
                                       device=self.device, seed=self.seed, episode_length=self.final_length,
                                       **self.train_kwargs)
        with dist.agree("racing the finalists"):
            mine = population[top[a:b].to(population.device)]
            ev = evaluate_policies(mine, self.final_env, self.action_map, mean, std, E, length,
                                   seed=self._first_seed(self._seed(generation, 11), a * E),
                                   collect_stats=self.normalizer.enabled, common_starts=self.common)
        if ev.obs_stats is not None:
            self.normalizer.merge_envs(*(dist.gather(x, K, "gathering the finalists' observations", per=E)
                                         for x in ev.obs_stats))
        final = dist.gather(ev.returns, K, "gathering the finalists' returns").to(ret.device, ret.dtype)
        ret, score = ret.clone(), score.clone()
        ret[top], score[top] = final, self._score(final, ev, K, " finalists'")
        return ret, score, top, dist.sum(ev.env_steps, "adding up the finalists' env steps")

    @staticmethod
    def _held(state: dict[str, Any], mean: torch.Tensor, held: list[dict[str, Any]]) -> bool:
        """Whether ``held`` has this tree under the same normaliser."""
        return any(all(torch.equal(state[k], h["tree"][k]) for k in ("kind", "code", "out", "value"))
                   and torch.equal(h["mean"], mean.cpu()) for h in held)

    def _remember(self, tree: Population, mean, std, fitness: float, ret: float, generation: int) -> None:
        state = population_state(tree)
        if self._held(state, mean, self.hof):
            return
        self.hof.append({"tree": state, "mean": mean.cpu(), "std": std.cpu(), "fitness": fitness,
                         "return": ret, "generation": generation})
        self.hof.sort(key=lambda h: h["fitness"], reverse=True)
        self.hof = self.hof[: self.hof_size]

    def draw_state(self) -> dict[str, Any]:
        return {"normalizer": self.normalizer.state_dict()}

    def start_draw(self, state: dict[str, Any] | None) -> None:
        # a draw's trees are evolved on its own observations' statistics (the hall of fame keeps each tree's)
        if state is None:
            self.normalizer = ObsNormalizer(self.n_in, self.device, enabled=self.normalizer.enabled)
        else:
            self.normalizer.load_state_dict(state["normalizer"])

    def state_dict(self) -> dict[str, Any]:
        return {"normalizer": self.normalizer.state_dict(), "hof": list(self.hof), "last": self.last}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.normalizer.load_state_dict(state["normalizer"])
        self.hof, self.last = state["hof"], state.get("last")

    def candidates(self) -> list[dict[str, Any]]:
        """The hall of fame, then the last generation's best trees it does not hold (``final_candidates``)."""
        cands = [{**h, "source": "hall_of_fame"} for h in self.hof]
        last = self.last
        if last:
            pop = population_from_state(last["tree"], "cpu")
            for j in range(len(pop)):
                state = population_state(pop[j:j + 1])
                if not self._held(state, last["mean"], cands):
                    cands.append({"tree": state, "mean": last["mean"], "std": last["std"],
                                  "fitness": last["fitness"][j], "return": last["return"][j],
                                  "generation": last["generation"], "source": "last_generation"})
        return cands

    def validate(self, cands: list[dict[str, Any]] | None = None) -> tuple[int, list[dict[str, Any]]]:
        """Mean return of every candidate (default :meth:`candidates`) on fresh full-length episodes;
        returns (best index, rows).

        With ``validation_keep`` the best share of the candidates plays a second round of as many episodes
        on other fresh starts, and that round alone decides (a first round of few episodes each flatters
        its luckiest candidates); the others' rows say ``eliminated``."""
        cands = self.candidates() if cands is None else cands
        K = len(cands)
        N = self._validation_size(K)
        rows = self._play(cands, N, self._seed(0x5EED, 1))
        if self.validation_keep is not None and K > 1:
            first = np.nan_to_num([r["validation_return"] for r in rows], nan=-np.inf)
            keep = np.argsort(-first, kind="stable")[:max(1, math.ceil(self.validation_keep * K))]
            second = self._play([cands[k] for k in keep], N, self._seed(0x5EED, 3))  # N >= K: a block each
            for k, row in zip(keep.tolist(), second):
                rows[k] = {**row, "first_round_return": rows[k]["validation_return"],
                           "first_round_episodes": rows[k]["validation_episodes"]}
            for k in set(range(K)) - set(keep.tolist()):
                rows[k]["eliminated"] = True
        return self._best(rows), rows

    def _validation_size(self, K: int) -> int:
        """Episodes validating K candidates: ``validation_episodes`` each, or (0) the training batch."""
        return K * self.validation_episodes if self.validation_episodes else max(K, self.total_envs)

    def _play(self, cands: list[dict[str, Any]], N: int, seed: int) -> list[dict[str, Any]]:
        """Plays N fresh full-length episodes shared among the candidates; a row per candidate.

        Candidate k plays a contiguous block of episodes (environments ``start_k ..``), so its episodes start
        from seeds ``seed + start_k + e``, which ``scripts/replay.py --reproduce`` replays. When the N
        episodes fill the training batch the training environment is reused (no second compilation on Brax)
        unless ``env.train_kwargs`` made it differ. Distributed, each rank plays its contiguous share of the
        N episodes (its training shard when the training environments are reused)."""
        K, dist = len(cands), self.dist
        reuse = N == self.total_envs and self.train_kwargs == self.env_kwargs
        n, per = (self.pop_size, self.episodes) if reuse else (N, 1)  # n items of per episodes each
        a, b = (x * per for x in dist.bounds(n))  # this rank's episodes [a, b) of the N
        sizes = [N // K + (1 if k < N % K else 0) for k in range(K)]
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
        index = torch.repeat_interleave(torch.arange(K), torch.tensor(sizes))[a:b]
        returns = torch.zeros(0, dtype=torch.float64)
        with dist.agree("validating the candidates"):
            if b > a:
                env = self.env if reuse else envs.make(self.name, backend=self.backend, num_envs=b - a,
                                                       device=self.device, seed=self.seed,
                                                       episode_length=self.final_length, **self.env_kwargs)
                trees = Population.cat([population_from_state(h["tree"], "cpu") for h in cands])[index]
                mean = torch.stack([h["mean"] for h in cands])[index].to(self.device)
                std = torch.stack([h["std"] for h in cands])[index].to(self.device)
                ev = evaluate_policies(trees.to(self.device), env, self.action_map, mean, std, 1,
                                       self.final_length, seed=seed + a)
                if not reuse:
                    env.close()
                returns = ev.returns.cpu()
        returns = dist.gather(returns, n, "gathering the validation returns", per=per)
        return [{"generation": h["generation"], "source": h["source"],
                 **{k: h[k] for k in ("terms", "tolerance") if k in h},
                 "train_return": h.get("return", h["fitness"]),
                 "validation_return": float(returns[starts[k]:starts[k] + sizes[k]].mean()),
                 "validation_seed": seed + starts[k], "validation_episodes": sizes[k],
                 "length": int(h["tree"]["size"][0, 0])}
                for k, h in enumerate(cands)]

    @staticmethod
    def _best(rows: list[dict[str, Any]]) -> int:
        """The validated row with the highest mean return, among those not eliminated."""
        return int(np.nanargmax([-np.inf if r.get("eliminated") else r["validation_return"] for r in rows]))

    def _pick(self, rows: list[dict[str, Any]]) -> int:
        """The exported row: the best, or with ``task.refine.prune`` or ``task.simplify`` the shortest tree
        whose validation return is within that share (the larger of the two) of the best's (the higher
        return among equally short ones)."""
        best = self._best(rows)
        prune = self.refine_settings.prune if self.refine_settings else None
        share = max(prune or 0.0, self.simplify or 0.0)
        if not share:
            return best
        floor = rows[best]["validation_return"] - share * abs(rows[best]["validation_return"])
        near = [k for k, r in enumerate(rows) if not r.get("eliminated") and r["validation_return"] >= floor]
        return min(near, key=lambda k: (rows[k]["length"], -rows[k]["validation_return"]))

    def refine(self, seconds: float | None) -> dict[str, Any]:
        """Validates the candidates, then tunes a linear term on the best, or its constants and observation
        scaling (:mod:`gprl.rl.refine`, on training episodes), and validates the result as one more candidate,
        kept for ``finish``.

        Distributed, each rank plays its contiguous share of the perturbations and the returns are gathered,
        so every rank takes the same steps (rank 0's clock decides when to stop)."""
        settings, dist = self.refine_settings, self.dist
        if settings is None or not self.hof or (seconds is not None and seconds <= 0):
            return {}
        cands = self.candidates()
        best, rows = self.validate(cands)
        h = cands[best]
        tree = population_from_state(h["tree"], self.device)
        constants = settings.target == "constants"
        start, scale = tree_numbers(tree, h["mean"], h["std"]) if constants else \
            (torch.zeros(self.n_out, self.n_in + 1), None)
        E, steps = settings.episodes, settings.horizon or self.final_length
        # n items of `per` environments: the training batch's (pairs null), or 2·pairs samples of E episodes
        n, per = (self.pop_size, self.episodes) if settings.pairs is None else (2 * settings.pairs, E)
        dist.check_shardable(n, "2 * task.refine.pairs", "perturbation")
        a, b = (x * per for x in dist.bounds(n))  # this rank's environments
        reuse = n * per == self.total_envs and (a, b) == tuple(x * self.episodes for x in self.shard)
        mean, std, shift = h["mean"].to(self.device), h["std"].to(self.device), self.reward_shift
        env = self.env if reuse else envs.make(self.name, backend=self.backend, num_envs=b - a,
                                               device=self.device, seed=self.seed,
                                               episode_length=self.final_length, **self.train_kwargs)
        first = self._seed(0x5EED, 2)

        def play(params: torch.Tensor, iteration: int) -> torch.Tensor:
            # environment k: seed + k, or with common starts every perturbation on the same E starts
            seed = self._first_seed((first + 7919 * iteration) % (2**31 - 1 - n * per), a)
            mine = params[a // E:b // E].to(self.device)  # this rank's samples, E environments each
            with dist.agree("refining the best tree"):
                if constants:
                    trees, means, stds = with_numbers(tree, mine)
                    ev = evaluate_policies(trees, env, self.action_map, means, stds, E, steps, seed=seed,
                                           common_starts=self.common)
                    ret, lengths = ev.returns, ev.lengths  # means over the E episodes, [samples]
                else:
                    policy = linear_policy(tree, mine, mean, std, self.action_map)
                    res = envs.rollout(env, policy, len(mine), E, max_steps=steps, seed=seed,
                                       common_starts=self.common)
                    ret, lengths = res.mean_return, res.mean_length
            score = ret - shift * lengths if shift else ret
            return dist.gather(score, n, "gathering the refinement's returns", per=per // E)

        try:
            if not constants and not self.normalizer.enabled:
                # raw observations: each weight moves in units of 1 / its observation's spread under the
                # tree, as it would on normalised observations (velocities and angles differ tenfold)
                scale = feedback_scale(self._spread(tree, env, mean, std, n, per, (a, b),
                                                    self._seed(0x5EED, 4)))
            done = refine(start, n * per // E, settings, seconds, first, play,
                          agree=lambda go: dist.broadcast_object(go, "agreeing to go on refining"),
                          log=(lambda line: print(f"gprl: {line}", flush=True)) if dist.is_main else None,
                          scale=scale)
        finally:
            if not reuse:
                env.close()
        if constants:
            refined, m, sd = with_numbers(tree.to("cpu"), done.params[None])
            mean, std = m[0].to(h["mean"]), sd[0].to(h["std"])
        else:
            refined, mean, std = fold(tree.to("cpu"), done.params), h["mean"], h["std"]
        last = [row["mean_score"] for row in done.history[-5:]]
        found = [{"tree": population_state(refined), "mean": mean, "std": std,
                  "fitness": float(np.mean(last)) if last else math.nan,
                  "generation": h["generation"], "source": "refined"}]
        if settings.prune is not None:  # shorter formulas: the feedback cut to each action's heaviest terms
            found += [{**found[0], "tree": population_state(fold(tree.to("cpu"), w)), "fitness": None,
                       "source": "pruned", "terms": k} for k, w in pruned_feedback(done.params, scale)]
        new = self._play(found, self._validation_size(len(found)), self._seed(0x5EED, 1))  # as validate
        self.validated = (cands + found, rows + new)
        tuned = {"refine_constants": int(start.numel()) - 2 * self.n_in} if constants else \
            {"refine_weights": int(done.params[:, :self.n_in].count_nonzero())}
        pruned = {f"pruned_{f['terms']}_validation_return": r["validation_return"]
                  for f, r in zip(found[1:], new[1:])}
        return {"refine_iterations": done.iterations, "refine_s": round(done.seconds, 1), **tuned,
                "refined_validation_return": new[0]["validation_return"],
                "unrefined_validation_return": rows[best]["validation_return"], **pruned}

    def _spread(self, tree: Population, env: envs.VecEnv, mean: torch.Tensor, std: torch.Tensor, n: int,
                per: int, bounds: tuple[int, int], seed: int) -> torch.Tensor:
        """The standard deviation of the live observations of ``tree`` over one batch of ``env``'s episodes
        (``n`` items of ``per`` environments, this rank's ``bounds``), ``[n_in]`` on the CPU."""
        a, b = bounds
        stats = ObsNormalizer(self.n_in, self.device)
        with self.dist.agree("measuring the observations' spread"):
            ev = evaluate_policies(tree[torch.zeros(b - a, dtype=torch.long, device=tree.device)], env,
                                   self.action_map, mean, std, 1, self.final_length, seed=seed + a,
                                   collect_stats=True)
        stats.merge_envs(*(self.dist.gather(x, n, "gathering the observations' spread", per=per)
                           for x in ev.obs_stats))
        stats.freeze()
        return stats.std.cpu()

    def _simplified(self, cands: list[dict[str, Any]], rows: list[dict[str, Any]]
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``task.simplify``: the tree that would be exported, simplified by evaluation
        (:mod:`gprl.evolve.simplify`) at each of :data:`SIMPLIFY_TOLERANCES` on the observations of its own
        episodes, its actions compared in units of their half ranges; the shorter trees are validated beside
        the candidates (on the first validation round's starts). Rank 0 simplifies, every rank validates."""
        h = cands[self._pick(rows)]
        tree = population_from_state(h["tree"], "cpu")
        X = self._visited(h)
        found: list[dict[str, Any]] = []
        if self.dist.is_main and len(X):
            reference = self.action_map.unit(tree.forward(X, check_finite=False))[0]
            last = tree
            for tolerance in SIMPLIFY_TOLERANCES:
                simpler = simplify(last, X, tolerance, self.action_map.unit, reference, SIMPLIFY_SECONDS)
                if simpler.size[0, 0] < last.size[0, 0]:  # unchanged: no new candidate
                    found.append({**h, "tree": population_state(simpler), "fitness": None,
                                  "source": "simplified", "tolerance": tolerance})
                last = simpler
        found = self.dist.broadcast_object(found, "sharing the simplified trees")
        if not found:
            return cands, rows
        new = self._play(found, self._validation_size(len(found)), self._seed(0x5EED, 1))  # as validate
        return cands + found, rows + new

    def _visited(self, h: dict[str, Any]) -> torch.Tensor:
        """Up to :data:`SIMPLIFY_ROWS` normalised observations ``[D, n_in]`` (CPU) of candidate ``h``'s live
        steps in :data:`SIMPLIFY_EPISODES` fresh full-length episodes (rank 0's; the other ranks return
        none). Where validation fills the training batch (a Brax batch of another size compiles anew) the
        training environment plays and its first episodes are kept."""
        if not self.dist.is_main:
            return torch.zeros(0, self.n_in)
        reuse = self.validation_episodes == 0 and self.train_kwargs == self.env_kwargs
        env = self.env if reuse else envs.make(self.name, backend=self.backend, num_envs=SIMPLIFY_EPISODES,
                                               device=self.device, seed=self.seed,
                                               episode_length=self.final_length, **self.env_kwargs)
        tree = population_from_state(h["tree"], self.device)
        mean, std = h["mean"].to(self.device), h["std"].to(self.device)
        kept = min(SIMPLIFY_EPISODES, env.num_envs)
        seen: list[torch.Tensor] = []

        def policy(obs: torch.Tensor) -> torch.Tensor:
            x = (obs - mean) / std
            live = ~env.done[:kept]  # ended episodes' observations are not the policy's (they may be NaN)
            seen.append(x.reshape(-1, self.n_in)[:kept][live])
            return self.action_map(tree.forward(x.reshape(-1, self.n_in), check_finite=False)
                                   .reshape(*obs.shape[:-1], -1))

        try:
            envs.rollout(env, policy, env.num_envs, 1, self.final_length, seed=self._seed(0x5EED, 5))
        finally:
            if not reuse:
                env.close()
        X = torch.cat(seen).cpu()
        pick = torch.randperm(len(X), generator=torch.Generator().manual_seed(self._seed(0x5EED, 6)))
        return X[pick[:SIMPLIFY_ROWS]]

    def finish(self, population: Population, fitness: torch.Tensor | None, out_dir: str) -> dict[str, Any]:
        if not self.hof:
            raise RuntimeError("no generation was evaluated: nothing to export")
        if self.validated is not None:
            cands, rows = self.validated
        else:
            cands = self.candidates()
            _, rows = self.validate(cands)  # on every rank (each plays its share)
        if self.simplify is not None:
            cands, rows = self._simplified(cands, rows)
        best = self._pick(rows)
        h = cands[best]
        tree = population_from_state(h["tree"], "cpu")
        result = {"validation_return": rows[best]["validation_return"],
                  "train_return": rows[best]["train_return"],
                  "tree_length": int(tree.lengths()[0])}
        if not self.dist.is_main:
            return {"files": {}, "formulas": {}, **result}
        low = None if self.action_map.low is None else self.action_map.low.tolist()
        high = None if self.action_map.high is None else self.action_map.high.tolist()
        meta = {"env": self.name, "backend": self.backend, "episode_length": self.final_length,
                "env_kwargs": self.env_kwargs, "generation": h["generation"],
                "train_return": result["train_return"], "reward_shift": self.reward_shift,
                "validation": rows[best], "candidates": rows}
        files = export_policy(out_dir, tree, h["mean"].tolist(), h["std"].tolist(), self.action_map.transform,
                              low, high, self.env.observation_names(), self.action_names, meta, self.digits,
                              self.action_map.segments)
        with open(files["json"]) as f:
            formulas = json.load(f)["formulas"]
        return {"files": files, "formulas": formulas, **result}

    def close(self) -> None:
        self.env.close()
        if self.final_env is not None:
            self.final_env.close()
