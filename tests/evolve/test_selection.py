"""Selection operators against their exact selection probabilities (fixed seeds, statistical tolerance)."""

import numpy as np
import pytest
import torch

import gprl
from gprl import selection as S

N = 200_000  # draws per frequency test: 4 sigma of a 5% frequency is ~0.002


def freq(idx, P):
    return torch.bincount(idx, minlength=P).double() / len(idx)


def shuffled_fitness(P, seed=0):
    perm = torch.from_numpy(np.random.default_rng(seed).permutation(P))
    return perm.float(), perm  # fitness of individual i is its rank (0 best, as a loss)


def test_tournament_frequencies_match_order_statistics():
    P, k = 50, 4
    fit, rank = shuffled_fitness(P)
    f = freq(S.tournament(fit, N, k, seed=1), P)
    r = rank.double()
    expect = ((P - r) / P) ** k - ((P - r - 1) / P) ** k  # P(best of k draws has rank r)
    torch.testing.assert_close(f, expect, atol=0.004, rtol=0)
    best = int(torch.argmin(fit))
    assert abs(float(f[best]) - (1 - (1 - 1 / P) ** k)) < 0.004


def test_tournament_maximize_and_nonfinite_never_win():
    fit = torch.tensor([1.0, float("nan"), 3.0, float("inf"), -float("inf"), 2.0])
    idx = S.tournament(fit, 20000, 6, maximize=True, seed=2)
    winners = freq(idx, 6)
    assert winners[2] > winners[5] > winners[0]
    assert float(winners[[1, 3, 4]].max()) < float(winners[0])
    assert S.elite(fit, 3, maximize=True).tolist() == [2, 5, 0]
    assert S.elite(fit, 3).tolist() == [0, 5, 2]


def test_rank_selection_uses_fitness_order_not_index():
    P, s = 40, 1.8
    fit, rank = shuffled_fitness(P, seed=3)
    f = freq(S.rank(fit, N, s, seed=4), P)
    expect = (s - (2 * s - 2) * rank.double() / (P - 1)) / P
    torch.testing.assert_close(f, expect, atol=0.003, rtol=0)
    # the probabilities are not monotone in the index (the population is shuffled)
    assert not bool((f[1:] <= f[:-1]).all())


def test_truncation_draws_uniformly_from_the_best_fraction():
    P = 100
    fit, rank = shuffled_fitness(P, seed=5)
    f = freq(S.truncation(fit, N, 0.2, seed=6), P)
    torch.testing.assert_close(f, torch.where(rank < 20, 0.05, 0.0).double(), atol=0.003, rtol=0)


def test_roulette_with_negative_fitness():
    fit = torch.tensor([-10.0, -8.0, -5.0, -9.0, float("nan")])
    f = freq(S.roulette(fit, N, maximize=True, seed=7), 5)
    w = torch.tensor([0.0, 2.0, 5.0, 1.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(f, w / w.sum(), atol=0.004, rtol=0)
    # as a loss (minimise) the same numbers weigh max - loss
    f = freq(S.roulette(fit, N, seed=8), 5)
    w = torch.tensor([5.0, 3.0, 0.0, 4.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(f, w / w.sum(), atol=0.004, rtol=0)
    same = freq(S.roulette(torch.full((4,), 3.0), N, seed=9), 4)
    torch.testing.assert_close(same, torch.full((4,), 0.25, dtype=torch.float64), atol=0.004, rtol=0)


def test_lexicase_selects_specialists_not_the_mediocre_generalist():
    # 0 is best on cases 0-4, 1 on cases 5-9, 2 is second on all, 3 is bad everywhere
    e = torch.full((4, 10), 5.0)
    e[0, :5], e[1, 5:] = 0.0, 0.0
    e[2] = 1.0
    e[3] = 9.0
    f = freq(S.lexicase(e, 20000, epsilon=None, seed=10), 4)
    assert abs(float(f[0]) - 0.5) < 0.02 and abs(float(f[1]) - 0.5) < 0.02 and float(f[2] + f[3]) == 0
    # with an epsilon covering the generalist's gap, it survives the specialists' cases too
    f = freq(S.lexicase(e, 20000, epsilon=1.5, seed=11), 4)
    assert float(f[2]) > 0.2 and float(f[3]) == 0
    assert float(freq(S.lexicase(torch.where(e == 0, float("nan"), e), 5000, seed=12), 4)[2]) > 0.9


def test_mad_epsilon_and_parsimony():
    e = torch.tensor([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [10.0, 5.0]])
    torch.testing.assert_close(S.mad_epsilon(e), torch.tensor([1.0, 0.0]))
    loss = torch.tensor([1.0, 1.0])
    torch.testing.assert_close(S.with_parsimony(loss, torch.tensor([3, 10]), 0.1), torch.tensor([1.3, 2.0]))


def test_selection_is_seeded_and_validates_arguments():
    fit = torch.randn(1000)
    for fn in (S.tournament, S.truncation, S.rank, S.roulette):
        assert torch.equal(fn(fit, 500, seed=3), fn(fit, 500, seed=3))
        assert not torch.equal(fn(fit, 500, seed=3), fn(fit, 500, seed=4))
    with pytest.raises(ValueError, match="tournament size"):
        S.tournament(fit, 10, 0)
    with pytest.raises(ValueError, match="fitness"):
        S.tournament(fit[None], 10)
    with pytest.raises(ValueError, match="pressure"):
        S.rank(fit, 10, 3.0)
    with pytest.raises(ValueError, match="errors"):
        S.lexicase(fit, 10)


def reference_tournament(loss, n, size, seed):
    """The unfused formulation: Philox uniforms -> contestants -> first argmin (independent of the kernel)."""
    u = gprl.backend.ops.ops.uniform(loss, n * size, seed)
    contestants = (u.double() * len(loss)).long().clamp_(0, len(loss) - 1).view(n, size)
    return contestants.gather(1, loss[contestants].argmin(dim=1, keepdim=True)).squeeze(1)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_fused_tournament_equals_the_unfused_formulation(device):
    g = torch.Generator().manual_seed(3)
    for P, n, size in [(1, 5, 3), (7, 100, 1), (1000, 5000, 7), (4097, 3000, 32)]:
        # few distinct values: many ties, which the first drawn contestant must win
        loss = torch.randint(0, 5, (P,), generator=g).float()
        loss[torch.rand(P, generator=g) < 0.1] = float("inf")
        loss = loss.to(device)
        for seed in (0, 12345, 2**61 + 7):
            got = gprl.backend.ops.ops.tournament(loss, n, size, seed)
            assert torch.equal(got.cpu(), reference_tournament(loss, n, size, seed).cpu()), (P, n, size, seed)
