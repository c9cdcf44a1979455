#!/usr/bin/env python3
"""Megatron-LM's flags next to this program's (issue 15): docs/MEGATRON_FLAGS.md is generated, not
written by hand.

  extract  Takes a Megatron-LM checkout's tree at a git ref, imports its parser
           (megatron.training.arguments.add_megatron_arguments, with the argument groups its
           dataclasses declare; scripts/megatron_parser_import.py) and stores every flag (dest,
           default, action, choices), the flags of examples/gpt3/train_gpt3_175b_distributed.sh
           with their values, and the GPT pretraining test cases' command lines
           (tests/functional_tests/test_cases/gpt/*/model_config.yaml, MODEL_ARGS) as JSON, with
           the commit.
  table    Merges that JSON with the program's own table (pretrain_gpt --megatron-flag-table: each
           flag it accepts, and how, and each Megatron flag it refuses with the reason) into the
           markdown page.
  check    Regenerates the page into memory and fails when it differs from the file, or when a
           flag of the example launch script is neither accepted nor refused with a reason.

  scripts/megatron_flags.py extract --repo /path/to/Megatron-LM --ref d98e8a64ddf3 \\
      --out docs/megatron/arguments.json --cases-out docs/megatron/gpt_configurations.json \\
      --moe-cases-out docs/megatron/moe_configurations.json
  scripts/megatron_flags.py table --megatron docs/megatron/arguments.json \\
      --program build/bin/pretrain_gpt --out docs/MEGATRON_FLAGS.md
"""
import argparse
import ast
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

ARGUMENTS_PY = "megatron/training/arguments.py"
EXAMPLE = "examples/gpt3/train_gpt3_175b_distributed.sh"


