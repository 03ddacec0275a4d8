"""The strict checks `tests/run` runs before pytest (so `.ci/run` too); any failure fails the run.

    ruff           lint of the whole checkout with pyproject.toml's rules, line length included (E501)
    mypy           the whole `kanal` package, kanal.v1 (proto/) included, on a copy laid out as installed
                   (tests/harness/package_tree.py: the package-dir mapping hides it from a directory walk),
                   with pyproject.toml's [tool.mypy]: the pure cores (kanal.metadata, kanal.broker.storage,
                   kanal chaos's history checker) under every flag of --strict, which this check makes sure
                   the override spells out (mypy's own list), the rest under the plain flags
    mypy-ratchet   mypy --strict over the whole package, on the same copy: the errors it reports may not
                   outnumber the count recorded in tests/mypy_strict_ratchet.json (which also counts them
                   per package, for reading, and per file, so a failure shows the errors of the files whose
                   count rose); a lower count passes and says how to record it
    buf lint       the wire schema against buf.yaml (its exceptions say why Kafka's names win)
    buf breaking   the wire schema against the last commit that changed proto/ on main (buf.yaml)

`.venv/bin/python tests/strict_checks.py [--only ruff,mypy,mypy-ratchet,buf-lint,buf-breaking]`. Each check
prints its findings with checkout paths and one verdict line; the last line names every check that failed.
`.venv/bin/python tests/strict_checks.py --update-ratchet` runs mypy --strict alone and records its count
when it is not above the recorded one (the file is written the same way for the same count: sorted keys,
no timestamps); it refuses a higher count, whose new errors are to be fixed, not recorded. The tools are the
test extras' pinned versions (pyproject.toml), installed by deploy/bootstrap.sh. mypy keeps its caches
under .venv/ (one per set of flags, so the two runs never evict each other), so a run after a small change
takes seconds; the verdict lines give each check's time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from functools import cache
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
from package_tree import build_package_tree, package_dirs

BIN = Path(sys.executable).parent
WORK = REPO / ".venv" / "strict-checks"
RATCHET = REPO / "tests" / "mypy_strict_ratchet.json"
UPDATE_RATCHET = ".venv/bin/python tests/strict_checks.py --update-ratchet"
CHECK_TIMEOUT_S = 900
MAIN_REFS = ("main", "origin/main")
# `path:line: error: message  [code]`, as mypy prints an error (notes say `note:`).
MYPY_ERROR = re.compile(r"^(?P<path>[^:\s]+\.pyi?):\d+: error: ", re.MULTILINE)
COPY_PATH = re.compile(r"(?<![\w/.])kanal/[\w/]+\.pyi?(?!\w)")
MYPY_SUMMARY = re.compile(r"^(Found (?P<errors>\d+) errors? in \d+ files?|Success: no issues found)",
                          re.MULTILINE)


class Outcome(NamedTuple):
    """A check's verdict, its findings (printed when it fails) and a note for its verdict line."""

    ok: bool
    output: str
    note: str = ""


def run(argv: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False)


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        raise CheckError(f"{name} is not installed in {BIN} (bash deploy/bootstrap.sh test installs it)")
    return str(path)


class CheckError(Exception):
    """A check that could not run (a missing tool, no baseline): a failure too."""


def check_ruff() -> Outcome:
    result = run([tool("ruff"), "check", "--no-cache", "--output-format", "concise", "."])
    return Outcome(result.returncode == 0, (result.stdout + result.stderr).strip())


class PackageTree(NamedTuple):
    root: Path
    origin: dict[Path, Path]  # a file of the copy -> the checkout's

    def checkout_paths(self, out: str) -> str:
        """mypy's output naming the checkout's files, not the copy's (whole paths only: `kanal/v1/x.py`
        is a substring of the checkout's `proto/kanal/v1/x.pyi`)."""
        names = {str(copy.relative_to(self.root)): str(source.relative_to(REPO))
                 for copy, source in self.origin.items()}
        return COPY_PATH.sub(lambda m: names.get(m[0], m[0]), out)


@cache
def package_tree() -> PackageTree:
    """The installed-layout copy both mypy checks read, built once per run (copies keep their mtimes, so
    mypy's caches stay valid from run to run)."""
    root = WORK / "tree"
    shutil.rmtree(root, ignore_errors=True)
    return PackageTree(root, build_package_tree(root))


def mypy(*flags: str, cache_dir: str) -> tuple[PackageTree, subprocess.CompletedProcess]:
    tree = package_tree()
    argv = [tool("mypy"), "--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(WORK / cache_dir),
            *flags, "-p", "kanal"]
    return tree, run(argv, cwd=tree.root)


def mypy_config() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]


