#!/bin/sh
# Builds the perfsched wheel (with the shipped predictor model and the simulator's sample data as package
# data) into the directory given as $1. The Dockerfile's build stage runs exactly this script, and
# tests/deploy/test_image.py runs it too and inspects the wheel, so what the tests check is what ships.
# Needs setuptools and wheel installed in the running python (no build isolation: no network needed).
set -eu
out="${1:?usage: build-wheel.sh OUTDIR}"
cd "$(dirname "$0")/../.."
"${PYTHON:-python}" -m pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir "$out" .
