"""The failure families a red-team pass found without a cause: NCCL transport failures (sockets, InfiniBand, the
c10d store), Windows / MSVC builds, CUDA libraries that do not load, and GPU kernel faults. Each family in several
spellings (versions, paths, `[rank3]:` prefixes, timestamps, Windows paths) names its cause first, and the near
misses of each (INFO chatter, a plain watchdog timeout, a traceback frame alone) do not name it at all."""

from __future__ import annotations

import pytest

from olmo_doctor.diagnose import diagnose_text

WATCHDOG = ("[rank5]:[E1114 02:43:56.210918 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=3681, OpType=ALLREDUCE, NumelIn=262144000, NumelOut=262144000, "
            "Timeout(ms)=1800000) ran for 1800088 milliseconds before timing out.")
FA_FRAME = ('  File "/venv/lib/python3.11/site-packages/flash_attn/flash_attn_interface.py", line 261, in '
            "_flash_attn_backward")


def _causes(log: str) -> list[str]:
    return [f.cause for f in diagnose_text(log)]


@pytest.mark.parametrize(("log", "cause"), [
    # NCCL transport: socket
    ("node-b:4410:4588 [0] misc/socket.cc:49 NCCL WARN socketProgressOpt: Call to recv from 192.168.7.11<46031> "
     "failed : Connection reset by peer\n" + WATCHDOG, "nccl_network"),
    ("[rank3]: socketProgress: Connection closed by remote peer worker-12.cluster.local<38817>", "nccl_network"),
    ("2026-11-02T10:11:12Z gpu7:1:2 [1] NCCL WARN socketStartConnect: Connect to 10.0.0.9<41000> failed : "
     "No route to host", "nccl_network"),
    ("gpu7:1:2 [1] NCCL WARN NET/Socket : Call to send failed : Broken pipe", "nccl_network"),
    ("node1:7:7 [0] misc/socket.cc:583 NCCL WARN socketPollConnect: connect returned Connection refused, exceeded "
     "error retry count (35)\ntorch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
     "NCCLUtils.hpp:275, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
     "nccl_network"),
    # NCCL transport: InfiniBand
    ("dgx2:99:120 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, "
     "vendor err 129\n" + WATCHDOG, "nccl_network"),
    ("[1,3]<stderr>:h1:9:9 [3] NCCL WARN NET/IB: Got completion from peer 10.1.1.4<3321> with status=5 opcode=1 "
     "len=0 vendor err 249 (Send)", "nccl_network"),
    ("mlx5: node3: got completion with error:\nIBV_WC_RETRY_EXC_ERR: transport retry counter exceeded",
     "nccl_network"),
    ("node4:10:20 [0] NCCL WARN NET/IB : Got async event : local catastrophic error", "nccl_network"),
    ("node2:5:5 [0] NCCL WARN Net : Connect to 10.4.0.2<43925> failed : No route to host", "nccl_network"),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:54321",
     "nccl_network"),
    # the c10d store
    ("torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] "
     "via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer",
     "nccl_network"),
    # a port going down is the root of the completion errors after it
    ("h:1:2 [2] NCCL INFO NET/IB : Got async event : port error\nh:1:3 [2] NCCL WARN NET/IB : Got completion from "
     "peer 10.20.0.7<40919> with status=12 opcode=0 len=0 vendor err 129 (Send)", "rdma_port_down"),
    # the unspecific NCCL errors of every torch, with nothing more specific next to them
    ("RuntimeError: NCCL Error 2: unhandled system error", "nccl_failure"),
    ("[rank1]: RuntimeError: NCCL Error 6: remote process exited or there was a network error\n"
     "[rank1]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
     "prematurely.", "nccl_failure"),
    # a plain hang is not a network failure
    (WATCHDOG + "\n  what():  [PG 0 (default_pg) Rank 5] Process group watchdog thread terminated with exception: "
     "[Rank 5] Watchdog caught collective operation timeout", "nccl_failure"),
    # Windows / MSVC
    ("      error: Microsoft Visual C++ 14.0 or greater is required. Get it with \"Microsoft C++ Build Tools\"",
     "msvc_build"),
    ("C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.1\\bin\\nvcc.exe ...\nnvcc fatal   : Cannot find "
     "compiler 'cl.exe' in PATH\nerror: command 'C:\\\\Program Files\\\\NVIDIA GPU Computing Toolkit\\\\CUDA\\\\v12.1"
     "\\\\bin\\\\nvcc.exe' failed with exit code 1", "msvc_build"),
    ("'cl' is not recognized as an internal or external command,\noperable program or batch file.", "msvc_build"),
    # torch's compiler probe failed, yet the compile ran and MSVC rejected the sources: the compile error it is
    ("cpp_extension.py:382: UserWarning: Error checking compiler version for cl: [WinError 2] The system cannot find "
     "the file specified\nD:\\fa\\csrc\\cutlass\\include\\cutlass/exmy_base.h(404): error C2275: 'Storage': "
     "expected an expression instead of a type", "msvc_build"),
    ("subprocess.CalledProcessError: Command '['where', 'cl']' returned non-zero exit status 1.", "msvc_build"),
    ("nvcc error   : 'cudafe++' died with status 0xC0000409\nninja: build stopped: subcommand failed.", "msvc_build"),
    ("      LINK : fatal error LNK1181: cannot open input file 'c10_cuda.lib'\n      error: command 'C:\\\\link.exe' "
     "failed with exit code 1181", "msvc_build"),
    ("D:\\src\\flash-attention\\csrc\\flash_attn\\src\\flash_bwd_kernel.h(345): error C2975: 'Is_causal': invalid "
     "template argument", "msvc_build"),
    ("C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v11.8\\include\\crt/host_config.h(160): fatal error "
     "C1189: #error:  -- unsupported Microsoft Visual Studio version! Only the versions between 2017 and 2022 "
     "(inclusive) are supported!", "unsupported_gcc"),
    # CUDA libraries
    ("ImportError: libcudnn.so.9: cannot open shared object file: No such file or directory", "cuda_libs_missing"),
    ("[rank0]: OSError: libcublasLt.so.12: cannot open shared object file: No such file or directory",
     "cuda_libs_missing"),
    ("OSError: libnvrtc-builtins.so.12.4: cannot open shared object file: No such file or directory",
     "cuda_libs_missing"),
    ("Could not load library libcudnn_cnn_infer.so.8. Error: libcudnn_cnn_infer.so.8: cannot open shared object file",
     "cuda_libs_missing"),
    ("Could not locate cudnn_ops_infer64_8.dll. Please make sure it is in your library path!", "cuda_libs_missing"),
    ("RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (9, 1, 0) but found runtime version "
     "(8, 9, 7).", "cuda_libs_missing"),
    ("ImportError: /venv/lib/python3.10/site-packages/nvidia/cusparse/lib/libcusparse.so.12: undefined symbol: "
     "__nvJitLinkComplete_12_4, version libnvJitLink.so.12", "cuda_libs_missing"),
    # an extension linking another CUDA runtime stays the version mismatch it was
    ("ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory",
     "cuda_version_mismatch"),
    # GPU kernel faults
    ("RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
     "asynchronously reported at some other API call", "cuda_kernel_fault"),
    ("[rank0]:[E1201 01:12:44.902 ProcessGroupNCCL.cpp:1595] [PG 0 (default_pg) Rank 0] Process group watchdog "
     "thread terminated with exception: CUDA error: an illegal memory access was encountered", "cuda_kernel_fault"),
    ("RuntimeError: Triton Error [CUDA]: misaligned address", "cuda_kernel_fault"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, "
     "k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F, "
     "CUBLAS_GEMM_DEFAULT_TENSOR_OP)`", "cuda_kernel_fault"),
    ("RuntimeError: CUDA error: unspecified launch failure", "cuda_kernel_fault"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered\n" * 4 + "[Mon Dec  1 01:12:40 2026] NVRM: "
     "Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.", "gpu_hardware_fault"),
    ("[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n[rank0]: RuntimeError: CUDA "
     "error: uncorrectable ECC error encountered", "gpu_hardware_fault"),
    # a rank that died of something else: the others' closed connections are its echo
    ("[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
     "[rank0]: socketProgress: Connection closed by remote peer gpu-b-7<51234>\n"
     "[rank1]: socketProgress: Connection closed by remote peer gpu-b-7<51234>", "cuda_kernel_fault"),
    ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity "
     "of 79.10 GiB\n[rank0]: socketProgressOpt: Call to recv from 10.0.0.3<40001> failed : Connection reset by peer",
     "out_of_memory_training"),
    # a hardware Xid next to the fault points at the GPU
    ("[Mon Dec  1 01:12:40 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the "
     "bus.\nRuntimeError: CUDA error: an illegal memory access was encountered", "gpu_hardware_fault"),
])
def test_family_names_its_cause_first(log: str, cause: str) -> None:
    causes = _causes(log)
    assert causes and causes[0] == cause, causes


