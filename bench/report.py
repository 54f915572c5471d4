"""The report of mount_bench.py: the summary (medians with min-max), results.md
and the plots (coalescing.png, scaling.png), all from the results dict alone,
so that --report-only can rebuild them from results.json."""

import json
import os
import statistics

from measure import GIB, MB, MIB, human_size, log, summarize
from workloads import (CHUNK_BYTES, CHUNK_NAMES, FLOOR_BIG_PHASES, FLOOR_LAYOUT_KEYS, PIECE,
                       RESTORE_THREADS, STEPS_VARIANTS)


def fmt_spread(s, fmt="%.0f"):
    if not s:
        return "n/a"
    if s["n"] == 1:
        return fmt % s["median"]
    return (fmt + " (" + fmt + "-" + fmt + ")") % (s["median"], s["min"], s["max"])


def ratio(a, b):
    if not a or not b or not b["median"]:
        return None
    return a["median"] / b["median"]


def fmt_ratio(r):
    return "n/a" if r is None else "%.2fx" % r


def fmt_pct(r):
    return "n/a" if r is None else "%.0f%%" % (100 * r)


def table_row(*cells):
    return "|" + "|".join((" %s " % c) if c else " " for c in cells) + "|"


def compare_head(first, floor, rest=()):
    """The head of a table whose columns are `first`, plain, [FUSE floor],
    ckptfs, ckptfs/plain, [ckptfs/floor], then `rest`."""
    cols = ([first, "plain"] + (["FUSE floor"] if floor else []) + ["ckptfs", "ckptfs/plain"] +
            (["ckptfs/floor"] if floor else []) + list(rest))
    return [table_row(*cols), "|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|"]


def compare_cells(p, c, f, floor, fmt="%.0f", ratios=True):
    """The cells plain, [FUSE floor], ckptfs, ckptfs/plain, [ckptfs/floor]: a
    summary (or None) printed with fmt_spread, text as it is ("": not
    measured); a ratio only between two summaries."""
    def cell(v):
        return v if isinstance(v, str) else fmt_spread(v, fmt)

    def ratio_cell(a, b):
        return "" if not ratios or isinstance(a, str) or isinstance(b, str) \
            else fmt_ratio(ratio(a, b))
    if not floor:
        return [cell(p), cell(c), ratio_cell(c, p)]
    return [cell(p), cell(f), cell(c), ratio_cell(c, p), ratio_cell(c, f)]


# Phases of workload 1, in the order they run.
BIG_PHASES = ("write", "cold_read", "warm_read", "mmap_read")


def compute_summary(results):
    """Summarizes every workload in `results` (medians with min-max, see
    measure.summarize) and the contention the Meters saw; stores the summary
    as results["summary"] and returns it."""
    S = {}
    for key, summarize_workload in WORKLOAD_SUMMARIES:
        if key in results:
            S[key] = summarize_workload(results[key])
    S.update(summarize_contention(results))
    results["summary"] = S
    return S


def summarize_big(big):
    """Workload 1: throughput and client CPU per side, the daemons' CPU, RSS
    and reported memory per phase, and dd's disk limit."""
    s = {}
    size = big["size_bytes"]
    for who in present(big):
        for phase in BIG_PHASES:
            s["%s_%s_MBps" % (who, phase)] = summarize(
                [size / MB / r[phase]["seconds"] for r in big[who] if phase in r])
            s["%s_%s_app_cpu_s_per_GiB" % (who, phase)] = summarize(
                [r[phase]["client_cpu_s"] / (size / GIB) for r in big[who] if phase in r])
    for phase in FLOOR_BIG_PHASES:
        s["floor_%s_daemon_cpu_s_per_GiB" % phase] = summarize(
            [r[phase]["daemon_cpu_s"] / (size / GIB) for r in big.get("floor", [])
             if phase in r and r[phase]["daemon_cpu_s"] is not None])
    for phase in BIG_PHASES:
        s.update(summarize_big_daemon(big, phase))
    for phase in ("write", "read"):
        s["dd_%s_MBps" % phase] = summarize(
            [size / MB / r[phase]["seconds"] for r in big["dd"]])
    return s


def summarize_big_daemon(big, phase):
    """The ckptfs daemon's CPU, RSS and reported memory in one phase of workload 1."""
    s = {}
    size = big["size_bytes"]
    runs = [r[phase] for r in big["ckptfs"] if phase in r]
    s["%s_cpu_s_per_GiB" % phase] = summarize(
        [r["daemon_cpu_s"] / (size / GIB) for r in runs if r["daemon_cpu_s"] is not None])
    # The median and the highest of each run's pieces (workloads.PieceCpu).
    piece_runs = [r["daemon_cpu_s_per_GiB_pieces"] for r in runs
                  if r.get("daemon_cpu_s_per_GiB_pieces")]
    s["%s_cpu_piece_median" % phase] = summarize([statistics.median(p) for p in piece_runs])
    s["%s_cpu_piece_max" % phase] = summarize([max(p) for p in piece_runs])
    s["%s_reported_MiB" % phase] = summarize([r.get("reported_to_host_MiB") for r in runs])
    s["%s_peak_rss_MiB" % phase] = summarize(
        [r["daemon_peak_rss_kb"] / 1024 for r in runs
         if r.get("daemon_peak_rss_kb") is not None])
    return s


