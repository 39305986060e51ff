"""perfmodel: predicts training throughput of deep-learning jobs on GPU placements.

A separate package: it never imports ``scheduler``. Its modules are the stages of a prediction (job ->
operators -> per-operator time -> step -> placement and parallelism -> residual -> online correction),
each importing only earlier stages; docs/perfmodel.md's module map lists them. The entry points are
``predictor.Predictor`` (``Predictor.load()``), ``online.OnlineCorrector``, ``truth.GroundTruth`` and
``profiling`` (operator profiles). Importing the package is pure and cheap.
"""
