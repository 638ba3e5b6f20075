#!/usr/bin/env python3
"""The size limits (issue 42): no source file under src/ or include/ over 500
lines, and no function over 100 lines, counted from its signature's first line
to its closing brace, except the declarative tables in ALLOWED. Prints every
file and function over its limit and exits 1; exit 0 with a count when there
is none.

    python3 tests/check_limits.py <source root>

Functions are found by reading the braces: comments, string and character
literals and preprocessor lines are blanked first, then a '{' opens a function
body when the text before it (since the last ';', '{' or '}') ends in a
parameter list followed only by qualifiers (const, noexcept, override, a
trailing return type) or a constructor's initialiser list. Only the outermost
body counts; lambdas and blocks inside it are part of it.
"""
import os
import re
import sys

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 100
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")

# (path relative to the root, function name as written in its signature): why it may be longer.
ALLOWED = {
    ("include/shardtrain/core/run_config.h", "visit_config_keys"):
        "declarative table: one line per TOML key binding ([section] key -> RunConfig field); "
        "splitting it by section would only scatter the table",
}

CONTROL = re.compile(r"^(if|for|while|switch|catch|else|do|return)\b")
# What may follow a function's parameter list before its body.
QUALIFIERS = re.compile(r"^(\s*(const|volatile|noexcept(\s*\([^)]*\))?|override|final|mutable|&&|&|try|"
                        r"->\s*[^;{}]+?))*\s*$")
NAME = re.compile(r"((?:operator\s*(?:\(\)|[^\s(]+)|~?[A-Za-z_]\w*)(?:\s*<[^()]*>)?)\s*$")


def blank(text):
    """The text with comments, string / character literals and preprocessor
    lines replaced by spaces (newlines kept, so line numbers stay)."""
    out, i, n = [], 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a preprocessor line and its continuations
            while i < n and not (text[i] == "\n" and text[i - 1] != "\\"):
                out.append("\n" if text[i] == "\n" else " ")
                i += 1
            continue
        line_start = c == "\n"
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        raw = re.match(r'(?:u8|[uUL])?R"([^ ()\\\t\n]{0,16})\(', text[i:i + 24])
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find(")" + raw.group(1) + '"', i + raw.end())
            end = n if end < 0 else end + len(raw.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        if c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum())):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j, n - 1) + 1 - i))
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def split_header(header):
    """(text before the parameter list, text after it) when the header ends in
    a parameter list plus qualifiers or an initialiser list; None otherwise."""
    if "(" not in header or ")" not in header:
        return None
    # The first top-level parameter list whose remainder is qualifiers or ': inits'.
    depth = 0
    for k, ch in enumerate(header):
        if ch == "(":
            if depth == 0:
                open_at = k
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                before, after = header[:open_at], header[k + 1:]
                if QUALIFIERS.match(after) or after.lstrip().startswith(":") and not after.lstrip().startswith("::"):
                    return before, after
            if depth < 0:
                return None
    return None


def functions(text):
    """Yields (name, first line, last line) for each outermost function body."""
    code = blank(text)
    stack = []  # kinds of the open braces: "func", "init" (a member's brace-init), "other"
    header_start = 0
    for i, ch in enumerate(code):
        if ch in ";{}" and ch != "{" and stack and stack[-1] == "init" and ch == "}":
            stack.pop()
            continue  # the header of the constructor goes on
        if ch == ";":
            header_start = i + 1
        elif ch == "{":
            header = code[header_start:i]
            stripped = header.strip()
            inside_function = "func" in stack
            kind = "other"
            if not inside_function and stripped and not CONTROL.match(stripped) and not stripped.endswith("="):
                parts = split_header(stripped)
                if parts is not None:
                    before, after = parts
                    if after.lstrip().startswith(":") and re.search(r"[\w>]\s*$", after):
                        kind = "init"
                    elif not re.search(r"=\s*$", before) and NAME.search(before):
                        kind = "func"
                        name = NAME.search(before).group(1)
                        start_line = code.count("\n", 0, header_start + len(header) - len(header.lstrip())) + 1
            stack.append(kind)
            if kind != "init":
                header_start = i + 1
            if kind == "func":
                pending = (name, start_line)
        elif ch == "}":
            if stack:
                kind = stack.pop()
                if kind == "func" and "func" not in stack:
                    yield pending[0], pending[1], code.count("\n", 0, i) + 1
            header_start = i + 1


def main(root):
    problems, num_files, num_functions, used = [], 0, 0, set()
    for top in ("src", "include"):
        for directory, subdirectories, files in os.walk(os.path.join(root, top)):
            subdirectories.sort()
            for file_name in sorted(files):
                if not file_name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(directory, file_name)
                relative = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                num_files += 1
                num_lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
                if num_lines > MAX_FILE_LINES:
                    problems.append(f"{relative}: {num_lines} lines (at most {MAX_FILE_LINES}); "
                                    f"split it into files that answer one question")
                for name, first, last in functions(text):
                    num_functions += 1
                    length = last - first + 1
                    if length <= MAX_FUNCTION_LINES:
                        continue
                    if (relative, name) in ALLOWED:
                        used.add((relative, name))
                        continue
                    problems.append(f"{relative}:{first}: function '{name}' is {length} lines "
                                    f"(at most {MAX_FUNCTION_LINES}); split it into named steps")
    for path, name in sorted(set(ALLOWED) - used):
        problems.append(f"{path}: allowed function '{name}' is gone or no longer over {MAX_FUNCTION_LINES} "
                        f"lines; remove it from ALLOWED in tests/check_limits.py")
    for p in problems:
        print(p)
    if problems:
        print(f"check_limits: {len(problems)} problem(s) in {num_files} files")
        return 1
    print(f"check_limits: OK ({num_files} files, {num_functions} functions; at most {MAX_FILE_LINES} lines a file, "
          f"{MAX_FUNCTION_LINES} a function, {len(ALLOWED)} table(s) allowed)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