def summarize_layout(lay):
    """Workload 2: create and restore rates and the backing store per side,
    then what only ckptfs counts."""
    s = {}
    for who in present(lay):
        runs = lay[who]
        s["%s_create_files_per_s" % who] = summarize(
            [r["files"] / r["create"]["seconds"] for r in runs])
        s["%s_create_sync_files_per_s" % who] = summarize(
            [r["files"] / (r["create"]["seconds"] + r["create_sync"]["seconds"])
             for r in runs])
        s["%s_restore_files_per_s" % who] = summarize(
            [r["files"] / r["restore"]["seconds"] for r in runs])
        s["%s_restore_parallel_files_per_s" % who] = summarize(
            [r["files"] / r["restore_parallel"]["seconds"] for r in runs
             if "restore_parallel" in r])
        s["%s_restore_MBps" % who] = summarize(
            [r["bytes"] / MB / r["restore"]["seconds"] for r in runs])
        s["%s_backing_files" % who] = summarize(
            [r["store_files"] for r in runs if "store_files" in r])
        s["%s_allocated_MiB" % who] = summarize(
            [r["store_allocated_bytes"] / MIB for r in runs if "store_allocated_bytes" in r])
    s.update(summarize_layout_ckptfs(lay["ckptfs"]))
    return s


def summarize_layout_ckptfs(runs):
    """Workload 2's engine counters, FUSE requests per file, warmup and daemon CPU."""
    s = {}
    for key in ("backing_reads", "coalesced_reads", "cache_hits", "backing_read_bytes"):
        s["ckptfs_restore_" + key] = summarize(
            [r["restore"]["engine_delta"].get(key) for r in runs])
    s["ckptfs_create_requests_per_file"] = summarize(
        [r["create"]["requests"]["all"] / r["files"] for r in runs
         if "requests" in r["create"]])
    s["ckptfs_restore_requests_per_file"] = summarize(
        [r["restore"]["requests"]["all"] / r["files"] for r in runs
         if "requests" in r["restore"]])
    s["ckptfs_restore_warm_files_per_s"] = summarize(
        [r["files"] / r["restore_warm"]["seconds"] for r in runs if "restore_warm" in r])
    s["ckptfs_restore_warm_requests_per_file"] = summarize(
        [r["restore_warm"]["requests"]["all"] / r["files"] for r in runs
         if "restore_warm" in r])
    s["ckptfs_warmup_s"] = summarize(
        [r["warmup"]["seconds"] for r in runs if "warmup" in r])
    s["ckptfs_warmup_backing_MB"] = summarize(
        [r["warmup"]["engine_delta"]["backing_read_bytes"] / MB for r in runs
         if "warmup" in r])
    s["ckptfs_create_daemon_cpu_s"] = summarize([r["create"]["daemon_cpu_s"] for r in runs])
    s["ckptfs_restore_daemon_cpu_s"] = summarize([r["restore"]["daemon_cpu_s"] for r in runs])
    return s


def summarize_sweep(sw):
    """Workload 4: per coalescing setting (and the plain directory), the cold
    restore's time and rate; for ckptfs also its engine counters and CPU."""
    s = {}
    for label in ["plain"] + [setting["label"] for setting in sw["settings"]]:
        runs = [r for r in sw["runs"] if r["setting"] == label]
        e = {"restore_s": summarize([r["restore"]["seconds"] for r in runs]),
             "files_per_s": summarize([r["files"] / r["restore"]["seconds"] for r in runs])}
        if label != "plain":
            for key in ("backing_reads", "coalesced_reads", "cache_hits",
                        "backing_read_bytes"):
                e[key] = summarize([r["restore"]["engine_delta"].get(key) for r in runs])
            e["daemon_cpu_s"] = summarize([r["restore"]["daemon_cpu_s"] for r in runs])
        s[label] = e
    return s


