"""The strict checks `tests/run` runs before pytest (so `.ci/run` too); any failure fails the run.

    ruff           lint of the whole checkout with pyproject.toml's rules, line length included (E501)
    mypy           the whole `kanal` package, kanal.v1 (proto/) included, on a copy laid out as installed
                   (tests/harness/package_tree.py: the package-dir mapping hides it from a directory walk)
    buf lint       the wire schema against buf.yaml (its exceptions say why Kafka's names win)
    buf breaking   the wire schema against the last commit that changed proto/ on main (buf.yaml)

`.venv/bin/python tests/strict_checks.py [--only ruff,mypy,buf-lint,buf-breaking]`. Each check prints its
findings with checkout paths and one verdict line; the last line names every check that failed. The tools
are the test extras' pinned versions (pyproject.toml), installed by deploy/bootstrap.sh. mypy keeps its
cache under .venv/, so a run after a small change takes seconds.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
from package_tree import build_package_tree

BIN = Path(sys.executable).parent
WORK = REPO / ".venv" / "strict-checks"
CHECK_TIMEOUT_S = 900
MAIN_REFS = ("main", "origin/main")


def run(argv: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False)


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        raise CheckError(f"{name} is not installed in {BIN} (bash deploy/bootstrap.sh test installs it)")
    return str(path)


class CheckError(Exception):
    """A check that could not run (a missing tool, no baseline): a failure too."""


def check_ruff() -> tuple[bool, str]:
    result = run([tool("ruff"), "check", "--no-cache", "--output-format", "concise", "."])
    return result.returncode == 0, (result.stdout + result.stderr).strip()


def check_mypy() -> tuple[bool, str]:
    tree = WORK / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    origin = build_package_tree(tree)
    result = run(
        [
            tool("mypy"),
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--cache-dir",
            str(WORK / "mypy-cache"),
            "-p",
            "kanal",
        ],
        cwd=tree,
    )
    out = result.stdout + result.stderr
    # Name the checkout's files, not the copy's.
    for copy, source in sorted(origin.items(), key=lambda kv: -len(str(kv[0]))):
        out = out.replace(str(copy.relative_to(tree)), str(source.relative_to(REPO)))
    return result.returncode == 0, out.strip()


def check_buf_lint() -> tuple[bool, str]:
    result = run([tool("buf"), "lint"])
    return result.returncode == 0, (result.stdout + result.stderr).strip()


def baseline_commit() -> str:
    """The last commit that changed proto/ on main (origin/main in a clone whose main is not local; HEAD's
    own history when neither exists, as in a clone of main alone)."""
    for ref in (*MAIN_REFS, "HEAD"):
        if run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"]).returncode != 0:
            continue
        found = run(["git", "log", "-1", "--format=%H", ref, "--", "proto"]).stdout.strip()
        if found:
            return found
    raise CheckError("no commit that changed proto/ is in this clone's history: buf breaking has no baseline")


def check_buf_breaking() -> tuple[bool, str]:
    commit = baseline_commit()
    with tempfile.TemporaryDirectory(prefix="kanal-proto-baseline-") as tmp:
        archive = subprocess.run(["git", "archive", commit, "proto"], cwd=REPO, capture_output=True,
                                 timeout=CHECK_TIMEOUT_S, check=False)
        if archive.returncode != 0:
            raise CheckError(f"git archive {commit} proto failed: {archive.stderr.decode(errors='replace')}")
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True, timeout=CHECK_TIMEOUT_S)
        result = run([tool("buf"), "breaking", "proto", "--against", str(Path(tmp) / "proto")])
    out = (result.stdout + result.stderr).strip()
    return (
        result.returncode == 0,
        f"against {commit[:12]} (the last commit that changed proto/ on main)\n{out}",
    )


CHECKS = {
    "ruff": check_ruff,
    "mypy": check_mypy,
    "buf-lint": check_buf_lint,
    "buf-breaking": check_buf_breaking,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(CHECKS), help=f"comma-separated subset of {','.join(CHECKS)}")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        p.error(f"unknown check(s) {unknown}; known: {list(CHECKS)}")
    WORK.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in names:
        started = time.monotonic()
        try:
            ok, output = CHECKS[name]()
        except (CheckError, subprocess.SubprocessError, OSError) as exc:
            ok, output = False, str(exc)
        took = time.monotonic() - started
        if output and not ok:
            print(output)
        print(f"strict checks: {name} {'passed' if ok else 'FAILED'} ({took:.1f} s)", flush=True)
        if not ok:
            failed.append(name)
    if failed:
        print(f"strict checks: FAILED: {', '.join(failed)} (see above; run `.venv/bin/python "
              f"tests/strict_checks.py --only {','.join(failed)}` to repeat)", file=sys.stderr)
        return 1
    print(f"strict checks: all passed ({', '.join(names)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
