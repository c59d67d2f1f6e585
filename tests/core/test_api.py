"""Population API: construction, structure, indexing, persistence, op registration and bad input."""

import os

import numpy as np
import pytest
import torch

from gprl import Population
from gprl.core.functions import BY_NAME
from tests.backend.helpers import opcheck_all


def test_opcheck_cpu():
    opcheck_all("cpu")


def test_generate_is_reproducible_and_valid():
    kw = {"max_len": 128, "functions": list(BY_NAME), "output_prob": 0.5, "max_depth": 7}
    a = Population.random(3000, 5, 4, seed=11, **kw)
    assert a.equal(Population.random(3000, 5, 4, seed=11, **kw))
    assert not a.equal(Population.random(3000, 5, 4, seed=12, **kw))
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert Population.random(50, 2, seed=g1).equal(Population.random(50, 2, seed=g2))
    assert (a.validate() == 0).all()


@pytest.mark.parametrize("method", ["grow", "full", "ramped"])
def test_generate_respects_limits_and_choices(method):
    pop = Population.random(4000, 3, 5, max_len=40, method=method, min_depth=2, max_depth=6,
                            functions={"add": 1.0, "sin": 1.0, "if": 0.5}, const_prob=0.3,
                            const_range=(-0.5, 0.25), output_prob=0.25, seed=1)
    assert (pop.validate() == 0).all()
    assert int(pop.lengths().max()) <= 40
    depths = pop.depths()
    assert int(depths.max()) <= 6
    funcs = pop.code[(pop.kind & 3) == 3]
    assert set(funcs.unique().tolist()) <= {BY_NAME["add"].id, BY_NAME["sin"].id, BY_NAME["if"].id}
    consts = pop.value[(pop.kind & 3) == 2]
    assert float(consts.min()) >= -0.5 and float(consts.max()) < 0.25 and len(consts) > 100
    modi = (pop.kind & 4) != 0
    n_fn = int(((pop.kind & 3) == 3).sum())
    assert abs(int(modi.sum()) / n_fn - 0.25) < 0.03  # output_prob
    assert set(pop.out[modi].unique().tolist()) == set(range(5))
    if method == "full":
        # full trees reach the depth limit unless the length limit stopped them
        assert bool(((depths == 6) | (pop.lengths() > 40 - 3)).all())
    if method == "ramped":
        assert set(depths.unique().tolist()) >= {2, 3, 4, 5, 6}


def test_every_output_trees_write_each_output_from_their_own_subtree():
    kw = {"functions": ["add", "mul", "sin", "max"], "max_depth": 4, "seed": 5}
    pop = Population.random(300, 4, 3, max_len=40, every_output=True, **kw)
    assert (pop.validate() == 0).all() and int(pop.lengths().max()) <= 40
    modi = (pop.kind & 4) != 0
    assert (modi.sum(1) == 3).all()  # the chain's three links, no other Modi node
    # output k is A_k + B: the same subtrees generated on their own, (40 - 3) // 4 nodes at most
    parts = Population.random(4 * 300, 4, 1, max_len=9, output_prob=0.0, **kw)
    X = torch.randn(30, 4)
    A = parts.forward(X)[..., 0].view(4, 300, 30)
    torch.testing.assert_close(pop.forward(X), (A[:3] + A[3:]).permute(1, 2, 0))
    assert pop.to_sympy(0)[1] == parts.to_sympy(300)[0] + parts.to_sympy(900)[0]
    single = Population.random(50, 4, 1, max_len=40, every_output=True, **kw)
    assert single.equal(Population.random(50, 4, 1, max_len=40, **kw))  # one output: the plain trees
    with pytest.raises(ValueError, match="max_len"):
        Population.random(10, 4, 6, max_len=12, every_output=True, **kw)
    with pytest.raises(ValueError, match="binary function"):
        Population.random(10, 4, 3, every_output=True, functions=["sin"])


def test_single_output_trees_have_no_modi_nodes():
    pop = Population.random(500, 2, 1, output_prob=1.0, seed=0)
    assert not bool(((pop.kind & 4) != 0).any())


def test_function_weights_shape_the_mix():
    pop = Population.random(3000, 2, functions={"add": 3.0, "mul": 1.0}, method="full", max_depth=4, seed=0)
    fn = pop.code[(pop.kind & 3) == 3]
    share = float((fn == BY_NAME["add"].id).float().mean())
    assert abs(share - 0.75) < 0.02


