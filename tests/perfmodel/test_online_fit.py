"""The online correction's fits (``perfmodel.online_fit``): agreement weights and the structural solve."""

from __future__ import annotations

import math

import pytest

from perfmodel.online_fit import (
    AGREEMENT_SLOPE_SDS,
    MODEL_PRIOR_SD,
    ROBUST_SCALE,
    Point,
    agreement_weights,
    gauss_newton,
)

P: Point = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("residuals", "want"),
    [
        # one run: left as it is
        ((0.9,), (1.0,)),
        # two runs that agree keep their weights, however far both are from the offline model
        ((0.7, 0.7), (1.0, 1.0)),
        # two runs 0.9 apart at one configuration: the centre, started at the offline model (0 in log),
        # settles at 0.17, nearer the run nearer the offline model: weights 1 / (1 + (0.17 / 0.35)^2) =
        # 0.81 and 1 / (1 + (0.73 / 0.35)^2) = 0.19 (1.63 and 0.37 if rescaled to keep the sum 2)
        ((0.0, 0.9), (0.81, 0.19)),
        # three runs, one far off (BERT-large's table row measured 2.4x its neighbours): centre 0.33,
        # weights 0.96, 0.17, 0.96
        ((0.26, 1.1, 0.26), (0.96, 0.17, 0.96)),
    ],
)
def test_agreement_weights(residuals: tuple[float, ...], want: tuple[float, ...]) -> None:
    assert ROBUST_SCALE == 0.35  # the arithmetic in the comments
    got = agreement_weights([(1.0, r, P) for r in residuals])
    assert [w for w, _, _ in got] == pytest.approx(want, abs=0.01)
    assert [r for _, r, _ in got] == list(residuals)


def test_runs_that_disagree_count_for_less_in_total() -> None:
    # Two runs of a model at one configuration, 2.5x apart: together they are weaker evidence of the
    # model's level than two that agree (rescaled to keep their sum, they would count as two).
    far = agreement_weights([(1.0, 0.0, P), (1.0, 0.9, P)])
    near = agreement_weights([(1.0, 0.0, P), (1.0, 0.05, P)])
    assert sum(w for w, _, _ in far) < 1.1
    assert sum(w for w, _, _ in near) > 1.95


def test_a_difference_the_models_batch_slope_may_explain_is_not_disagreement() -> None:
    # Runs at per-GPU batches 8 and 64 (1.04 e-folds either side of their mean) 0.4 apart in log: the
    # model level's batch slope (prior sd 0.2, 3 sds: 0.6 per e-fold) may explain 0.62 of each one's
    # distance, so s^2 = 0.35^2 + 0.62^2 and each keeps 1 / (1 + (0.2^2 / 0.51)) = 0.93; at one batch
    # the same two runs weigh 1 / (1 + (0.2 / 0.35)^2) = 0.75 each.
    assert AGREEMENT_SLOPE_SDS == 3.0 and MODEL_PRIOR_SD[1] == 0.2
    at = [(math.log(b), 0.0, 0.0, 0.0, 0.0, 20.0) for b in (8, 64)]
    got = agreement_weights([(1.0, 0.0, at[0]), (1.0, 0.4, at[1])])
    assert [w for w, _, _ in got] == pytest.approx([0.93, 0.93], abs=0.01)
    same = agreement_weights([(1.0, 0.0, at[0]), (1.0, 0.4, at[0])])
    assert [w for w, _, _ in same] == pytest.approx([0.75, 0.75], abs=0.01)


def test_structural_solve_recovers_factors_within_and_across_nodes() -> None:
    # Rows of one model in units of their observed time: 0.5 compute + 0.5 all-reduce, half within a
    # node and half across; the truth takes 1 x compute + 2 x all-reduce within a node and 4 x across,
    # so y = 0.5 + 0.5 x factor and each row's columns are divided by it. With the compute factor held
    # (frozen log A, free d, ridge ~0 on the factors) the solve finds log m = log 2 and log 4 and k = 1.
    rows = []
    for factor, across in ((2.0, False), (4.0, True)):
        for share in (0.2, 0.5, 0.8):
            y = (1 - share) + share * factor
            sync = (0.0, share / y) if across else (share / y, 0.0)
            rows.append((0, 1.0, (1 - share) / y, sync, 0.0))
    # phi = [log A, d, log e, log m_in, log m_x, k]
    phi = gauss_newton(rows, 1, [1e6, 1e6, 1e6, 1e-9, 1e-9, 1e6], [0.0] * 5 + [1.0], [0.0] * 5 + [1.0])
    assert phi[3] == pytest.approx(math.log(2.0), abs=1e-4)
    assert phi[4] == pytest.approx(math.log(4.0), abs=1e-4)
