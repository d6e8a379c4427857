#!/usr/bin/env python3
"""A CUDA-enabled `actorlm` maps no CUDA library until --device cuda asks
for one (issue 32), and then loads its CUDA module.

  cuda_module_test.py ACTORLM_BINARY

1. `actorlm run` on the CPU: once the model is loaded (stderr's "loaded in"),
   /proc/<pid>/maps names no libcuda*, libcublas*, libnvrtc* or
   libactorlm_cuda.so, and the dynamic loader's own log (LD_DEBUG=files, the
   whole life of the process) shows none of them loaded either.
2. `actorlm run --device cuda`: the loader's log shows the module and cuBLAS
   loaded. Without a GPU the run fails with the module's "no usable device"
   (so dlopen and the symbol lookup worked); with one it answers.
3. ACTORLM_CUDA_MODULE naming a missing file: a clear error that says where
   it looked, not a crash.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

CUDA_LIB = re.compile(r"\S*/(libcuda|libcudart|libcublas|libcublasLt|libnvrtc|libnvJitLink|libactorlm_cuda)[^/\s]*\.so[^/\s]*")
PROMPT = ["run", "--raw", "--max-tokens", "8", "-p", "The capital of France is"]


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def loaded_objects(log_dir, pid):
    """Every file the dynamic loader opened for `pid` (LD_DEBUG=files)."""
    path = os.path.join(log_dir, f"ld.{pid}")
    if not os.path.exists(path):
        fail(f"no LD_DEBUG log at {path}: the loader's log is the check")
    with open(path, errors="replace") as f:
        return re.findall(r"file=(\S+)\s+\[\d+\];\s+generating link map", f.read())


def run_logged(binary, args, log_dir, extra_env=None, on_loaded=None):
    """Runs actorlm with the loader's log in log_dir; on_loaded(pid) is called
    once stderr says the model is loaded. Returns (code, stderr, pid)."""
    env = dict(os.environ, LD_DEBUG="files", LD_DEBUG_OUTPUT=os.path.join(log_dir, "ld"))
    env.update(extra_env or {})
    p = subprocess.Popen([binary] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
    err = []
    for line in p.stderr:
        err.append(line)
        if on_loaded and line.startswith("loaded in"):
            on_loaded(p.pid)
            on_loaded = None
    code = p.wait(timeout=300)
    return code, "".join(err), p.pid


def gpu_present():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    r = subprocess.run([smi, "-L"], capture_output=True, text=True)
    return r.returncode == 0 and "GPU" in r.stdout


def cpu_run_maps_no_cuda(binary, log_dir):
    maps = {}

    def read_maps(pid):
        with open(f"/proc/{pid}/maps") as f:
            maps["text"] = f.read()

    code, err, pid = run_logged(binary, PROMPT + ["--device", "cpu"], log_dir, on_loaded=read_maps)
    if code != 0:
        fail(f"CPU run exited {code}:\n{err[-2000:]}")
    if "text" not in maps:
        fail(f"the CPU run never printed 'loaded in':\n{err[-2000:]}")
    mapped = sorted({m.group(0) for m in CUDA_LIB.finditer(maps["text"])})
    if mapped:
        fail(f"the CPU run maps CUDA libraries: {mapped}")
    loaded = [o for o in loaded_objects(log_dir, pid) if CUDA_LIB.search("/" + os.path.basename(o))]
    if loaded:
        fail(f"the CPU run loaded CUDA libraries: {loaded}")
    print(f"ok: CPU run maps and loads no CUDA library ({len(loaded_objects(log_dir, pid))} objects loaded)")


def cuda_run_loads_module(binary, log_dir):
    code, err, pid = run_logged(binary, PROMPT + ["--device", "cuda"], log_dir)
    names = [os.path.basename(o) for o in loaded_objects(log_dir, pid)]
    for want in ("libactorlm_cuda.so", "libcublas.so"):
        if not any(n.startswith(want) for n in names):
            fail(f"--device cuda did not load {want} (loaded: {names})\n{err[-2000:]}")
    if gpu_present():
        if code != 0:
            fail(f"--device cuda exited {code} on a machine with a GPU:\n{err[-2000:]}")
        print("ok: --device cuda loaded the module and ran on the GPU")
        return
    if code == 0:
        fail("--device cuda succeeded on a machine without a GPU")
    if "CUDA backend loaded from" not in err or "libactorlm_cuda.so" not in err:
        fail(f"--device cuda without a GPU did not report the module's own error:\n{err[-2000:]}")
    print("ok: --device cuda loaded the module, which reported: " + err.strip().splitlines()[-1])


def missing_module_is_a_clear_error(binary, log_dir):
    missing = os.path.join(log_dir, "nowhere", "libactorlm_cuda.so")
    code, err, _ = run_logged(binary, PROMPT + ["--device", "cuda"], log_dir, {"ACTORLM_CUDA_MODULE": missing})
    if code == 0 or code < 0:
        fail(f"a missing module gave exit {code}:\n{err[-2000:]}")
    if "could not be loaded" not in err or missing not in err:
        fail(f"a missing module's error does not say where it looked:\n{err[-2000:]}")
    print("ok: a missing module is reported with where it was looked for")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    for check in (cpu_run_maps_no_cuda, cuda_run_loads_module, missing_module_is_a_clear_error):
        with tempfile.TemporaryDirectory() as log_dir:
            check(binary, log_dir)


if __name__ == "__main__":
    main()
