#!/usr/bin/python3
"""The device script's CPU-side steps (scripts/device/gpu_check.sh, pack.sh, gpu_results.py;
docs/TESTING.md, "Every CUDA path run once"):

  * packing: pack.sh with the build skipped packs this build's pretrain_gpt and generate into a
    runtime archive (the executables, env.sh, libraries), beside run.sh, device_env.sh, the
    benchmark scripts and commit.txt naming HEAD, under the 64 MiB a device call carries;
  * the dry run over that pack lists every gpt_gpu_test target of tests/gpu/CMakeLists.txt and
    every tests/gpu/*_test.py, marks the GPU test binaries a CPU pack lacks as missing and the
    packed programs as present, names the benchmark and the results, writes nothing; a bad
    argument is one error line, exit 2;
  * the results format: GoogleTest's own XML (a CPU test binary run here) and hand-written
    reports in GoogleTest's skipped/failed form, script reports for exit 0 / 77 / 1 / 124, a
    binary that crashed without a report: the summary's counts and rows, the merged JUnit file,
    the exit status (a skip fails only with --skips-fail, which the script passes where a GPU is
    visible);
  * a whole run without a GPU, over stand-in test binaries: at most 8 result files with names the
    device tool brings back, every test in summary.md and junit.xml, exit 1 on a failing one.
"""
import argparse
import glob
import os
import re
import shutil
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEVICE = os.path.join(ROOT, "scripts", "device")


def gpu_targets():
    with open(os.path.join(ROOT, "tests", "gpu", "CMakeLists.txt")) as f:
        return re.findall(r"^\s*gpt_gpu_test\((\w+) ", f.read(), re.M)


def gpu_scripts():
    return sorted(os.path.basename(p)[:-len("_test.py")] for p in glob.glob(os.path.join(ROOT, "tests/gpu/*_test.py")))


def run(command, env=None, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=300,
                          **kwargs)


def check_pack(args, work, failures):
    build = os.path.join(work, "build")
    os.makedirs(os.path.join(build, "bin"))
    for program, path in (("pretrain_gpt", args.pretrain), ("generate", args.generate)):
        os.symlink(path, os.path.join(build, "bin", program))
    pack = os.path.join(work, ".devrt")
    result = run(["bash", os.path.join(DEVICE, "pack.sh")],
                 env={"GPT_DEVICE_SKIP_BUILD": "1", "GPT_DEVICE_BUILD_DIR": build, "GPT_DEVICE_PACK_DIR": pack,
                      "GPT_DEVICE_PROGRAMS": "pretrain_gpt generate", "XZ_OPT": "-0 -T2"})
    if result.returncode != 0:
        failures.append(f"pack.sh: exit {result.returncode}: {result.stderr.strip()[-400:]}")
        return None
    present = sorted(os.listdir(pack))
    wanted = ["commit.txt", "device_env.sh", "gpu_benchmark.py", "run.sh", "runtime.tar.xz", "torch_gpt_baseline.py"]
    if present != wanted:
        failures.append(f"pack: {present}, want {wanted}")
    listing = run(["tar", "-tJf", os.path.join(pack, "runtime.tar.xz")]).stdout.split()
    for member in ("./bin/pretrain_gpt", "./bin/generate", "./env.sh"):
        if member not in listing:
            failures.append(f"pack: {member} not in runtime.tar.xz")
    if not any(m.startswith("./lib/") and m != "./lib/" for m in listing):
        failures.append("pack: no library packed beside the executables")
    size = sum(os.path.getsize(os.path.join(pack, f)) for f in present)
    if size >= 64 << 20:
        failures.append(f"pack: {size} bytes, over the 64 MiB a device call carries")
    with open(os.path.join(pack, "commit.txt")) as f:
        commit = f.read()
    head = run(["git", "-C", ROOT, "rev-parse", "HEAD"]).stdout.strip()
    if head and head not in commit or "pretrain_gpt generate" not in commit:
        failures.append(f"pack: commit.txt {commit!r} does not name HEAD {head} and the programs")
    print(f"pack: {len(listing)} archive members, {size / 2**20:.1f} MiB in all")
    return pack