def strict_config_gaps() -> list[str]:
    """Where pyproject.toml's [tool.mypy] falls short of --strict for the modules it makes strict: an
    override that sets any of --strict's flags must set all of them (mypy's own list, so a mypy that adds
    one names it here), and the flags mypy takes only globally must be on globally. And every module
    protoc generated must be among those whose errors are ignored (their .pyi files type them)."""
    try:
        from mypy.main import define_options
        from mypy.options import PER_MODULE_OPTIONS
    except ImportError as exc:
        raise CheckError(f"mypy is not importable from {sys.executable}: {exc}") from None
    strict = dict(define_options()[2])  # option name -> the value --strict gives it
    config = mypy_config()
    gaps = [f"[tool.mypy] {name} = {str(value).lower()} is missing: --strict sets it and mypy takes it "
            f"only globally" for name, value in strict.items()
            if name not in PER_MODULE_OPTIONS and config.get(name) != value]
    overrides = config.get("overrides", [])
    unchecked = {module for o in overrides if o.get("ignore_errors") for module in _modules(o)}
    gaps += [f"kanal.v1.{path.stem} (protoc's) is not among the modules whose errors are ignored"
             for path in sorted((REPO / "proto" / "kanal" / "v1").glob("*_pb2*.py"))
             if f"kanal.v1.{path.stem}" not in unchecked]
    strict_overrides = [o for o in overrides if any(o.get(name) == value for name, value in strict.items())]
    if not strict_overrides:
        gaps.append("no [[tool.mypy.overrides]] sets --strict's flags: which modules are strict?")
    for override in strict_overrides:
        gaps += [f"the override of {', '.join(_modules(override))} lacks {name} = {str(value).lower()} "
                 f"(--strict sets it)" for name, value in strict.items()
                 if name in PER_MODULE_OPTIONS and override.get(name) != value]
    return gaps


def _modules(override: dict) -> list[str]:
    module = override["module"]
    return [module] if isinstance(module, str) else module


def check_mypy() -> Outcome:
    gaps = strict_config_gaps()
    tree, result = mypy(cache_dir="mypy-cache")
    out = tree.checkout_paths(result.stdout + result.stderr).strip()
    if gaps:
        out = "\n".join(["pyproject.toml's [tool.mypy] does not say what it should:", *gaps, out])
    return Outcome(result.returncode == 0 and not gaps, out)


class StrictErrors(NamedTuple):
    """What mypy --strict reports over the whole package: errors per file (checkout paths) and its output."""

    by_file: Counter[str]
    output: str

    @property
    def total(self) -> int:
        return self.by_file.total()

    def by_package(self) -> Counter[str]:
        """Errors per package (`kanal.broker`, `kanal.broker.storage`, ...: the package holding the file)."""
        folders = {folder.relative_to(REPO): name for name, folder in package_dirs().items()}
        out: Counter[str] = Counter()
        for path, count in self.by_file.items():
            out[folders[Path(path).parent]] += count
        return out


def strict_errors() -> StrictErrors:
    tree, result = mypy("--strict", cache_dir="mypy-strict-cache")
    out = tree.checkout_paths(result.stdout + result.stderr).strip()
    summary = MYPY_SUMMARY.search(out)
    if result.returncode not in (0, 1) or summary is None:
        raise CheckError(f"mypy --strict did not finish (exit {result.returncode}):\n{out}")
    by_file = Counter(m["path"] for m in MYPY_ERROR.finditer(out))
    if by_file.total() != int(summary["errors"] or 0):
        raise CheckError(f"mypy --strict: {by_file.total()} error lines, but it says {summary[0]!r}")
    return StrictErrors(by_file, out)


def shown(path: Path) -> str:
    """`path` as messages name it: from the checkout's root."""
    return os.path.relpath(path, REPO)


def read_ratchet() -> dict | None:
    return json.loads(RATCHET.read_text()) if RATCHET.exists() else None


def ratchet_text(errors: StrictErrors) -> str:
    """The ratchet file for `errors`: the same bytes for the same counts (sorted keys, no time stamps)."""
    from mypy.version import __version__ as mypy_version

    record = {
        "what": "errors `mypy --strict -p kanal` reports (tests/strict_checks.py, check mypy-ratchet): the "
                "total may only go down; per package for reading, per file to point at new ones",
        "mypy": mypy_version,
        "errors": errors.total,
        "by_package": dict(sorted(errors.by_package().items())),
        "by_file": dict(sorted(errors.by_file.items())),
    }
    return json.dumps(record, indent=2) + "\n"


def changes(now: Counter[str], recorded: dict[str, int]) -> list[str]:
    before = Counter(recorded)
    return [f"  {name}: {before[name]} -> {now[name]}" for name in sorted(before.keys() | now.keys())
            if before[name] != now[name]]


