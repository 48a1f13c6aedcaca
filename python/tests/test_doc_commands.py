"""Every vdt command line of README.md and docs/*.md names a vdt command and flags that exist (the built binary's
--help, the Python commands' too), and every shell block is either run by test_readme.py or marked with why it is not
(md_commands.py says how). docs/BENCHMARKS.md is left out: it records the commands of past measurements as they ran."""
from __future__ import annotations

import glob
import os
import re

import pytest

from conftest import vdt_binary
from md_commands import MARKERS, REPO, SHELLS, blocks, check_command, command_lines, command_tree, inline_spans, \
    span_is_command

DOCS = [os.path.join(REPO, "README.md")] + sorted(p for p in glob.glob(os.path.join(REPO, "docs", "*.md"))
                                                  if not p.endswith("BENCHMARKS.md"))


@pytest.fixture(scope="module")
def tree():
    b = vdt_binary()
    if not b:
        pytest.skip("no vdt binary (set VDT_BINARY or build into build/)")
    env_python = os.environ.get("VDT_PYTHON")
    os.environ["VDT_PYTHON"] = env_python or __import__("sys").executable   # `vdt data prepare --help` runs Python
    try:
        return command_tree(b)
    finally:
        if env_python is None:
            del os.environ["VDT_PYTHON"]


def test_every_shell_block_runs_or_says_why_not():
    problems = []
    for path in DOCS:
        for b in blocks(path):
            unknown = [m for m in b.markers if m not in MARKERS]
            if unknown:
                problems.append(f"{b.where()}: unknown marker(s) {unknown}; known: {sorted(MARKERS)}")
            if b.runs and not path.endswith("README.md"):
                problems.append(f"{b.where()}: a shell block in docs/ runs nowhere; mark it ({sorted(MARKERS)}) "
                                "or move it to README.md, whose blocks test_readme.py runs")
    assert not problems, "\n".join(problems)


def test_command_lines_name_existing_commands_and_flags(tree):
    problems, n = [], 0
    for path in DOCS:
        rel = os.path.relpath(path, REPO)
        for b in blocks(path):
            for cmd in command_lines(b.text, shell=b.lang in SHELLS):
                n += 1
                problems += [f"{b.where()}: {p}: {' '.join(cmd)}" for p in check_command(tree, cmd)]
            for script in re.findall(r"(?<![\w/])scripts/[\w.-]+\.sh", b.text):
                if not os.path.isfile(os.path.join(REPO, script)):
                    problems.append(f"{b.where()}: {script} does not exist")
        for line, span in inline_spans(path):
            if span_is_command(span):
                for cmd in command_lines(span, shell=False):
                    n += 1
                    problems += [f"{rel}:{line}: {p}: `{span}`" for p in check_command(tree, cmd)]
    assert n > 50, f"only {n} command lines found: is the parsing broken?"
    assert not problems, "\n".join(problems)


def test_the_checker_catches_what_it_should(tree):
    assert check_command(tree, ["vdt", "train", "sft", "--max_steps", "3", "--max-steps=4"]) == []
    assert check_command(tree, ["vdt", "train", "sft", "--no-such-flag"]) == ["vdt train sft has no flag --no-such-flag"]
    assert check_command(tree, ["vdt", "trian", "sft"])[0].startswith("'vdt trian' is not a vdt command")
    assert check_command(tree, ["build/vdt", "data", "prepare", "--videos", "V", "--text-encoder", "T"]) == []
    assert check_command(tree, ["vdt", "data", "prepare", "--video", "V"]) == ["vdt data prepare has no flag --video"]