def check_dry_run(pack, work, failures):
    out = os.path.join(work, "dry_out")
    result = run(["bash", os.path.join(DEVICE, "gpu_check.sh"), "--dry-run", "--out", out], env={"DEVRT": pack})
    lines = result.stdout.splitlines()
    if result.returncode != 0 or os.path.exists(out):
        failures.append(f"dry run: exit {result.returncode}, wrote {out}: {os.path.exists(out)}; {result.stderr[-300:]}")
    targets = gpu_targets()
    if len(targets) < 8:
        failures.append(f"tests/gpu/CMakeLists.txt: only {targets}")
    for target in targets:
        line = [l for l in lines if l.startswith(f"gtest: {target} ")]
        if len(line) != 1 or "MISSING" not in line[0]:
            failures.append(f"dry run: {target}: {line} (a CPU pack lacks it: want it listed once, marked missing)")
    for script in gpu_scripts():
        line = [l for l in lines if l.startswith(f"script: {script}:") and f"tests/gpu/{script}_test.py" in l]
        if len(line) != 1 or "MISSING" in line[0]:
            failures.append(f"dry run: tests/gpu/{script}_test.py: {line} (want it listed once, its programs packed)")
    for prefix in ("unpack: " + pack, "record: nvidia-smi", "benchmark: ", "results: " + out, "commit: "):
        if not any(l.startswith(prefix) for l in lines):
            failures.append(f"dry run: no line starting {prefix!r}")
    bad = run(["bash", os.path.join(DEVICE, "gpu_check.sh"), "--frobnicate"])
    if bad.returncode != 2 or len(bad.stderr.strip().splitlines()) != 1 or "error:" not in bad.stderr:
        failures.append(f"bad argument: exit {bad.returncode}, {bad.stderr!r}")
    print(f"dry run: {len(lines)} lines, {len(targets)} test binaries, {len(gpu_scripts())} scripts")


GTEST_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="3" failures="1" name="AllTests">
  <testsuite name="OpsTest" tests="3" failures="1">
    <testcase name="Passes" status="run" result="completed" time="0.5" classname="OpsTest" />
    <testcase name="Skips" status="run" result="skipped" time="0" classname="OpsTest">
      <skipped message="no GPU on this machine" />
    </testcase>
    <testcase name="Fails" status="run" result="completed" time="1.25" classname="OpsTest">
      <failure message="error 0.5 &gt; 1e-5&#x0A;second line" type="" />
    </testcase>
  </testsuite>
