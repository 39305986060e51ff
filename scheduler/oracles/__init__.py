"""Throughput oracles (adapter): ground-truth tables with injected error, and the perfmodel predictor."""
