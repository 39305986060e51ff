"""``perfsched demo --real``'s report: restarts found in a trainer's loss curve, per-job figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfsched_dev.demo.real import SCRIPT, build_real_report, manifest, restarts


def point(step: int, loss: float, world: int, run: str) -> dict[str, Any]:
    return {"step": step, "loss": loss, "world_size": world, "run": run}


def test_restarts_use_the_checkpoint_step_and_average_the_noisy_loss() -> None:
    # run 1 (world 2) reaches step 8 but its checkpoint is step 6; run 2 (world 1) resumes from 6 and
    # stops at 9 with a checkpoint; run 3 (world 2) resumes from 9
    curve = [point(s, 2.0 - 0.1 * s, 2, "1") for s in range(1, 9)]
    curve += [point(s, 1.5 - 0.1 * s, 1, "2") for s in range(7, 10)]
    curve += [point(s, 0.5, 2, "3") for s in range(10, 12)]
    first, second = restarts(curve, window=2)
    assert (first.resumed_from, first.world_before, first.world_after) == (6, 2, 1)
    # before: steps 5 and 6 of run 1 (1.5, 1.4); after: steps 7 and 8 of run 2 (0.8, 0.7)
    assert abs(first.loss_before - 1.45) < 1e-9 and abs(first.loss_after - 0.75) < 1e-9  # type: ignore[operator]
    # the redone steps 7, 8 of run 2 replace run 1's: before = steps 8, 9 of run 2 (0.7, 0.6)
    assert (second.resumed_from, second.world_before, second.world_after) == (9, 1, 2)
    assert abs(second.loss_before - 0.65) < 1e-9 and second.loss_after == 0.5  # type: ignore[operator]


def test_a_curve_without_restarts_has_none() -> None:
    assert restarts([point(s, 1.0, 1, "1") for s in range(1, 5)]) == []


def test_report_per_job() -> None:
    tj = {
        "metadata": {"name": "alpha"},
        "spec": {"work": {"iterations": 400}},
        "status": {"phase": "Succeeded", "progress": 400, "preemptions": 1, "resizes": 1, "restarts": 2},
    }
    curve = [point(1, 2.4, 2, "1"), point(2, 2.2, 2, "1"), point(3, 2.0, 1, "2")]
    rep = build_real_report([tj], {"alpha": curve}, {"alpha": [(10.0, 8.0), (12.0, 9.0)]}, 90.0)
    [job] = rep.jobs
    assert (job.phase, job.progress, job.total) == ("Succeeded", 400, 400)
    assert (rep.preemptions, rep.resizes, job.restarts) == (1, 1, 2)
    assert (job.first_loss, job.final_loss, job.predicted, job.observed) == (2.4, 2.0, 11.0, 8.5)
    assert [r.resumed_from for r in job.restart_log] == [2]


def test_script_jobs_divide_their_global_batch_at_every_size() -> None:
    for job in SCRIPT:
        body = manifest(job, "/usr/bin/python3", Path("/tmp/x"))
        args = body["spec"]["template"]["spec"]["containers"][0]["args"]
        batch = int(args[args.index("--global-batch-size") + 1])
        lo, hi = job.replicas
        assert all(batch % n == 0 for n in range(lo, hi + 1)), job
