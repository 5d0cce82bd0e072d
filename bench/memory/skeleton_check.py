#!/usr/bin/python3
"""The Python side of bench/run_large_skeleton: independent of mfsdp, with Debian's torch and
PyPI's safetensors (SITE_PACKAGES is appended to sys.path, as in
tests/fixtures/safetensors/make_init_fixtures.py, so that Debian's numpy stays the one torch
was built with).

    skeleton_check.py SITE prepare MODEL WEIGHTS SKELETON
        WEIGHTS: every parameter (a tied weight once) and buffer of MODEL, by safetensors'
        save_file; SKELETON: MODEL loaded onto the meta device and saved.
    skeleton_check.py SITE losses RANKS A.jsonl B.jsonl
        per-step losses (every rank's global and own loss) of two runs: equal bit for bit?
        Prints table rows; exit 1 when they differ.
    skeleton_check.py SITE compare TRAINED.pt EXPORT_DIR
        every tensor of the safetensors export (read by safetensors) against TRAINED.pt's
        parameters and buffers (read by torch.jit.load): same names, dtypes, shapes, bytes.
        Prints one line of JSON; exit 1 when anything differs.
    skeleton_check.py SITE setup RANKS FROM PLAN METRICS WALL
        set-up table rows (as bench/run_large's); exit 1 when a set-up peak exceeds its bound.
    skeleton_check.py SITE largest EXPORT_DIR
        the largest tensor's bytes and name in a safetensors export (its headers).
    skeleton_check.py SITE time FILE
        wall seconds and max RSS bytes of a `/usr/bin/time -v -o FILE` report.
"""
import glob
import json
import os
import struct
import sys

sys.path.append(sys.argv[1])
cmd, args = sys.argv[2], sys.argv[3:]

MIB = 1048576
m = lambda b: f"{b / MIB:.0f}"  # noqa: E731


def export_files(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        names = sorted(set(json.load(open(index))["weight_map"].values()))
        return [os.path.join(d, n) for n in names]
    return sorted(glob.glob(os.path.join(d, "*.safetensors")))


def header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def as_bits(t):
    import torch
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    t = t.detach().contiguous()
    return t.view(ints[t.element_size()]) if t.is_floating_point() else t


def prepare(model_path, weights_path, skeleton_path):
    import torch
    from safetensors.torch import save_file
    skeleton = torch.jit.load(model_path, map_location="meta")
    torch.jit.save(skeleton, skeleton_path + ".tmp")
    del skeleton
    model = torch.jit.load(model_path)
    weights = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        weights[name] = t.detach().contiguous()  # a tied weight is listed once
    del model
    save_file(weights, weights_path + ".tmp", metadata={"format": "pt"})
    os.replace(skeleton_path + ".tmp", skeleton_path)
    os.replace(weights_path + ".tmp", weights_path)
    print(json.dumps({"tensors": len(weights),
                      "bytes": sum(t.numel() * t.element_size() for t in weights.values()),
                      "skeleton_bytes": os.path.getsize(skeleton_path)}))


def losses(ranks, a_path, b_path):
    def read(p):
        return {(r["step"], r["rank"]): (r["loss"], r["rank_loss"])
                for r in map(json.loads, open(p)) if "step_ms" in r}
    a, b = read(a_path), read(b_path)
    same = a.keys() == b.keys() and len(a) > 0 and all(a[k] == b[k] for k in a)
    for step in sorted({s for s, _ in a}):
        la, lb = a.get((step, 0), (None,))[0], b.get((step, 0), (None,))[0]
        print(f"| {ranks} | {step} | {la!r} | {lb!r} | "
              f"{'yes' if la == lb else 'NO'} |")
    if not same:
        print(f"losses differ: {a} vs {b}", file=sys.stderr)
    sys.exit(0 if same else 1)


def compare(trained_path, export_dir):
    import torch
    from safetensors import safe_open
    model = torch.jit.load(trained_path)
    ref = dict(model.named_parameters())
    ref.update(dict(model.named_buffers()))
    seen, bad = set(), []
    files = export_files(export_dir)
    for path in files:
        with safe_open(path, framework="pt") as f:
            for key in f.keys():
                seen.add(key)
                t = f.get_tensor(key)
                r = ref.get(key)
                if r is None:
                    bad.append(f"{key}: not in {trained_path}")
                elif r.dtype != t.dtype or r.shape != t.shape:
                    bad.append(f"{key}: {t.dtype} {list(t.shape)} vs {r.dtype} {list(r.shape)}")
                elif not torch.equal(as_bits(r), as_bits(t)):
                    bad.append(f"{key}: values differ")
    bad += [f"{key}: not in the export" for key in sorted(ref.keys() - seen)]
    print(json.dumps({"files": len(files), "tensors": len(seen), "equal": not bad,
                      "bytes": sum(t.numel() * t.element_size() for t in ref.values()),
                      "differences": bad[:5], "more": max(0, len(bad) - 5)}))
    sys.exit(0 if not bad else 1)


def setup(ranks, source, plan_path, metrics_path, wall):
    plan = json.load(open(plan_path))
    unit = max(u["unsharded_bytes"] for u in plan["units"])
    over = False
    records = [json.loads(line) for line in open(metrics_path)]
    rows = [r["memory"] for r in records if "memory" in r]
    steps = [r["step_ms"] for r in records if "step_ms" in r]
    step = f"{steps[-1] / 1000:.0f} s" if steps else "-"
    for k in sorted(rows, key=lambda k: k["rank"]):
        bound = 1.1 * (k["runtime_base_bytes"] + k["sharded_param_bytes"] + unit)
        peak = k["setup_peak_rss_bytes"]
        over |= peak > bound
        print(f"| {ranks} | {source} | {k['rank']} | {m(k['runtime_base_bytes'])} | "
              f"{m(k['sharded_param_bytes'])} | {m(unit)} | {m(bound)} | {m(peak)} | "
              f"{peak / bound:.2f} | {m(k['model_as_loaded_bytes'])} | "
              f"{m(k['peak_rss_bytes'])} | {step} | {float(wall):.0f} s |")
    sys.exit(1 if over or not rows else 0)


def largest(export_dir):
    best = (0, None)
    for path in export_files(export_dir):
        for key, v in header(path).items():
            best = max(best, (v["data_offsets"][1] - v["data_offsets"][0], key))
    print(best[0], best[1])


def time_report(path):
    wall = rss = None
    for line in open(path):
        key, _, value = line.strip().rpartition(": ")
        if key.startswith("Elapsed (wall clock) time"):
            wall = 0.0
            for part in value.split(":"):
                wall = wall * 60 + float(part)
        elif key == "Maximum resident set size (kbytes)":
            rss = int(value) * 1024
    print(wall, rss)


{"prepare": prepare, "losses": losses, "compare": compare, "setup": setup,
 "largest": largest, "time": time_report}[cmd](*args)
