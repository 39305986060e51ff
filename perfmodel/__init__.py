"""perfmodel: predicts training throughput of deep-learning jobs on GPU placements.

A separate package: it never imports ``scheduler``.
"""
