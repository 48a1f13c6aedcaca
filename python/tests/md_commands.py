"""The shell blocks and `vdt` command lines of README.md and docs/*.md, and the flags the built vdt accepts.

A fenced block's info string is its language, then markers (GitHub shows the first word only):

* a shell block (``bash``, ``sh``, ``shell``) without a marker runs on the CPU as written: test_readme.py runs
  README.md's, in order, in a temporary directory that holds the checkout's ``build/``, ``scripts/`` and ``python/``;
* ``gpu`` (needs a GPU, several, or a cluster), ``weights`` (needs real model weights or data), ``suite`` (sets up,
  builds and runs this test suite or the demo), ``install`` (writes a prefix outside the checkout; Install.PrefixRuns
  covers it): the block is not run, its command lines are checked against the flags vdt has (test_doc_commands.py);
* a block without a language is text (synopses, listings): its command lines are checked the same way.

Inline code spans that start with ``vdt``, ``build/vdt``, ``torchrun`` or ``srun`` are command lines too.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHELLS = {"bash", "sh", "shell"}
MARKERS = {"gpu", "weights", "suite", "install"}


@dataclass
class Block:
    path: str
    line: int                    # 1-based line of the opening fence
    lang: str
    markers: list[str]
    text: str

    @property
    def runs(self) -> bool:
        return self.lang in SHELLS and not self.markers

    def where(self) -> str:
        return f"{os.path.relpath(self.path, REPO)}:{self.line}"


def blocks(path: str) -> list[Block]:
    out, cur, body = [], None, []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r"^```(.*)$", line.rstrip("\n"))
            if m and cur is None:
                words = m.group(1).split()
                cur = Block(path, n, words[0] if words else "", words[1:], "")
                body = []
            elif m and cur is not None and not m.group(1).strip():
                cur.text = "".join(body)
                out.append(cur)
                cur = None
            elif cur is not None:
                body.append(line)
    assert cur is None, f"{path}:{cur.line}: a fenced block is not closed"
    return out


def inline_spans(path: str) -> list[tuple[int, str]]:
    """(line, text) of the inline code spans outside fenced blocks."""
    out, fenced = [], False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("```"):
                fenced = not fenced
                continue
            if not fenced:
                out += [(n, m.group(1)) for m in re.finditer(r"`([^`]+)`", line)]
    return out


LAUNCHERS = {"torchrun", "srun", "python", "python3", "mpirun"}


def is_vdt(token: str) -> bool:
    return token == "vdt" or token.endswith("/vdt")


def vdt_index(cmd: list[str]) -> int | None:
    """Where vdt is the program of a command: its first word (after VAR=value), or a launcher's program."""
    words = [k for k, t in enumerate(cmd) if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", t)]
    if not words:
        return None
    first = cmd[words[0]]
    if is_vdt(first):
        return words[0]
    if first in LAUNCHERS:
        return next((k for k in words if is_vdt(cmd[k])), None)
    return None


def command_lines(text: str, shell: bool = True) -> list[list[str]]:
    """The commands of a text that run vdt, as token lists from the vdt token on (launchers dropped). In a synopsis
    (shell=False) '|' separates alternatives, not commands."""
    separators = ("&&", "||", ";", "|") if shell else ("&&", ";")
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        try:
            tokens = shlex.split(line.replace("\\|", "|"), comments=True)
        except ValueError:
            continue
        cmd: list[str] = []
        for t in tokens + ["&&"]:
            if t in separators:
                i = vdt_index(cmd)
                if i is not None:
                    out.append(cmd[i:])
                cmd = []
            else:
                cmd.append(t)
    return out


def span_is_command(span: str) -> bool:
    return vdt_index(span.split()) is not None


@dataclass
class Command:
    """One vdt (sub)command's help: its subcommands and the long flags it takes."""
    flags: set[str] = field(default_factory=set)
    subcommands: dict[str, "Command"] = field(default_factory=dict)
    python: bool = False       # forwarded to vdt_py (argparse): its flags are matched exactly


def _help(binary: str, path: list[str]) -> str:
    r = subprocess.run([binary, *path, "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"vdt {' '.join(path)} --help exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def command_tree(binary: str, path: list[str] | None = None) -> Command:
    path = path or []
    text = _help(binary, path)
    cmd = Command(python=text.lstrip().startswith("usage:"))
    section = ""
    for line in text.splitlines():
        if re.match(r"^\S.*:\s*$", line):
            section = line.strip().rstrip(":").lower()
            continue
        names = re.split(r"\s{2,}", line.strip())[0] if line.startswith(" ") else ""
        if "subcommand" in section and names and not names.startswith("-"):
            cmd.subcommands[names] = None
        elif line.lstrip().startswith("-"):
            cmd.flags.update(re.findall(r"--[A-Za-z0-9][\w-]*", names))
    for name in list(cmd.subcommands):
        cmd.subcommands[name] = command_tree(binary, path + [name])
    return cmd


def norm(flag: str) -> str:
    return flag.replace("_", "-")


def check_command(tree: Command, tokens: list[str]) -> list[str]:
    """Problems of one command line (tokens from the vdt token on): an unknown subcommand or flag."""
    node, path, i = tree, [], 1
    while i < len(tokens) and tokens[i] in node.subcommands:
        node = node.subcommands[tokens[i]]
        path.append(tokens[i])
        i += 1
    placeholder = i < len(tokens) and (tokens[i] == "..." or tokens[i][:1] in "<[$")
    if not path and i < len(tokens) and not tokens[i].startswith("-") and not placeholder:
        return [f"'vdt {tokens[i]}' is not a vdt command (vdt --help lists them)"]
    known = node.flags if node.python else {norm(f) for f in node.flags}
    problems = []
    for t in tokens[i:]:
        for word in t.strip("[]()").split("|"):
            flag = word.split("=", 1)[0].strip("[]")
            if not re.match(r"^--[A-Za-z0-9]", flag):
                continue
            if (flag if node.python else norm(flag)) not in known:
                problems.append(f"vdt {' '.join(path)} has no flag {flag}")
    return problems
