"""perfmodel: predicts training throughput of deep-learning jobs on GPU placements.

A separate package: it never imports ``scheduler``. Modules: ``gpus`` (product labels -> canonical GPU
types and specs), ``zoo`` (model and dataset features), ``features`` (job/placement features and the
data-parallel scaling model), ``predictor`` (the learned predictor, batch API, model file), ``online``
(online correction from observed throughput, remaining time), ``truth`` (measured ground truth for the
simulator and emulator), ``measurements`` (measured tables and their units), ``train`` (training), and
``errors``. Importing the package is pure and cheap.
"""
