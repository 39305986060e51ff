"""The numerical fits behind ``perfmodel.online.OnlineCorrector``'s shared levels: the structural
level's Gauss-Newton (compute, all-reduce within and across nodes, departure; per model a compute and an
all-reduce factor), the per-(model, GPU type) Bayesian linear level, and the weights that keep a model's
disagreeing runs from moving its other configurations. Pure functions of their arguments (no state, no
I/O); small dense solves in plain Python (a few unknowns per GPU type).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# Where a row sits, for the trend and the model level: (log per-GPU batch, log GPUs, spans nodes, sync
# share, departure, log training FLOPs per sample); see the module docstring.
Point = tuple[float, float, float, float, float, float]

# The per-(model, GPU type) level is a Bayesian linear fit of what the GPU level leaves, in
# ``model_x``: intercept, log per-GPU batch (from ``BATCH_REF``), log GPUs and log training FLOPs per
# sample (centred on the observed jobs' mean: ``posterior_mean``). Prior sds of the four coefficients
# and the noise sd of one observation's log error (run-to-run and table noise), all in log throughput:
# a model may sit far from its GPU type (sd 0.5), its error changes slowly with the batch and the GPU
# count (sd 0.2 and 0.1 per e-fold). On the benchmark's held-out generations (10 draws) noise sd
# 0.15 / 0.25 / 0.35 were within a point of each other after 2 and 3 runs, 0.15 worst; batch sd 0.1 /
# 0.2 alike, 0.3 two to four points worse. One observation moves the intercept most of the way (the
# prior weighs (0.25 / 0.5)^2 = 1/4 observation); two at different batches or GPU counts tilt it.
# The work per sample is the sequence length of an LLM job (or the input size of another: BERT at 128 or
# 512 tokens), which changes the kernels (attention's share, memory per token) the way the per-GPU batch
# changes the work per step: the same prior sd, 0.2 per e-fold.
MODEL_PRIOR_SD = (0.5, 0.2, 0.1, 0.2)
MODEL_NOISE_SD = 0.25
BATCH_REF = math.log(32.0)

# A model's observed jobs on a GPU type that disagree: each weighs 1 / (1 + (e / ROBUST_SCALE)^2) in
# every shared level (e: its log error from the jobs' robust centre, found from the offline model's
# prediction; the weights of a model's jobs keep their sum), so one run measured 2.4x off its
# neighbours does not move the model's other configurations by 2x (``agreement_weights``). Chosen on
# the development splits: after 2 / 3 runs 30.2 / 26.4% at 0.25, 30.2 / 24.8% at 0.35, 30.6 / 24.5% at
# 0.5, 30.5 / 24.6% at 0.7, 30.4 / 25.2% without.
ROBUST_SCALE = 0.35
# Gauss-Newton stops when no unknown moves by more than this (in log of a factor).
GN_TOL = 1e-7


def agreement_weights(
    jobs: Sequence[tuple[float, float, Point]],
) -> list[tuple[float, float, Point]]:
    """A model's jobs on a GPU type (weight, mean log error, point) with their weights redistributed by
    how well they agree: each job's weight times ``1 / (1 + (e / ROBUST_SCALE)^2)``, ``e`` its log error
    from the jobs' centre, rescaled so that the weights keep their sum.

    The centre is the Cauchy location estimate (iteratively reweighted means) started from 0, the
    offline model's prediction: of two runs 0.9 apart in log, the one nearer the offline model weighs
    most (a table row measured 2.4x off its neighbours moves the model's other configurations little);
    two runs that agree keep their weights, however far both are from the offline model; one run is
    left as it is."""
    if len(jobs) < 2:
        return list(jobs)
    c = 0.0
    u = [1.0] * len(jobs)
    for _ in range(50):
        u = [1.0 / (1.0 + ((r - c) / ROBUST_SCALE) ** 2) for _, r, _ in jobs]
        w = sum(cw * f for (cw, _, _), f in zip(jobs, u, strict=True))
        nc = sum(cw * f * r for (cw, r, _), f in zip(jobs, u, strict=True)) / w
        if abs(nc - c) < 1e-9:
            break
        c = nc
    total = sum(cw for cw, _, _ in jobs)
    w = sum(cw * f for (cw, _, _), f in zip(jobs, u, strict=True))
    return [(cw * f * total / w, r, p) for (cw, r, p), f in zip(jobs, u, strict=True)]


def within_model_slopes(
    models: Sequence[Sequence[tuple[float, float, Point]]], bias: float, trend: Sequence[int], ridge: float
) -> tuple[float, ...]:
    """Weighted ridge slopes of residuals (less ``bias``) on the ``trend`` descriptors of ``Point``,
    within models: each model's jobs are centred on their own weighted means (the model level absorbs
    constants), so only how the error changes with the placement inside a model is shared."""
    k = len(trend)
    xtx = [[ridge if i == j else 0.0 for j in range(k)] for i in range(k)]
    xty = [0.0] * k
    for jobs in models:
        w = sum(cw for cw, _, _ in jobs)
        if len(jobs) < 2 or w <= 0:
            continue
        mx = [sum(cw * p[f] for cw, _, p in jobs) / w for f in trend]
        my = sum(cw * (mean - bias) for cw, mean, _ in jobs) / w
        for cw, mean, p in jobs:
            x = [p[f] - m for f, m in zip(trend, mx, strict=True)]
            y = mean - bias - my
            for i in range(k):
                xty[i] += cw * x[i] * y
                for j in range(k):
                    xtx[i][j] += cw * x[i] * x[j]
    return solve(xtx, xty)


def model_x(point: Point) -> tuple[float, float, float, float]:
    """The per-(model, GPU type) level's regressors at ``point``: 1, log per-GPU batch / 32, log GPUs,
    log training FLOPs per sample."""
    return (1.0, point[0] - BATCH_REF, point[1], point[5])


def posterior_mean(left: Sequence[tuple[float, float, Point]]) -> tuple[float, ...]:
    """Posterior mean of the coefficients on ``model_x`` given weighted residuals ``left`` (weight,
    residual, point): prior N(0, ``MODEL_PRIOR_SD``^2) each, Gaussian noise of sd ``MODEL_NOISE_SD``
    per unit of weight (ridge regression with those penalties; 4 x 4, O(observations)).

    The work per sample has no reference shared by models (1e9 to 1e15 FLOPs), so its slope is fitted
    around the observed jobs' weighted mean: jobs of one sequence length leave it at 0 and put the whole
    residual in the intercept. The returned coefficients apply to ``model_x`` as it is (the centre is
    folded into the intercept)."""
    k = len(MODEL_PRIOR_SD)
    noise = MODEL_NOISE_SD**2
    w = sum(cw for cw, _, _ in left)
    centre = sum(cw * p[5] for cw, _, p in left) / w if w > 0 else 0.0
    a = [[noise / MODEL_PRIOR_SD[i] ** 2 if i == j else 0.0 for j in range(k)] for i in range(k)]
    b = [0.0] * k
    for cw, r, p in left:
        x0 = model_x(p)
        x = (*x0[:3], x0[3] - centre)
        for i in range(k):
            b[i] += cw * x[i] * r
            for j in range(k):
                a[i][j] += cw * x[i] * x[j]
    coef = solve(a, b)
    return (coef[0] - coef[3] * centre, *coef[1:])


def sync_columns(p: Point, y: float) -> tuple[float, float]:
    """A row's all-reduce share in units of its observed time ``y``, in the column of the all-reduce
    factor it takes: (within a node, across nodes)."""
    x = p[3] / y
    return (0.0, x) if p[2] > 0 else (x, 0.0)


def gauss_newton(
    rows: Sequence[tuple[int, float, float, tuple[float, ...], float]],
    models: int,
    ridge: Sequence[float],
    centre: Sequence[float],
    phi: list[float],
    frozen: Sequence[int] = (),
) -> list[float]:
    """Ridge least squares of ``log(a x xa + e x sum_j m_j x xm_j + k x xk)`` over weighted ``rows``
    (model index, weight, xa, the xm_j, xk) by Gauss-Newton. ``phi`` = [log A, d per model, log e per
    model, log m_j, k]: ``a = exp(log A + d)`` and ``e`` of the row's model; pulled to ``centre`` by
    ``ridge``; the ``frozen`` unknowns keep their values and ``k`` stays >= 0. Steps are clipped to 1 per
    unknown; 20 iterations at most.

    Each model's free (d, e) meet only each other and the shared unknowns, so every step eliminates
    them (a block of at most 2 x 2 per model) and solves a small system in the free shared ones:
    O(rows + models) a step, however many models a GPU type runs."""
    n = len(phi)
    sync = n - 2 - 2 * models  # the log m_j
    fz = set(frozen)
    # Free shared unknowns (log A, the log m_j, k), and each model's free locals (d, log e).
    shared = [g for g in (0, *range(1 + 2 * models, n)) if g not in fz]
    ns = len(shared)
    locs = [[j for j in (1 + i, 1 + models + i) if j not in fz] for i in range(models)]
    kidx = n - 1
    # Which derivative each free unknown takes (``by_kind`` below): 0 log A or d, 1 k, 2 log e, 3 + j m_j.
    kinds = [0 if g == 0 else 1 if g == kidx else 3 + g - (n - 1 - sync) for g in shared]
    lkinds = [[0 if j <= models else 2 for j in loc] for loc in locs]
    for _ in range(20):
        ms = [math.exp(phi[n - 1 - sync + j]) for j in range(sync)]
        avals = [math.exp(phi[0] + phi[1 + i]) for i in range(models)]
        evals = [math.exp(phi[1 + models + i]) for i in range(models)]
        ll = [[[ridge[a] if a == b else 0.0 for b in loc] for a in loc] for loc in locs]
        ls = [[[0.0] * ns for _ in loc] for loc in locs]
        rl = [[-ridge[j] * (phi[j] - centre[j]) for j in loc] for loc in locs]
        ss = [[ridge[g] if r == c else 0.0 for c in range(ns)] for r, g in enumerate(shared)]
        rs = [-ridge[g] * (phi[g] - centre[g]) for g in shared]
        for col, cw, xa, xm, xk in rows:
            ca = avals[col] * xa
            cms = [m * evals[col] * x for m, x in zip(ms, xm, strict=True)]
            cm = sum(cms)
            total = ca + cm + phi[kidx] * xk
            if total <= 1e-6:
                continue
            f = math.log(total)
            # d/d of log(total) by each unknown: log A and d (ca), log m_j (its term), k (xk), log e (cm)
            by_kind = (ca / total, xk / total, cm / total, *(c / total for c in cms))
            gsh = [by_kind[g] for g in kinds]
            gl = [by_kind[g] for g in lkinds[col]]
            for r in range(ns):
                w = cw * gsh[r]
                rs[r] -= w * f
                row = ss[r]
                for c in range(ns):
                    row[c] += w * gsh[c]
            blk, cross, rhs = ll[col], ls[col], rl[col]
            for a, ga in enumerate(gl):
                w = cw * ga
                rhs[a] -= w * f
                brow, crow = blk[a], cross[a]
                for b, gb in enumerate(gl):
                    brow[b] += w * gb
                for r in range(ns):
                    crow[r] += w * gsh[r]
        # Schur complement on the free shared unknowns, then each model's locals from its own block.
        inv: list[list[list[float]]] = []
        for i in range(models):
            li, cross, rhs = _inverse(ll[i]), ls[i], rl[i]
            inv.append(li)
            nl = len(li)
            if nl == 0 or ns == 0:
                continue
            # t = li x cross (nl x ns)
            t = [[sum(li[a][b] * cross[b][r] for b in range(nl)) for r in range(ns)] for a in range(nl)]
            for a in range(nl):
                ta, ca_row, ra = t[a], cross[a], rhs[a]
                for r in range(ns):
                    # ss -= cross^T li cross, rs -= cross^T li rhs (li symmetric)
                    rs[r] -= ta[r] * ra
                    row = ss[r]
                    for c in range(ns):
                        row[c] -= ta[r] * ca_row[c]
        xs = solve(ss, rs) if ns else ()
        step = [0.0] * n
        for r, g in enumerate(shared):
            step[g] = xs[r]
        for i, loc in enumerate(locs):
            left = [rl[i][a] - sum(ls[i][a][r] * xs[r] for r in range(ns)) for a in range(len(loc))]
            for a, j in enumerate(loc):
                step[j] = sum(inv[i][a][b] * left[b] for b in range(len(loc)))
        phi = [v + max(-1.0, min(1.0, d)) for v, d in zip(phi, step, strict=True)]
        phi[kidx] = max(0.0, phi[kidx])
        if max(abs(d) for d in step) < GN_TOL:
            break
    return phi


def _inverse(m: list[list[float]]) -> list[list[float]]:
    """The inverse of a 0 x 0, 1 x 1 or 2 x 2 matrix."""
    if len(m) == 0:
        return []
    if len(m) == 1:
        return [[1.0 / m[0][0]]]
    (p, q), (u, v) = m
    det = p * v - q * u
    return [[v / det, -q / det], [-u / det, p / det]]


def solve(a: list[list[float]], b: list[float]) -> tuple[float, ...]:
    """Solve the small symmetric positive-definite system ``a x = b`` (Gaussian elimination)."""
    k = len(b)
    m = [[*row, v] for row, v in zip(a, b, strict=True)]
    for i in range(k):
        piv = max(range(i, k), key=lambda r: abs(m[r][i]))
        m[i], m[piv] = m[piv], m[i]
        for r in range(i + 1, k):
            f = m[r][i] / m[i][i]
            for c in range(i, k + 1):
                m[r][c] -= f * m[i][c]
    x = [0.0] * k
    for i in reversed(range(k)):
        x[i] = (m[i][k] - sum(m[i][c] * x[c] for c in range(i + 1, k))) / m[i][i]
    return tuple(x)
