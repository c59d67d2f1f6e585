"""`torchrun train.py` on the CPU (gloo, 2 processes): the same result as one process, bit for bit; kill and
resume with another number of processes; a rank that dies; bad configurations (gprl/train/distributed.py)."""

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gprl import Population
from gprl.train import distributed
from gprl.train.distributed import Dist, ordered_sum, shard_bounds
from gprl.train.tasks.policy import PolicyTask
from tests.train.helpers import ROOT, TINY, assert_same_final_population, metrics, run_train

# 11 trees (uneven shards), 2 episodes each, episodes long enough that a run can be killed in the middle
POLICY = [*TINY, "gp.population_size=11", "env.episodes=2", "env.episode_length=120", "gp.generations=6",
          "checkpoint_every=1", "wandb.mode=disabled", "progress=false", "dist.timeout_s=30"]
SR = ["task=sr", "dataset=koza_quartic", "gp.population_size=200", "gp.generations=6", "checkpoint_every=2",
      "wandb.mode=disabled", "progress=false"]
LAST = "gen_000006.pt"


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "disabled", "WANDB_DIR": str(tmp_path / "wandb_home"),
            "HYDRA_FULL_ERROR": "0"}


def torchrun(tmp_path: Path, run: str, nproc: int, *overrides: str, check: bool = True, wait: bool = True):
    """`python -m torch.distributed.run --nproc_per_node=<nproc> --standalone train.py ...`
    into tmp_path/run."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--standalone",
           "train.py", f"hydra.run.dir={tmp_path / run}", *overrides]
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    res = subprocess.run(cmd, check=False, cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True,
                         timeout=240)
    if check and res.returncode != 0:
        raise AssertionError(f"torchrun failed ({res.returncode}):\n"
                             f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


def launch_ranks(tmp_path: Path, run: str, nproc: int, *overrides: str) -> list[subprocess.Popen]:
    """The ranks of a run started by hand (no torchrun agent that would kill the survivors of a dead rank)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(nproc):
        env = {**_env(tmp_path), "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
               "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen(
            [sys.executable, "train.py", f"hydra.run.dir={tmp_path / run}", *overrides],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs


def wait_for(path: Path, procs, seconds: float = 200) -> None:
    deadline = time.time() + seconds
    while not path.exists() and time.time() < deadline and all(p.poll() is None for p in procs):
        time.sleep(0.01)
    assert path.exists(), f"{path} never appeared"


def assert_same_run(a: Path, b: Path) -> None:
    ca, cb = assert_same_final_population(a, b, LAST)
    assert ca["best_so_far"] == cb["best_so_far"]
    if "normalizer" in ca["task"]:
        assert torch.equal(ca["task"]["normalizer"]["m2"], cb["task"]["normalizer"]["m2"])
    assert metrics(a) == metrics(b)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    """The reference: the policy run in a single process."""
    tmp = tmp_path_factory.mktemp("one")
    run_train(tmp, "run", *POLICY)
    return tmp / "run"


def test_ordered_sum_and_shards():
    x = torch.randn(1001, 3, dtype=torch.float64) * 1e6
    assert torch.allclose(ordered_sum(x), x.sum(0), rtol=1e-12)
    assert torch.equal(ordered_sum(x), ordered_sum(x.clone().contiguous()))
    assert torch.equal(ordered_sum(x[:0]), torch.zeros(3, dtype=torch.float64))
    for n, k in ((11, 2), (11, 3), (5, 5), (1000, 7)):
        bounds = [shard_bounds(n, k, r) for r in range(k)]
        assert (bounds[0][0] == 0 and bounds[-1][1] == n
                and all(a[1] == b[0] for a, b in itertools.pairwise(bounds)))
        assert max(b - a for a, b in bounds) - min(b - a for a, b in bounds) <= 1


def test_population_travels_as_bytes():
    pop = Population.random(3, n_in=2, n_out=2, max_len=7, seed=0, functions=["add", "mul", "sin"])
    buf = distributed.pack_population(pop)
    assert buf.dtype == torch.uint8 and buf.numel() == distributed.population_bytes(3, 7)
    assert distributed.unpack_population(buf, 3, 7, 2, 2).equal(pop)


def test_two_processes_give_the_one_process_result(one_process, tmp_path):
    torchrun(tmp_path, "two", 2, *POLICY)
    two = tmp_path / "two"
    assert_same_run(one_process, two)
    a, b = (json.loads((d / "policy.json").read_text()) for d in (one_process, two))
    assert a == b  # the same hall of fame, validated on the same episodes (split over the ranks)
    assert (one_process / "policy.py").read_text() == (two / "policy.py").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["two"]  # rank 1 wrote no run directory


def test_racing_over_two_processes_gives_the_one_process_result(tmp_path):
    """Racing's finalists (5 of 11: an uneven split) play on both ranks; the run is the one process's."""
    race = [*POLICY, "gp.generations=3", "env.racing={horizon: 0.5, finalists: 0.4, episodes: 3}"]
    run_train(tmp_path, "one", *race)
    torchrun(tmp_path, "two", 2, *race)
    one, two = tmp_path / "one", tmp_path / "two"
    assert all("racing_length" in row for row in metrics(one))
    assert_same_final_population(one, two, "gen_000003.pt")
    assert metrics(one) == metrics(two)
    assert (one / "policy.json").read_text() == (two / "policy.json").read_text()


def test_draws_over_two_processes_give_the_one_process_result(tmp_path):
    """gp.draws: every rank keeps the best draw and its observation statistics: the one process's run."""
    draws = [*POLICY, "gp.generations=5", "gp.draws=2", "gp.draw_generations=2"]
    run_train(tmp_path, "one", *draws)
    torchrun(tmp_path, "two", 2, *draws)
    one, two = tmp_path / "one", tmp_path / "two"
    assert [row["episode_length"] for row in metrics(one)] == [30, 75, 30, 75, 120]  # per draw
    assert_same_final_population(one, two, "gen_000005.pt")
    assert metrics(one) == metrics(two)
    assert (one / "policy.json").read_text() == (two / "policy.json").read_text()


# share 0: 3 iterations whatever the clock (the backend default's share would bound them by the evolution's
# time, which a loaded machine makes differ between the two runs)
REFINE_3 = "share: 0, iterations: 3, pairs: 7"


@pytest.mark.parametrize("refine_cfg", [f"{{{REFINE_3}}}", f"{{{REFINE_3}, target: constants, episodes: 2}}"])
def test_refinement_over_two_processes_gives_the_one_process_result(tmp_path, refine_cfg):
    """task.refine's 7 pairs (14 rows: 7 a rank, each of 1 or 2 episodes) play on both ranks; the refined tree
    is the one process's."""
    # no simplification: it stops on the clock, and the exported tree must be the one process's
    refine = [*POLICY, "gp.generations=2", f"task.refine={refine_cfg}", "task.simplify=false"]
    run_train(tmp_path, "one", *refine)
    torchrun(tmp_path, "two", 2, *refine)
    one, two = (json.loads((tmp_path / d / "policy.json").read_text()) for d in ("one", "two"))
    assert "refined" in [c["source"] for c in one["meta"]["candidates"]]
    assert one == two


def test_a_dead_rank_fails_the_others_and_resume_with_one_process(one_process, tmp_path):
    """Rank 1 is killed mid-run: rank 0 exits with a clear error well within dist.timeout_s, the checkpoints
    stay intact, and resuming with a single process ends exactly as the uninterrupted run."""
    procs = launch_ranks(tmp_path, "killed", 2, *POLICY)
    wait_for(tmp_path / "killed" / "checkpoints" / "gen_000002.pt", procs)
    procs[1].send_signal(signal.SIGKILL)
    t = time.time()
    out, _ = procs[0].communicate(timeout=60)
    procs[1].wait()
    assert time.time() - t < 30 + 10
    assert procs[0].returncode not in (0, None), out[-3000:]
    assert not (tmp_path / "killed" / "summary.json").exists(), "the run finished before rank 1 was killed"
    assert "error (rank 0): distributed:" in out and "dist.timeout_s=30" in out, out[-3000:]
    assert f"resume={tmp_path / 'killed'}" in out
    for ckpt in (tmp_path / "killed" / "checkpoints").iterdir():
        torch.load(ckpt, weights_only=False)  # complete files only (atomic writes)
    run_train(tmp_path, "resumer", *POLICY, f"resume={tmp_path / 'killed'}")
    assert_same_run(one_process, tmp_path / "killed")


def test_a_one_process_checkpoint_resumes_with_two(one_process, tmp_path):
    """The reference run stopped after generation 5 (its last checkpoint but one) continues over 2 processes
    (rank 0 reads the checkpoint and shares it) and ends exactly as it did."""
    stopped = tmp_path / "stopped"
    shutil.copytree(one_process, stopped)
    for name in ("checkpoints/" + LAST, "summary.json", "policy.json", "policy.py", "policy.txt",
                 "policy.tex"):
        (stopped / name).unlink()
    torchrun(tmp_path, "resumer", 2, *POLICY, f"resume={stopped}")
    assert_same_run(one_process, stopped)
    assert (stopped / "policy.py").read_text() == (one_process / "policy.py").read_text()


def test_sr_population_shards_match_one_process_and_data_shards_are_close(tmp_path):
    run_train(tmp_path, "one", *SR)
    torchrun(tmp_path, "two", 2, *SR)
    assert_same_run(tmp_path / "one", tmp_path / "two")
    assert (tmp_path / "one" / "model.py").read_text() == (tmp_path / "two" / "model.py").read_text()
    assert json.loads((tmp_path / "two" / "model.json").read_text())["meta"]["linear_scaling"]
    # rows split over the ranks (linear scaling auto: off, each rank holds only its rows): float64 partial
    # sums of float32 losses, equal up to rounding to one process without the scaling
    torchrun(tmp_path, "rows", 2, *SR, "dist.shard=data")
    run_train(tmp_path, "plain", *SR, "task.linear_scaling=false")
    a, b = metrics(tmp_path / "plain")[0], metrics(tmp_path / "rows")[0]
    for key in ("best_loss", "train_r2", "test_loss", "test_r2"):
        assert b[key] == pytest.approx(a[key], rel=1e-5), key
    assert json.loads((tmp_path / "rows" / "model.json").read_text())["scaling"] is None


def test_island_model_runs_the_same_over_two_processes(tmp_path):
    islands = [*SR, "gp.islands=4", "gp.migration_interval=2", "gp.migrants=2"]
    run_train(tmp_path, "one", *islands)
    torchrun(tmp_path, "two", 2, *islands)
    assert_same_run(tmp_path / "one", tmp_path / "two")


@pytest.mark.parametrize("overrides, message", [
    (["gp.population_size=1", "gp.elitism=1"],
     "gp.population_size=1 is smaller than the number of processes (2)"),
])
def test_bad_distributed_configuration_fails_every_rank(tmp_path, overrides, message):
    procs = launch_ranks(tmp_path, "bad", 2, *TINY, "gp.generations=2", "wandb.mode=disabled",
                         "progress=false", "dist.timeout_s=30", *overrides)
    outs = [p.communicate(timeout=60)[0] for p in procs]
    for rank, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode != 0 and f"error (rank {rank}):" in out, out[-3000:]
    assert message in outs[1], outs[1][-3000:]  # every rank names the problem and its fix (config key)
    assert "error (rank 0):" in outs[0] and "gp.population_size" in outs[0]
    assert not (tmp_path / "bad" / "checkpoints").exists()


RANK_CODE = """
import json, torch
from gprl import Population
from gprl.train import distributed
d = distributed.init({"dist": {"timeout_s": 30}})
r = d.rank
out = {"world": d.world_size}
# uneven shards of 5 items, 2 rows an item, gathered in rank order
a, b = d.bounds(5)
out["gather"] = d.gather(torch.arange(2 * a, 2 * b, dtype=torch.float64), 5, per=2).tolist()
out["sum"] = int(d.sum(torch.tensor(r + 1)))
pop = Population.random(3, n_in=2, max_len=7, seed=0) if r == 0 else None
got = d.broadcast_population(pop, size=3, n_in=2, n_out=1, max_len=7, device=torch.device("cpu"))
out["population"] = got.equal(Population.random(3, n_in=2, max_len=7, seed=0))
try:
    with d.agree("checking the devices"):
        if r == 1:
            raise ValueError("device=cuda: rank 1 has no GPU")
except Exception as err:
    out["error"] = f"{type(err).__name__}: {err}"
print(json.dumps(out), flush=True)  # before the group's teardown: its threads can abort a process at exit
d.close()
"""


def test_collectives_and_error_agreement_between_ranks(tmp_path):
    """Two ranks (gloo): gather in global order, sum, population broadcast, and a failure on rank 1 only is an
    error on both ranks (rank 0 names rank 1 and its message) instead of a hang."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, "-c", RANK_CODE], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**_env(tmp_path), "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}) for r in range(2)]
    outs = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    for out in outs:
        assert (out["world"] == 2 and out["gather"] == list(range(10)) and out["sum"] == 3
                and out["population"])
    assert outs[1]["error"] == "ValueError: device=cuda: rank 1 has no GPU"
    assert outs[0]["error"] == ("DistributedError: rank 1 failed while checking the devices: "
                                "ValueError: device=cuda: rank 1 has no GPU")


def test_more_processes_than_gpus_is_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    third = Dist(rank=2, world_size=3, local_rank=2)
    with pytest.raises(ValueError, match=r"device=cuda: this node has 2 GPU\(s\) but runs a process with "
                                         r"LOCAL_RANK=2; launch at most 2 processes per node \(torchrun "
                                         r"--nproc_per_node=2\) or set device=cpu"):
        third.task_device("cuda")
    assert Dist(rank=1, world_size=3, local_rank=1).task_device("cuda") == "cuda:1"
    # device=auto: a GPU environment backend picked the current GPU, which is not this rank's own
    with pytest.raises(ValueError, match=r"rank 2 \(LOCAL_RANK=2\) would run on cuda:0, "
                                         r"but every rank needs its own GPU"):
        third.check_task_device(torch.device("cuda", 0))


def test_configuration_errors_name_the_key_and_the_fix():
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"device=cuda: this node has no CUDA GPU "
                                             r"\(process LOCAL_RANK=1\); "
                                             "set device=cpu"):
            Dist(rank=1, world_size=2, local_rank=1).task_device("cuda")
    two = Dist(rank=1, world_size=2, local_rank=1)
    with pytest.raises(ValueError, match="pins every rank to one GPU; set device=cuda"):
        two.task_device("cuda:1")
    with pytest.raises(ValueError, match=r"dist.backend=nccl carries CUDA tensors only, but device=cpu"):
        Dist(world_size=2, backend="nccl").task_device("cpu")
    with pytest.raises(ValueError,
                       match=r"dist.backend=nccl carries CUDA tensors only, but the task runs on cpu"):
        Dist(world_size=2, backend="nccl").check_task_device(torch.device("cpu"))
    with pytest.raises(ValueError,
                       match=r"gp.population_size=1 is smaller than the number of processes \(2\)"):
        two.check_shardable(1, "gp.population_size", "individual")
    assert two.task_device("cpu") == "cpu" and two.task_device("auto") is None
    with pytest.raises(ValueError, match="dist.shard=data applies to task=sr"):
        PolicyTask.from_config({"dist": {"shard": "data"}, "gp": {}, "task": {}}, None, two)
    for key, value, message in (("timeout_s", 0, "dist.timeout_s must be a positive"),
                                ("backend", "mpi", "dist.backend must be one of"),
                                ("shard", "rows", "dist.shard must be one of")):
        with pytest.raises(ValueError, match=message):
            distributed.init({"dist": {key: value}})