def summarize_frameworks(fw):
    """Workload 3: rate and time per phase and side; the bytes torch.load made
    the daemon read."""
    s = {}
    for phase in FRAMEWORK_PHASES:
        for who in present(fw):
            runs = [r[phase] for r in fw[who] if phase in r]
            s["%s_%s_MBps" % (who, phase)] = summarize(
                [r["bytes"] / MB / r["seconds"] for r in runs])
            s["%s_%s_s" % (who, phase)] = summarize([r["seconds"] for r in runs])
    # Bytes the daemon read from data files per byte torch.load loaded.
    s["ckptfs_torch-load_data_file_reads_per_byte"] = summarize(
        [r["torch-load"]["engine_delta"].get("data_file_read_bytes", 0) / r["torch-load"]["bytes"]
         for r in fw["ckptfs"] if "engine_delta" in r["torch-load"]])
    # ... and from the storage (the OS's cache answers the rest).
    s["ckptfs_torch-load_storage_reads_per_byte"] = summarize(
        [r["torch-load"]["daemon_storage_read_bytes"] / r["torch-load"]["bytes"]
         for r in fw["ckptfs"] if "daemon_storage_read_bytes" in r["torch-load"]])
    return s


def summarize_pieces(pc):
    """Workload 8: rate per write size and side; ckptfs's FUSE requests per MiB."""
    s = {}
    for piece in pc["pieces"]:
        for who in ("ckptfs", "plain"):
            s["%s_%d_MBps" % (who, piece)] = summarize(
                [x["bytes"] / MB / x["seconds"] for r in pc[who] for x in r["runs"]
                 if x["piece"] == piece])
        s["ckptfs_%d_requests_per_MiB" % piece] = summarize(
            [x["requests"]["all"] / (x["bytes"] / MIB) for r in pc["ckptfs"]
             for x in r["runs"] if x["piece"] == piece and "requests" in x])
    return s


def summarize_steps(st):
    """Workload 10: the rate of the timed saves per variant; the space each
    ckptfs variant holds per live byte."""
    s = {}
    for v in [v for v in STEPS_VARIANTS + ("floor",) if v in st]:
        # Per repetition: the timed saves together.
        s["%s_MBps" % v] = summarize(
            [st["bytes"] * len(r["saves"]) / MB / sum(x["seconds"] for x in r["saves"])
             for r in st[v]])
    for v in STEPS_VARIANTS[1:]:
        s["%s_space_ratio" % v] = summarize(
            [r["segment_file_bytes"] / r["live_bytes"] for r in st[v] if r.get("live_bytes")])
    return s


def summarize_cloud(cl):
    """Workload 9: the throttled cold restore's rate per side."""
    return {"%s_files_per_s" % who: summarize(
        [r["files"] / r["restore"]["seconds"] for r in cl[who]]) for who in ("ckptfs", "plain")}


def summarize_scaling(sc):
    """Workload 5: the aggregate rate per number of writers and side."""
    s = {}
    for n in sc["writers"]:
        for who in ("ckptfs", "plain"):
            s["%s_%d_MBps" % (who, n)] = summarize(
                [x["bytes"] / MB / x["seconds"] for r in sc[who] for x in r["runs"]
                 if x["writers"] == n])
    return s


def summarize_contention(results):
    """The CPU other processes used during the timed phases (sync phases and
    Meters that do not count for contention left out), and the time spent
    waiting for a quiet host."""
    others = [m["other_cpu_cores"] for m in iter_meters(results, skip_keys=("create_sync",))
              if m.get("other_cpu_cores") is not None and m.get("counts_for_contention", True)]
    return {"other_cpu_cores": summarize(others),
            "quiet_wait_s": sum(m.get("quiet_wait_s") or 0 for m in iter_meters(results))}


# Each workload's key in the results, with what summarizes it, in the order
# the summary holds them.
WORKLOAD_SUMMARIES = (
    ("big", summarize_big),
    ("layout", summarize_layout),
    ("sweep", summarize_sweep),
    ("frameworks", summarize_frameworks),
    ("pieces", summarize_pieces),
    ("steps", summarize_steps),
    ("cloud", summarize_cloud),
    ("scaling", summarize_scaling),
)


def present(section):
    """The sides a workload's results hold: ckptfs, plain and, when it ran, the floor."""
    return [who for who in ("ckptfs", "plain", "floor") if who in section]


def iter_meters(obj, skip_keys=()):
    """Every Meter record (a dict with "other_cpu_cores") inside the results,
    leaving out the subtrees under `skip_keys`."""
    if isinstance(obj, dict):
        if "other_cpu_cores" in obj:
            yield obj
        for k, v in obj.items():
            if k != "summary" and k not in skip_keys:
                yield from iter_meters(v, skip_keys)
    elif isinstance(obj, list):
        for v in obj:
            yield from iter_meters(v, skip_keys)


def render_markdown(results):
    """results.md's text: the run's environment, then a section for each
    workload that ran, from `results` and its summary (compute_summary)."""
    L = []
    for render in (render_environment, render_big, render_layout, render_frameworks,
                   render_pieces_and_cloud, render_steps, render_sweep, render_scaling,
                   render_disk_limit, render_daemon_resources):
        L += render(results)
    return "\n".join(L) + "\n"


