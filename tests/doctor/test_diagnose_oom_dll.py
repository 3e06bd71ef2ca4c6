"""Two failure families `diagnose` named nothing for, as families, not as one log's words:

- the kernel's OOM killer during a build is the build's memory, whatever process it killed: a desktop
  (gnome-shell, Xorg), a browser, an editor, ninja or python, in dmesg, journalctl or cgroup wording; the same kill
  during training (no compile running in the log) is not a compile OOM;
- a Windows DLL load failure is named by which DLL failed and what that DLL needs (the Visual C++ runtime for
  c10.dll / torch_cpu.dll, libomp140.x86_64.dll for fbgemm.dll, the NVIDIA driver for torch_cuda.dll); a CUDA
  library's DLL stays the CUDA-library cause.

Log fixtures of both (tests/fixtures/logs/compile_oom_killed/, tests/fixtures/logs/windows_dll_missing/) reproduce
the lines of these threads: flash-attention#2051 and #2493 (a server and a desktop freezing while nvcc jobs run),
ninja#1340 (the kernel's OOM table with desktop processes), LlamaFactory#5132, FunClip#105, pytorch#131662
(fbgemm.dll), nunif#701, Kronos#166, graph-rag-agent#54 (c10.dll, WinError 1114).
"""

from __future__ import annotations

import pytest

from olmo_doctor.diagnose import diagnose_text

NVCC = ("[7/48] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c csrc/flash_attn/src/"
        "flash_fwd_hdim64_fp16_sm80.cu -o build/flash_fwd_hdim64_fp16_sm80.o --threads 4")
CUDAFE = "nvcc error   : 'cudafe++' running"  # a compile step named (not a failure)
KILLS = [
    "[81771.912] Out of memory: Killed process 2211 (gnome-shell) total-vm:5104220kB, anon-rss:1623300kB",
    "Dec 06 10:12:41 box kernel: Out of memory: Killed process 1042 (Xorg) total-vm:812332kB, anon-rss:90312kB",
    "[ 3012.1] Out of memory: Kill process 5120 (code) score 312 or sacrifice child",
    "kernel: oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task=chrome,pid=99",
    "[ 9012.55] Xorg invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0",
    "Memory cgroup out of memory: Killed process 771 (node) total-vm:3310432kB, anon-rss:2123912kB",
    "[Sat Dec  6 10:12:41 2025] Out of memory: Killed process 8812 (python3.12) total-vm:9104220kB",
]
BUILDS = [
    NVCC,
    "  Building wheel for xformers (setup.py) ... -",
    "building 'flash_attn_2_cuda' extension",
    "ninja: build stopped: subcommand failed.",
    "#12 811.0 /usr/local/cuda/bin/nvcc -c kernels/cutlassF.cu -o build/cutlassF.o -gencode=arch=compute_90,code=sm_90",
    # the kernel's own process table, whose last column is the command: a compiler at the end of its line
    "Dec 07 15:40:35 user kernel: [   8123]     0  8123    25225    10680   151552        0             0 cudafe++",
    "[ 811.2] [   4401]     0  4401   812211   622110  5111808        0             0 cicc",
]


@pytest.mark.parametrize("kill", KILLS)
@pytest.mark.parametrize("build", BUILDS)
def test_an_oom_kill_during_a_build_is_the_builds_memory(build: str, kill: str) -> None:
    findings = diagnose_text(f"{build}\n...\n{kill}\n")
    assert findings and findings[0].cause == "compile_oom_killed", [(f.code, f.cause) for f in findings[:3]]
    assert any(kill[:30] in m.text for m in findings[0].matched_lines)  # the kill line is quoted, not the nvcc one


@pytest.mark.parametrize("kill", KILLS)
def test_the_same_kill_without_a_build_names_no_compile_oom(kill: str) -> None:
    training = f"step 1200 | loss 2.31 | 41.2k tok/s\nstep 1210 | loss 2.30\n{kill}\n"
    assert "compile_oom_killed" not in [f.cause for f in diagnose_text(training)]


def test_a_compile_line_alone_names_nothing() -> None:
    assert diagnose_text(f"{NVCC}\n{CUDAFE}\n") == []


DLLS = [
    ("fbgemm.dll", "OSError: [WinError 126] The specified module could not be found. Error loading "
     '"C:\\Users\\x\\AppData\\Local\\Programs\\Python\\Python312\\Lib\\site-packages\\torch\\lib\\fbgemm.dll" '
     "or one of its dependencies.", "libomp140.x86_64.dll"),
    ("fbgemm.dll", 'OSError: [WinError 126] 找不到指定的模块。 Error loading "E:\\app\\lib\\site-packages\\torch\\lib\\'
     'fbgemm.dll" or one of its dependencies.', "libomp140.x86_64.dll"),
    ("c10.dll", "OSError: [WinError 1114] A dynamic link library (DLL) initialization routine failed. Error loading "
     '"D:\\env\\lib\\site-packages\\torch\\lib\\c10.dll" or one of its dependencies.', "Visual C++"),
    ("c10.dll", 'OSError: [WinError 1114] 动态链接库(DLL)初始化例程失败。 Error loading "C:\\Program Files\\'
     'Python311\\Lib\\site-packages\\torch\\lib\\c10.dll" or one of its dependencies.', "Visual C++"),
    ("torch_cpu.dll", 'OSError: [WinError 127] The specified procedure could not be found. Error loading "C:\\venv\\'
     'Lib\\site-packages\\torch\\lib\\torch_cpu.dll" or one of its dependencies.', "Visual C++"),
    ("torch_cuda.dll", 'OSError: [WinError 126] The specified module could not be found. Error loading "C:\\venv\\Lib\\'
     'site-packages\\torch\\lib\\torch_cuda.dll" or one of its dependencies.', "nvcuda.dll"),
    ("torchaudio's libtorchaudio.dll", 'OSError: [WinError 126] The specified module could not be found. Error '
     'loading "C:\\venv\\Lib\\site-packages\\torchaudio\\lib\\libtorchaudio.dll" or one of its dependencies.',
     "Dependencies"),
]


@pytest.mark.parametrize(("dll", "log", "needs"), DLLS, ids=[d[0] + f"-{i}" for i, d in enumerate(DLLS)])
def test_a_dll_load_failure_names_the_dll_and_what_it_needs(dll: str, log: str, needs: str) -> None:
    trace = ('Traceback (most recent call last):\n  File "C:\\venv\\Lib\\site-packages\\torch\\__init__.py", '
             "line 281, in <module>\n    _load_dll_libraries()\n" + log + "\n")
    findings = diagnose_text(trace)
    assert findings and findings[0].cause == "windows_dll_missing", [(f.code, f.cause) for f in findings[:3]]
    name = dll.split("'s ")[-1]
    assert name in findings[0].title and needs in findings[0].title + findings[0].message
    assert "System32" in findings[0].message  # never advise dropping downloaded DLLs there


def test_a_cuda_librarys_dll_stays_the_cuda_library_cause() -> None:
    log = ('OSError: [WinError 126] The specified module could not be found. Error loading "C:\\x\\torch\\lib\\'
           'cudnn_cnn_infer64_8.dll" or one of its dependencies.\n')
    assert diagnose_text(log)[0].cause == "cuda_libs_missing"


def test_an_unnamed_dll_failure_still_names_the_family() -> None:
    findings = diagnose_text("ImportError: DLL load failed while importing _C: The specified module could not be "
                             "found.\n")
    assert findings[0].cause == "windows_dll_missing" and "Dependencies" in findings[0].message
