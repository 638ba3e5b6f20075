#!/usr/bin/env python3
"""`shardtrain plot` end to end, looked at as pixels: two run folders (a fresh
one and one with a different loss curve) are plotted to SVG, the SVG is
rendered by a real renderer (rsvg-convert, librsvg2-bin), and the PNG --
decoded here with zlib, no imaging library -- must show the chart: mostly
white, but with many non-white pixels, text-grey, and each run's colour in
many pixels. `plot --output X.png` (librsvg inside shardtrain) is checked the
same way when the build has it; and bad input gives exit status 2 with an
error that names file:line.

Usage: check_curves_render.py SHARDTRAIN WORK_DIR
Prints "curves render: OK" when every check passes.
"""
import os
import shutil
import struct
import subprocess
import sys
import zlib

RUN_COLOURS = {"run 1": (0x1F, 0x77, 0xB4), "run 2": (0xFF, 0x7F, 0x0E)}
HEADER = "step,epoch,loss,lr,grad_norm,samples_per_s,tokens_per_s,elapsed_s\n"

failures = []


def check(ok, what):
    print(("ok:     " if ok else "NOT OK: ") + what)
    if not ok:
        failures.append(what)


def decode_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB or RGBA PNG."""
    blob = open(path, "rb").read()
    if blob[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    at, idat, width = 8, b"", None
    while at < len(blob):
        (length,) = struct.unpack_from(">I", blob, at)
        kind = blob[at + 4:at + 8]
        data = blob[at + 8:at + 8 + length]
        if zlib.crc32(kind + data) != struct.unpack_from(">I", blob, at + 8 + length)[0]:
            raise ValueError(f"{path}: bad CRC in chunk {kind}")
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", data)
            if depth != 8 or colour not in (2, 6) or interlace:
                raise ValueError(f"{path}: unexpected PNG format (depth {depth}, colour type {colour})")
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += data
        at += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous, pos = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[pos], bytearray(raw[pos + 1:pos + 1 + stride])
        pos += 1 + stride
        for i in range(stride):  # undo the row filter (PNG spec, section 9)
            a = line[i - channels] if i >= channels else 0
            b = previous[i]
            c = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        previous = line
    return width, height, rows


def check_chart(png, label):
    width, height, rows = decode_png(png)
    pixels = [p for row in rows for p in row]
    counts = {}
    for p in pixels:
        counts[p] = counts.get(p, 0) + 1
    white = counts.get((255, 255, 255), 0)
    check(width >= 900 and height >= 800, f"{label}: {width} x {height} pixels")
    check(white > 0.6 * len(pixels), f"{label}: the background is white ({white} of {len(pixels)})")
    non_white = len(pixels) - white
    check(non_white > 0.02 * len(pixels), f"{label}: not blank: {non_white} non-white pixels")
    check(len(counts) > 50, f"{label}: {len(counts)} distinct colours (lines, text, anti-aliasing)")
    for run, colour in RUN_COLOURS.items():
        near = sum(n for p, n in counts.items() if max(abs(p[i] - colour[i]) for i in range(3)) <= 12)
        check(near > 500, f"{label}: {run}'s colour #{bytes(colour).hex()} in {near} pixels")
    dark = sum(n for p, n in counts.items() if max(p) < 100)
    check(dark > 2000, f"{label}: dark text and frame in {dark} pixels")
    # Three panels stacked: down the middle column (clear of tick labels and legends) the grey frame of each
    # panel is crossed twice. The 1-pixel frame is anti-aliased, so count runs of frame-grey pixels.
    def frame_grey(p):
        return p[0] == p[1] == p[2] and 100 <= p[0] <= 215

    column = [rows[y][width // 2] for y in range(height)]
    edges = sum(1 for y in range(1, height) if frame_grey(column[y]) and not frame_grey(column[y - 1]))
    check(edges == 6, f"{label}: {edges} frame edges down the middle (3 panels x top and bottom)")

def write_run(folder, loss_scale, lr_peak):
    os.makedirs(folder)
    with open(os.path.join(folder, "progress.csv"), "w") as out:
        out.write(HEADER)
        for step in range(10, 310, 10):
            lr = lr_peak * min(step / 30, (300 - step) / 270)
            out.write(f"{step},{step / 100:.6f},{0.7 * loss_scale * (1 - step / 600):.8g},{lr:.8g},1.5,300,9000,"
                      f"{step / 3:.3f}\n")
    with open(os.path.join(folder, "result.jsonl"), "w") as out:
        for i, step in enumerate((100, 200, 300)):
            out.write(f'{{"epoch":{i + 1},"step":{step},"training_iteration":{i + 1},'
                      f'"train_loss":{0.6 * loss_scale:.4f},"eval_loss":{0.65 * loss_scale - 0.02 * i:.4f},'
                      f'"eval_accuracy":{0.6 + 0.05 * i / loss_scale:.4f},"eval_f1":{0.7 + 0.04 * i:.4f},'
                      f'"eval_mcc":{0.1 + 0.1 * i / loss_scale:.4f},"checkpoint":null}}\n')


def main():
    shardtrain, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    write_run(os.path.join(work, "run 1"), 1.0, 3e-4)
    write_run(os.path.join(work, "run 2"), 1.3, 2e-4)
    runs = [os.path.join(work, "run 1"), os.path.join(work, "run 2")]

    svg = os.path.join(work, "compare.svg")
    done = subprocess.run([shardtrain, "plot", *runs, "--output", svg], capture_output=True, text=True)
    check(done.returncode == 0, f"plot --output compare.svg: status {done.returncode} {done.stderr.strip()}")
    if done.returncode == 0:
        png = os.path.join(work, "compare_rsvg.png")
        subprocess.run(["rsvg-convert", "--format", "png", "--output", png, svg], check=True)
        check_chart(png, "rsvg-convert of the SVG")

    png = os.path.join(work, "compare.png")
    done = subprocess.run([shardtrain, "plot", *runs, "--output", png], capture_output=True, text=True)
    if "built without librsvg" in done.stderr:
        check(done.returncode == 2 and "librsvg2-dev" in done.stderr, "plot --output X.png names librsvg2-dev")
    else:
        check(done.returncode == 0, f"plot --output compare.png: status {done.returncode} {done.stderr.strip()}")
        if done.returncode == 0:
            check_chart(png, "plot --output X.png (librsvg in shardtrain)")

    # Bad input: exit status 2 and the file:line.
    with open(os.path.join(work, "run 2", "progress.csv"), "a") as out:
        out.write("310,3.1,0.5\n")
    done = subprocess.run([shardtrain, "plot", *runs, "--output", svg], capture_output=True, text=True)
    check(done.returncode == 2 and "run 2/progress.csv:32: expected 8 comma-separated values" in done.stderr,
          f"a short csv row: status {done.returncode}, {done.stderr.strip()}")
    done = subprocess.run([shardtrain, "plot", os.path.join(work, "missing"), "--output", svg],
                          capture_output=True, text=True)
    check(done.returncode == 2 and "missing: no such run folder" in done.stderr,
          f"a missing folder: status {done.returncode}, {done.stderr.strip()}")
    done = subprocess.run([shardtrain, "plot", runs[0], "--output", os.path.join(work, "x.jpg")],
                          capture_output=True, text=True)
    check(done.returncode == 2 and "must end in .svg or .png" in done.stderr,
          f"--output x.jpg: status {done.returncode}, {done.stderr.strip()}")

    if failures:
        print(f"curves render: {len(failures)} checks failed")
        return 1
    print("curves render: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