def git_show(repo, ref, path):
    return subprocess.run(["git", "-C", repo, "show", f"{ref}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def parser_flags(repo, ref):
    """Every flag of Megatron's parser at `ref`, from importing it in a child process."""
    tree = tempfile.mkdtemp(prefix="megatron_tree_")
    try:
        archive = subprocess.run(["git", "-C", repo, "archive", ref, "megatron"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
        importer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "megatron_parser_import.py")
        run = subprocess.run([sys.executable, importer, tree], capture_output=True, text=True, cwd=tree)
        if run.returncode != 0:
            raise SystemExit(f"importing Megatron's parser failed: {run.stderr[-2000:]}")
        return json.loads(run.stdout)
    finally:
        shutil.rmtree(tree, ignore_errors=True)


# Megatron's GPT test cases that are pretraining runs (not its inference or RL cases); its
# mixture-of-experts ones (issue 40) in the two directories after it.
CASES_DIR = "tests/functional_tests/test_cases/gpt"
MOE_CASES_DIRS = ["tests/functional_tests/test_cases/moe", "tests/functional_tests/test_cases/mixtral"]
NOT_PRETRAINING_MODES = {"inference", "rl"}


def gpt_cases(repo, ref, directory=CASES_DIR):
    """{case: {"test_type", "model_args": [[flag, value or None], ...]}} with the values as the YAML
    text gives them (true: the flag alone, as Megatron's _run_training.sh passes it)."""
    import yaml

    class TextLoader(yaml.SafeLoader):
        """Every scalar as its text (".01" stays ".01"), with YAML's merge keys (<<: *BASE)."""
    TextLoader.yaml_implicit_resolvers = {
        first: [(tag, regex) for tag, regex in resolvers if tag == "tag:yaml.org,2002:merge"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    names = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--name-only", ref, directory], check=True,
                           capture_output=True, text=True).stdout.split()
    cases = {}
    for path in sorted(n for n in names if n.endswith("/model_config.yaml")):
        config = yaml.load(git_show(repo, ref, path), Loader=TextLoader)
        if config.get("MODE") in NOT_PRETRAINING_MODES or not isinstance(config.get("MODEL_ARGS"), dict):
            continue
        args = [[flag, None if value == "true" else value] for flag, value in config["MODEL_ARGS"].items()
                if value != ""]
        cases[path.split("/")[-2]] = {"test_type": config.get("TEST_TYPE"), "model_args": args}
    return cases


def example_flags(script):
    """The flags of the example's pretrain_gpt.py command line, with their values (shell variables
    as written)."""
    joined = script.replace("\\\n", " ")
    flags = []
    for token in shlex.split(joined, comments=True):
        if token.startswith("--"):
            flags.append([token, None])
        elif flags and flags[-1][1] is None and not token.startswith("$"):
            flags[-1][1] = token
        elif flags and flags[-1][1] is None:
            flags[-1][1] = token
    # Arrays like GPT_MODEL_ARGS=( --num-layers 96 ... ) and the torchrun flags: keep the --flags
    # that Megatron's parser knows (the caller filters).
    return flags


def extract(args):
    commit = subprocess.run(["git", "-C", args.repo, "rev-parse", f"{args.ref}^{{commit}}"], check=True,
                            capture_output=True, text=True).stdout.strip()
    flags = parser_flags(args.repo, args.ref)
    known = {f["flag"] for f in flags} | {a for f in flags for a in f["aliases"]}
    example = [[flag, value] for flag, value in example_flags(git_show(args.repo, args.ref, EXAMPLE)) if flag in known]
    data = {"source": "NVIDIA/Megatron-LM", "ref": args.ref, "commit": commit, "file": ARGUMENTS_PY,
            "example": EXAMPLE, "flags": flags, "example_flags": example}
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{len(flags)} flags of {args.ref} ({commit[:12]}); {len(example)} in {EXAMPLE}")
    if args.cases_out:
        write_cases(args.cases_out, gpt_cases(args.repo, args.ref), args.ref, commit, CASES_DIR)
    if args.moe_cases_out:
        cases = {}
        for directory in MOE_CASES_DIRS:
            cases.update(gpt_cases(args.repo, args.ref, directory))
        write_cases(args.moe_cases_out, cases, args.ref, commit, " and ".join(MOE_CASES_DIRS))


def write_cases(path, cases, ref, commit, directory):
    head = {"source": "NVIDIA/Megatron-LM", "ref": ref, "commit": commit, "directory": directory}
    with open(path, "w") as f:
        # One case a line, so that a later extract's diff reads by case.
        f.write(json.dumps(head, sort_keys=True)[:-1] + ', "cases": {\n')
        f.write(",\n".join(f"{json.dumps(name)}: {json.dumps(case, sort_keys=True)}"
                            for name, case in sorted(cases.items())))
        f.write("\n}}\n")
    print(f"{len(cases)} pretraining cases in {directory}")


STATUS_TEXT = {"same": "same", "implementation": "accepted (implementation choice)",
               "refused at some values": "accepted; some values refused", "refused": "refused",
               "own": "this program's own", "not yet": "not yet"}
# The example's values that need files or a cluster: the check runs its other flags on a tiny model.
EXAMPLE_NOT_RUN = {"--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length",
                   "--max-position-embeddings", "--micro-batch-size", "--global-batch-size", "--train-iters",
                   "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--data-path", "--vocab-file",
                   "--merge-file"}
TINY = ["--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "255", "--num-layers", "2",
        "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16", "--max-position-embeddings", "16",
        "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "2", "--lr", "1e-3",
        "--device", "cpu"]
# The argument dump against Megatron's defaults: dests whose value here differs on purpose, or that
# Megatron's validate_args derives before printing (so its parser default is not what it prints).
DUMP_DIFFERENCES = {
    "ffn_hidden_size": "derived (4 h, or Megatron's SwiGLU rule), as Megatron's validate_args does",
    "kv_channels": "derived (h / heads), as Megatron's validate_args does",
    "global_batch_size": "derived (micro batch x data-parallel size), as Megatron's validate_args does",
    "add_qkv_bias": "derived (True whenever the linears have biases), as Megatron's validate_args does",
    "split": "Megatron's parser default is None, which its validate_args turns into '969, 30, 1'",
    "tokenizer_type": "--mock-data and --tokenizer-type given in the test",
    "distributed_backend": "None here means NCCL on the GPU and MPI on the CPU (Megatron: nccl)",
    "attention_backend": "an AttnBackend enum member, printed as Megatron prints it (not a Python literal)",
    "deprecated_use_mcore_models": "Megatron's default flips with versions; the model here is always Megatron-Core's",
    "transformer_impl": "Megatron's default",
    "num_query_groups": "Megatron's default 1",
    "hidden_dropout": "the same default, 0.1",
    "rerun_mode": "disabled here by default: --check-for-nan-in-loss-and-grad (on) stops at a NaN; Megatron's "
                  "default validate_results reruns the iteration first (give --rerun-mode validate_results)",
}


def program_table(binary):
    run = subprocess.run([binary, "--megatron-flag-table"], capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        raise SystemExit(f"{binary} --megatron-flag-table failed ({run.returncode}): {run.stderr}")
    return {entry["flag"]: entry for entry in map(json.loads, run.stdout.splitlines())}


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def status_of(flag, ours):
    entry = ours.get(flag)
    return (entry["status"], entry["note"]) if entry else ("not yet", "")


def configurations_section(run, moe=False):
    """The figure of tests/integration/megatron_configurations.py's last run
    (docs/megatron/gpt_configurations_run.json; with moe, moe_configurations_run.json)."""
    if moe:
        out = ["", "## Megatron's mixture-of-experts configurations", "",
               f"Megatron-LM's MoE pretraining test cases at `{run['megatron_commit'][:12]}` "
               "(`tests/functional_tests/test_cases/moe/*/model_config.yaml` and `.../mixtral/*`, stored in "
               "`docs/megatron/moe_configurations.json`), changed as the GPT ones below, two iterations each under "
               "mpirun on at most 8 ranks with their expert parallelism (`tests/integration/megatron_configurations.py "
               "--set moe`, the ctest "
               f"`megatron_moe_configurations`; this program at `{run['program_commit']}`, {run['date']}): "
               f"**{run['ran']} of {run['total']} run.**", "",
               "The world: the model-parallel size (TP x CP x PP, halved pipeline first past 8) times a data-parallel "
               "size of 2 (1 past 4 model-parallel ranks); with `--expert-model-parallel-size` > 1, the smallest "
               "multiple of that data-parallel size for which the expert grid's ETP x EP divides TP x CP x DP within "
               "8 ranks (Megatron's RankGenerator); where none does, EP halved (never below 2), and where EP 2 fits "
               "no data-parallel size either, TP / PP halved again as above. `--expert-tensor-parallel-size`, CP and "
               "every other flag are kept. The configurations whose TP, PP or EP changed:", "",
               "| configuration | changed (the data-parallel size and world it runs with) |", "|---|---|"]
        out += [f"| `{name}` | {cell(change)} |" for name, change in run.get("layout_changes", [])]
        out += ["", "Each configuration once, by its first reason:", "", "| configurations | reason |", "|---|---|"]
        out += [f"| {count} | {cell(reason)} |" for reason, count in run.get("by_reason", [])]
        out += ["", "Every flag that blocks them, by configurations (as for the GPT configurations):", "",
                "| configurations | alone | flag |", "|---|---|---|"]
    else:
        out = ["", "## Megatron's GPT configurations", "",
               f"Megatron-LM's GPT pretraining test cases at `{run['megatron_commit'][:12]}` "
               "(`tests/functional_tests/test_cases/gpt/*/model_config.yaml`, stored in "
               "`docs/megatron/gpt_configurations.json`) and its `examples/gpt3` launch script, with only sizes, paths "
               "and the GPU backend changed, two iterations each under mpirun on the CPU "
               "(`tests/integration/megatron_configurations.py`; this program at "
               f"`{run['program_commit']}`, {run['date']}): **{run['ran']} of {run['total']} run.**", "",
               "What stops the others, by the number of configurations it stops (a configuration counts under every "
               "flag of it that is unknown here or refused at any value; *alone*: the configurations it is the only "
               "such flag of):", "", "| configurations | alone | flag |", "|---|---|---|"]
    out += [f"| {count} | {run.get('only_blocker', {}).get(flag, 0)} | `{flag.split(' ')[0]}` "
            f"{flag.split(' ', 1)[1] if ' ' in flag else ''} |" for flag, count in run["blocking_flags"]]
    if run["first_errors"]:
        out += ["", "Configurations with no such flag that stop, by their first error:", "",
                "| configurations | error |", "|---|---|"]
        out += [f"| {count} | {cell(error)} |" for error, count in run["first_errors"]]
    return out


def render(megatron, ours, run=None, moe_run=None):
    flags = megatron["flags"]
    names = {f["flag"]: f for f in flags}
    for f in flags:
        for alias in f["aliases"]:
            names[alias] = f
    counts = {}
    for f in flags:
        status = status_of(f["flag"], ours)[0]
        counts[status] = counts.get(status, 0) + 1
    newer = sorted(flag for flag, e in ours.items() if flag not in names and e["status"] != "own")
    own = sorted(flag for flag, e in ours.items() if e["status"] == "own")
    out = ["# Megatron-LM flags in pretrain_gpt", "",
           "Generated by `scripts/megatron_flags.py table` from Megatron-LM's parser "
           f"({megatron['source']} `{megatron['ref']}`, commit `{megatron['commit'][:12]}`, `{megatron['file']}`; "
           "stored in `docs/megatron/arguments.json`) and this program's own flag table "
           "(`pretrain_gpt --megatron-flag-table`, from `src/train/args/flag_table.cc` and `src/train/args/megatron_flags.cc`). "
           "Do not edit by hand: the `megatron_flags` test fails when this page and the program disagree.", "",
           "Statuses: **same** (accepted, Megatron's meaning); **accepted (implementation choice)** (accepted; "
           "what it means in this program is in the note); **accepted; some values refused** (the note says which); "
           "**refused** (pretrain_gpt stops with the reason in the note, before training); **not yet** (unknown to "
           "pretrain_gpt: it stops with \"not expected\").", "",
           f"Of Megatron's {len(flags)} flags: " + ", ".join(
               f"{counts.get(k, 0)} {STATUS_TEXT[k]}" for k in ["same", "implementation", "refused at some values",
                                                               "refused", "not yet"]) + ".", "",
           f"Also accepted: {len(own)} flags of this program's own ({', '.join(f'`{f}`' for f in own)}) and "
           f"{len(newer)} flags of other Megatron versions ({', '.join(f'`{f}`' for f in newer)}).", "",
           *(configurations_section(run)[1:] + [""] if run is not None else []),
           *(configurations_section(moe_run, moe=True)[1:] + [""] if moe_run is not None else []),
           f"## Megatron's example launch script (`{megatron['example']}`)", "",
           "| flag | value there | here | note |", "|---|---|---|---|"]
    for flag, value in megatron["example_flags"]:
        status, note = status_of(flag, ours)
        out.append(f"| `{flag}` | {cell(value if value is not None else '')} | {STATUS_TEXT[status]} | {cell(note)} |")
    out += ["", "## Every flag of Megatron's parser", "", "| flag | Megatron dest | Megatron default | here | note |",
            "|---|---|---|---|---|"]
    for f in flags:
        status, note = status_of(f["flag"], ours)
        flag = ", ".join(f"`{x}`" for x in [f["flag"]] + f["aliases"])
        out.append(f"| {flag} | `{f['dest']}` | `{cell(f['default'])}` | {STATUS_TEXT[status]} | {cell(note)} |")
    out += ["", "## Refused flags that Megatron's parser does not define", "", "| flag | note |", "|---|---|"]
    for flag in sorted(flag for flag, e in ours.items() if flag not in names and e["status"] == "refused"):
        out.append(f"| `{flag}` | {cell(ours[flag]['note'])} |")
    return "\n".join(out) + "\n"


def configurations_run(megatron_json, name="gpt_configurations_run.json"):
    path = os.path.join(os.path.dirname(os.path.abspath(megatron_json)), name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def table(args):
    with open(args.megatron) as f:
        megatron = json.load(f)
    text = render(megatron, program_table(args.program), configurations_run(args.megatron),
                  configurations_run(args.megatron, "moe_configurations_run.json"))
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}")


def parse_dump(stdout):
    """{dest: printed value} of the argument dump."""
    dump, inside = {}, False
    for line in stdout.splitlines():
        if line.startswith("------------------------ arguments"):
            inside = True
        elif line.startswith("-------------------- end of arguments"):
            break
        elif inside:
            name, _, value = line.strip().partition(" ")
            dump[name] = value.lstrip(".").strip()
    return dump


def python_str_of_default(text):
    """str() of the default whose repr the JSON holds, or None when it is not a literal."""
    try:
        return str(ast.literal_eval(text))
    except (ValueError, SyntaxError):
        return None


def check(args):
    failures = []
    with open(args.megatron) as f:
        megatron = json.load(f)
    ours = program_table(args.program)
    with open(args.doc) as f:
        if f.read() != render(megatron, ours, configurations_run(args.megatron),
                              configurations_run(args.megatron, "moe_configurations_run.json")):
            failures.append(f"{args.doc} differs from the program's flag table: run scripts/megatron_flags.py table")
    # The example's flags: accepted, or refused with a reason that pretrain_gpt prints. Its
    # directories become fresh temporary ones.
    checkpoints = tempfile.mkdtemp(prefix="megatron_flags_")
    runnable = []
    for flag, value in megatron["example_flags"]:
        status, note = status_of(flag, ours)
        if status == "not yet" or (status == "refused" and not note):
            failures.append(f"example flag {flag}: {status}, no reason")
        elif status == "refused":
            extra = [flag] + ([value] if value is not None else [])
            extra = [x if not x.startswith("$") else "x" for x in extra]
            run = subprocess.run([args.program] + TINY + extra, capture_output=True, text=True, timeout=120)
            errors = [l for l in run.stderr.splitlines() if l.startswith("error:")]
            if run.returncode == 0 or len(errors) != 1 or flag not in errors[0]:
                failures.append(f"example flag {flag}: refused, but pretrain_gpt printed {errors} (exit "
                                f"{run.returncode})")
            else:
                print(f"{flag}: {errors[0]}")
        elif flag not in EXAMPLE_NOT_RUN:
            # A path variable ($CHECKPOINT_PATH, $TENSORBOARD_LOGS_PATH) becomes a temporary directory.
            if value is not None and value.startswith("$"):
                value = os.path.join(checkpoints, value.lstrip("$"))
            runnable += [flag] + ([value] if value is not None else [])
    # The accepted ones with the example's values, on a tiny model. A step schedule gives every
    # batch size: Megatron's head refuses it with --global-batch-size (which the example also gives).
    tiny = TINY
    if "--step-batch-size-schedule" in runnable:
        at = TINY.index("--global-batch-size")
        tiny = TINY[:at] + TINY[at + 2:]
    run = subprocess.run([args.program] + tiny + runnable, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        failures.append(f"the example's accepted flags {runnable}: exit {run.returncode}: {run.stderr[-800:]}")
    else:
        print(f"accepted with the example's values on a tiny model: {' '.join(runnable)}")
    # The argument dump: Megatron's defaults where this program has the flag and it was not given.
    dump = parse_dump(run.stdout)
    given = {x for x in tiny + runnable if x.startswith("--")}
    compared = 0
    for f in megatron["flags"]:
        if f["dest"] not in dump or f["flag"] in given or f["dest"] in DUMP_DIFFERENCES:
            continue
        want = python_str_of_default(f["default"])
        if want is None:
            continue
        compared += 1
        if dump[f["dest"]] != want:
            failures.append(f"argument dump: {f['dest']} = {dump[f['dest']]}, Megatron's default prints {want}")
    if compared < 50:
        failures.append(f"argument dump: only {compared} defaults compared with Megatron's (dump: {len(dump)} lines)")
    else:
        print(f"argument dump: {compared} defaults print as Megatron's ({len(DUMP_DIFFERENCES)} listed differences)")
    shutil.rmtree(checkpoints, ignore_errors=True)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("PASSED (Megatron flags)")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("extract")
    e.add_argument("--repo", required=True)
    e.add_argument("--ref", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--cases-out", help="also store the GPT test cases' command lines here")
    e.add_argument("--moe-cases-out", help="also store the moe/ and mixtral/ test cases' command lines here")
    t = sub.add_parser("table")
    t.add_argument("--megatron", required=True)
    t.add_argument("--program", required=True)
    t.add_argument("--out", required=True)
    c = sub.add_parser("check")
    c.add_argument("--megatron", required=True)
    c.add_argument("--program", required=True)
    c.add_argument("--doc", required=True)
    args = parser.parse_args()
    if args.command == "extract":
        extract(args)
    elif args.command == "table":
        table(args)
    else:
        return check(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