def risen(errors: StrictErrors, recorded: dict) -> str:
    """The packages whose count changed, and the errors of the files whose count rose."""
    before = Counter(recorded.get("by_file", {}))
    files = {path for path, count in errors.by_file.items() if count > before[path]}
    shown = [line for line in errors.output.splitlines()
             if (m := MYPY_ERROR.match(line)) and m["path"] in files]
    return "\n".join(["By package:", *changes(errors.by_package(), recorded.get("by_package", {})),
                      "The errors of the files whose count rose:", *shown])


def check_mypy_ratchet() -> Outcome:
    started = time.monotonic()
    errors = strict_errors()
    took = f"mypy --strict took {time.monotonic() - started:.1f} s"
    recorded = read_ratchet()
    if recorded is None:
        return Outcome(False, f"{shown(RATCHET)} is missing: record the count with "
                              f"`{UPDATE_RATCHET}`", took)
    now, then = errors.total, int(recorded["errors"])
    if now > then:
        head = (f"mypy --strict reports {now} errors, {now - then} more than the {then} recorded in "
                f"{shown(RATCHET)}: fix the new ones (the count may only go down).")
        return Outcome(False, f"{head}\n{risen(errors, recorded)}", f"{now} > {then}; {took}")
    if now < then:
        lower = (f"{now} errors, {then - now} fewer than the {then} recorded: record the lower count with "
                 f"`{UPDATE_RATCHET}` and commit {shown(RATCHET)}")
        return Outcome(True, "", f"{lower}; {took}")
    return Outcome(True, "", f"{now} errors, as recorded; {took}")


def update_ratchet() -> int:
    """Record mypy --strict's count in the ratchet file when it is not above the recorded one."""
    started = time.monotonic()
    try:
        errors = strict_errors()
    except (CheckError, subprocess.SubprocessError, OSError) as exc:
        print(f"strict checks: {exc}", file=sys.stderr)
        return 1
    took = time.monotonic() - started
    recorded = read_ratchet()
    now = errors.total
    if recorded is not None and now > int(recorded["errors"]):
        print(risen(errors, recorded))
        print(f"strict checks: mypy --strict reports {now} errors, above the {recorded['errors']} recorded: "
              f"not recorded (the count may only go down; fix the new errors above)", file=sys.stderr)
        return 1
    text = ratchet_text(errors)
    if RATCHET.exists() and RATCHET.read_text() == text:
        print(f"strict checks: {shown(RATCHET)} already records {now} errors ({took:.1f} s)")
        return 0
    RATCHET.write_text(text)
    was = "nothing" if recorded is None else recorded["errors"]
    print(f"strict checks: recorded {now} errors in {shown(RATCHET)} (was {was}; {took:.1f} s); "
          f"commit it")
    for line in changes(errors.by_package(), (recorded or {}).get("by_package", {})):
        print(line)
    return 0


def check_buf_lint() -> Outcome:
    result = run([tool("buf"), "lint"])
    return Outcome(result.returncode == 0, (result.stdout + result.stderr).strip())


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


def check_buf_breaking() -> Outcome:
    commit = baseline_commit()
    with tempfile.TemporaryDirectory(prefix="kanal-proto-baseline-") as tmp:
        archive = subprocess.run(["git", "archive", commit, "proto"], cwd=REPO, capture_output=True,
                                 timeout=CHECK_TIMEOUT_S, check=False)
        if archive.returncode != 0:
            raise CheckError(f"git archive {commit} proto failed: {archive.stderr.decode(errors='replace')}")
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True, timeout=CHECK_TIMEOUT_S)
        result = run([tool("buf"), "breaking", "proto", "--against", str(Path(tmp) / "proto")])
    out = (result.stdout + result.stderr).strip()
    return Outcome(
        result.returncode == 0,
        f"against {commit[:12]} (the last commit that changed proto/ on main)\n{out}",
    )


CHECKS = {
    "ruff": check_ruff,
    "mypy": check_mypy,
    "mypy-ratchet": check_mypy_ratchet,
    "buf-lint": check_buf_lint,
    "buf-breaking": check_buf_breaking,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(CHECKS), help=f"comma-separated subset of {','.join(CHECKS)}")
    p.add_argument("--update-ratchet", action="store_true",
                   help=f"record mypy --strict's error count in {shown(RATCHET)} (never a higher "
                        "one) and run no check")
    args = p.parse_args(argv)
    if args.update_ratchet:
        WORK.mkdir(parents=True, exist_ok=True)
        return update_ratchet()
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        p.error(f"unknown check(s) {unknown}; known: {list(CHECKS)}")
    WORK.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in names:
        started = time.monotonic()
        try:
            ok, output, note = CHECKS[name]()
        except (CheckError, subprocess.SubprocessError, OSError) as exc:
            ok, output, note = False, str(exc), ""
        took = time.monotonic() - started
        if output and not ok:
            print(output)
        verdict = f"strict checks: {name} {'passed' if ok else 'FAILED'} ({took:.1f} s)"
        print(f"{verdict}: {note}" if note else verdict, flush=True)
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