</testsuites>
"""


def summarize(reports, work, name, extra=()):
    md, junit = os.path.join(work, name + ".md"), os.path.join(work, name + ".xml")
    result = run([sys.executable, os.path.join(DEVICE, "gpu_results.py"), "summary", "--reports", reports,
                  "--device", os.path.join(work, "missing_device.txt"), "--commit", os.path.join(work, "nothing.txt"),
                  "--markdown", md, "--junit", junit] + list(extra))
    return result, md, junit


def check_results_format(args, work, failures):
    reports = os.path.join(work, "reports")
    os.makedirs(reports)
    real = run([args.cpu_gtest, "--gtest_filter=" + args.cpu_gtest_filter,
                f"--gtest_output=xml:{os.path.join(reports, 'cpu_gtest.xml')}"])
    passed_here = len(re.findall(r"^\[       OK \]", real.stdout, re.M))
    with open(os.path.join(reports, "cpu_gtest.rc"), "w") as f:
        f.write(f"{real.returncode} 1")
    only_good, _, _ = summarize(reports, work, "good")
    if only_good.returncode != 0 or f"tests: {passed_here} passed, 0 failed, 0 skipped" not in only_good.stdout:
        failures.append(f"summary of a passing binary ({passed_here} tests): exit {only_good.returncode}, "
                        f"{only_good.stdout.strip()}")
    skipped_only = os.path.join(work, "skipped_only")
    os.makedirs(skipped_only)
    log = os.path.join(work, "skipped.log")
    with open(log, "w") as f:
        f.write("skipped: no GPU\n")
    run([sys.executable, os.path.join(DEVICE, "gpu_results.py"), "script-junit", "--name", "skips", "--log", log,
         "--rc", "77", "--out", os.path.join(skipped_only, "skips.xml")])
    without_gpu, _, _ = summarize(skipped_only, work, "skips")
    with_gpu, _, _ = summarize(skipped_only, work, "skips_gpu", ["--skips-fail"])
    if without_gpu.returncode != 0 or with_gpu.returncode != 1:
        failures.append(f"a skip: exit {without_gpu.returncode} without a GPU (want 0), {with_gpu.returncode} "
                        "with --skips-fail (want 1)")
    with open(os.path.join(reports, "fake_gtest.xml"), "w") as f:
        f.write(GTEST_XML)
    for name, rc in (("script_ok", 0), ("script_skip", 77), ("script_fail", 1), ("script_slow", 124)):
        log = os.path.join(work, name + ".log")
        with open(log, "w") as f:
            f.write("first\nlast line of " + name + "\n")
        run([sys.executable, os.path.join(DEVICE, "gpu_results.py"), "script-junit", "--name", name, "--log", log,
             "--rc", str(rc), "--seconds", "2.5", "--out", os.path.join(reports, name + ".xml")])
    with open(os.path.join(reports, "crashed_test.rc"), "w") as f:
        f.write("139 3")
    result, md, junit = summarize(reports, work, "mixed")
    want_passed, want_failed, want_skipped = passed_here + 2, 4, 2
    if result.returncode != 1 or f"tests: {want_passed} passed, {want_failed} failed, {want_skipped} skipped" \
            not in result.stdout:
        failures.append(f"summary: exit {result.returncode}, {result.stdout.strip()} (want {want_passed} passed, "
                        f"{want_failed} failed, {want_skipped} skipped)")
    with open(md) as f:
        text = f.read()
    for row in ("| fake_gtest | OpsTest.Fails | FAILED | 1.2 | error 0.5 > 1e-5 second line |",
                "| fake_gtest | OpsTest.Skips | SKIPPED | 0.0 | no GPU on this machine |",
                "| script_slow | script_slow | FAILED | 2.5 | timed out (exit 124) |",
                "| script_fail | script_fail | FAILED | 2.5 | exit 1 |",
                "| script_skip | script_skip | SKIPPED | 2.5 | last line of script_skip |",
                "| script_fail | script_fail | FAILED | 2.5 | exit 1 |",
                "| crashed_test | (whole binary) | FAILED | 3.0 | exited 139 without a failing test in its report |",
                "(no commit recorded)", "(no device output)", "## Benchmark"):
        if row not in text:
            failures.append(f"summary.md lacks {row!r}")
    if text.index("FAILED") > text.index("SKIPPED") or text.index("SKIPPED") > text.index("| passed |"):
        failures.append("summary.md: failed rows must come first, then skipped, then passed")
    root = ET.parse(junit).getroot()
    cases = list(root.iter("testcase"))
    if len(cases) != want_passed + want_failed + want_skipped or root.get("failures") != str(want_failed):
        failures.append(f"junit.xml: {len(cases)} cases, {root.get('failures')} failures")
    print(f"results format: {len(cases)} cases summarized")


def stand_in(path, body):
    with open(path, "w") as f:
        f.write("#!/bin/bash\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def check_whole_run(work, failures):
    bin_dir = os.path.join(work, "stand_in_bin")
    os.makedirs(bin_dir)
    targets = gpu_targets()
    for i, target in enumerate(targets):
        verdict = '<failure message="broke"/>' if i == 1 else ""
        stand_in(os.path.join(bin_dir, target), f"""xml=${{1#--gtest_output=xml:}}
cat > "$xml" <<END
<testsuites><testsuite name="S"><testcase classname="S" name="{target}_case" time="0.1">{verdict}</testcase></testsuite></testsuites>
END
[ {i} = 1 ] && exit 1 || exit 0
""")
    for program in ("pretrain_gpt", "generate"):
        stand_in(os.path.join(bin_dir, program), 'echo "error: --device cuda: no GPU is visible" >&2; exit 1\n')
    out = os.path.join(work, "whole_out")
    result = run(["bash", os.path.join(DEVICE, "gpu_check.sh"), "--bin", bin_dir, "--out", out],
                 env={"PYTHON": sys.executable, "BENCHMARK_RESERVE_S": "100000"})
    files = sorted(os.listdir(out)) if os.path.isdir(out) else []
    if result.returncode != 1:
        failures.append(f"whole run with a failing binary: exit {result.returncode}: {result.stderr[-400:]}")
    if not 0 < len(files) <= 8 or any(not re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files):
        failures.append(f"whole run: result files {files} (the device tool brings back at most 8, plain names)")
    for wanted in ("summary.md", "junit.xml", "device.txt", "commit.txt", "tests.log", "results.tar.gz"):
        if wanted not in files:
            failures.append(f"whole run: no {wanted}")
    if "summary.md" in files:
        with open(os.path.join(out, "summary.md")) as f:
            text = f.read()
        want = f"## Tests: {len(targets) - 1} passed, 1 failed, {len(gpu_scripts())} skipped"
        if want not in text:
            failures.append(f"whole run: summary.md lacks {want!r}")
        for target in targets:
            if f"| {target} | S.{target}_case |" not in text:
                failures.append(f"whole run: no row for {target}")
    print(f"whole run: exit {result.returncode}, files {files}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain", required=True)
    parser.add_argument("--generate", required=True)
    parser.add_argument("--cpu-gtest", required=True, help="any GoogleTest binary of this build")
    parser.add_argument("--cpu-gtest-filter", default="Fp16.*")
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    failures = []
    pack = check_pack(args, args.work_dir, failures)
    if pack:
        check_dry_run(pack, args.work_dir, failures)
    check_results_format(args, args.work_dir, failures)
    check_whole_run(args.work_dir, failures)
    for failure in failures:
        print("FAILED:", failure)
    print("PASSED" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
