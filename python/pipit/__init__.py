"""pipit from Python: a ctypes binding of libpipit (docs/python.md).

Layers:
  pipit.lib, pipit.S, pipit.C   every public C function, struct and constant (_lib.py)
  Graph, Value, op functions    building graphs: + - * / @, pipit.softmax(x), pipit.pipeline_yield(x)
  Schedule, Program             schedules, compiled programs, steps, params
  Checkpoint, Data, Tokenizer   files, token streams, BPE
  models, Trainer               the presets and `pipit train`'s loop
  sample_token, Sampler, Decoder   generating tokens with a KV cache (generate.py)
  partition, Schedule.simulate, Program.plan, simulate, Hardware
                                stage cuts, schedule and cost simulators, plans (analysis.py)
Failures raise pipit.Error subclasses carrying pipit's message.
"""
from ._lib import (C, S, DeadlockError, Error, FormatError, InternalError, InvalidError, IOFailure, MisuseError,
                   NoMemoryError, RuntimeFailure, ScheduleError, ShapeError, finalize, lib, library_path)
from .core import (DTYPES, Checkpoint, Data, Feeds, Graph, Program, Schedule, Tokenizer, Value, adamw, agree,
                   build_id, cpu_bf16_gemm, cpu_blas_advice, cpu_blas_kernels, cuda_device_count, have_cuda, have_mpi, init, lr_at, lr_schedule,
                   process_count, process_rank, schedule_names, sgd, version)
from .ops import *  # noqa: F401,F403
from .ops import __all__ as _ops_all
from . import models
from .trainer import Trainer
from .generate import Decoder, Sampler, sample_token
from .analysis import (Hardware, Partition, SimReport, SimResult, mem_available, partition, plan, plan_text,
                       probe_links, profile, profile_text, schedule_text, simulate)

__all__ = ["lib", "S", "C", "library_path", "Error", "InvalidError", "ShapeError", "IOFailure", "FormatError",
           "NoMemoryError", "MisuseError", "ScheduleError", "DeadlockError", "RuntimeFailure", "InternalError",
           "Graph", "Value", "Schedule", "Program", "Checkpoint", "Data", "Tokenizer", "Feeds", "DTYPES", "adamw",
           "sgd", "lr_schedule", "lr_at", "schedule_names", "version", "build_id", "models", "Trainer", "init",
           "finalize", "process_rank", "process_count", "agree", "Decoder", "Sampler", "sample_token", "Hardware",
           "Partition", "SimReport", "SimResult", "mem_available", "partition", "plan", "plan_text", "profile",
           "profile_text", "schedule_text", "simulate", "probe_links", "have_mpi", "have_cuda", "cuda_device_count",
           "cpu_bf16_gemm", "cpu_blas_kernels", "cpu_blas_advice"] + _ops_all