def test_structure_helpers():
    pop = Population.from_expressions(["x0", "sin(x0) + x1*x1", "max(x0, x1, 2)"], n_in=2, max_len=16)
    assert pop.lengths().tolist() == [1, 6, 5]
    assert pop.depths().tolist() == [0, 2, 2]
    # sympy orders the sum as add(mul(x1, x1), sin(x0))
    assert pop.node_depths()[1, :7].tolist() == [0, 1, 2, 2, 1, 2, -1]
    assert pop.max_stack() == 3  # evaluated last to first: x0, sin, x1, x1 (3 on the stack), mul, add


def test_indexing_slicing_cat_and_devices():
    pop = Population.random(10, 3, 2, seed=0)
    assert len(pop[3]) == 1 and pop[3].equal(pop[torch.tensor([3])]) and pop[-1].equal(pop[9])
    assert pop[2:5].equal(pop[[2, 3, 4]])
    assert pop[pop.lengths() > 3].equal(pop[torch.nonzero(pop.lengths() > 3).flatten()])
    both = Population.cat([pop[:4], pop[4:]])
    assert both.equal(pop)
    long = Population.random(3, 3, 2, max_len=100, seed=1)
    mixed = Population.cat([pop, long])
    assert mixed.max_len == 100 and len(mixed) == 13 and (mixed.validate() == 0).all()
    X = torch.randn(7, 3)
    torch.testing.assert_close(mixed.forward(X)[:10], pop.forward(X))
    assert pop.to("cpu").equal(pop)
    with pytest.raises(IndexError):
        pop[10]
    with pytest.raises(ValueError, match="n_in"):
        Population.cat([pop, Population.random(2, 4, 2, seed=0)])


