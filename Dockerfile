# perfsched container image: one image, entrypoint `perfsched`, so the commands are
#   perfsched extender | perfsched operator | perfsched simulate | perfsched predict
# It ships the product only (scheduler, perfmodel): the developer tooling in perfsched_dev/ (dev-cluster,
# demo, emulate) is not copied, so its entry points in the wheel's metadata find nothing and the CLI
# leaves those commands out.
# Build:  docker build -t perfsched:dev .
# Lint:   hadolint Dockerfile   (tests/deploy/test_image.py runs it)
# Dependencies are pinned by deploy/image/requirements.lock, the runtime part of uv.lock that the tests run
# with (`make lock` exports it; the build tools below, pip, setuptools, wheel and mypy with its
# dependencies, are the lock's versions too); the wheel is
# built by deploy/image/build-wheel.sh, the same script the tests run, and carries the shipped predictor
# model (perfmodel/data) and the simulator's sample traces and cluster specs as package data.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---- build: a virtualenv with the pinned dependencies and the perfsched wheel -------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# A C compiler for the predictor's compiled tree walk (perfmodel/_forest.c) and, with mypyc (it comes with
# mypy), for the scheduling core's modules that setup.py compiles (NATIVE); build stage only.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential=12.9 \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/perfsched \
 && /opt/perfsched/bin/pip install --no-cache-dir "pip==26.3" "setuptools==84.2.1" "wheel==0.48.0" \
      "mypy==1.20.2" "mypy-extensions==1.2.0" "pathspec==1.1.1" "librt==0.17.0"
ENV PATH=/opt/perfsched/bin:$PATH
COPY deploy/image/requirements.lock /src/deploy/image/requirements.lock
RUN pip install --no-cache-dir --require-virtualenv -r deploy/image/requirements.lock
COPY pyproject.toml README.md /src/
COPY deploy/image/build-wheel.sh /src/deploy/image/build-wheel.sh
COPY scheduler /src/scheduler
COPY perfmodel /src/perfmodel
COPY setup.py /src/
RUN sh deploy/image/build-wheel.sh /wheels \
 && pip install --no-cache-dir --no-deps /wheels/perfsched-*.whl \
 && pip check \
 && python -I -c "import perfmodel._forest" \
 && python -I -c "import scheduler.sim.engine as m; assert m.__file__.endswith('.so'), m.__file__" \
 && pip uninstall --yes setuptools wheel mypy mypy-extensions pathspec librt

# ---- runtime: slim base, the venv, a non-root user --------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
# xgboost needs the GNU OpenMP runtime, which the slim image does not carry.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1=12.2.0-14+deb12u1 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 perfsched \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin perfsched
COPY --from=build /opt/perfsched /opt/perfsched
ENV PATH=/opt/perfsched/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp
USER 10001:10001
WORKDIR /tmp
# The Helm chart runs `extender` and `operator`; 8888 = extender API and /metrics, 9090 = operator /metrics.
EXPOSE 8888 9090
ENTRYPOINT ["perfsched"]
CMD ["--help"]
