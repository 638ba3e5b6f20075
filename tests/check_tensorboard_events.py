#!/usr/bin/env python3
"""Reads the TensorBoard event files shardtrain writes with a decoder of its
own: TFRecord framing and a CRC-32C written out here, and Event / Summary
message classes built in this script from TensorBoard's field numbers
(tensorboard/compat/proto/event.proto, summary.proto) through python3-protobuf
(Debian) -- not from shardtrain's .proto. Checks every record's two CRCs, the
file_version event, and every tag, value, step and wall time, for a fresh
file, after a resume trim (steps <= S kept, a torn tail cut off) and with a
second file appended.

Usage: check_tensorboard_events.py TENSORBOARD_PROBE WORK_DIR
Prints "tensorboard events: OK" when every check passes.
"""
import math
import os
import shutil
import socket
import struct
import subprocess
import sys

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError:
    sys.exit("check_tensorboard_events.py needs Python's protobuf module (Debian: python3-protobuf)")


# ---- TensorBoard's messages, from their field numbers -----------------------
def build_messages():
    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="check_tensorboard/event.proto", package="check_tb", syntax="proto3")
    summary = f.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    value.field.add(name="node_name", number=7, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL, oneof_index=0)
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".check_tb.Summary.Value")
    event = f.message_type.add(name="Event")
    event.oneof_decl.add(name="what")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="graph_def", number=4, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, oneof_index=0,
                    type_name=".check_tb.Summary")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    descriptor = pool.FindMessageTypeByName("check_tb.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


Event = build_messages()


# ---- CRC-32C, bit by bit (Castagnoli, reflected 0x82F63B78) -----------------
def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720 B.4)
assert crc32c(bytes(32)) == 0x8A9136AA      # RFC 3720 B.4: 32 bytes of zeros


def read_records(path):
    """Every record of a TFRecord file, checking both CRCs; raises ValueError naming the offset."""
    blob = open(path, "rb").read()
    out, at = [], 0
    while at < len(blob):
        if len(blob) - at < 12:
            raise ValueError(f"{path}: header cut short at byte {at}")
        (length,) = struct.unpack_from("<Q", blob, at)
        (length_crc,) = struct.unpack_from("<I", blob, at + 8)
        if length_crc != masked(blob[at:at + 8]):
            raise ValueError(f"{path}: length CRC wrong at byte {at}")
        if at + 12 + length + 4 > len(blob):
            raise ValueError(f"{path}: record cut short at byte {at}")
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack_from("<I", blob, at + 12 + length)
        if data_crc != masked(data):
            raise ValueError(f"{path}: data CRC wrong at byte {at}")
        event = Event()
        event.ParseFromString(data)
        out.append(event)
        at += 12 + length + 4
    return out