def test_save_load_roundtrip(tmp_path):
    pop = Population.random(100, 4, 3, seed=5)
    path = tmp_path / "sub" / "pop.pt"
    pop.save(path)
    assert Population.load(path).equal(pop)
    assert [p.name for p in path.parent.iterdir()] == ["pop.pt"]  # no temporary files left behind
    broken = Population.random(2, 4, 3, seed=5)
    broken.size[0, 0] += 1
    broken.save(tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="invalid tree"):
        Population.load(tmp_path / "bad.pt")
    torch.save({"x": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a gprl population"):
        Population.load(tmp_path / "other.pt")


class _NotData:
    pass


def test_load_of_a_damaged_file_names_the_file_and_the_cause(tmp_path):
    good = tmp_path / "good.pt"
    Population.random(20, 3, seed=0).save(good)
    data = good.read_bytes()
    state = {k: v for k, v in torch.load(good, weights_only=True).items()}
    files = {"empty": b"", "truncated": data[: len(data) // 2], "text": b"not a checkpoint\n" * 20}
    for name, content in files.items():
        (tmp_path / f"{name}.pt").write_bytes(content)
    torch.save({"format": "gprl.population", "obj": _NotData()}, tmp_path / "object.pt")
    torch.save({**state, "kind": state["kind"].float()}, tmp_path / "dtype.pt")
    torch.save({k: v for k, v in state.items() if k != "size"}, tmp_path / "missing.pt")
    torch.save({**state, "version": 99}, tmp_path / "newer.pt")
    causes = {"empty": "empty", "truncated": "damaged", "text": "damaged", "object": "objects other than",
              "dtype": "uint8", "missing": "size", "newer": "version 99"}
    for name, cause in causes.items():
        path = tmp_path / f"{name}.pt"
        with pytest.raises(ValueError) as err:
            Population.load(path)
        msg = str(err.value)
        assert str(path) in msg and cause in msg, msg
        assert err.value.__cause__ is None and err.value.__suppress_context__, "torch's advice stays out"
        assert "weights_only" not in msg
    with pytest.raises(FileNotFoundError, match="absent.pt"):
        Population.load(tmp_path / "absent.pt")


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_saved_files_respect_the_umask(tmp_path):
    pop, path = Population.random(3, 2, seed=0), tmp_path / "pop.pt"
    for umask, mode in ((0o022, 0o644), (0o027, 0o640), (0o002, 0o664)):  # the same path: a replaced file too
        old = os.umask(umask)
        try:
            pop.save(path)
        finally:
            os.umask(old)
        assert oct(path.stat().st_mode & 0o777) == oct(mode)


def test_forward_without_finiteness_check_passes_nan_through():
    # the policy loop skips the scan (a GPU sync per step); a row with NaN inputs then gives NaN outputs
    pop = Population.from_expressions(["x0 + x1", "x2 * 2"], n_in=3)
    out = pop.forward(torch.tensor([[1.0, 2.0, 3.0], [float("nan"), 0.0, 1.0]]), check_finite=False)
    assert out[:, 0].tolist() == [[3.0], [6.0]]
    assert torch.isnan(out[0, 1, 0]) and out[1, 1, 0] == 2.0


def test_bad_input_names_the_argument():
    pop = Population.random(5, 3, seed=0)
    with pytest.raises(ValueError, match="X must be"):
        pop.forward(torch.randn(4, 2))
    with pytest.raises(ValueError, match="X must be"):
        pop.forward(torch.randn(4))
    with pytest.raises(ValueError, match="population has 5 trees"):
        pop.forward(torch.randn(4, 2, 3))
    with pytest.raises(ValueError, match="X must have a floating dtype"):
        pop.forward(torch.ones(4, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="NaN"):
        pop.forward(torch.tensor([[0.0, float("nan"), 1.0]]))
    with pytest.raises(ValueError, match="NaN"):
        pop.fitness(torch.zeros(2, 3), torch.tensor([1.0, float("inf")]))
    with pytest.raises(ValueError, match="y must be"):
        pop.fitness(torch.zeros(4, 3), torch.zeros(5))
    with pytest.raises(ValueError, match="metric"):
        pop.fitness(torch.zeros(4, 3), torch.zeros(4), metric="r2")
    with pytest.raises(ValueError, match="weight"):
        pop.fitness(torch.zeros(4, 3), torch.zeros(4), weight=-torch.ones(4))
    with pytest.raises(ValueError, match="max_len must be <= 4096"):
        Population.random(5, 3, max_len=5000)
    with pytest.raises(ValueError, match="n_out"):
        Population.random(5, 3, 0)
    with pytest.raises(ValueError, match="functions: unknown function 'sinh'"):
        Population.random(5, 3, functions=["add", "sinh"])
    with pytest.raises(ValueError, match="method"):
        Population.random(5, 3, method="half")
    with pytest.raises(ValueError, match="max_depth"):
        Population.random(5, 3, min_depth=4, max_depth=2)
    with pytest.raises(TypeError, match="seed"):
        Population.random(5, 3, seed="abc")
    X = np.zeros((3, 3), np.float64)  # numpy float64 input is accepted and converted
    assert pop.forward(X).shape == (5, 3, 1)
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="on cuda"):
            pop.forward(torch.zeros(3, 3, device="cuda"))


def test_kernel_errors_with_numbers_reach_python():
    # the ops' own checks (direct torch.ops calls) format numbers into their messages; on a toolchain that
    # links a private libstdc++ into the extension, streaming a number crashed (kernels/ops.h)
    ops = torch.ops.gprl
    with pytest.raises(RuntimeError, match="max_depth must be <= 64"):
        ops.generate(torch.ones(len(BY_NAME)), 10, 32, 3, 1, 2, 1, 99, 0.3, 0.2, -1.0, 1.0, 0.0, 1)
    with pytest.raises(RuntimeError, match=rf"function weights must be float32 \[{len(BY_NAME)}\]"):
        ops.generate(torch.ones(3), 10, 32, 3, 1, 2, 1, 4, 0.3, 0.2, -1.0, 1.0, 0.0, 1)
    pop = Population.random(50, 3, 2, max_len=32, output_prob=0.5, seed=0)
    with pytest.raises(RuntimeError, match=r"variable index [12] >= n_in 1"):
        ops.forward(*pop.tensors(), torch.randn(1, 8), 2, pop.max_stack())
    with pytest.raises(RuntimeError, match=r"output index 1 >= n_out 1"):
        ops.forward(*pop.tensors(), torch.randn(3, 8), 1, pop.max_stack())


def test_a_length_past_max_len_is_an_error_not_a_read_past_the_tree():
    # the last tree's row is the end of the tensors: its nodes past max_len would be read out of bounds
    pop = Population.random(4, 2, max_len=16, seed=0)
    kind, code, out, value, size = (t.clone() for t in pop.tensors())
    size[3, 0] = 3000
    ops, msg = torch.ops.gprl, r"tree 3 has length size\[3, 0\] = 3000 outside \[0, max_len = 16\]"
    with pytest.raises(RuntimeError, match=msg):
        ops.forward(kind, code, out, value, size, torch.rand(2, 5), 1, 16)
    with pytest.raises(RuntimeError, match=msg):
        ops.forward_batched(kind, code, out, value, size, torch.rand(4, 5, 2), 1, 16)
    with pytest.raises(RuntimeError, match=msg):
        ops.fitness(kind, code, out, value, size, torch.rand(2, 5), torch.rand(1, 5), None, 0, 16)


def test_ten_bytes_per_node():
    pop = Population.random(4, 2, max_len=512, seed=0)
    assert sum(t.element_size() for t in pop.tensors()) == 10
    assert sum(t.numel() * t.element_size() for t in pop.tensors()) == 4 * 512 * 10  # 1e6 x 512 nodes: 5.1 GB
