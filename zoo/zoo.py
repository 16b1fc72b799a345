#!/usr/bin/env python3
"""osmeter's zoo: boots emulated machines unlike the host (qemu-system, TCG), runs osmeter
in each, and checks that `osmeter machine --json` describes the machine qemu was told to
build and that the smoke run fails and panics nowhere. See docs/ZOO.md.

Kernels and busybox come from Debian's package registry at run time (a private apt state
under the cache folder, so the host's apt is untouched); nothing prebuilt is committed.
Exit status: 0 when every guest matched, 1 when any differed or failed, 2 on bad usage.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MIRROR = "http://deb.debian.org/debian"
SECURITY = "http://deb.debian.org/debian-security"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

# The experiments a guest runs at smoke: the placement-sensitive ones (pairs by class,
# teams by core and node, the NUMA premises), and one or two of each other kind so the
# file (ext4 disk), network (loopback peer), fork/exec and counter paths all run.
SMOKE_ONLY = ",".join([
    "cpu.timer", "cpu.syscall", "cpu.process-create", "cpu.core-to-core",
    "mem.latency", "mem.bandwidth", "mem.loaded-latency", "mem.pagefault",
    "net.rtt", "fs.read",
])
MEM_QUICK = "mem.*"

# Each guest: what qemu is told, and so what osmeter must say. `expect` lists only what
# follows from the qemu options; the rest of the description is reported, not judged.
GUESTS = {
    "two-socket-smt": dict(
        what="2 sockets x 2 cores x 2 threads (Intel CPUID, so Linux sees the SMT "
             "siblings), 2 NUMA nodes of unequal memory (640 + 384 MiB)",
        arch="x86_64", kernel="bookworm", cpu="max,vendor=GenuineIntel",
        smp="8,sockets=2,cores=2,threads=2", numa=["0-3:640M", "4-7:384M"]),
    "split-llc": dict(
        what="1 socket, 2 dies x 2 cores: QEMU gives each die its own L3, so the "
             "socket's cores are split into two last-level-cache groups (as AMD's CCXs); "
             "plus 2 NUMA nodes inside the socket (sub-NUMA clustering)",
        arch="x86_64", kernel="bookworm", cpu="max,vendor=GenuineIntel",
        smp="4,sockets=1,dies=2,cores=2,threads=1", numa=["0-1:384M", "2-3:384M"]),
    "snc": dict(
        what="2 sockets x 4 cores, one L3 per socket, 4 NUMA nodes (2 per socket, as "
             "sub-NUMA clustering makes them): pairs in one cache on two nodes",
        arch="x86_64", kernel="bookworm", cpu="max,vendor=GenuineIntel",
        smp="8,sockets=2,cores=4,threads=1",
        numa=["0-1:256M", "2-3:256M", "4-5:256M", "6-7:256M"]),
    "one-cpu": dict(
        what="one CPU, 512 MiB", arch="x86_64", kernel="bookworm", cpu="max",
        smp="1", mem="512M"),
    "container": dict(
        what="4 CPUs and 2 GiB; osmeter confined as a container runtime does: cgroup v2 "
             "cpuset 2-3, memory.max 512 MiB, no swap; /sys read-only, then hidden; "
             "and the memory experiments at quick inside the limit",
        arch="x86_64", kernel="bookworm", cpu="max", smp="4", mem="2048M",
        mode="container"),
    "bullseye-cgv1": dict(
        what="Debian 11's kernel 5.10, cgroup v1 mounted, osmeter in a v1 cgroup of "
             "768 MiB and 1.5 CPUs", arch="x86_64", kernel="bullseye", cpu="max",
        smp="2", mem="1024M", mode="cgv1"),
    "aarch64-numa": dict(
        what="qemu-system-aarch64 -M virt, Debian's arm64 kernel, 2 sockets x 2 cores, "
             "2 NUMA nodes", arch="aarch64", kernel="bookworm", cpu="max",
        smp="4,sockets=2,cores=2,threads=1", numa=["0-1:512M", "2-3:512M"]),
}

KERNEL_META = {  # (arch, suite) -> (metapackage=version constraint source, deb arch)
    ("x86_64", "bookworm"): ("linux-image-amd64", "amd64", "bookworm"),
    ("x86_64", "bullseye"): ("linux-image-amd64", "amd64", "bullseye"),
    ("aarch64", "bookworm"): ("linux-image-arm64", "arm64", "bookworm"),
}
MODULES = ["virtio_pci", "virtio_blk", "crc32c_generic", "ext4"]


def log(msg):
    print(f"zoo: {msg}", flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


class Fail(Exception):
    pass


# ---------------------------------------------------------------- packages and kernels

class Apt:
    """apt-get with its own state under the cache: the sources the zoo needs (bookworm and
    bullseye, amd64 and arm64), from the mirror this machine's apt uses."""

    def __init__(self, cache):
        self.dir = os.path.join(cache, "apt")
        for d in ("state/lists/partial", "cache/archives/partial", "etc"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        open(os.path.join(self.dir, "state/status"), "a").close()
        mirror, security = host_mirrors()
        src = os.path.join(self.dir, "etc/sources.list")
        lines = []
        for suite, arch in (("bookworm", "amd64,arm64"), ("bullseye", "amd64")):
            opt = f"[arch={arch} signed-by={KEYRING}]"
            lines.append(f"deb {opt} {mirror} {suite} main")
            lines.append(f"deb {opt} {security} {suite}-security main")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        d = self.dir
        self.opts = [
            f"-oDir::State={d}/state", f"-oDir::State::status={d}/state/status",
            f"-oDir::Cache={d}/cache", f"-oDir::Etc::SourceList={src}",
            "-oDir::Etc::SourceParts=/nonexistent", "-oAPT::Architectures::=amd64",
            "-oAPT::Architectures::=arm64", "-oDebug::NoLocking=1", "-qq",
        ]
        self.updated = False

    def update(self):
        stamp = os.path.join(self.dir, "updated")
        fresh = os.path.exists(stamp) and time.time() - os.path.getmtime(stamp) < 86400
        if not self.updated and not fresh:
            log("apt-get update (private state under the cache)")
            run(["apt-get", *self.opts, "update"], stdout=subprocess.DEVNULL)
            open(stamp, "w").close()
        self.updated = True

    def show(self, spec):
        self.update()
        return subprocess.run(["apt-cache", *self.opts, "show", spec], check=True,
                              capture_output=True, text=True).stdout

    def candidates(self, pkg):
        """Versions of pkg (name[:arch]) with the suite each comes from."""
        self.update()
        out = subprocess.run(["apt-cache", *self.opts, "policy", pkg], check=True,
                             capture_output=True, text=True).stdout
        vers, cur = [], None
        for line in out.splitlines():
            m = re.match(r"^\s+(?:\*\*\* )?(\S+) \d+$", line)
            if m:
                cur = m.group(1)
                continue
            m = re.search(r"/debian(?:-security)? (\S+?)(?:-security)?/main", line)
            if m and cur:
                vers.append((cur, m.group(1)))
        return vers

    def download(self, spec, dest):
        self.update()
        os.makedirs(dest, exist_ok=True)
        # _apt cannot write into root's folders; the download is of a signed index's file.
        subprocess.run(["apt-get", *self.opts, "download", spec], check=True, cwd=dest,
                       stderr=subprocess.DEVNULL)


def host_mirrors():
    """The Debian mirror this machine's apt uses (so the zoo uses no other source)."""
    mirror, security = MIRROR, SECURITY
    texts = []
    d = "/etc/apt/sources.list.d"
    names = ["/etc/apt/sources.list"] + (
        sorted(os.path.join(d, f) for f in os.listdir(d)) if os.path.isdir(d) else [])
    for name in names:
        if name.endswith((".list", ".sources")):
            try:  # commented lines (often a snapshot.debian.org alternative) are not used
                texts.append("\n".join(line for line in open(name).read().splitlines()
                                       if not line.lstrip().startswith("#")))
            except OSError:
                pass
    for t in texts:
        for url in re.findall(r"(https?://\S+/debian)(?=[\s/]|$)", t):
            mirror = url
            break
        for url in re.findall(r"(https?://\S+/debian-security)(?=[\s/]|$)", t):
            security = url
    return mirror, security


def kernel(apt, cache, arch, suite):
    """Downloads and unpacks Debian's current kernel of suite for arch; returns
    (vmlinuz path, modules dir, release)."""
    meta, debarch, suite = KERNEL_META[(arch, suite)]
    spec = meta if debarch == "amd64" else f"{meta}:{debarch}"
    vers = [v for v, s in apt.candidates(spec) if s == suite]
    if not vers:
        raise Fail(f"no {meta} for {suite} in the package index")
    show = apt.show(f"{spec}={vers[0]}")
    m = re.search(r"^Depends: (linux-image-\S+)", show, re.M)
    if not m:
        raise Fail(f"{meta}={vers[0]} names no kernel package")
    image = m.group(1)
    root = os.path.join(cache, "kernels", image)
    if not os.path.isdir(os.path.join(root, "boot")):
        debs = os.path.join(cache, "debs")
        apt.download(image if debarch == "amd64" else f"{image}:{debarch}", debs)
        deb = next(os.path.join(debs, f) for f in os.listdir(debs)
                   if f.startswith(image + "_"))
        tmp = root + ".part"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        run(["dpkg-deb", "-x", deb, tmp])
        os.rename(tmp, root)
    release = image[len("linux-image-"):]
    return (os.path.join(root, "boot", f"vmlinuz-{release}"),
            os.path.join(root, "lib/modules", release), release)


def busybox(apt, cache, arch):
    if arch == "x86_64":
        for p in ("/bin/busybox", "/usr/bin/busybox"):
            if os.path.exists(p) and "static" in subprocess.run(
                    ["file", "-L", p], capture_output=True, text=True).stdout:
                return p
        spec, debarch = "busybox-static", "amd64"
    else:
        spec, debarch = "busybox-static:arm64", "arm64"
    root = os.path.join(cache, "busybox", debarch)
    bb = os.path.join(root, "bin/busybox")
    if not os.path.exists(bb):
        debs = os.path.join(cache, "debs")
        apt.download(spec, debs)
        deb = max((f for f in os.listdir(debs)
                   if f.startswith("busybox-static_") and f.endswith(f"_{debarch}.deb")),
                  key=lambda f: os.path.getmtime(os.path.join(debs, f)))
        os.makedirs(root, exist_ok=True)
        run(["dpkg-deb", "-x", os.path.join(debs, deb), root])
    return bb


# ---------------------------------------------------------------- initramfs and disk

LIBDIRS = {
    "x86_64": ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64"],
    "aarch64": ["/usr/aarch64-linux-gnu/lib", "/usr/lib/aarch64-linux-gnu"],
}


def needed(path):
    out = subprocess.run(["readelf", "-dl", path], check=True, capture_output=True,
                         text=True).stdout
    libs = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    interp = re.search(r"Requesting program interpreter: ([^\]]+)\]", out)
    return libs, interp.group(1) if interp else None


def module_files(moddir):
    """Module name (underscores) -> its file, for every module of the kernel package."""
    out = {}
    for r, _, fs in os.walk(os.path.join(moddir, "kernel")):
        for f in fs:
            if ".ko" in f:
                out[f.split(".ko")[0].replace("-", "_")] = os.path.join(r, f)
    return out


def module_bytes(moddir, name):
    path = module_files(moddir)[name]
    if path.endswith(".xz"):
        return subprocess.run(["xz", "-dc", path], check=True, capture_output=True).stdout
    if path.endswith(".zst"):
        return subprocess.run(["zstd", "-dc", path], check=True, capture_output=True).stdout
    return open(path, "rb").read()


def module_order(moddir, wanted):
    files, order = module_files(moddir), []

    def add(name):
        if name in order or name not in files:  # not a file: built into the kernel
            return
        m = re.search(rb"\x00depends=([^\x00]*)\x00", b"\x00" + module_bytes(moddir, name))
        for d in filter(None, (m.group(1).decode() if m else "").split(",")):
            add(d.replace("-", "_"))
        order.append(name)

    for w in wanted:
        add(w)
    return order


def initramfs(out, arch, osmeter, bb, moddir):
    root = tempfile.mkdtemp(prefix="zoo-initramfs.")
    try:
        for d in ("bin", "sbin", "lib", "proc", "sys", "dev", "tmp", "mnt", "etc", "root"):
            os.makedirs(os.path.join(root, d))
        shutil.copy(bb, os.path.join(root, "bin/busybox"))
        shutil.copy(osmeter, os.path.join(root, "bin/osmeter"))
        for f in ("zoo-osm", "zoo-confine"):
            shutil.copy(os.path.join(HERE, f), os.path.join(root, "bin", f))
        shutil.copy(os.path.join(HERE, "init"), os.path.join(root, "init"))
        # The binary's libraries, found by name in the arch's library folders, into /lib
        # (a folder the dynamic loader always searches); the loader at its own path.
        todo, done = [osmeter], set()
        while todo:
            libs, interp = needed(todo.pop())
            if interp and interp not in done:
                done.add(interp)
                src = next((os.path.join(d, os.path.basename(interp)) for d in LIBDIRS[arch]
                            if os.path.exists(os.path.join(d, os.path.basename(interp)))),
                           interp)
                dst = root + interp
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copy(src, dst)
            for lib in libs:
                if lib in done:
                    continue
                done.add(lib)
                src = next((os.path.join(d, lib) for d in LIBDIRS[arch]
                            if os.path.exists(os.path.join(d, lib))), None)
                if src is None:
                    raise Fail(f"library {lib} of {osmeter} not found for {arch}")
                shutil.copy(src, os.path.join(root, "lib", lib))
                todo.append(src)
        # posix_spawn of /bin/true (cpu.process-create) and /bin/sh: busybox applets.
        for a in ("sh", "true"):
            os.symlink("busybox", os.path.join(root, "bin", a))
        # Modules for the disk, dependencies first (each module's .modinfo "depends=";
        # the package has no modules.dep, depmod makes it at install time).
        lines = []
        for name in module_order(moddir, MODULES):
            with open(os.path.join(root, "lib", name + ".ko"), "wb") as f:
                f.write(module_bytes(moddir, name))
            lines.append(f"/lib/{name}.ko")
        with open(os.path.join(root, "etc/zoo-modules"), "w") as f:
            f.write("\n".join(lines) + "\n")
        files = subprocess.run(["find", "."], cwd=root, check=True, capture_output=True)
        with open(out, "wb") as f:
            cpio = subprocess.Popen(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            gz = subprocess.Popen(["gzip", "-1"], stdin=cpio.stdout, stdout=f)
            cpio.stdout.close()
            cpio.communicate(files.stdout)
            gz.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- topology arithmetic

def parse_smp(smp):
    parts = smp.split(",")
    t = {"cpus": int(parts[0]) if parts[0].isdigit() else None}
    for p in parts:
        if "=" in p:
            k, v = p.split("=", 1)
            t[k] = int(v)
    t.setdefault("sockets", 1)
    t.setdefault("dies", 1)
    t.setdefault("clusters", 1)
    t.setdefault("threads", 1)
    per = t["dies"] * t["clusters"] * t["threads"]
    if t.get("cores") is None:
        t["cores"] = (t["cpus"] or 1) // (t["sockets"] * per)
    if t["cpus"] is None:
        t["cpus"] = t["sockets"] * t["cores"] * per
    return t


def cpu_list(s):
    out = []
    for part in s.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def mem_mib(s):
    m = re.fullmatch(r"(\d+)([MG]?)", s)
    if not m:
        raise Fail(f"bad memory size {s!r} (want e.g. 512M or 2G)")
    return int(m.group(1)) * (1024 if m.group(2) == "G" else 1)


def expectations(g):
    """What osmeter must say, from the qemu options alone."""
    t = parse_smp(g["smp"])
    cpus = t["cpus"]
    nodes = [(cpu_list(c), mem_mib(m)) for c, m in (n.split(":") for n in g.get("numa", []))]
    e = {
        "arch": g["arch"], "logical_cpus": cpus, "sockets": t["sockets"],
        "threads_per_core": t["threads"], "numa_nodes": max(1, len(nodes)),
        "cores": cpus // t["threads"],
    }
    # x86: QEMU's CPUID shares the L3 among a die's threads. aarch64 -M virt: the device
    # tree describes no cache, so the sharing is unknown (each level lists one CPU).
    e["llc_groups"] = t["sockets"] * t["dies"] if g["arch"] == "x86_64" else None
    classes = set()
    if t["threads"] > 1:
        classes.add("smt_sibling")
    if g["arch"] == "x86_64":
        # QEMU numbers CPUs socket, die, core, thread; a pair on two cores of one die
        # shares its L3, and is other_node when NUMA nodes split the die (SNC).
        node_of = {c: i for i, (cs, _) in enumerate(nodes) for c in cs}
        per_die = t["cores"] * t["threads"]
        for a in range(cpus):
            for b in range(a + 1, cpus):
                if a // per_die == b // per_die and a // t["threads"] != b // t["threads"]:
                    classes.add("other_node" if node_of.get(a) != node_of.get(b)
                                else "same_llc")
        if t["dies"] > 1:
            classes.add("other_llc")
    if t["sockets"] > 1:
        classes.add("other_package")
    e["classes"] = classes
    e["allowed"] = list(range(cpus))
    mode = g.get("mode")
    if mode == "container":
        e["allowed"] = [2, 3]
        e["memory_limit"] = 512 << 20
        e["cgroup_version"] = 2
    elif mode == "cgv1":
        e["memory_limit"] = 768 << 20
        e["cgroup_version"] = 1
        e["cpu_limit"] = 1.5
    else:
        e["memory_limit"] = None
    e["nodes"] = nodes
    return e


def qemu_cmd(g, kernel_path, initrd, disk, release):
    t = parse_smp(g["smp"])
    append = (f"console={'ttyAMA0' if g['arch'] == 'aarch64' else 'ttyS0'} panic=-1 "
              f"quiet loglevel=3 zoo.name={g['name']} zoo.mode={g.get('mode', 'plain')} "
              f"zoo.profile={g['profile']} zoo.only={g['only']}")
    if g.get("append"):
        append += " " + g["append"]
    if g.get("mode") == "container" and g.get("memquick"):
        append += f" zoo.memquick={g['memquick']} zoo.memprofile={g['memprofile']}"
    nodes = g.get("numa", [])
    mem = sum(mem_mib(n.split(":")[1]) for n in nodes) if nodes else mem_mib(g.get("mem", "1024M"))
    if g["arch"] == "aarch64":
        cmd = ["qemu-system-aarch64", "-M", "virt", "-cpu", g["cpu"]]
        append += " acpi=off"
    else:
        cmd = ["qemu-system-x86_64", "-M", "q35", "-cpu", g["cpu"]]
    cmd += ["-accel", "tcg,thread=multi", "-smp", g["smp"], "-m", f"{mem}M",
            "-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio",
            "-kernel", kernel_path, "-initrd", initrd, "-append", append,
            "-drive", f"file={disk},format=raw,if=none,id=d0,cache=unsafe",
            "-device", "virtio-blk-pci,drive=d0"]
    for i, n in enumerate(nodes):
        cpus, size = n.split(":")
        cmd += ["-object", f"memory-backend-ram,id=m{i},size={mem_mib(size)}M",
                "-numa", f"node,nodeid={i},cpus={cpus},memdev=m{i}"]
    return cmd


# ---------------------------------------------------------------- checking

def check_machine(m, e, label):
    """Differences between osmeter's description and what qemu was told."""
    bad = []
    cpu, topo = m.get("cpu", {}), m.get("topology", {})

    def want(name, got, exp):
        if got != exp:
            bad.append(f"{label}: {name} is {got!r}, qemu was told {exp!r}")

    want("os.arch", m.get("os", {}).get("arch"), e["arch"])
    kernel = m.get("os", {}).get("kernel", "")
    if e.get("release") and e["release"] not in kernel:
        bad.append(f"{label}: os.kernel is {kernel!r}, the guest booted {e['release']}")
    want("cpu.allowed_cpus", cpu.get("allowed_cpus"), e["allowed"])
    want("cpu.logical_cpus", cpu.get("logical_cpus"), e["logical_cpus"])
    if not e.get("no_sysfs"):
        want("cpu.sockets", cpu.get("sockets"), e["sockets"])
        want("topology.packages", topo.get("packages"), e["sockets"])
        want("cpu.threads_per_core", cpu.get("threads_per_core"), e["threads_per_core"])
        want("cpu.physical_cores", cpu.get("physical_cores"), e["cores"])
        want("topology.numa_nodes", topo.get("numa_nodes"), e["numa_nodes"])
        want("memory.numa_nodes", m.get("memory", {}).get("numa_nodes"), e["numa_nodes"])
        if "llc_groups" in e:
            want("topology.llc_groups", topo.get("llc_groups"), e["llc_groups"])
        # Partner classes from the chosen CPU, within the allowed CPUs.
        got = {k for k, v in (topo.get("partners") or {}).items() if v is not None}
        exp = set(e["classes"]) if len(e["allowed"]) == e["logical_cpus"] else None
        if exp is not None and not got <= exp:
            bad.append(f"{label}: partner classes {sorted(got)}, the topology has "
                       f"{sorted(exp)}")
        # Nodes: each CPU's node as qemu placed it.
        for i, (cpus, _) in enumerate(e["nodes"]):
            for c in cpus:
                p = next((x for x in topo.get("cpus", []) if x.get("cpu") == c), None)
                if p is None or p.get("node") != i:
                    bad.append(f"{label}: CPU {c} on node "
                               f"{None if p is None else p.get('node')}, qemu put it on {i}")
    cg = m.get("cgroup", {})
    if "memory_limit" in e:
        want("cgroup.memory_limit_bytes", cg.get("memory_limit_bytes"), e["memory_limit"])
    if "cgroup_version" in e:
        want("cgroup.version", cg.get("version"), e["cgroup_version"])
    if "cpu_limit" in e:
        want("cgroup.cpu_limit", cg.get("cpu_limit"), e["cpu_limit"])
    return bad


def check_results(path, m, e, label):
    """Statuses (no failed, no panic; invalid and skipped with a reason) and the placement
    the results carry: bandwidth teams one per physical core first, core-to-core classes,
    NUMA premises."""
    bad, lines = [], []
    doc = json.load(open(path))
    topo = m.get("topology", {})
    core_of = {c["cpu"]: (c.get("package"), c.get("core")) for c in topo.get("cpus", [])}
    for x in doc.get("experiments", []):
        st, reason = x.get("status"), (x.get("reason") or "").strip()
        lines.append(f"{x['id']}: {st}" + (f" ({reason})" if reason else ""))
        if st in ("failed", "panic", "panicked") or (st != "ok" and not reason):
            bad.append(f"{label}: {x['id']} {st}" + (f": {reason}" if reason else
                                                      " without a reason"))
        # The teams' CPUs are in the metrics' descriptions whatever the status (a failed
        # NUMA premise under automatic NUMA balancing leaves them there).
        if x["id"] == "mem.bandwidth":
            cores = len({core_of.get(c) for c in e["allowed"]})
            for met in x.get("metrics", []):
                mm = re.search(r"(\d+) thread\(s\) on CPUs? (\d+(?:,\d+)*)", met.get("description", ""))
                if not mm:
                    continue
                cpus = [int(c) for c in mm.group(2).split(",")]
                k = min(len(cpus), cores)
                if len({core_of.get(c) for c in cpus[:k]}) != k:
                    bad.append(f"{label}: mem.bandwidth {met['name']} on CPUs {cpus}: two "
                               f"threads share a core while a core was free")
            lines.append("  mem.bandwidth teams: " + "; ".join(sorted({
                re.search(r"\d+ thread\(s\) on CPUs? \d+(?:,\d+)*(, one per physical core)?",
                          met["description"]).group(0)
                for met in x.get("metrics", [])
                if re.search(r"thread\(s\) on CPUs?", met.get("description", ""))})))
        if x["id"] == "cpu.core-to-core" and st == "ok":
            names = {met["name"] for met in x.get("metrics", [])}
            got = set()
            for met in x.get("metrics", []):
                mm = re.match(r"one_way(?:_(smt_sibling|other_llc|other_package|"
                              r"other_node))?$", met["name"])
                if mm:
                    cls = mm.group(1) or re.search(r"one-way cache-line latency, (\w+)",
                                                   met.get("description", "")).group(1)
                    got.add(cls)
            exp = e["classes"] | e.get("extra_classes", set())
            lines.append(f"  cpu.core-to-core classes: {sorted(got)}")
            if len(e["allowed"]) == e["logical_cpus"] and not got >= exp:
                bad.append(f"{label}: cpu.core-to-core measured classes {sorted(got)} "
                           f"(metrics {sorted(names)}), the topology has {sorted(exp)}")
        for c in x.get("checks", []) or []:
            text = json.dumps(c)
            if re.search(r"node|mempolicy|NUMA", text, re.I):
                lines.append(f"  {x['id']} premise: {c.get('name', '')} "
                             f"{'passed' if c.get('passed', c.get('ok')) else c.get('status', c)}")
    return bad, lines


def read_out(disk, dest):
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    subprocess.run(["debugfs", "-R", f"rdump /out {dest}", disk], check=True,
                   capture_output=True)
    return os.path.join(dest, "out")


def boot(g, cache, work, osmeters, apt, timeout):
    vmlinuz, moddir, release = kernel(apt, cache, g["arch"], g["kernel"])
    bb = busybox(apt, cache, g["arch"])
    initrd = os.path.join(work, f"{g['name']}.cpio.gz")
    initramfs(initrd, g["arch"], osmeters[g["arch"]], bb, moddir)
    disk = os.path.join(work, f"{g['name']}.ext4")
    with open(disk, "wb") as f:
        f.truncate(1 << 30)
    run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1", disk])
    cmd = qemu_cmd(g, vmlinuz, initrd, disk, release)
    console = os.path.join(work, f"{g['name']}.console")
    log(f"{g['name']}: {' '.join(c for c in cmd if not c.startswith(('/', 'file=')))}")
    t0 = time.time()
    with open(console, "wb") as con:
        try:
            p = subprocess.run(["nice", "-n", "10", *cmd], stdout=con, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    secs = time.time() - t0
    text = open(console, errors="replace").read()
    if "ZOO-DONE" not in text:
        tail = "\n".join(text.splitlines()[-25:])
        raise Fail(f"{g['name']}: guest did not finish (qemu {rc}, {secs:.0f} s); console "
                   f"tail:\n{tail}")
    out = read_out(disk, os.path.join(work, g["name"]))
    os.remove(disk)
    return out, release, secs


def judge(g, out, release):
    e = expectations(g)
    e["release"] = release
    bad, report = [], []
    variants = sorted(d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d)))
    for v in variants:
        d = os.path.join(out, v)
        label = f"{g['name']}/{v}"
        ev = dict(e)
        if v in ("sys-hidden", "mem-quick"):
            # No /sys: the CPU list comes from /proc; sockets, nodes and the cgroup limit
            # are unknown, and osmeter must say so rather than guess.
            ev["no_sysfs"] = True
            ev["memory_limit"] = None
            ev.pop("cgroup_version", None)
        try:
            m = json.load(open(os.path.join(d, "machine.json")))
        except (OSError, ValueError) as err:
            bad.append(f"{label}: no machine description ({err}); stderr: "
                       f"{open(os.path.join(d, 'machine.err')).read()[-500:]}")
            continue
        bad += check_machine(m, ev, label)
        warned_busy = [w for w in m.get("warnings", []) if "busy" in w]
        if g.get("mode") == "container":
            # N10: ro ran with both cpuset CPUs spinning, hidden with the two outside it.
            if v == "sys-ro" and not warned_busy:
                bad.append(f"{label}: both allowed CPUs spun, yet no busy warning")
            if v == "sys-hidden" and warned_busy:
                bad.append(f"{label}: only CPUs outside the cpuset spun, yet {warned_busy}")
            # N4: without /sys the cgroup's limit is unknown and said to be.
            unseen = m.get("cgroup", {}).get("unseen")
            if ev.get("no_sysfs") and not (unseen or "").startswith("/zoo/"):
                bad.append(f"{label}: cgroup.unseen is {unseen!r}: the hidden cgroup's "
                           "limit is not reported unknown")
        topo, cpu, cg = m.get("topology", {}), m.get("cpu", {}), m.get("cgroup", {})
        report.append(
            f"{label}: osmeter says {m['os']['arch']} {m['os']['kernel']}; "
            f"{cpu.get('logical_cpus')} CPUs, allowed {cpu.get('allowed_cpus')}, "
            f"{cpu.get('sockets')} socket(s), {cpu.get('physical_cores')} cores, "
            f"{cpu.get('threads_per_core')} thread(s)/core, {topo.get('llc_groups')} LLC "
            f"group(s), {topo.get('numa_nodes')} node(s), partners "
            f"{ {k: v for k, v in (topo.get('partners') or {}).items() if v is not None} }, "
            f"cgroup v{cg.get('version')} limit {cg.get('memory_limit_bytes')} "
            f"cpu {cg.get('cpu_limit')}; source {topo.get('source')}")
        for w in m.get("warnings", []):
            if re.search(r"cgroup|busy|/sys|last-level", w):
                report.append(f"  warning: {w}")
        res = None
        if os.path.isdir(os.path.join(d, "results")):
            res = next((os.path.join(r, "results.json") for r, _, fs in
                        os.walk(os.path.join(d, "results")) if "results.json" in fs), None)
        if os.path.exists(os.path.join(d, "run.rc")):
            rc = open(os.path.join(d, "run.rc")).read().strip()
            secs = open(os.path.join(d, "run.seconds")).read().strip()
            report.append(f"  run: exit {rc} in {secs} s")
            if res is None:
                bad.append(f"{label}: the run left no results.json (exit {rc}); stderr: "
                           f"{open(os.path.join(d, 'run.err')).read()[-800:]}")
            else:
                b, lines = check_results(res, m, ev, label)
                bad += b
                report += ["  " + x for x in lines]
                if ev.get("no_sysfs") and g.get("mode") == "container":
                    # N4: the notes say the budget is unknown, not the guest's MemAvailable.
                    for x in json.load(open(res)).get("experiments", []):
                        if x["id"] in ("mem.latency", "mem.bandwidth", "mem.pagefault") \
                                and x["status"] == "ok" and not any(
                                    "memory available unknown" in n for n in x.get("notes", [])):
                            bad.append(f"{label}: {x['id']} sized from MemAvailable with the "
                                       "cgroup's limit unknown")
        for f in sorted(os.listdir(d)):
            if f.startswith("cgroup."):
                val = open(os.path.join(d, f)).read().strip().replace("\n", ", ")
                report.append(f"  {f[7:]}: {val}")
                if f == "cgroup.memory.events":
                    kills = re.search(r"oom_kill (\d+)", val)
                    if kills and int(kills.group(1)):
                        bad.append(f"{label}: {kills.group(1)} OOM kill(s) in the container")
    return bad, report


def main():
    ap = argparse.ArgumentParser(
        prog="zoo/run", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="guests: " + "; ".join(f"{k}: {v['what']}" for k, v in GUESTS.items()))
    ap.add_argument("guests", nargs="*", help="guests to boot (default: all)")
    ap.add_argument("--smp", help="a guest of your own: qemu's -smp, e.g. "
                    "4,sockets=1,cores=2,threads=2 (replaces the list)")
    ap.add_argument("--numa", action="append", default=[], metavar="CPUS:MEM",
                    help="with --smp: a NUMA node, e.g. 0-1:512M (repeat)")
    ap.add_argument("--mem", help="guest memory where no --numa gives it (default 1024M "
                    "with --smp; each named guest's own otherwise)")
    ap.add_argument("--arch", default="x86_64", choices=["x86_64", "aarch64"])
    ap.add_argument("--cpu", help="with --smp: qemu's -cpu (default max, Intel vendor on x86)")
    ap.add_argument("--profile", default="smoke")
    ap.add_argument("--only", default=SMOKE_ONLY, help="experiments of the run (osmeter's "
                    "--only); default: the placement-sensitive ones and one of each kind")
    ap.add_argument("--mem-quick", default=MEM_QUICK,
                    help="the container guest's run of the memory experiments inside the "
                    "limit ('' = none)")
    ap.add_argument("--mem-profile", default="quick", help="its profile")
    ap.add_argument("--cache", default=os.environ.get("ZOO_CACHE", "/var/tmp/osm-zoo-cache"))
    ap.add_argument("--timeout", type=int, default=600, help="seconds per guest")
    ap.add_argument("--osmeter", help="the x86_64 binary (default target/release/osmeter)")
    ap.add_argument("--osmeter-aarch64", help="default "
                    "target/aarch64-unknown-linux-gnu/release/osmeter")
    ap.add_argument("--append", default="", help="more kernel parameters for every guest "
                    "(e.g. numa_balancing=disable)")
    ap.add_argument("--keep", metavar="DIR", help="keep consoles and outputs in DIR")
    a = ap.parse_args()

    if a.smp:
        try:
            parse_smp(a.smp)
            for n in a.numa:
                cpu_list(n.split(":")[0]), mem_mib(n.split(":")[1])
        except (ValueError, IndexError, Fail) as err:
            ap.error(f"bad --smp/--numa: {err}")
        guests = [dict(name="custom", what="given on the command line", arch=a.arch,
                       kernel="bookworm", smp=a.smp, numa=a.numa, mem=a.mem or "1024M",
                       cpu=a.cpu or ("max,vendor=GenuineIntel" if a.arch == "x86_64"
                                     else "max"))]
    else:
        unknown = [g for g in a.guests if g not in GUESTS]
        if unknown:
            ap.error(f"unknown guest(s) {unknown}; known: {list(GUESTS)}")
        guests = [dict(GUESTS[n], name=n) for n in (a.guests or GUESTS)]
        if a.mem:
            for g in guests:
                g["mem"] = a.mem
    for g in guests:
        g.update(profile=a.profile, only=a.only, memquick=a.mem_quick, append=a.append,
                 memprofile=a.mem_profile)
    tools = {"x86_64": "qemu-system-x86_64", "aarch64": "qemu-system-aarch64"}
    missing = [t for t in {tools[g["arch"]] for g in guests} |
               {"cpio", "mkfs.ext4", "debugfs", "apt-get", "dpkg-deb", "readelf"}
               if shutil.which(t) is None]
    if missing:
        sys.exit(f"zoo: missing {', '.join(sorted(missing))} (apt: qemu-system-x86 "
                 "qemu-system-arm busybox-static e2fsprogs cpio binutils)")
    osmeters = {
        "x86_64": a.osmeter or os.path.join(REPO, "target/release/osmeter"),
        "aarch64": a.osmeter_aarch64 or os.path.join(
            REPO, "target/aarch64-unknown-linux-gnu/release/osmeter"),
    }
    for arch in {g["arch"] for g in guests}:
        if not os.path.exists(osmeters[arch]):
            sys.exit(f"zoo: no {arch} osmeter at {osmeters[arch]} (zoo/run builds it)")

    os.makedirs(a.cache, exist_ok=True)
    apt = Apt(a.cache)
    work = a.keep or tempfile.mkdtemp(prefix="osm-zoo.")
    os.makedirs(work, exist_ok=True)
    failures, t_all = [], time.time()
    try:
        for g in guests:
            e = expectations(g)
            log(f"{g['name']}: {g['what']}")
            try:
                out, release, secs = boot(g, a.cache, work, osmeters, apt, a.timeout)
            except (Fail, subprocess.CalledProcessError) as err:
                failures.append(str(err))
                print(f"FAIL {err}", flush=True)
                continue
            bad, report = judge(g, out, release)
            print(f"== {g['name']} ({secs:.0f} s in the guest; {release}; qemu told: "
                  f"{e['logical_cpus']} CPUs, {e['sockets']} socket(s), "
                  f"{e['threads_per_core']} thread(s)/core, {e['numa_nodes']} node(s), "
                  f"allowed {e['allowed']}, memory limit {e.get('memory_limit')})")
            for line in report:
                print("  " + line)
            for b in bad:
                print(f"  MISMATCH {b}")
            failures += bad
            print(f"  {'FAIL' if bad else 'ok'}", flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    log(f"{len(guests)} guest(s) in {time.time() - t_all:.0f} s; "
        f"{'all matched' if not failures else f'{len(failures)} problem(s)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Fail as err:
        sys.exit(f"zoo: {err}")
    except KeyboardInterrupt:
        sys.exit(130)
