#!/usr/bin/env python3
"""`shardtrain plot` on hostile input: it must end (no hang), and its SVG must
parse as XML (xml.etree) with what the user gave still recognisable.

- values that make a naive tick loop stop advancing: two eval_loss values one
  ulp apart, losses 1e15 and 1.00000000000000025e15, a step of 1.7e308;
- a --title and run folder names with control characters, invalid UTF-8, XML
  markup, and long names of multi-byte characters (the legend cuts them).

Usage: check_curves_hostile.py SHARDTRAIN WORK_DIR
Prints "curves hostile: OK" when every check passes.
"""
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

HEADER = "step,epoch,loss,lr,grad_norm,samples_per_s,tokens_per_s,elapsed_s\n"
failures = []


def check(ok, what):
    print(("ok:     " if ok else "NOT OK: ") + what)
    if not ok:
        failures.append(what)


def run_folder(root, name, progress=None, results=None):
    path = os.path.join(root, name)
    os.makedirs(path)
    if progress is not None:
        with open(os.path.join(path, b"progress.csv" if isinstance(path, bytes) else "progress.csv"), "w") as f:
            f.write(progress)
    if results is not None:
        with open(os.path.join(path, b"result.jsonl" if isinstance(path, bytes) else "result.jsonl"), "w") as f:
            f.write(results)
    return path


def plot(shardtrain, args, output):
    try:
        done = subprocess.run([shardtrain, "plot"] + args + ["--output", output], capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None, "timed out after 60 s"
    return done.returncode, done.stderr.decode("utf-8", "replace")


def parsed_svg(path):
    try:
        return ET.parse(path).getroot(), ""
    except (ET.ParseError, OSError) as e:
        return None, str(e)


def texts(root):
    return ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]


def main():
    shardtrain, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    cases = {
        "ulp": (None, '{"step": 10, "eval_loss": 0.6284062483166163}\n{"step": 20, "eval_loss": 0.6284062483166164}\n'),
        "big": (HEADER + "1,0,1e15,1e-5,1,1,1,1\n2,0,1.00000000000000025e15,1e-5,1,1,1,1\n", None),
        "far_step": (HEADER + "0,0,0.7,1e-5,1,1,1,1\n1.7e308,0,0.6,1e-5,1,1,1,1\n", None),
        "equal": (HEADER + "5,0,0.5,0,1,1,1,1\n6,0,0.5,0,1,1,1,1\n", None),
    }
    for name, (progress, results) in cases.items():
        folder = run_folder(work, name, progress, results)
        out = os.path.join(work, name + ".svg")
        rc, err = plot(shardtrain, [folder], out)
        check(rc == 0, "%s: plot ends with rc 0 (rc %s: %s)" % (name, rc, err.strip()[-300:]))
        root, why = parsed_svg(out)
        check(root is not None, "%s: the SVG parses as XML %s" % (name, why))
        if root is not None:
            check(len(texts(root)) < 200, "%s: a bounded number of tick labels (%d texts)" % (name, len(texts(root))))

    # Hostile names: a control character and an invalid byte in folder names,
    # markup, and a 40-character name of 3-byte characters (cut in the legend).
    progress = HEADER + "1,0,0.7,1e-5,1,1,1,1\n2,0,0.6,1e-5,1,1,1,1\n"
    names = [b"ctl\x01\x1b[31mred", b"bad\xff\xfeutf8", "<b>&amp;\"'".encode(), ("\u00e9\u4e2d" * 20).encode()]
    folders = [run_folder(os.fsencode(work), n, progress) for n in names]
    title = b"title \x07 bell \xc3 cut \xed\xa0\x80 surrogate <&> \x7f"
    out = os.path.join(work, "names.svg")
    rc, err = plot(shardtrain, folders + [b"--title", title], out)
    check(rc == 0, "hostile names: rc 0 (rc %s: %s)" % (rc, err.strip()[-300:]))
    root, why = parsed_svg(out)
    check(root is not None, "hostile names: the SVG parses as XML %s" % why)
    if root is not None:
        all_text = texts(root)
        check(any(t.startswith("title ") and "bell" in t and "<&>" in t for t in all_text),
              "the title is kept, markup included: %r" % [t for t in all_text if "bell" in t])
        check(not any(ch < " " for t in all_text for ch in t), "no control characters in any text")
        check(any("red" in t and "\ufffd" in t for t in all_text), "a control character becomes U+FFFD")
        check(any("<b>&amp;\"'" in t for t in all_text), "markup in a run name is text")
        cut = [t for t in all_text if t.startswith("\u00e9\u4e2d")]
        check(cut and all(t.endswith("...") and len(t) == 30 for t in cut),
              "a long multi-byte name is cut to 30 characters: %r" % cut)
    if failures:
        print("curves hostile: %d checks failed" % len(failures))
        return 1
    print("curves hostile: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