def f32(x):
    """x rounded to float32; beyond float32's range, +-inf."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def same_float(a, b):
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("NOT OK:", what)


def check_file(path, file_time, scalars):
    """path holds the file_version event at file_time, then exactly `scalars` (tag, step, value, wall_time)."""
    events = read_records(path)
    check(len(events) == 1 + len(scalars), f"{path}: {len(events)} events, expected {1 + len(scalars)}")
    first = events[0]
    check(first.WhichOneof("what") == "file_version" and first.file_version == "brain.Event:2",
          f"{path}: first event is not file_version brain.Event:2")
    check(first.wall_time == file_time, f"{path}: file_version wall_time {first.wall_time} != {file_time}")
    for event, (tag, step, value, wall_time) in zip(events[1:], scalars):
        where = f"{path}: {tag} at step {step}"
        check(event.WhichOneof("what") == "summary" and len(event.summary.value) == 1, where + ": not one scalar")
        if event.WhichOneof("what") != "summary" or not event.summary.value:
            continue
        v = event.summary.value[0]
        check(v.tag == tag, f"{where}: tag {v.tag!r}")
        check(v.WhichOneof("value") == "simple_value", f"{where}: no simple_value (a 0.0 must still be written)")
        check(same_float(v.simple_value, f32(value)), f"{where}: value {v.simple_value!r} != float32({value!r})")
        check(event.step == step, f"{where}: step {event.step}")
        check(event.wall_time == wall_time, f"{where}: wall_time {event.wall_time!r} != {wall_time!r}")


class Probe:
    def __init__(self, exe):
        self.process = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, line):
        """Sends one command and waits for its answer, so the files are as the command left them."""
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().strip()
        if not answer or answer.startswith("error"):
            raise SystemExit(f"tensorboard_probe: {line!r} -> {answer!r}")
        return answer

    def finish(self):
        self.process.stdin.close()
        if self.process.wait() != 0:
            raise SystemExit(f"tensorboard_probe exited with {self.process.returncode}")


def main():
    exe, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    tb = os.path.join(work, "tensorboard")  # created by the writer, parents too
    host = socket.gethostname()

    # ---- a fresh run: 3 tags x 30 steps, awkward values ----
    t0 = 1700000000.25
    values = [0.0, -1.5, 1e-7, 3.0e38, 0.6931471805599453, 2e-5, 123456.789, -0.0, math.nan, -math.inf, 1e-50]
    scalars = []
    for step in range(1, 31):
        for j, tag in enumerate(["train/loss", "train/learning_rate", "eval/accuracy"]):
            scalars.append((tag, step, values[(step + j) % len(values)] * (1 + step / 7), t0 + step + j / 8))
    probe = Probe(exe)
    path = probe.ask(f"open {tb} {t0!r}").split(" ", 1)[1]
    check(os.path.basename(path) == f"events.out.tfevents.{int(t0):010d}.{host}", f"file name {path}")
    for i, (tag, step, value, wall_time) in enumerate(scalars):
        probe.ask(f"scalar {tag} {step} {value!r} {wall_time!r}")
        if i == 40:
            probe.ask("flush")
    probe.ask("close")
    probe.ask(f"trim {tb} 1000")  # round trip: a no-op
    check_file(path, t0, scalars)

    # The decoder must notice a flipped byte (so it can fail).
    damaged = os.path.join(work, "flipped")
    blob = bytearray(open(path, "rb").read())
    blob[len(blob) // 2] ^= 0x40
    open(damaged, "wb").write(blob)
    try:
        read_records(damaged)
        check(False, "a flipped byte went unnoticed")
    except ValueError:
        pass
    os.remove(damaged)

    # ---- resume from step 17: later events go, the file is rewritten in place ----
    before = os.path.getmtime(path)
    answer = probe.ask(f"trim {tb} 17")
    kept = [s for s in scalars if s[1] <= 17]
    check(answer == f"trim files 1 rewritten 1 kept {1 + len(kept)} dropped {len(scalars) - len(kept)} damaged 0",
          f"trim answer {answer!r}")
    check_file(path, t0, kept)
    check(sorted(os.listdir(tb)) == [os.path.basename(path)], f"left in the folder: {os.listdir(tb)}")

    # A job killed mid-write leaves a torn record: the trim cuts it off and keeps the rest. A rewrite
    # killed before its rename leaves "<file>.tmp", which TensorBoard would read too: the trim deletes it.
    intact = open(path, "rb").read()
    shutil.copy(path, path + ".tmp")
    with open(path, "ab") as out:
        out.write(intact[-30:-3])
    answer = probe.ask(f"trim {tb} 17")
    check(answer == f"trim files 1 rewritten 1 kept {1 + len(kept)} dropped 0 damaged 27", f"torn trim {answer!r}")
    check(open(path, "rb").read() == intact, "the torn tail was not cut off exactly")
    check(not os.path.exists(path + ".tmp"), "a leftover temporary file was kept")

    # The resumed run's writer: a second file, later in name order, steps 18.. only.
    t1 = t0 + 100
    path2 = probe.ask(f"open {tb} {t1!r}").split(" ", 1)[1]
    resumed = [(tag, step, value + 1, wall + 100) for tag, step, value, wall in scalars if step > 17]
    for tag, step, value, wall_time in resumed:
        probe.ask(f"scalar {tag} {step} {value!r} {wall_time!r}")
    probe.ask("flush")
    check_file(path, t0, kept)
    check_file(path2, t1, resumed)
    files = sorted(f for f in os.listdir(tb) if "tfevents" in f)
    check(files == [os.path.basename(path), os.path.basename(path2)], f"event files {files}")
    seen = []
    for name in files:  # TensorBoard's order: by name
        for event in read_records(os.path.join(tb, name))[1:]:
            seen.append((event.summary.value[0].tag, event.step))
    check(len(seen) == len(set(seen)), "a (tag, step) appears twice after the resume")
    check([s for t, s in seen if t == "train/loss"] == list(range(1, 31)), "train/loss steps are not 1..30 in order")

    # Two writers in the same second get distinct names.
    path3 = probe.ask(f"open {tb} {t1!r}").split(" ", 1)[1]
    check(path3 == path2 + ".1", f"same-second file {path3}")
    probe.ask("close")

    # A folder that cannot be created is an error naming it.
    blocker = os.path.join(work, "a_file")
    open(blocker, "w").close()
    bad = subprocess.run([exe], input=f"open {blocker}/tb 1\n", text=True, capture_output=True)
    check(bad.returncode == 2 and "cannot create the TensorBoard folder" in bad.stdout and blocker in bad.stdout,
          f"unwritable folder: {bad.returncode} {bad.stdout!r}")
    probe.finish()

    if failures:
        print(f"tensorboard events: {len(failures)} checks failed")
        return 1
    print("tensorboard events: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