def render_environment(results):
    """The title, the machine and the run's settings, then the FUSE floor and
    the contention the run saw."""
    env = results["env"]
    L = ["# ckptfs mount benchmark", "",
         "%s, %s, kernel %s, %d CPUs, %.0f GiB RAM; work dir %s (%s on %s); "
         "ckptfs %s; mount options: %s; FUSE read_ahead_kb %s; %d repetitions%s; "
         "median (min-max)."
         % (env["date"], env["host"], env["kernel"], env["cpus"], env["mem_gib"],
            env["work"], env["work_fs"], env["work_dev"], env["ckptfs_rev"],
            env["mount_opts"] or "defaults", env.get("fuse_read_ahead_kb", "?"),
            env["reps"],
            ", --priority (nice -20, realtime I/O)" if env.get("priority") else ""),
         "Ratios are ckptfs/plain as throughput (>1: ckptfs faster); \"% of disk\" is "
         "relative to dd with O_DIRECT on the same disk."]
    return L + render_floor_note(results) + render_contention(results)


def render_floor_note(results):
    """What the FUSE floor is and which workloads ran on it; nothing when it did not run."""
    R, env = results, results["env"]
    if not env.get("fuse_floor"):
        return []
    # The workloads that ran on the floor.
    ran = [name for key, name in (("big", "1"), ("layout", "2"),
                                  ("frameworks", "3's torch pair"), ("steps", "10"))
           if "floor" in R.get(key, {})]
    L = ["", "FUSE floor (workload%s %s): libfuse's example passthrough_hp (%s) "
         "mirroring a directory on the same disk, run as `%s`: every read and "
         "write through its daemon (no kernel passthrough), with the kernel's "
         "write-back cache, splice, entry and attribute timeouts of 86400 s and "
         "libfuse's default worker threads, as ckptfs's default mount serves files. "
         "It is what any FUSE filesystem costs here; ckptfs/floor is a throughput "
         "ratio too. Cold: caches dropped and the floor remounted, as for ckptfs."
         % ("s" if len(ran) > 1 else "",
            ", ".join(ran[:-1]) + (" and " if len(ran) > 1 else "") + ran[-1],
            env["fuse_floor"], env["fuse_floor_command"])]
    if env.get("fuse_floor_output"):
        L.append("passthrough_hp said: %s" % " / ".join(env["fuse_floor_output"][:3]))
    return L


def render_contention(results):
    """The CPU other processes used during the run, with a warning when the
    host was busy; nothing when no Meter measured it."""
    S, env = results["summary"], results["env"]
    oc = S.get("other_cpu_cores")
    if not oc:
        return []
    L = ["", "CPU used by other processes and kernel threads during the timed phases "
         "(sync phases left out): "
         "median %.2f, max %.2f cores of %d%s." % (
             oc["median"], oc["max"], env["cpus"],
             (" (waited %.0f s for quiet)" % S["quiet_wait_s"]) if S["quiet_wait_s"] else "")]
    if oc["median"] > 0.25 or oc["max"] > 0.5 * env["cpus"]:
        L.append("**Warning: the host was busy with other work during this run; "
                 "treat the figures as skewed (other_cpu_cores in results.json says "
                 "which phases); rerun when it is quiet, or with --priority or "
                 "--wait-quiet.**")
    return L


def big_ran(results):
    """Whether workload 1 ran and measured ckptfs."""
    return "big" in results["summary"] and bool(results["big"]["ckptfs"])


def render_big(results):
    """Section 1: workload 1's throughput per phase and side."""
    if not big_ran(results):
        return []
    R, s = results, results["summary"]["big"]
    size = R["big"]["size_bytes"]
    floor = "floor" in R["big"]
    L = ["", "## 1. Big file: %s in 1 MiB writes + fsync, 1 MiB reads (MB/s)"
         % human_size(size), ""]
    L += compare_head("phase", floor, ("plain % of disk", "ckptfs % of disk"))
    for phase, label, dd in (("write", "write + fsync", "dd_write_MBps"),
                             ("cold_read", "cold read", "dd_read_MBps"),
                             ("warm_read", "warm read", "dd_read_MBps"),
                             ("mmap_read", "cold read through mmap", "dd_read_MBps")):
        p, c = s["plain_%s_MBps" % phase], s["ckptfs_%s_MBps" % phase]
        if p is None and c is None:
            continue  # results from before the phase existed
        f = s.get("floor_%s_MBps" % phase) if phase in FLOOR_BIG_PHASES else ""
        L.append(table_row(label, *compare_cells(p, c, f, floor),
                           fmt_pct(ratio(p, s.get(dd))), fmt_pct(ratio(c, s.get(dd)))))
    if floor:
        L.append("")
        L.append("The FUSE floor's daemon used %s CPU s/GiB (write, cold read, warm "
                 "read, read through mmap; near 0 where kernel passthrough carries the "
                 "data)." % ", ".join(
                     fmt_spread(s["floor_%s_daemon_cpu_s_per_GiB" % phase], "%.2f")
                     for phase in FLOOR_BIG_PHASES))
    return L