@pytest.mark.parametrize(("log", "cause"), [
    ("node1:7:7 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>\nNCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB "
     "ib0:10.0.0.2<0>\nNCCL INFO Channel 00/0 : 0[0] -> 1[1] via NET/IB/0", "nccl_network"),
    ("ssh: connect to host 10.0.0.2 port 22: Connection refused", "nccl_network"),
    ("requests.exceptions.ConnectionError: ('Connection aborted.', ConnectionResetError(104, 'Connection reset by "
     "peer'))", "nccl_network"),
    (WATCHDOG, "nccl_network"),
    ("h:1:2 [0] NCCL INFO NET/IB : Got async event : GID table change", "nccl_network"),
    ("-- The CXX compiler identification is MSVC 19.38.33134.0\nMicrosoft (R) C/C++ Optimizing Compiler Version "
     "19.38.33134 for x64", "msvc_build"),
    ("C:\\src\\a.cpp(12): warning C4267: 'argument': conversion from 'size_t' to 'int', possible loss of data",
     "msvc_build"),
    ("/src/csrc/flash_api.cpp:12:5: error: 'min' is not a member of 'std'", "msvc_build"),
    ("libcudnn.so.9 => /venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9 (0x00007f...)\n"
     "cuDNN version: 90100", "cuda_libs_missing"),
    ("ImportError: libGL.so.1: cannot open shared object file: No such file or directory", "cuda_libs_missing"),
    # a custom kernel's frame alone is no fault: here the failure is an out-of-memory
    ("Traceback (most recent call last):\n" + FA_FRAME + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to "
     "allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB", "cuda_kernel_fault"),
    ("Traceback (most recent call last):\n" + FA_FRAME + "\nValueError: too many values to unpack",
     "cuda_kernel_fault"),
    ("RuntimeError: CUDA error: device-side assert triggered\nNVRM: Xid (PCI:0000:3b:00): 131, pid=1",
     "cuda_kernel_fault"),
])
def test_near_miss_does_not_name_the_cause(log: str, cause: str) -> None:
    assert cause not in _causes(log)


