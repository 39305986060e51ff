"""The online correction's fits (``perfmodel.online_fit``): agreement weights and the structural solve."""

from __future__ import annotations

import math

import pytest

from perfmodel.online_fit import ROBUST_SCALE, Point, agreement_weights, gauss_newton

P: Point = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("residuals", "want"),
    [
        # one run: left as it is
        ((0.9,), (1.0,)),
        # two runs that agree keep their weights, however far both are from the offline model
        ((0.7, 0.7), (1.0, 1.0)),
        # two runs 0.9 apart: the centre, started at the offline model (0 in log), settles at 0.17, nearer
        # the run nearer the offline model: weights 1 / (1 + (0.17 / 0.35)^2) = 0.81 and
        # 1 / (1 + (0.73 / 0.35)^2) = 0.19, rescaled to keep the sum 2: 1.63 and 0.37
        ((0.0, 0.9), (1.63, 0.37)),
        # three runs, one far off (BERT-large's table row measured 2.4x its neighbours): centre 0.33,
        # weights 0.96, 0.17, 0.96, rescaled to 1.38, 0.24, 1.38
        ((0.26, 1.1, 0.26), (1.38, 0.24, 1.38)),
    ],
)
def test_agreement_weights(residuals: tuple[float, ...], want: tuple[float, ...]) -> None:
    assert ROBUST_SCALE == 0.35  # the arithmetic in the comments
    got = agreement_weights([(1.0, r, P) for r in residuals])
    assert [w for w, _, _ in got] == pytest.approx(want, abs=0.01)
    assert sum(w for w, _, _ in got) == pytest.approx(len(residuals))
    assert [r for _, r, _ in got] == list(residuals)


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
