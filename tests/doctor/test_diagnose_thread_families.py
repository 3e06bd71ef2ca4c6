"""The families the thread logs (tests/fixtures/logs/threads/) found `diagnose` naming wrongly, each with a
neighbour (the same family, worded or laid out differently) and a trap (a look-alike that is another cause):

- torch's CUDA init wrapper ("Unexpected error from cudaGetDeviceCount()") carries an error number; the number
  names the cause (804: the container's CUDA is newer than the driver), the wrapper only that CUDA did not start;
- an NCCL watchdog timeout among the first collectives is a transport that never worked (P2P); one after thousands
  of completed collectives is a stalled rank, reported as the NCCL timeout it is;
- torch falling back from ninja to distutils is a warning the build goes on after: another cause in the log is
  the failure;
- a terminal's hard wrap cuts a message inside a word at full width; the halves join without a blank.
"""

from __future__ import annotations

from olmo_doctor.diagnose import diagnose_text

WRAPPER = ("UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
           "functions before calling NumCudaDevices() that might have already set an error? {error}")


def _first(log: str) -> str | None:
    findings = diagnose_text(log)
    return findings[0].cause if findings else None


def test_the_error_number_in_torchs_init_wrapper_names_the_cause() -> None:
    for error in ("Error 804: forward compatibility was attempted on non supported HW (function operator())",
                  "Error 804: forward compatibility was attempted on non supported HW (Triggered internally at "
                  "../c10/cuda/CUDAFunctions.cpp:108.)"):
        assert _first(WRAPPER.format(error=error) + "\n") == "driver_too_old"
    # the same wrapper around another number is not the driver's age
    other = WRAPPER.format(error="Error 802: system not yet initialized (Triggered internally)") + "\n"
    assert _first(other) not in (None, "driver_too_old")


TIMEOUT = ("[rank3]:[E1206 18:44:12.715 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=544997376, NumelOut=68124672, Timeout(ms)=600000) "
           "ran for 600061 milliseconds before timing out.\n")


def test_a_timeout_after_many_collectives_is_not_blocked_p2p() -> None:
    for seq, op in (("7753", "_REDUCE_SCATTER_BASE"), ("1580", "ALLREDUCE"), ("96120", "ALLGATHER")):
        assert _first(TIMEOUT.format(seq=seq, op=op)) == "nccl_failure"
    # the first collective hanging is still the transport's
    assert "nccl_p2p" in [f.cause for f in diagnose_text(TIMEOUT.format(seq="1", op="ALLREDUCE"))]


FALLBACK = ("  /venv/lib/python3.11/site-packages/torch/utils/cpp_extension.py:502: UserWarning: Attempted to use "
            "ninja as the BuildExtension backend but we could not find ninja.. Falling back to using the slow "
            "distutils backend.\n")


def test_ninjas_fallback_yields_to_the_failure_after_it() -> None:
    assert _first(FALLBACK) == "ninja_missing"  # alone it is still the finding
    gcc = ("/usr/local/cuda/include/crt/host_config.h:143:2: error: #error -- unsupported GNU version! gcc versions "
           "later than 12 are not supported!\n")
    assert _first(FALLBACK + gcc) == "unsupported_gcc"
    cl = ("  UserWarning: Error checking compiler version for cl: [WinError 2] The system cannot find the file "
          "specified\n")
    assert _first(FALLBACK + cl) == "msvc_build"


def test_a_message_hard_wrapped_inside_a_word_is_read_whole() -> None:
    line = ("/usr/local/cuda-12.4/bin/../targets/x86_64-linux/include/crt/host_config.h:143:2: error: #error -- "
            "unsupported GNU version! gcc versions later than 13 are not supported!")
    for cut in (95, 110, 121):  # wherever the terminal's width falls inside the message
        wrapped = line[:cut] + "\n" + line[cut:] + "\n"
        assert _first(wrapped) == "unsupported_gcc", line[cut - 5:cut + 5]


def test_a_short_line_is_no_hard_wrap() -> None:
    # a line far shorter than a terminal's width ends where its writer ended it: "unsupp" + "orted ..." stays two
    text = "#error -- unsupp\norted GNU version! gcc versions later than 12 are not supported!\n"
    assert "unsupported_gcc" not in [f.cause for f in diagnose_text(text)]
