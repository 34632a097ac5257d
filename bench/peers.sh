#!/usr/bin/env bash
# bench/peers.sh — pipit against the best-configured peers, in one command:
# the one-rank train step (pipit, Debian torch, PyPI torch 2.x, JAX, and the
# OpenBLAS sgemm ceiling, 1 and 2 threads, small model and GPT-2 124M) and
# PyTorch's own pipelining. Same as `bench/run.sh --peers` (see there for the
# environment variables); docs/benchmarks.md, "Peers", has a run.
exec "$(dirname "$0")/run.sh" --peers "$@"