def test_transport_failure_names_the_peer() -> None:
    findings = diagnose_text("h:1:2 [2] NCCL WARN NET/IB : Got completion from peer 10.20.0.7<40919> with status=12 "
                             "opcode=0 len=0 vendor err 129 (Send)\n" + WATCHDOG)
    assert findings[0].cause == "nccl_network" and "10.20.0.7<40919>" in findings[0].title
    assert "NCCL_SOCKET_IFNAME" in findings[0].message and "NCCL_IB_HCA" in findings[0].message
    # without a peer in the log the wording says so instead of showing a blank
    title = diagnose_text("IBV_WC_RETRY_EXC_ERR: transport retry counter exceeded")[0].title
    assert "{" not in title and "<peer>" not in title and "does not say which" in title


def test_compile_error_outranks_a_failed_compiler_probe() -> None:
    log = ("UserWarning: Error checking compiler version for cl: [WinError 2] The system cannot find the file "
           "specified\nD:\\fa\\csrc\\flash_api.cpp(88): error C2039: 'min': is not a member of 'std'\n")
    assert diagnose_text(log)[0].code == "OD179"
    assert diagnose_text(log.splitlines()[0])[0].code == "OD177"  # the probe alone: cl.exe is not set up


def test_custom_kernel_on_the_stack_names_the_kernel_and_raises_confidence() -> None:
    fault = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    plain = diagnose_text(fault)[0]
    for frame, kernel in [(FA_FRAME, "flash_attn"),
                          ('  File "C:\\venv\\Lib\\site-packages\\xformers\\ops\\fmha\\cutlass.py", line 202, in '
                           "apply", "xformers"),
                          ('  File "/venv/lib/python3.12/site-packages/triton/runtime/jit.py", line 345, in <lambda>',
                           "triton")]:
        sharpened = diagnose_text("Traceback (most recent call last):\n" + frame + "\n" + fault)[0]
        assert sharpened.code == "OD257" and kernel in sharpened.title
        assert (sharpened.confidence or 0) > (plain.confidence or 0)
    assert plain.code == "OD256"
    assert "CUDA_LAUNCH_BLOCKING=1" in plain.message and "compute-sanitizer" in plain.message
