#!/usr/bin/env python3
"""The results format of scripts/device/gpu_check.sh (standard library only: it runs on the GPU
machine too).

  gpu_results.py script-junit --name N --log LOG --rc RC --seconds S --out N.xml
      a JUnit report of one test run as a program (a Python driver): exit 0 passed, 77 skipped,
      124 or 137 timed out, anything else failed (the log's last lines as the message).
  gpu_results.py summary --reports DIR --device device.txt --commit commit.txt
                         [--benchmark benchmark.md] --markdown summary.md --junit junit.xml
      merges every DIR/*.xml (GoogleTest's --gtest_output=xml and script-junit's) into one JUnit
      file and a markdown summary: the commit, the device, one row per test (binary, test, result,
      seconds), the totals and the benchmark table. A binary whose DIR/NAME.rc says it exited
      non-zero without a failing test in its report (a crash, a timeout, no report at all) gets a
      failing row of its own. Exit status 1 when anything failed (or, with --skips-fail, where a GPU
      is visible, was skipped), else 0.

The .rc file beside each report holds "<exit status> <seconds>".
"""
import argparse
import glob
import os
import sys
import xml.etree.ElementTree as ET

SKIP_CODE = 77
TIMEOUT_CODES = (124, 137)


def script_junit(args):
    with open(args.log, errors="replace") as f:
        tail = "".join(f.readlines()[-15:])
    suite = ET.Element("testsuite", name=args.name, tests="1", time=f"{args.seconds:.3f}")
    case = ET.SubElement(suite, "testcase", classname=args.name, name=args.name, time=f"{args.seconds:.3f}")
    if args.rc == SKIP_CODE:
        ET.SubElement(case, "skipped", message=tail.strip().splitlines()[-1] if tail.strip() else "skipped")
    elif args.rc in TIMEOUT_CODES:
        ET.SubElement(case, "failure", message=f"timed out (exit {args.rc})").text = tail
    elif args.rc != 0:
        ET.SubElement(case, "failure", message=f"exit {args.rc}").text = tail
    suites = ET.Element("testsuites")
    suites.append(suite)
    ET.ElementTree(suites).write(args.out, encoding="unicode", xml_declaration=True)
    return 0


def case_result(case):
    """passed, failed or skipped, with GoogleTest's and JUnit's spellings of a skip."""
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    if case.find("skipped") is not None or case.get("result") == "skipped" or case.get("status") == "notrun":
        return "skipped"
    return "passed"


def read_rc(path):
    try:
        with open(path) as f:
            fields = f.read().split()
        return int(fields[0]), float(fields[1]) if len(fields) > 1 else 0.0
    except (OSError, ValueError, IndexError):
        return None


def collect(reports):
    """Rows (binary, test, result, seconds, message) and the merged <testsuites>."""
    rows, merged = [], ET.Element("testsuites", name="gpu_check")
    names = {os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(reports, "*.xml"))}
    names |= {os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(reports, "*.rc"))}
    for name in sorted(names):
        xml_path, binary_failed = os.path.join(reports, name + ".xml"), False
        rc = read_rc(os.path.join(reports, name + ".rc"))
        suites = []
        if os.path.exists(xml_path):
            try:
                root = ET.parse(xml_path).getroot()
                suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
            except ET.ParseError as e:
                rows.append((name, "(report)", "failed", 0.0, f"unreadable report: {e}"))
                binary_failed = True
        for suite in suites:
            for case in suite.iter("testcase"):
                result = case_result(case)
                detail = case.find("failure") if case.find("failure") is not None else case.find("skipped")
                message = (detail.get("message") or "") if detail is not None else ""
                test = case.get("name") if case.get("classname") in (None, name) else \
                    f"{case.get('classname')}.{case.get('name')}"
                brief = " ".join(line.strip() for line in message.splitlines() if line.strip())
                rows.append((name, test, result, float(case.get("time") or 0), brief[:200]))
                binary_failed |= result == "failed"
            suite.set("name", f"{name}:{suite.get('name', name)}")
            merged.append(suite)
        if rc is not None and rc[0] not in (0, SKIP_CODE) and not binary_failed:
            why = "timed out" if rc[0] in TIMEOUT_CODES else f"exited {rc[0]}"
            rows.append((name, "(whole binary)", "failed", rc[1], f"{why} without a failing test in its report"))
            suite = ET.SubElement(merged, "testsuite", name=f"{name}:exit")
            ET.SubElement(ET.SubElement(suite, "testcase", classname=name, name="exit", time=str(rc[1])),
                          "failure", message=why)
    return rows, merged


def read_text(path, default):
    try:
        with open(path, errors="replace") as f:
            return f.read().strip()
    except OSError:
        return default


def summary(args):
    rows, merged = collect(args.reports)
    counts = {r: sum(1 for row in rows if row[2] == r) for r in ("passed", "failed", "skipped")}
    merged.set("tests", str(len(rows)))
    merged.set("failures", str(counts["failed"]))
    merged.set("skipped", str(counts["skipped"]))
    ET.ElementTree(merged).write(args.junit, encoding="unicode", xml_declaration=True)
    lines = ["# GPU check", "", "## Commit", "", "```", read_text(args.commit, "(no commit recorded)"), "```", "",
             "## Device", "", "```", read_text(args.device, "(no device output)"), "```", "",
             f"## Tests: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped", "",
             "| binary | test | result | seconds | message |", "|---|---|---|---|---|"]
    order = {"failed": 0, "skipped": 1, "passed": 2}
    for binary, test, result, seconds, message in sorted(rows, key=lambda r: (order[r[2]], r[0], r[1])):
        lines.append(f"| {binary} | {test} | {result.upper() if result != 'passed' else result} | {seconds:.1f} | "
                     f"{message.replace('|', '/')} |")
    lines += ["", "## Benchmark", "", read_text(args.benchmark, "(not run)") if args.benchmark else "(not run)", ""]
    with open(args.markdown, "w") as f:
        f.write("\n".join(lines))
    print(f"tests: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] or (args.skips_fail and counts["skipped"]) else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    s = commands.add_parser("script-junit")
    s.add_argument("--name", required=True)
    s.add_argument("--log", required=True)
    s.add_argument("--rc", type=int, required=True)
    s.add_argument("--seconds", type=float, default=0.0)
    s.add_argument("--out", required=True)
    m = commands.add_parser("summary")
    m.add_argument("--reports", required=True)
    m.add_argument("--device", required=True)
    m.add_argument("--commit", required=True)
    m.add_argument("--benchmark")
    m.add_argument("--markdown", required=True)
    m.add_argument("--junit", required=True)
    m.add_argument("--skips-fail", action="store_true", help="a GPU is visible: a skipped test is a failure")
    args = parser.parse_args()
    return script_junit(args) if args.command == "script-junit" else summary(args)


if __name__ == "__main__":
    sys.exit(main())
