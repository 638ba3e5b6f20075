#!/usr/bin/env python3
"""Every shardtrain command shown in README.md and docs/*.md still parses as written.

For each command in a fenced sh / bash block (continuation lines joined) that
runs build/shardtrain (directly or after scripts/mpirun.sh / mpirun / srun):
  - the subcommand exists;
  - every --flag is one of that subcommand's flags (its --help), or, for
    train / config / estimate-memory, a config key (`config --help`);
  - a --config file and every repository path the command names exist;
  - a --config file validates (`shardtrain config --config FILE`), with the
    command's key overrides.
A `bash scripts/X.sh` command must name an existing script. Commands with
placeholders (`<...>`, `...`, /models/, my_run, runs/...) are checked for the
subcommand and flags only: their files are the user's.

usage: check_docs.py SHARDTRAIN_BINARY REPO_ROOT
"""
import glob
import os
import re
import shlex
import subprocess
import sys

binary, root = sys.argv[1], sys.argv[2]
os.chdir(root)
env = dict(os.environ, OMP_NUM_THREADS="1")


def run(args):
    return subprocess.run([binary] + args, capture_output=True, text=True, env=env, timeout=120)


help_cache = {}


def flags_of(sub):
    if sub not in help_cache:
        out = run([sub, "--help"])
        if out.returncode != 0:
            help_cache[sub] = None
        else:
            help_cache[sub] = set(re.findall(r"(?<![\w-])(--[a-z][\w.-]*)", out.stdout))
    return help_cache[sub]


config_keys = flags_of("config") or set()
failures = []
checked = 0


def commands(path):
    """The lines of the fenced blocks that are shell (sh, bash, console or no language)."""
    block, shell = None, False
    for line in open(path, encoding="utf-8").read().splitlines():
        fence = re.match(r"\s*```(\w*)", line)
        if fence:
            if block is None:
                block, shell = [], fence.group(1) in ("sh", "bash", "console", "")
            else:
                if shell:
                    for command in re.sub(r"\\\n\s*", " ", "\n".join(block)).splitlines():
                        command = command.split(" #")[0].strip().lstrip("$ ")
                        if command and not command.startswith("#"):
                            yield command
                block = None
            continue
        if block is not None:
            block.append(line)


REPO_DIRS = ("configs/", "data/", "scripts/", "slurm/", "tests/", "benchmarks/", "docs/")


def user_path(value):
    """A path that is the user's (not checked), unless it names the repository's files."""
    return not value.startswith(REPO_DIRS) or any(m in value for m in ("<", "...", "$"))


for doc in ["README.md"] + sorted(glob.glob("docs/*.md")) + ["slurm/README.md", "benchmarks/README.md"]:
    if not os.path.exists(doc):
        continue
    for command in commands(doc):
        try:
            words = shlex.split(command)
        except ValueError:
            continue
        where = f"{doc}: {command}"
        if len(words) >= 2 and words[0] == "bash" and words[1].startswith("scripts/"):
            if not os.path.exists(words[1]):
                failures.append(f"{where}\n  {words[1]} does not exist")
        binaries = [i for i, w in enumerate(words) if w in ("build/shardtrain", "shardtrain")]
        if not binaries:
            continue
        checked += 1
        rest = words[binaries[0] + 1:]
        if "[" in command or re.search(r"\b[A-Z][A-Z_]{2,}\b", command):
            # A synopsis (docs/commands.md): its flags must exist; its words are placeholders.
            if rest and not rest[0].startswith("-") and flags_of(rest[0]) is None:
                failures.append(f"{where}\n  no subcommand '{rest[0]}'")
                continue
            known = (flags_of(rest[0]) or set()) | config_keys if rest and not rest[0].startswith("-") else set()
            for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*(?:\.[\w-]+)*)", command):
                if flag not in known and flag != "--section.key" and not flag.startswith("--mpi") and \
                        flag not in ("--bind-to", "--allow-run-as-root", "--oversubscribe"):
                    failures.append(f"{where}\n  '{flag}' is not a flag of '{rest[0]}'")
            continue
        if not rest or rest[0].startswith("-"):
            continue
        sub, args = rest[0], rest[1:]
        known = flags_of(sub)
        if known is None:
            failures.append(f"{where}\n  no subcommand '{sub}'")
            continue
        if sub in ("train", "config", "estimate-memory", "sweep"):
            known = known | config_keys
        overrides, config = [], None
        for i, word in enumerate(args):
            flag = word.split("=")[0]
            if flag.startswith("--") and flag not in known:
                failures.append(f"{where}\n  '{flag}' is not a flag of '{sub}'")
            if flag == "--config" and i + 1 < len(args):
                config = args[i + 1]
            if flag.startswith("--") and "." in flag and i + 1 < len(args):
                overrides += [flag, args[i + 1]]
            elif not word.startswith("-") and not user_path(word) and not os.path.exists(word):
                failures.append(f"{where}\n  '{word}' does not exist")
        if config and not user_path(config):
            if not os.path.exists(config):
                failures.append(f"{where}\n  --config {config} does not exist")
            elif sub != "sweep":  # a sweep file is checked by the sweep tests
                out = run(["config", "--config", config] + overrides)
                if out.returncode != 0:
                    failures.append(f"{where}\n  config refused: {out.stderr.strip()[-400:]}")

for config in sorted(glob.glob("configs/*.toml")):
    if re.search(r"^\[sweep", open(config).read(), re.M):
        continue  # a sweep file (docs/sweeps.md): the sweep tests load it
    out = run(["config", "--config", config])
    # A config that points model.path at a real model folder is the user's to fill.
    if out.returncode != 0 and "model.path" not in out.stderr:
        failures.append(f"{config}: config refused: {out.stderr.strip()[-400:]}")

print(f"check_docs: {checked} shardtrain commands in the docs, {len(glob.glob('configs/*.toml'))} configs")
if failures:
    print("\n".join(failures))
    sys.exit(1)