def render_layout(results):
    """Section 2: workload 2's table and what it measured; nothing when the
    layout was only built for the sweep."""
    R, S = results, results["summary"]
    if "layout" not in S or R["layout"].get("only_built_for_sweep"):
        return []
    lay = R["layout"]
    nfiles = lay["dirs"] * lay["files_per_dir"]
    L = ["", "## 2. Per-parameter layout: %d dirs x (.zarray + %d x %d KiB chunks) "
         "= %d files" % (lay["dirs"], len(CHUNK_NAMES), CHUNK_BYTES // 1024, nfiles), ""]
    L += render_layout_table(results)
    L.append("")
    floor_dirs = sorted({r.get("dirs", lay["dirs"]) for r in lay.get("floor", [])})
    if floor_dirs and floor_dirs != [lay["dirs"]]:
        L.append("The FUSE floor's tree has %s dirs (%s files): its daemon holds a file "
                 "descriptor for every inode the kernel knows, and this machine allows it "
                 "fewer than the full tree needs. Its figures are per file." % (
                     "/".join(str(n) for n in floor_dirs),
                     "/".join(str(n * lay["files_per_dir"]) for n in floor_dirs)))
        L.append("")
    env = R["env"]
    L.append("Restore lists the checkpoint dir, then reads each array: its .zarray "
             "(parsed), then the chunks it names; with one thread, or with %d threads "
             "taking one array at a time (as tensorstore or a zarr thread pool do). "
             "Before each restore all caches are dropped and ckptfs is remounted, with "
             "default coalescing (%s/%s)." % (
                 RESTORE_THREADS, env.get("default_coalesce_gap", "?"),
                 env.get("default_coalesce_max", "?")))
    return L


def render_layout_table(results):
    """Workload 2's table: rates per side, the backing store, FUSE requests,
    warmup and the engine's counters."""
    s = results["summary"]["layout"]
    floor = "floor" in results["layout"]
    L = compare_head("metric", floor)

    def row(label, p, c, fmt="%.0f", ratios=True, f=""):
        L.append(table_row(label, *compare_cells(p, c, f, floor, fmt, ratios)))
    for key, label in (("create_files_per_s", "create, files/s"),
                       ("create_sync_files_per_s", "create + sync, files/s"),
                       ("restore_files_per_s", "cold restore, files/s"),
                       ("restore_MBps", "cold restore, MB/s"),
                       ("restore_parallel_files_per_s",
                        "cold restore, %d threads, files/s" % RESTORE_THREADS)):
        row(label, s["plain_" + key], s["ckptfs_" + key],
            f=s.get("floor_" + key) if key in FLOOR_LAYOUT_KEYS else "")
    row("files in backing directory", s["plain_backing_files"], s["ckptfs_backing_files"],
        ratios=False)
    row("disk allocated, MiB", s["plain_allocated_MiB"], s["ckptfs_allocated_MiB"], "%.1f",
        ratios=False)
    row("FUSE requests per file, create", "", s.get("ckptfs_create_requests_per_file"),
        "%.2f")
    row("FUSE requests per file, cold restore", "",
        s.get("ckptfs_restore_requests_per_file"), "%.2f")
    warm = s.get("ckptfs_restore_warm_files_per_s")
    if warm:
        row("restore after `ckptfs warmup`, files/s (vs plain cold)",
            s["plain_restore_files_per_s"], warm)
        row("FUSE requests per file, restore after warmup", "",
            s.get("ckptfs_restore_warm_requests_per_file"), "%.2f")
        row("`ckptfs warmup` seconds (backing MB read)", "", "%s (%s)" % (
            fmt_spread(s.get("ckptfs_warmup_s"), "%.2f"),
            fmt_spread(s.get("ckptfs_warmup_backing_MB"), "%.1f")))
    row("backing_reads during restore", "", s["ckptfs_restore_backing_reads"])
    row("coalesced_reads during restore", "", s["ckptfs_restore_coalesced_reads"])
    return L


def render_sweep(results):
    """Section 4: the cold restore per coalescing setting."""
    R, S = results, results["summary"]
    if "sweep" not in S:
        return []
    s = S["sweep"]
    plain = s["plain"]["restore_s"]
    L = ["", "## 4. Coalescing sweep: cold restore of workload 2 (%d files)"
         % (R["layout"]["dirs"] * R["layout"]["files_per_dir"]), "",
         "| coalesce_gap/coalesce_max | restore s | files/s | ckptfs/plain "
         "| backing_reads | coalesced_reads | backing MB read | daemon CPU s |",
         "|---|---:|---:|---:|---:|---:|---:|---:|",
         "| plain directory | %s | %s | 1.00x | | | | |" % (
             fmt_spread(plain, "%.2f"), fmt_spread(s["plain"]["files_per_s"]))]
    for st in R["sweep"]["settings"]:
        e = s[st["label"]]
        r = ratio(plain, e["restore_s"])
        bytes_mb = None
        if e["backing_read_bytes"]:
            bytes_mb = {k: (v / MB if k != "n" and k != "values" else v)
                        for k, v in e["backing_read_bytes"].items()}
            bytes_mb["values"] = [v / MB for v in e["backing_read_bytes"]["values"]]
        label = ("off (gap=0)" if st["label"] == "off" else st["label"])
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label, fmt_spread(e["restore_s"], "%.2f"), fmt_spread(e["files_per_s"]),
            fmt_ratio(r), fmt_spread(e["backing_reads"]),
            fmt_spread(e["coalesced_reads"]), fmt_spread(bytes_mb, "%.1f"),
            fmt_spread(e["daemon_cpu_s"], "%.2f")))
    L += ["", "Plot: coalescing.png."]
    return L


