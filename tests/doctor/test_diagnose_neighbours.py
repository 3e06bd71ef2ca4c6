"""The new causes next to their neighbours: a log of each family and of the family beside it (an NCCL timeout
without network errors, an OOM with a flash_attn frame, an MSVC warning that is not the error, Xid 79 vs Xid 13, an
out-of-bounds index in user code), checked for the first-ranked cause and the line it quotes first; and warnings
the run got past (a cuDNN library that a UserWarning or TensorFlow says could not load) are not named as the cause
of the program's own error that followed."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmo_doctor.diagnose import diagnose

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "neighbours"


def _log(name: str) -> str:
    return (LOGS / f"{name}.log").read_text()


NCCL_TIMEOUT = _log("nccl-timeout")
NCCL_IB = _log("nccl-ib")
NCCL_AFTER_OOM = _log("nccl-after-oom")
OOM_FLASH = _log("oom-flash")
MSVC_WARNINGS_THEN_SUBMODULE = _log("msvc-warnings-then-submodule")
MSVC_MISSING = _log("msvc-missing")
XID79 = _log("xid79")
XID13 = _log("xid13")
OOB_EMBEDDING = _log("oob-embedding")
DEVICE_ASSERT_FLASH_FRAME = _log("device-assert-flash-frame")
TORCHAO_WARNING_THEN_OOM = _log("torchao-warning-then-oom")
CUDNN_USERWARNING_THEN_KEYERROR = _log("cudnn-userwarning-then-keyerror")
TF_WARNING_THEN_FILE_NOT_FOUND = _log("tf-warning-then-file-not-found")
# the same warnings, then an error they can cause: the warning stays the cause
TF_WARNING_THEN_CUDNN_ERROR = TF_WARNING_THEN_FILE_NOT_FOUND.replace(
    "FileNotFoundError: [Errno 2] No such file or directory: 'data/tokenizer.json'",
    "tensorflow.python.framework.errors_impl.UnknownError: Failed to get convolution algorithm. This is probably "
    "because cuDNN failed to initialize")
CUDNN_USERWARNING_THEN_RUNTIME = CUDNN_USERWARNING_THEN_KEYERROR.replace(
    "KeyError: 'input_ids'", "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED")
# a plain Python error that a rule recognises is not the program's own bug: nothing is demoted
IMPORT_NO_CUDNN = _log("import-no-cudnn")

CASES = [
    ("nccl-ib-completion-error", NCCL_IB, "nccl_network", 1),
    ("nccl-network-after-oom", NCCL_AFTER_OOM, "out_of_memory_training", 1),
    ("oom-with-flash-frame", OOM_FLASH, "out_of_memory_training", 5),
    ("msvc-warnings-then-submodule", MSVC_WARNINGS_THEN_SUBMODULE, "missing_submodule", 4),
    ("msvc-missing", MSVC_MISSING, "msvc_build", 2),
    ("xid79", XID79, "gpu_hardware_fault", 1),
    ("xid13", XID13, "cuda_kernel_fault", 1),
    ("oob-embedding", OOB_EMBEDDING, "cuda_kernel_fault", 5),
    ("torchao-warning-then-oom", TORCHAO_WARNING_THEN_OOM, "out_of_memory_training", 2),
    ("tf-warning-then-cudnn-error", TF_WARNING_THEN_CUDNN_ERROR, "cuda_libs_missing", 1),
    ("userwarning-then-runtime", CUDNN_USERWARNING_THEN_RUNTIME, "cuda_libs_missing", 1),
    ("import-no-cublas", IMPORT_NO_CUDNN, "cuda_libs_missing", 1),
    # torchao's own library failing to link names torchao, not the general ABI mismatch (OD160)
    ("torchao-undefined-symbol", _log("torchao-undefined-symbol"), "torchao_torch_mismatch", 4),
    ("torchao-api-missing", _log("torchao-api-missing"), "torchao_torch_mismatch", 4),
]


@pytest.mark.parametrize(("log", "cause", "line"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_first_cause_and_its_first_quoted_line(log: str, cause: str, line: int) -> None:
    diag = diagnose([log])
    assert diag.found and diag.findings, "nothing recognised"
    top = diag.findings[0]
    assert top.cause == cause, [(f.code, f.cause, f.confidence) for f in diag.findings[:3]]
    assert top.matched_lines[0].line == line, top.matched_lines


def test_an_nccl_timeout_without_network_errors_is_not_a_network_cause() -> None:
    assert "nccl_network" not in [f.cause for f in diagnose([NCCL_TIMEOUT]).findings]


def test_a_custom_kernel_frame_next_to_a_device_assert_does_not_blame_the_kernel() -> None:
    assert [f.cause for f in diagnose([DEVICE_ASSERT_FLASH_FRAME]).findings] == []


def test_a_fault_in_user_code_is_the_generic_kernel_fault() -> None:
    assert diagnose([OOB_EMBEDDING]).findings[0].code == "OD256"  # no custom kernel to blame (OD257)


@pytest.mark.parametrize("log", [CUDNN_USERWARNING_THEN_KEYERROR, TF_WARNING_THEN_FILE_NOT_FOUND],
                         ids=["userwarning-keyerror", "tensorflow-filenotfound"])
def test_a_warning_the_run_got_past_is_not_the_cause_of_its_own_error(log: str) -> None:
    diag = diagnose([log])
    assert not diag.found  # a symptom at most: the KeyError / FileNotFoundError is the program's own
    assert all((f.confidence or 0.0) <= 0.35 for f in diag.findings)


def test_the_final_error_is_found_past_a_long_log_and_numbered_right() -> None:
    from olmo_doctor.diagnose.asides import final_own_error

    noise = "".join(f"step {i} loss 2.0 " + "x" * 60 + "\n" for i in range(3000))  # ~200 KB
    text = (noise + CUDNN_USERWARNING_THEN_KEYERROR).encode()
    assert final_own_error(text, 10) == 10 + text.count(b"\n") - 1  # the KeyError line, counted from line 10
    assert final_own_error((noise + "RuntimeError: CUDA error\n").encode(), 1) is None
    diag = diagnose([noise + CUDNN_USERWARNING_THEN_KEYERROR])
    assert not diag.found


TORCHRUN_SUMMARY = ("E1201 10:00:01.000000 4242 torch/distributed/elastic/multiprocessing/api.py:869] failed "
                    "(exitcode: 1) local_rank: 0 (pid: 4243) of binary: /venv/bin/python\n") + """\
Traceback (most recent call last):
  File "/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/venv/lib/python3.12/site-packages/torch/distributed/launcher/api.py", line 263, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_10:00:01
  host      : node-3
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 4243)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_a_torchrun_summary_after_the_programs_own_error_keeps_the_warning_a_symptom() -> None:
    diag = diagnose([CUDNN_USERWARNING_THEN_KEYERROR + TORCHRUN_SUMMARY])
    assert not diag.found
    # and when the worker's last error is one the warning can cause, the warning stays the cause
    assert diagnose([CUDNN_USERWARNING_THEN_RUNTIME + TORCHRUN_SUMMARY]).findings[0].cause == "cuda_libs_missing"
