"""Variation operators: validity (property tests), per-operator semantics against the independent references
in tests/reference/variation.py."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gprl
from gprl import OPS, Population, VariationParams, vary
from gprl.core.functions import ARITY, BY_NAME
from tests.evolve.helpers import ALL, RANDOM_OPS, population, random_rounds
from tests.reference import variation as ref


def test_one_million_random_applications_stay_valid():
    # 20,000 trees x 50 rounds = 1e6 operator applications, each child validated
    pop = population(20000, n_in=3, n_out=3, max_len=64, seed=11)
    pop = random_rounds(pop, 50, seed=12)
    assert pop.lengths().float().mean() > 3  # the population did not collapse to single leaves


@settings(max_examples=15, deadline=None)
@given(P=st.integers(1, 300), n_in=st.integers(0, 4), n_out=st.integers(1, 5), max_len=st.integers(1, 80),
       op=st.sampled_from(RANDOM_OPS), max_depth=st.integers(0, 12), seed=st.integers(0, 2**31),
       nfun=st.integers(1, len(ALL)))
def test_any_operator_and_setting_gives_valid_trees(P, n_in, n_out, max_len, op, max_depth, seed, nfun):
    rng = np.random.default_rng(seed)
    fset = list(rng.choice(ALL, nfun, replace=False))
    pop = Population.random(P, n_in, n_out, max_len=max_len, functions=fset, max_depth=min(max_depth or 6, 6),
                            const_prob=0.3 if n_in else 1.0, seed=seed)
    params = VariationParams(functions=fset, max_depth=max_depth, const_prob=0.3 if n_in else 1.0)
    for s in range(3):
        pop = vary(pop, op, params=params, seed=seed + s)
        assert int(pop.validate().abs().sum()) == 0


def test_exchange_matches_reference_splice():
    a, b = population(400, seed=1), population(300, seed=2, max_len=40)
    rng = np.random.default_rng(0)
    la, lb = a.lengths().numpy(), b.lengths().numpy()
    donor = rng.integers(0, len(b), len(a))
    node = (rng.random(len(a)) * la).astype(np.int32)
    dnode = (rng.random(len(a)) * lb[donor]).astype(np.int32)
    child = gprl.subtree_exchange(a, torch.from_numpy(node), b, torch.from_numpy(donor),
                                  torch.from_numpy(dnode))
    ra, rb, rc = ref.rows(a), ref.rows(b), ref.rows(child)
    changed = 0
    for t in range(len(a)):
        expect = ref.splice(*ra[t], node[t], *rb[donor[t]], dnode[t])
        if len(expect) > a.max_len:
            expect = ra[t][0]  # too long: unchanged
        else:
            changed += 1
        assert rc[t][0] == expect
        assert rc[t][1] == ref.sizes_of(expect)
    assert changed > 300


def test_exchange_respects_depth_limit_and_bad_points():
    # add(x0, mul(x1, x2)) has depth 2; replacing x0 (depth 1) by the whole tree gives depth 3
    a = Population.from_expressions(["x0 + x1*x2"], n_in=3, max_len=16)
    assert gprl.subtree_exchange(a, [1], a, [0], [0], max_depth=2).equal(a)
    ok = gprl.subtree_exchange(a, [1], a, [0], [0], max_depth=3)
    assert ref.rows(ok)[0][0] == ref.splice(*ref.rows(a)[0], 1, *ref.rows(a)[0], 0)
    assert int(ok.depths()[0]) == 3
    short = Population.from_expressions(["x0 + x1*x2"], n_in=3, max_len=9)  # 5 - 1 + 5 = 9 nodes fit
    assert not gprl.subtree_exchange(short, [1], short, [0], [0]).equal(short)
    assert gprl.subtree_exchange(short, [3], short, [0], [0], max_depth=0).lengths().item() == 9
    tight = Population.from_expressions(["x0 + x1*x2"], n_in=3, max_len=8)  # too long: unchanged
    assert gprl.subtree_exchange(tight, [1], tight, [0], [0]).equal(tight)
    outside = vary(a, "exchange", node=[10], donor_node=[0], check=False)  # node beyond the tree
    assert outside.equal(a)
    with pytest.raises(ValueError, match="parent"):
        vary(a, "copy", parent=[1])


def test_crossover_child_is_prefix_plus_donor_subtree_plus_suffix():
    a = population(300, seed=3)
    donor = torch.arange(300).flip(0)
    for leaf_prob in (None, 0.1, 1.0):
        child = gprl.crossover(a, donor=donor, leaf_prob=leaf_prob, seed=4)
        ra, rc = ref.rows(a), ref.rows(child)
        leaves = 0
        for t in range(len(a)):
            nodes, sizes = ra[t]
            dn, ds = ra[int(donor[t])]
            matches = [(k, j) for k in range(len(nodes)) for j in range(len(dn))
                       if ref.splice(nodes, sizes, k, dn, ds, j) == rc[t][0]]
            assert matches, f"child {t} is not a subtree exchange of its parents"
            leaves += any(ds[j] == 1 for _, j in matches)
        if leaf_prob == 1.0:
            assert leaves == len(a)


def test_leaf_biased_crossover_picks_leaves_at_the_given_rate():
    # full binary trees of depth 4: 15 function nodes and 16 leaves; donor subtree sizes reveal the point
    a = Population.random(4000, 2, max_len=64, method="full", max_depth=4, functions=["add", "mul"], seed=5)
    b = Population.from_expressions(["x0"] * 4000, n_in=2, max_len=64)  # donor point: always the leaf
    for leaf_prob, expect in ((0.1, 0.1), (None, 16 / 31), (0.5, 0.5)):
        child = gprl.crossover(a, b, leaf_prob=leaf_prob, seed=6)
        removed = a.lengths() - child.lengths() + 1  # size of the replaced subtree
        assert abs(float((removed == 1).float().mean()) - expect) < 0.03


def _same(x, y):
    return [torch.equal(p, q) for p, q in zip(x.tensors(), y.tensors())]


def test_hoist_and_delete_never_grow_and_are_subtree_exchanges():
    a = population(400, seed=7)
    ra = ref.rows(a)
    for op in ("hoist", "delete"):
        child = vary(a, op, seed=8)
        assert bool((child.lengths() <= a.lengths()).all())
        assert bool((child.depths() <= a.depths()).all())
        rc = ref.rows(child)
        for t in range(len(a)):
            nodes, sizes = ra[t]
            funcs = [k for k in range(len(nodes)) if nodes[k][0] & 3 == ref.FUNC]
            if not funcs:
                assert rc[t][0] == nodes
                continue
            if op == "hoist":
                cands = [(k, j) for k in funcs for j in range(k + 1, k + sizes[k])]
            else:  # a direct child of k
                cands = []
                for k in funcs:
                    j = k + 1
                    for _ in range(ARITY[nodes[k][1]]):
                        cands.append((k, j))
                        j += sizes[j]
            assert any(ref.splice(nodes, sizes, k, nodes, sizes, j) == rc[t][0] for k, j in cands)


def test_point_mutations_keep_shape_and_respect_the_function_set():
    a = population(3000, n_in=4, seed=9, functions=["add", "sub", "mul", "sin", "cos", "if"])
    allowed = {BY_NAME[n].id for n in ("add", "sin", "if")}
    params = VariationParams(functions=["add", "sin", "if"], multi_prob=0.5, const_range=(5.0, 6.0))
    for op in ("point", "multipoint"):
        child = vary(a, op, params=params, seed=10)
        assert (torch.equal(child.size, a.size) and torch.equal(child.kind, a.kind)
                and torch.equal(child.out, a.out))
        assert torch.equal(child.arities(), a.arities())
        changed = (child.code != a.code) | (child.value != a.value)
        per_tree = changed.sum(1)
        if op == "point":
            assert int(per_tree.max()) == 1 and float((per_tree == 1).float().mean()) > 0.5
        else:
            assert float(per_tree.float().mean()) > 1.5
        func = (a.kind & 3) == 3
        new_codes = child.code[func & changed].tolist()
        assert new_codes and set(new_codes) <= allowed
        const = (a.kind & 3) == 2
        assert bool(((child.value[const & changed] >= 5) & (child.value[const & changed] < 6)).all())
        var = (a.kind & 3) == 1
        assert bool(((child.code[var] >= 0) & (child.code[var] < 4)).all())
    # if (arity 3) is the only ternary function allowed: an "if" node can never change
    only = vary(a, "multipoint", params=params, seed=11)
    is_if = ((a.kind & 3) == 3) & (a.code == BY_NAME["if"].id)
    assert torch.equal(only.code[is_if], a.code[is_if])


def test_constant_mutations_keep_structure_and_are_gaussian():
    a = Population.random(20000, 2, max_len=32, const_prob=0.8, seed=12)
    for op, sigma in (("constant", 0.5), ("multiconstant", 2.0)):
        child = vary(a, op, params=VariationParams(const_sigma=sigma, multi_prob=0.5), seed=13)
        for name in ("kind", "code", "out", "size"):
            assert torch.equal(getattr(child, name), getattr(a, name))
        delta = (child.value - a.value)
        moved = delta != 0
        assert bool(((a.kind & 3)[moved] == 2).all())
        if op == "constant":
            assert int(moved.sum(1).max()) == 1
        assert abs(float(delta[moved].std()) - sigma) < 0.05 * sigma
        assert abs(float(delta[moved].mean())) < 0.05 * sigma


def _inserted_at(nodes, sizes, new, k):
    """Whether `new` is `nodes` with an allowed function inserted above node k, its other children leaves."""
    suffix = nodes[k + sizes[k]:]
    head, mid = new[k], new[k + 1:len(new) - len(suffix)]
    if new[:k] != nodes[:k] or new[len(new) - len(suffix):] != suffix or head[0] & 3 != ref.FUNC:
        return False
    if head[1] not in (BY_NAME["neg"].id, BY_NAME["if"].id):
        return False
    sub, ar = nodes[k:k + sizes[k]], ARITY[head[1]]
    return any(mid[p:p + len(sub)] == sub and all(n[0] & 3 in (1, 2) for n in mid[:p] + mid[p + len(sub):])
               and len(mid) == len(sub) + ar - 1 for p in range(ar))


def test_insert_adds_one_allowed_function_above_a_subtree():
    a = population(2000, seed=14)
    params = VariationParams(functions=["neg", "if"])
    child = vary(a, "insert", params=params, seed=15)
    grew = child.lengths() - a.lengths()
    assert set(grew.unique().tolist()) <= {0, 1, 3}
    assert bool((a.lengths()[grew == 0] == a.max_len).all())  # unchanged only when no node fits
    assert float((grew > 0).float().mean()) > 0.9
    ra, rc = ref.rows(a), ref.rows(child)
    for t in range(300):
        nodes, sizes = ra[t]
        if grew[t] == 0:
            continue
        new = rc[t][0]

        assert any(_inserted_at(nodes, sizes, new, k) for k in range(len(nodes)))


def test_subtree_mutation_uses_only_allowed_functions_and_depth():
    a = population(2000, seed=16, functions=["add"])
    params = VariationParams(functions=["mul"], subtree_depth=3, max_depth=8)
    child = vary(a, "subtree", params=params, seed=17)
    func = (child.kind & 3) == 3
    assert set(child.code[func].unique().tolist()) <= {BY_NAME["add"].id, BY_NAME["mul"].id}
    assert int(child.depths().max()) <= 8
    assert (child.code[func] == BY_NAME["mul"].id).any()


def test_output_mutation_changes_one_modi_field():
    a = population(2000, n_out=4, seed=18)
    child = vary(a, "output", seed=19)
    for name in ("code", "value", "size"):
        assert torch.equal(getattr(child, name), getattr(a, name))
    changed = ((child.kind != a.kind) | (child.out != a.out)).sum(1)
    has_func = ((a.kind & 3) == 3).any(1)
    assert bool((changed[has_func] == 1).all()) and bool((changed[~has_func] == 0).all())
    single = population(100, n_out=1, seed=18)
    assert vary(single, "output", seed=1).equal(single)


def test_same_seed_same_children_and_opcheck():
    a = population(500, n_out=2, seed=20)
    op = torch.randint(0, len(OPS), (500,), dtype=torch.int32, generator=torch.Generator().manual_seed(0))
    x = vary(a, op, seed=21)
    assert x.equal(vary(a, op, seed=21))
    assert not x.equal(vary(a, op, seed=22))
    args = (*a.tensors(), *a.tensors(), torch.arange(500), torch.arange(500).flip(0), op,
            torch.zeros(500, dtype=torch.int32), torch.zeros(500, dtype=torch.int32),
            torch.ones(len(ALL)), 3, 2, 8, 4, 0.1, 0.2, 0.1, 0.2, -1.0, 1.0, 0.3, 0.3, 5)
    torch.library.opcheck(torch.ops.gprl.vary, args)
    torch.library.opcheck(torch.ops.gprl.uniform, (torch.zeros(1), 100, 3))


def test_argument_errors_name_the_argument():
    a = population(10)
    with pytest.raises(ValueError, match="op must be one of"):
        vary(a, "swap")
    with pytest.raises(ValueError, match="max_depth"):
        VariationParams(max_depth=100)
    with pytest.raises(ValueError, match="functions"):
        VariationParams(functions=["nope"])
    with pytest.raises(ValueError, match="multi_prob"):
        VariationParams(multi_prob=2)
    with pytest.raises(TypeError, match="population"):
        vary(a.tensors(), "copy")