def render_disk_limit(results):
    """Section 6: dd's O_DIRECT write and read, the "% of disk" reference."""
    R, S = results, results["summary"]
    if "big" not in S or not S["big"].get("dd_write_MBps"):
        return []
    s = S["big"]
    return ["", "## 6. Disk limit: dd, O_DIRECT, bs=1M, %s (MB/s)"
            % human_size(R["big"]["size_bytes"]), "",
            "| phase | MB/s |",
            "|---|---:|",
            "| write (oflag=direct conv=fsync) | %s |" % fmt_spread(s["dd_write_MBps"]),
            "| read (iflag=direct) | %s |" % fmt_spread(s["dd_read_MBps"])]


def render_daemon_resources(results):
    """Section 7: the daemon's CPU and memory and the client's CPU per phase
    of workload 1."""
    if not big_ran(results):
        return []
    s = results["summary"]["big"]
    L = ["", "## 7. Daemon resources during workload 1", "",
         "| phase | daemon CPU s/GiB | per %d MiB piece: median / highest "
         "| daemon peak RSS (VmHWM, MiB) "
         "| app CPU s/GiB, ckptfs | app CPU s/GiB, plain "
         "| MiB the guest reported free to its host |" % (PIECE // MIB),
         "|---|---:|---:|---:|---:|---:|---:|"]
    for phase, label in (("write", "write + fsync"), ("cold_read", "cold read"),
                         ("warm_read", "warm read"), ("mmap_read", "cold read through mmap")):
        if s["%s_cpu_s_per_GiB" % phase] is None:
            continue  # results from before the phase existed
        pieces = "n/a"
        if s.get("%s_cpu_piece_median" % phase):
            pieces = "%s / %s" % (fmt_spread(s["%s_cpu_piece_median" % phase], "%.2f"),
                                  fmt_spread(s["%s_cpu_piece_max" % phase], "%.2f"))
        L.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            label, fmt_spread(s["%s_cpu_s_per_GiB" % phase], "%.2f"), pieces,
            fmt_spread(s["%s_peak_rss_MiB" % phase]),
            fmt_spread(s["ckptfs_%s_app_cpu_s_per_GiB" % phase], "%.2f"),
            fmt_spread(s["plain_%s_app_cpu_s_per_GiB" % phase], "%.2f"),
            fmt_spread(s.get("%s_reported_MiB" % phase))))
    L.append("")
    L.append("Peak RSS is the daemon's VmHWM since its mount: the write daemon is "
             "mounted fresh for the write; the read daemon for the cold+warm reads; "
             "another for the read through mmap. "
             "App CPU is the benchmark process itself (user+system: the kernel's "
             "copies and FUSE round trips are charged here). "
             "The pieces split each read into %d MiB pieces: the median piece is "
             "the daemon's steady cost per byte, the highest its worst burst. "
             "The last column is the free memory the guest's kernel handed back to its "
             "host during the phase (free page reporting, where the kernel counts it): "
             "the next first touch of such a page costs a fault in the host." % (PIECE // MIB))
    return L


# (phase, label, dd phase for "% of disk")
FRAMEWORK_PHASES = ("torch-save", "torch-load", "zarr-write", "zarr-read")
FRAMEWORK_LABELS = {
    "torch-save": ("torch.save + fsync", "dd_write_MBps"),
    "torch-load": ("torch.load, cold", "dd_read_MBps"),
    "zarr-write": ("zarr write, 16 threads", "dd_write_MBps"),
    "zarr-read": ("zarr read, 16 threads, cold", "dd_read_MBps"),
}


def render_frameworks(results):
    R, S = results, results["summary"]
    if "frameworks" not in S:
        return []
    s, fw = S["frameworks"], R["frameworks"]
    dd = S.get("big", {})
    floor = "floor" in fw
    L = ["", "## 3. Real frameworks: torch.save/load of a %s state dict; zarr, %d arrays "
         "(%d files) by %d threads (MB/s)"
         % (human_size(fw["torch_mib"] * MIB), fw["zarr_arrays"], fw["zarr_arrays"] * 5 + 1,
            fw["threads"]), ""]
    L += compare_head("phase", floor, ("plain s", "ckptfs s", "ckptfs % of disk"))
    for phase in FRAMEWORK_PHASES:
        label, ddkey = FRAMEWORK_LABELS[phase]
        p, c = s["plain_%s_MBps" % phase], s["ckptfs_%s_MBps" % phase]
        f = s.get("floor_%s_MBps" % phase) or ""
        L.append(table_row(label, *compare_cells(p, c, f, floor),
                           fmt_spread(s["plain_%s_s" % phase], "%.2f"),
                           fmt_spread(s["ckptfs_%s_s" % phase], "%.2f"),
                           fmt_pct(ratio(c, dd.get(ddkey)))))
    L += ["", "Each phase runs in its own /usr/bin/python3 process (bench/frameworks.py); "
          "the time covers the framework's calls only (torch.save includes an fsync of the "
          "file). Reads are cold: caches dropped, ckptfs remounted. torch.load made the "
          "daemon read %s bytes from data files per byte loaded, %s of them from the "
          "storage (1.00: each byte once; the OS's cache answered the rest)."
          % (fmt_spread(s.get("ckptfs_torch-load_data_file_reads_per_byte"), "%.2f"),
             fmt_spread(s.get("ckptfs_torch-load_storage_reads_per_byte"), "%.2f"))]
    return L


def render_pieces_and_cloud(results):
    R, S = results, results["summary"]
    L = []
    if "pieces" in S:
        s, pc = S["pieces"], R["pieces"]
        L += ["", "## 8. Small writes: one %s file in N-byte write(2) calls + fsync (MB/s)"
              % human_size(pc["bytes"]), "",
              "| piece | plain | ckptfs | ckptfs/plain | ckptfs FUSE requests per MiB |",
              "|---:|---:|---:|---:|---:|"]
        for piece in pc["pieces"]:
            p, c = s["plain_%d_MBps" % piece], s["ckptfs_%d_MBps" % piece]
            L.append("| %s | %s | %s | %s | %s |" % (
                human_size(piece), fmt_spread(p), fmt_spread(c), fmt_ratio(ratio(c, p)),
                fmt_spread(s.get("ckptfs_%d_requests_per_MiB" % piece), "%.1f")))
    if "cloud" in S:
        s, cl = S["cloud"], R["cloud"]
        p, c = s["plain_files_per_s"], s["ckptfs_files_per_s"]
        L += ["", "## 9. Cloud-disk profile: workload 2's cold restore, 1 thread, reads "
              "throttled to %d IOPS and %d MB/s (files/s)" % (cl["read_iops"],
                                                               cl["read_bps"] // 1000000), "",
              "| plain | ckptfs | ckptfs/plain |", "|---:|---:|---:|",
              "| %s | %s | %s |" % (fmt_spread(p), fmt_spread(c), fmt_ratio(ratio(c, p))), "",
              "The reader and the daemon run in one cgroup (v1 blkio.throttle.*, or v2 "
              "io.max) that limits reads from the work dir's disk; caches are dropped "
              "first."]
    return L


def render_steps(results):
    R, S = results, results["summary"]
    if "steps" not in S:
        return []
    s, st = S["steps"], R["steps"]
    p, c, n = (s["%s_MBps" % v] for v in STEPS_VARIANTS)
    f = s.get("floor_MBps")
    head = ["plain"] + (["FUSE floor"] if f else []) + [
        "ckptfs, compaction off", "ckptfs (defaults)", "defaults/off", "defaults/plain"] + (
        ["defaults/floor"] if f else []) + [
        "segment bytes / live after the last step: off, defaults"]
    cells = [fmt_spread(p)] + ([fmt_spread(f)] if f else []) + [
        fmt_spread(n), fmt_spread(c), fmt_ratio(ratio(c, n)), fmt_ratio(ratio(c, p))] + (
        [fmt_ratio(ratio(c, f))] if f else []) + [
        "%s, %s" % (fmt_spread(s["ckptfs-nocompact_space_ratio"], "%.2f"),
                    fmt_spread(s["ckptfs_space_ratio"], "%.2f"))]
    return ["", "## 10. Keep the last step: saves of %d x %s while the step before is "
            "deleted (MB/s)" % (st["shards"], human_size(st["bytes"] // st["shards"])), "",
            table_row(*head), "|" + "|".join(["---:"] * (len(head) - 1) + ["---"]) + "|",
            table_row(*cells), "",
            "%d steps, each written (1 MiB writes, fsync per shard) before the one before it "
            "is deleted; the saves of steps 3 to %d are timed, while background "
            "compaction (on by default, `compact_rate` 64M) rewrites what the deletes "
            "left. The space is measured once the store is idle." % (st["steps"], st["steps"])]


def render_scaling(results):
    R, S = results, results["summary"]
    if "scaling" not in S:
        return []
    s, sc = S["scaling"], R["scaling"]
    dd = S.get("big", {}).get("dd_write_MBps")
    L = ["", "## 5. Scaling: N threads writing separate files, %s in all, 1 MiB writes + "
         "fsync (aggregate MB/s)" % human_size(sc["bytes"]), "",
         "| writers | plain | ckptfs | ckptfs/plain | ckptfs % of disk |",
         "|---:|---:|---:|---:|---:|"]
    for n in sc["writers"]:
        p, c = s["plain_%d_MBps" % n], s["ckptfs_%d_MBps" % n]
        L.append("| %d | %s | %s | %s | %s |" % (n, fmt_spread(p), fmt_spread(c),
                                                 fmt_ratio(ratio(c, p)), fmt_pct(ratio(c, dd))))
    L += ["", "Plot: scaling.png."]
    return L


def pyplot():
    """matplotlib.pyplot without a display (Debian's python3-matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_scaling(results, path):
    S = results["summary"].get("scaling")
    if not S:
        return False
    plt = pyplot()
    writers = results["scaling"]["writers"]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for who, color in (("plain", "#c44e52"), ("ckptfs", "#4c72b0")):
        med = [S["%s_%d_MBps" % (who, n)]["median"] for n in writers]
        lo = [m - S["%s_%d_MBps" % (who, n)]["min"] for m, n in zip(med, writers)]
        hi = [S["%s_%d_MBps" % (who, n)]["max"] - m for m, n in zip(med, writers)]
        ax.errorbar(writers, med, yerr=[lo, hi], marker="o", capsize=4, color=color,
                    label="plain directory" if who == "plain" else "ckptfs")
    dd = results["summary"].get("big", {}).get("dd_write_MBps")
    if dd:
        ax.axhline(dd["median"], color="gray", linestyle=":",
                   label="disk limit, dd O_DIRECT write (%.0f MB/s)" % dd["median"])
    ax.set_xscale("log", base=2)
    ax.set_xticks(writers)
    ax.set_xticklabels([str(n) for n in writers])
    ax.set_xlabel("concurrent writers (separate files)")
    ax.set_ylabel("aggregate write + fsync, MB/s (median, min-max)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, frameon=False)
    ax.set_title("ckptfs writer scaling: %s in all" % human_size(results["scaling"]["bytes"]),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_sweep(results, path):
    S = results["summary"].get("sweep")
    if not S:
        return False
    plt = pyplot()
    settings = [s["label"] for s in results["sweep"]["settings"]]
    med = [S[l]["restore_s"]["median"] for l in settings]
    lo = [S[l]["restore_s"]["median"] - S[l]["restore_s"]["min"] for l in settings]
    hi = [S[l]["restore_s"]["max"] - S[l]["restore_s"]["median"] for l in settings]
    reads = [S[l]["backing_reads"]["median"] if S[l]["backing_reads"] else 0 for l in settings]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    x = range(len(settings))
    ax.bar(x, med, yerr=[lo, hi], capsize=4, color="#4c72b0", label="ckptfs cold restore")
    p = S["plain"]["restore_s"]
    ax.axhline(p["median"], color="#c44e52", linestyle="--",
               label="plain directory (%.2f s)" % p["median"])
    ax.axhspan(p["min"], p["max"], color="#c44e52", alpha=0.12)
    ax.set_xticks(list(x))
    ax.set_xticklabels([("off" if l == "off" else l) for l in settings])
    ax.set_xlabel("coalesce_gap / coalesce_max")
    ax.set_ylabel("cold restore time, s (median, min-max)")
    ax2 = ax.twinx()
    ax2.plot(list(x), reads, "o-", color="#dd8452", label="backing reads")
    ax2.set_ylabel("backing reads (median)")
    ax2.set_ylim(bottom=0)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3,
              fontsize=8, frameon=False)
    lay = results["layout"]
    ax.set_title("ckptfs coalescing sweep: %d dirs, %d files"
                 % (lay["dirs"], lay["dirs"] * lay["files_per_dir"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def write_report(results, out):
    """Summarizes `results` and writes results.md, results.json and the plots to
    `out`; returns results.md's text."""
    compute_summary(results)
    md = render_markdown(results)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    if plot_sweep(results, os.path.join(out, "coalescing.png")):
        log("wrote %s" % os.path.join(out, "coalescing.png"))
    if plot_scaling(results, os.path.join(out, "scaling.png")):
        log("wrote %s" % os.path.join(out, "scaling.png"))
    return md


def report_only(out):
    """Rebuilds the report in `out` from out/results.json; prints results.md."""
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    print(write_report(results, out))
