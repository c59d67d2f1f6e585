"""Library pieces of the training app: normaliser, action map, episode schedule, export, checkpoints."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sympy
import torch

import gprl
from gprl import functions as F
from gprl.core.formulas import safe_names, tree_from_record
from gprl.rl.export import export_policy, policy_expressions
from gprl.rl.policy import ActionMap, ObsNormalizer
from gprl.train.checkpoint import check_fingerprint, list_checkpoints, load_checkpoint, save_checkpoint
from gprl.train.tasks.policy import episode_length_at, episode_schedule

FUNCS = ["add", "sub", "mul", "div", "sin", "cos", "exp", "log", "sqrt", "abs", "neg", "inv", "pow", "max",
         "min", "tanh", "sigmoid", "lt", "gt", "if"]


def test_normalizer_matches_numpy_over_merged_batches():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 4)) * [1, 10, 0.1, 1] for n in (5, 17, 1, 40)]
    norm = ObsNormalizer(4)
    for b in batches:
        t = torch.from_numpy(b)
        norm.merge(torch.tensor(float(len(b)), dtype=torch.float64), t.sum(0), t.square().sum(0))
    norm.freeze()
    allx = np.concatenate(batches)
    np.testing.assert_allclose(norm.mean.numpy(), allx.mean(0), rtol=1e-6)
    np.testing.assert_allclose(norm.std.numpy(), np.sqrt(allx.var(0) + 1e-8), rtol=1e-5)
    # an empty batch changes nothing; a disabled normaliser is the identity
    before = norm.mean64.clone()
    norm.merge(torch.zeros((), dtype=torch.float64), torch.zeros(4, dtype=torch.float64),
               torch.zeros(4, dtype=torch.float64))
    assert torch.equal(before, norm.mean64)
    off = ObsNormalizer(4, enabled=False)
    off.merge(torch.tensor(5.0, dtype=torch.float64), torch.ones(4, dtype=torch.float64),
              torch.ones(4, dtype=torch.float64))
    off.freeze()
    assert torch.equal(off.mean, torch.zeros(4)) and torch.equal(off.std, torch.ones(4))


def test_action_map_keeps_outputs_in_bounds():
    low, high = torch.tensor([-1.0, 0.0, -0.4]), torch.tensor([1.0, 2.0, 0.4])
    y = torch.tensor([[-1e30, 0.0, 3.0], [1e30, -5.0, -0.1]])
    a = ActionMap("tanh", low, high)(y)
    assert torch.all(a >= low) and torch.all(a <= high)
    assert torch.allclose(a[0, 1], torch.tensor(1.0)) and torch.allclose(a[1, 0], torch.tensor(1.0))
    c = ActionMap("clip", low, high)(y)
    assert torch.equal(c, torch.maximum(torch.minimum(y, high), low))
    with pytest.raises(ValueError, match="transform"):
        ActionMap("softmax", low, high)
    with pytest.raises(ValueError, match="bounds"):
        ActionMap("tanh")


def test_episode_schedule():
    assert [episode_length_at(g, 200, 1000, 4) for g in range(6)] == [200, 400, 600, 800, 1000, 1000]
    assert episode_length_at(3, 1000, 1000, 10) == 1000 and episode_length_at(0, 200, 1000, 0) == 1000
    assert episode_schedule(None, 1000) == (1000, 0)
    assert episode_schedule({"start": 100, "ramp_generations": 30}, 1000) == (100, 30)
    assert episode_schedule({"start": 2000}, 1000) == (1000, 0)
    for bad, match in (({"end": 500}, "takes start and ramp_generations"), ({"start": 0}, "start"),
                       ({"start": 2.5}, "start"), ({"ramp_generations": -1}, "ramp_generations"),
                       ({"start": True}, "start")):
        with pytest.raises(ValueError, match=match):
            episode_schedule(bad, 1000)


@pytest.mark.parametrize("transform", ["tanh", "clip", "none"])
def test_exported_module_reproduces_kernels(tmp_path, transform):
    """policy.py (NumPy, protected forms copied in) against the kernels on normalised inputs."""
    P, n_in, n_out = 10, 5, 3
    pop = gprl.Population.random(P, n_in, n_out, max_len=48, functions=FUNCS, max_depth=5, seed=3)
    g = torch.Generator().manual_seed(0)
    mean, std = torch.randn(n_in, generator=g), torch.rand(n_in, generator=g) + 0.3
    low, high = torch.tensor([-1.0, 0.0, -0.4]), torch.tensor([1.0, 2.0, 0.4])
    X = torch.randn(200, n_in, generator=g) * 2 + mean
    amap = ActionMap(transform, low, high)
    raw = pop.forward(((X - mean) / std).expand(P, -1, -1).contiguous())
    want = amap(raw).numpy()
    names = ["a b", "x0", "class", "2nd", "x0"]  # messy names become distinct identifiers
    for i in range(P):
        paths = export_policy(tmp_path / str(i), pop[i], mean.tolist(), std.tolist(), transform, low.tolist(),
                              high.tolist(), names, None, {"env": "test"})
        spec = importlib.util.spec_from_file_location(f"p{transform}{i}", paths["py"])
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        # act(): float32 in the kernels' order with the C library's functions; the CPU kernels' sin/cos/tan
        # (kernels/trig_cpu.h, within 0.504 ulp) and libm's may differ in the last bit of a few values
        np.testing.assert_allclose(mod.scores(X.numpy()), raw[i].numpy(), rtol=1e-6, atol=1e-7)
        got = mod.act(X.numpy())
        assert got.shape == (200, n_out) and got.dtype == np.float32
        np.testing.assert_allclose(got, np.clip(want[i], low.numpy(), high.numpy()), rtol=1e-6, atol=1e-7)
        # the folded float64 formula: equal except where a protected branch flips at its threshold
        close = np.isclose(np.clip(mod.formula_scores(X.double().numpy()), low.numpy(), high.numpy()),
                           np.clip(want[i], low.numpy(), high.numpy()), rtol=1e-3, atol=1e-3)
        assert close.mean() > 0.98, (i, Path(paths["txt"]).read_text())
        rec = json.loads(Path(paths["json"]).read_text())
        assert torch.equal(tree_from_record(rec["tree"], 48).kind, pop[i].kind)
        assert rec["normalization"]["mean"] == pytest.approx(mean.tolist())
    assert safe_names(names, 5, "obs") == ["a_b", "x0", "obs_class", "obs_2nd", "x0_4"]


def test_folded_expression_is_raw_units():
    """A hand-made tree: y = x0 * x1 on normalised inputs, tanh to [0, 2]."""
    tree = gprl.Population.from_expressions(["x0 * x1"], n_in=2)
    (e,) = policy_expressions(tree, [1.0, -2.0], [2.0, 4.0], "tanh", [0.0], [2.0], ["u", "v"])
    u, v = sympy.symbols("u v", real=True)
    expected = 1 + sympy.tanh((u - 1) / 2 * (v + 2) / 4)
    for uu, vv in [(0.3, -1.0), (5.0, 2.0), (-3.0, 0.0)]:
        assert float(e.subs({u: uu, v: vv})) == pytest.approx(float(expected.subs({u: uu, v: vv})), rel=1e-12)


def test_simplification_has_a_time_bound():
    """sympy.simplify can run for minutes on small tanh/Min forms (seen on HalfCheetah policies): past the
    bound the export keeps the folded formula, and the timer and handler are put back."""
    import signal

    from gprl.core.formulas import simplify_within

    x, y = sympy.symbols("x y", real=True)
    slow = sympy.tanh(2 * sympy.tanh(0.1403 * x - 0.009714) - sympy.tanh(6.909 * y - 0.2117 * x + 2.238)
                      + sympy.tanh(sympy.Min(sympy.tanh(4.881 * x - 8.619 * y), sympy.tanh(0.3 * y))))
    before = signal.getsignal(signal.SIGALRM)
    assert simplify_within(slow, 1e-4) is None
    assert simplify_within(x * y / x + y, 5.0) == 2 * y
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_an_alarm_landing_after_simplify_returned_is_ignored(monkeypatch):
    """The timer fires once simplify is done but before it is disarmed (a slow machine, a bound just met):
    the result stands and nothing escapes the export."""
    import signal

    from gprl.core.formulas import readable, simplify_within

    setitimer = signal.setitimer

    def late_alarm(which, seconds, *interval):
        if seconds == 0:
            signal.raise_signal(signal.SIGALRM)
        return setitimer(which, seconds, *interval)

    monkeypatch.setattr(signal, "setitimer", late_alarm)
    x, y = sympy.symbols("x y", real=True)
    assert simplify_within(x * y / x + y, 5.0) == 2 * y
    assert readable(x * y / x + y) == 2 * y


def test_policy_module_needs_only_numpy(tmp_path):
    tree = gprl.Population.from_expressions([["x0 / x1", "log(x0)"]], n_in=2)
    paths = export_policy(tmp_path, tree, [0, 0], [1, 1], "clip", [-1, -1], [1, 1], ["p", "q"],
                          ["f", "g"], {})
    code = (f"import sys; sys.modules['torch'] = None; sys.modules['gprl'] = None; "
            f"import importlib.util as u; "
            f"s = u.spec_from_file_location('p', {paths['py']!r}); m = u.module_from_spec(s); "
            f"s.loader.exec_module(m); print(m.act([0.5, 0.0]).tolist(), m.act([2.0, 4.0]).tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # protected division: x/0 -> 1; log(2) ~ 0.693, clipped to [-1, 1]
    first, second = out.strip().replace("] [", "]|[").split("|")
    assert (json.loads(first) == pytest.approx([1.0, -0.6931472])
            and json.loads(second) == pytest.approx([0.5, 0.6931472]))
    assert F.EPS == 1e-6


def test_checkpoint_roundtrip_and_fingerprint(tmp_path):
    for g in (1, 2, 3):
        save_checkpoint(tmp_path, g, {"x": torch.arange(g), "fingerprint": {"env": "hopper"}}, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["gen_000002.pt", "gen_000003.pt"]
    state = load_checkpoint(tmp_path)
    assert state["generation"] == 3 and torch.equal(state["x"], torch.arange(3))
    with pytest.raises(ValueError, match="obs_dim: run has 11, this configuration 12"):
        check_fingerprint({"env": "hopper", "obs_dim": 11}, {"env": "hopper", "obs_dim": 12}, tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoints"):
        load_checkpoint(tmp_path / "checkpoints")


def test_per_backend_defaults_fill_only_null_entries():
    from omegaconf import OmegaConf

    from gprl.train.trainer import apply_backend_defaults

    hopper = Path(__file__).parents[2] / "configs" / "env" / "hopper.yaml"
    env = OmegaConf.to_container(OmegaConf.load(hopper))
    gp = {"population_size": None, "time_limit": None}
    brax = apply_backend_defaults({"env": {**env, "backend": "brax"}, "gp": dict(gp), "task": {}})
    assert brax["gp"]["population_size"] == 16384 and brax["env"]["kwargs"] == {"pipeline": "generalized"}
    assert brax["task"]["validation_episodes"] == 0
    mine = apply_backend_defaults({"env": {**env, "backend": "brax"}, "gp": {**gp, "population_size": 64},
                                   "task": {}})
    assert mine["gp"]["population_size"] == 64 and mine["gp"]["time_limit"] == 400
    # tree bounds and tournament: the environment's, else the policies' fallback; a given value stays
    assert (brax["gp"]["max_len"], brax["gp"]["max_depth"], brax["gp"]["tournament_size"]) == (64, 8, 5)
    cheetah = OmegaConf.to_container(OmegaConf.load(hopper.with_name("halfcheetah.yaml")))
    cpu = apply_backend_defaults({"env": {**cheetah, "backend": "mujoco"},
                                  "gp": {**gp, "max_len": None, "max_depth": 10}, "task": {}})
    assert (cpu["gp"]["max_len"], cpu["gp"]["max_depth"]) == (128, 10)
    assert cpu["env"]["racing"] == {"horizon": 0.25, "finalists": 0.25}
    # a mapping given where the default is one is laid over it; false and other values replace it
    mine = apply_backend_defaults({"env": {**cheetah, "backend": "mujoco", "racing": {"finalists": 0.5}},
                                   "gp": dict(gp), "task": {"refine": {"pairs": 32}}})
    assert mine["env"]["racing"] == {"horizon": 0.25, "finalists": 0.5}
    assert mine["task"]["refine"] == {**cheetah["per_backend"]["mujoco"]["task"]["refine"], "pairs": 32}
    assert mine["task"]["refine"]["share"] == 0.4  # the default's share kept
    off = apply_backend_defaults({"env": {**cheetah, "backend": "mujoco"}, "gp": dict(gp),
                                  "task": {"refine": False}})
    assert off["task"]["refine"] is False
    fast = apply_backend_defaults({"env": {**cheetah, "backend": "brax"}, "gp": dict(gp), "task": {}})
    assert (fast["gp"]["population_size"], fast["gp"]["tournament_size"]) == (4096, 20)
    # Brax HalfCheetah: + - * / on raw observations, in draws; the other backends keep the policies' fallback
    assert fast["gp"]["functions"] == ["add", "sub", "mul", "div"] and fast["env"]["normalize_obs"] is False
    assert (fast["gp"]["const_range"], fast["gp"]["draws"]) == ([-5.0, 5.0], 12)
    assert len(cpu["gp"]["functions"]) == 8 and cpu["gp"]["const_range"] == [-1.0, 1.0]
    assert cpu["env"]["normalize_obs"] is True and cpu["gp"].get("draws") is None
    mine = apply_backend_defaults({"env": {**cheetah, "backend": "brax"}, "gp": {**gp, "tournament_size": 3},
                                   "task": {}})
    assert mine["gp"]["tournament_size"] == 3
    if torch.cuda.is_available():
        return  # auto may pick Brax on a GPU machine
    auto = apply_backend_defaults({"env": dict(env), "gp": dict(gp), "task": {}})
    assert auto["env"]["backend"] == "mujoco" and auto["gp"]["population_size"] == 1000
    assert auto["env"]["episode_schedule"] == {"start": 200, "ramp_generations": 30}
