//! `osmeter machine --from DIR` on recorded trees of machines this one is not, and
//! `--snapshot DIR` of this machine read back with `--from`.

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/machines")
        .join(name)
}

fn osmeter() -> Command {
    Command::cargo_bin("osmeter").unwrap()
}

fn describe_json(dir: &Path) -> Value {
    let out = osmeter()
        .args(["machine", "--json", "--from"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn live_json() -> Value {
    let out = osmeter().args(["machine", "--json"]).output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

fn opt(v: &Value) -> Option<u64> {
    v.as_u64()
}

/// What a fixture must be described as.
struct Expect {
    name: &'static str,
    model: &'static str,
    arch: &'static str,
    cpus: usize,
    packages: u64,
    cores: u64,
    llc_groups: u64,
    nodes: u64,
    chosen: u64,
    smt_sibling: Option<u64>,
    same_llc: Option<u64>,
    other_llc: Option<u64>,
    other_package: Option<u64>,
    /// (level, kind, bytes) of every cache.
    caches: &'static [(u64, &'static str, u64)],
}

const K: u64 = 1024;

const FIXTURES: &[Expect] = &[
    Expect {
        name: "intel-hybrid-laptop",
        model: "12th Gen Intel(R) Core(TM) i7-12700H",
        arch: "x86_64",
        cpus: 20,
        packages: 1,
        cores: 14,
        llc_groups: 1,
        nodes: 1,
        chosen: 2,
        smt_sibling: Some(3),
        same_llc: Some(4),
        other_llc: None,
        other_package: None,
        caches: &[
            (1, "Data", 32 * K),
            (1, "Data", 48 * K),
            (1, "Instruction", 32 * K),
            (1, "Instruction", 64 * K),
            (2, "Unified", 1280 * K),
            (2, "Unified", 2048 * K),
            (3, "Unified", 24576 * K),
        ],
    },
    Expect {
        name: "xeon-two-socket",
        model: "Intel(R) Xeon(R) Silver 4208 CPU @ 2.10GHz",
        arch: "x86_64",
        cpus: 32,
        packages: 2,
        cores: 16,
        llc_groups: 2,
        nodes: 2,
        chosen: 1,
        smt_sibling: Some(17),
        same_llc: Some(2),
        other_llc: None,
        other_package: Some(8),
        caches: &[
            (1, "Data", 32 * K),
            (1, "Instruction", 32 * K),
            (2, "Unified", 1024 * K),
            (3, "Unified", 11264 * K),
        ],
    },
    Expect {
        name: "amd-two-ccx",
        model: "AMD Ryzen 9 5950X 16-Core Processor",
        arch: "x86_64",
        cpus: 32,
        packages: 1,
        cores: 16,
        llc_groups: 2,
        nodes: 1,
        chosen: 1,
        smt_sibling: Some(17),
        same_llc: Some(2),
        other_llc: Some(8),
        other_package: None,
        caches: &[
            (1, "Data", 32 * K),
            (1, "Instruction", 32 * K),
            (2, "Unified", 512 * K),
            (3, "Unified", 32768 * K),
        ],
    },
    Expect {
        name: "arm-graviton",
        model: "ARM Neoverse-V1",
        arch: "aarch64",
        cpus: 16,
        packages: 1,
        cores: 16,
        llc_groups: 1,
        nodes: 1,
        chosen: 1,
        smt_sibling: None,
        same_llc: Some(2),
        other_llc: None,
        other_package: None,
        caches: &[
            (1, "Data", 64 * K),
            (1, "Instruction", 64 * K),
            (2, "Unified", 1024 * K),
            (3, "Unified", 32768 * K),
        ],
    },
];

fn check(e: &Expect, m: &Value) {
    let n = e.name;
    assert_eq!(m["cpu"]["model"], e.model, "{n}");
    assert_eq!(m["os"]["arch"], e.arch, "{n}");
    let t = &m["topology"];
    let cpus = t["cpus"].as_array().unwrap();
    assert_eq!(cpus.len(), e.cpus, "{n}");
    assert_eq!(m["cpu"]["logical_cpus"], e.cpus as u64, "{n}");
    assert_eq!(opt(&t["packages"]), Some(e.packages), "{n}");
    assert_eq!(opt(&t["cores"]), Some(e.cores), "{n}");
    assert_eq!(opt(&t["llc_groups"]), Some(e.llc_groups), "{n}");
    assert_eq!(opt(&t["numa_nodes"]), Some(e.nodes), "{n}");
    assert_eq!(m["cpu"]["physical_cores"], e.cores, "{n}");
    assert_eq!(m["cpu"]["sockets"], e.packages, "{n}");
    assert_eq!(opt(&m["memory"]["numa_nodes"]), Some(e.nodes), "{n}");
    assert_eq!(opt(&t["chosen_cpu"]), Some(e.chosen), "{n}");
    assert_ne!(e.chosen, 0);
    let p = &t["partners"];
    assert_eq!(opt(&p["smt_sibling"]), e.smt_sibling, "{n}");
    assert_eq!(opt(&p["same_llc"]), e.same_llc, "{n}");
    assert_eq!(opt(&p["other_llc"]), e.other_llc, "{n}");
    assert_eq!(opt(&p["other_package"]), e.other_package, "{n}");
    // Every CPU entry has the documented fields; siblings are symmetric and exclude self.
    for c in cpus {
        for k in ["cpu", "package", "core", "node", "llc", "kind", "siblings"] {
            assert!(c.get(k).is_some(), "{n}: {k} missing in {c}");
        }
        let me = c["cpu"].as_u64().unwrap();
        for s in c["siblings"].as_array().unwrap() {
            let s = s.as_u64().unwrap();
            assert_ne!(s, me);
            let other = &cpus[s as usize];
            assert!(other["siblings"].as_array().unwrap().contains(&me.into()));
            assert_eq!(other["core"], c["core"], "{n}: siblings share a core");
        }
    }
    let place = |c: u64| &cpus[c as usize];
    let chosen = place(e.chosen);
    if let Some(s) = e.smt_sibling {
        assert_eq!(place(s)["core"], chosen["core"], "{n}");
    }
    if let Some(s) = e.same_llc {
        assert_eq!(place(s)["llc"], chosen["llc"], "{n}");
        assert_ne!(place(s)["core"], chosen["core"], "{n}");
    }
    if let Some(s) = e.other_llc {
        assert_ne!(place(s)["llc"], chosen["llc"], "{n}");
        assert_eq!(place(s)["package"], chosen["package"], "{n}");
    }
    if let Some(s) = e.other_package {
        assert_ne!(place(s)["package"], chosen["package"], "{n}");
        assert_ne!(
            place(s)["node"],
            chosen["node"],
            "{n}: two nodes, one per package"
        );
    }
    // The caches are the recorded machine's, never this one's.
    let mut caches: Vec<(u64, String, u64)> = m["cpu"]["caches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["level"].as_u64().unwrap(),
                c["kind"].as_str().unwrap().to_string(),
                c["size_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    caches.sort();
    let mut want: Vec<(u64, String, u64)> = e
        .caches
        .iter()
        .map(|(l, k, s)| (*l, k.to_string(), *s))
        .collect();
    want.sort();
    assert_eq!(caches, want, "{n}");
    // Live-only facts stay unknown instead of leaking from this machine.
    assert!(m["clock"].is_null(), "{n}");
    assert!(m["cpu"]["core_clock_hz"].is_null(), "{n}");
    assert!(m["memory"]["page_bytes"].is_null(), "{n}");
    assert!(m["virtualization"]["cpuid_signature"].is_null(), "{n}");
    assert!(m["virtualization"]["detect_virt"].is_null(), "{n}");
    assert!(m["storage"]["cwd_filesystem"].is_null(), "{n}");
    assert!(!m["recorded"]["unknown"].as_array().unwrap().is_empty());
    assert_eq!(
        m["topology"]["allowed"].as_array().unwrap().len(),
        e.cpus,
        "{n}: from Cpus_allowed_list"
    );
}

#[test]
fn fixtures_describe_their_machines() {
    for e in FIXTURES {
        check(e, &describe_json(&fixture(e.name)));
    }
}

#[test]
fn hybrid_kinds_and_a_performance_core_chosen() {
    let m = describe_json(&fixture("intel-hybrid-laptop"));
    let cpus = m["topology"]["cpus"].as_array().unwrap();
    for c in cpus {
        let n = c["cpu"].as_u64().unwrap();
        let want = if n < 12 { "performance" } else { "efficiency" };
        assert_eq!(c["kind"], want, "cpu {n}");
        // P-cores pair their threads; E-cores have none.
        assert_eq!(c["siblings"].as_array().unwrap().len(), usize::from(n < 12));
    }
    let chosen = m["topology"]["chosen_cpu"].as_u64().unwrap();
    assert_eq!(cpus[chosen as usize]["kind"], "performance");
    let why = m["topology"]["chosen_reason"].as_str().unwrap();
    assert!(
        why.contains("performance") && why.contains("CPU 0"),
        "{why}"
    );
    // Other machines have one kind of core: kind is null everywhere.
    for name in ["xeon-two-socket", "amd-two-ccx", "arm-graviton"] {
        let m = describe_json(&fixture(name));
        let cpus = m["topology"]["cpus"].as_array().unwrap();
        assert!(cpus.iter().all(|c| c["kind"].is_null()), "{name}");
    }
}

#[test]
fn arm_fixture_shows_none_of_this_machines_facts() {
    let live = live_json();
    let m = describe_json(&fixture("arm-graviton"));
    assert_eq!(m["cpu"]["vendor"], "ARM");
    assert_ne!(m["cpu"]["model"], live["cpu"]["model"]);
    assert_ne!(m["hostname"], live["hostname"]);
    assert_ne!(m["memory"]["total_bytes"], live["memory"]["total_bytes"]);
    assert_ne!(m["os"]["kernel"], live["os"]["kernel"]);
    // ARM feature flags, not x86 ones (whatever this machine is).
    let flags = m["cpu"]["flags"].as_object().unwrap();
    assert_eq!(flags.get("sve"), Some(&Value::Bool(true)));
    assert!(flags.get("avx2").is_none() && flags.get("hypervisor").is_none());
    assert_eq!(m["virtualization"]["hypervisor_flag"], false);
    assert_eq!(m["virtualization"]["is_vm"], true);
    assert_eq!(m["virtualization"]["dmi_product_name"], "c7g.4xlarge");
    assert!(m["cpu"]["governors"].as_object().unwrap().is_empty());
}

/// The disk `name` of a description.
fn disk<'a>(m: &'a Value, name: &str) -> &'a Value {
    m["storage"]["disks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no disk {name} in {}", m["storage"]))
}

fn members(d: &Value) -> Vec<&str> {
    d["members"]
        .as_array()
        .map(|a| a.iter().map(|m| m["name"].as_str().unwrap()).collect())
        .unwrap_or_default()
}

/// Asserts a disk's class kind and that its reason says `why`.
fn class_is(m: &Value, name: &str, kind: &str, why: &str) {
    let d = disk(m, name);
    assert_eq!(d["class"]["kind"], kind, "{name}: {}", d["class"]);
    let w = d["class"]["why"].as_str().unwrap();
    assert!(w.contains(why), "{name}: {w}");
}

#[test]
fn virtio_scsi_disks_are_virtual_not_rotating() {
    let m = describe_json(&fixture("qemu-virtio-scsi"));
    let sda = disk(&m, "sda");
    // QEMU sets the rotational flag and the driver is the SCSI disk driver `sd`; the
    // virtio device above the SCSI host says what it is.
    assert_eq!(sda["rotational"], true);
    assert_eq!(sda["driver"], "sd");
    assert_eq!(sda["bus"], "virtio");
    class_is(&m, "sda", "virtual", "virtio-scsi");
    class_is(&m, "vda", "virtual", "virtio-blk");
    assert_eq!(m["virtualization"]["is_vm"], true);
    let text = String::from_utf8(
        osmeter()
            .args(["machine", "--from"])
            .arg(fixture("qemu-virtio-scsi"))
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        text.contains("modelled as virtual disk: virtio-scsi bus"),
        "{text}"
    );
    assert!(!text.contains("modelled as rotating disk"), "{text}");
}

#[test]
fn stacked_devices_resolve_to_their_physical_disks() {
    let m = describe_json(&fixture("laptop-luks-nvme"));
    for (dm, layer) in [
        ("dm-0", "dm-crypt (nvme0n1p3_crypt)"),
        ("dm-1", "LVM (vgubuntu-root)"),
    ] {
        let d = disk(&m, dm);
        assert_eq!(d["layer"], layer);
        // LVM on LUKS: through both layers and the partition to the NVMe disk.
        assert_eq!(members(d), ["nvme0n1"], "{dm}");
        class_is(
            &m,
            dm,
            "nvme",
            "over nvme0n1: NVMe \"SAMSUNG MZVL21T0HCLR-00BL2\"",
        );
    }
    assert_eq!(m["virtualization"]["is_vm"], false);
    let m = describe_json(&fixture("server-md-raid"));
    assert_eq!(disk(&m, "md0")["layer"], "md raid1");
    assert_eq!(members(disk(&m, "md0")), ["sda", "sdb"]);
    class_is(&m, "md0", "flash", "md raid1 over sda, sdb");
    class_is(&m, "sdc", "rotational", "on the ata bus");
}

#[test]
fn cloud_volumes_are_network_block_storage() {
    let m = describe_json(&fixture("aws-ebs-nitro"));
    class_is(&m, "nvme0n1", "network_block", "Amazon Elastic Block Store");
    class_is(&m, "nvme1n1", "nvme", "Amazon EC2 NVMe Instance Storage");
    let m = describe_json(&fixture("gcp-persistent-disk"));
    class_is(&m, "sda", "network_block", "Google Persistent Disk");
    let m = describe_json(&fixture("azure-disk"));
    class_is(&m, "sda", "network_block", "Azure disk");
    assert_eq!(disk(&m, "sda")["bus"], "hyperv");
    // An older tree with plain folders (no links): the model string still decides.
    let m = describe_json(&fixture("arm-graviton"));
    class_is(&m, "nvme0n1", "network_block", "Amazon Elastic Block Store");
    assert!(disk(&m, "nvme0n1")["bus"].is_null());
}

#[test]
fn virtual_machines_are_found_on_every_architecture() {
    // Graviton: no x86 `hypervisor` flag; DMI says it is an EC2 instance.
    let m = describe_json(&fixture("arm-graviton"));
    let v = &m["virtualization"];
    assert_eq!(v["hypervisor_flag"], false);
    assert_eq!(v["is_vm"], true, "{v}");
    assert_eq!(v["vm_evidence"][0], "DMI: Amazon EC2 c7g.4xlarge");
    for (name, vm) in [
        ("gcp-persistent-disk", true),
        ("azure-disk", true),
        ("intel-hybrid-laptop", false),
        ("xeon-two-socket", false),
        ("amd-two-ccx", false),
    ] {
        let m = describe_json(&fixture(name));
        assert_eq!(m["virtualization"]["is_vm"], vm, "{name}");
    }
}

#[test]
fn huge_page_size_is_read_from_the_kernel() {
    let m = describe_json(&fixture("aws-ebs-nitro"));
    assert_eq!(m["memory"]["huge_page_bytes"], 2 << 20);
    // A 64 KiB-page arm64 kernel: 512 MiB huge pages.
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("graviton");
    copy_tree(&fixture("arm-graviton"), &tree);
    std::fs::write(
        tree.join("sys/kernel/mm/transparent_hugepage/hpage_pmd_size"),
        "536870912\n",
    )
    .unwrap();
    let m = describe_json(&tree);
    assert_eq!(m["memory"]["huge_page_bytes"], 512u64 << 20);
}

/// Copies a tree (files, directories, symbolic links) so that a test can alter a fixture.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ft = e.file_type().unwrap();
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if ft.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

#[test]
fn recorded_allowed_cpus_bound_the_choice() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("laptop");
    copy_tree(&fixture("intel-hybrid-laptop"), &tree);
    let status = tree.join("proc/self/status");
    let s = std::fs::read_to_string(&status).unwrap();
    let s: String = s
        .lines()
        .map(|l| {
            if l.starts_with("Cpus_allowed_list:") {
                "Cpus_allowed_list:\t12-19".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&status, s).unwrap();
    let m = describe_json(&tree);
    // Only E-cores allowed: the chosen CPU and every partner are among them.
    assert_eq!(m["topology"]["chosen_cpu"], 12);
    assert_eq!(m["topology"]["partners"]["same_llc"], 13);
    assert!(m["topology"]["partners"]["smt_sibling"].is_null());
    assert_eq!(m["cpu"]["allowed_cpus"].as_array().unwrap().len(), 8);
}

#[test]
fn text_output_shows_topology_choice_and_partners() {
    let out = osmeter()
        .args(["machine", "--from"])
        .arg(fixture("xeon-two-socket"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2 packages, 16 cores, 32 CPUs"), "{text}");
    assert!(
        text.contains("chosen CPU") && text.contains("other_package 8"),
        "{text}"
    );
    assert!(text.contains("recorded in"), "{text}");
}

#[test]
fn snapshot_then_from_describes_this_machine() {
    let tmp = tempfile::tempdir().unwrap();
    let snap = tmp.path().join("snap");
    let out = osmeter()
        .args(["machine", "--json", "--snapshot"])
        .arg(&snap)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let live: Value = serde_json::from_slice(&out.stdout).unwrap();
    for f in [
        "proc/cpuinfo",
        "proc/meminfo",
        "proc/self/status",
        "sys/devices/system/cpu/online",
    ] {
        assert!(snap.join(f).is_file(), "{f} not recorded");
    }
    let back = describe_json(&snap);
    assert_eq!(back["topology"], live["topology"]);
    for k in [
        "model",
        "vendor",
        "caches",
        "flags",
        "logical_cpus",
        "physical_cores",
        "sockets",
        "smt",
        "allowed_cpus",
        "mitigations",
    ] {
        assert_eq!(back["cpu"][k], live["cpu"][k], "cpu.{k}");
    }
    for k in ["hostname", "os", "network"] {
        assert_eq!(back[k], live[k], "{k}");
    }
    // Disks as the kernel links them (/sys/block -> /sys/devices), layers and classes.
    assert_eq!(back["storage"]["disks"], live["storage"]["disks"]);
    if let Some(d) = live["storage"]["disks"].as_array().and_then(|a| a.first()) {
        let link = snap.join("sys/block").join(d["name"].as_str().unwrap());
        if link.is_symlink() {
            assert!(
                link.join("queue").is_dir(),
                "{} does not resolve",
                link.display()
            );
        }
    }
    for k in [
        "is_vm",
        "hypervisor_flag",
        "dmi_sys_vendor",
        "dmi_product_name",
    ] {
        assert_eq!(back["virtualization"][k], live["virtualization"][k], "{k}");
    }
    assert_eq!(
        back["memory"]["huge_page_bytes"],
        live["memory"]["huge_page_bytes"]
    );
    assert_eq!(back["memory"]["total_bytes"], live["memory"]["total_bytes"]);
    assert_eq!(back["memory"]["numa_nodes"], live["memory"]["numa_nodes"]);
    assert_eq!(back["recorded"]["from"], snap.display().to_string());
    assert!(live.get("recorded").is_none());

    // A second snapshot into the same folder is refused and leaves it as it was.
    let before = std::fs::read_to_string(snap.join("proc/cpuinfo")).unwrap();
    let out = osmeter()
        .args(["machine", "--snapshot"])
        .arg(&snap)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not empty") && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(snap.join("proc/cpuinfo")).unwrap(),
        before
    );
}

#[test]
fn bad_folders_are_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--from".into(),
                tmp.path().join("missing").display().to_string(),
            ],
            "not an existing directory",
        ),
        (
            vec!["--from".into(), tmp.path().display().to_string()],
            "not a machine snapshot",
        ),
        (
            vec![
                "--snapshot".into(),
                tmp.path().join("a/b/c").display().to_string(),
            ],
            "does not exist",
        ),
        (
            vec![
                "--snapshot".into(),
                "x".into(),
                "--from".into(),
                fixture("arm-graviton").display().to_string(),
            ],
            "cannot be used with",
        ),
    ];
    for (args, want) in cases {
        let out = osmeter().arg("machine").args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(want) && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
    // Nothing was created by the refused snapshot.
    assert!(!tmp.path().join("a").exists());
}

/// A results document around a machine description, with no experiments.
fn results_doc(machine: Value) -> Value {
    serde_json::json!({
        "schema_version": 1,
        "tool": {"name": "osmeter", "version": "0.1.0"},
        "started_at": "2026-11-23T10:00:00Z",
        "duration_s": 1.0,
        "config": {"profile": "smoke", "cpu": 1},
        "machine": machine,
        "experiments": []
    })
}

fn schema_errors(doc: &Value) -> Vec<String> {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/results.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let v = jsonschema::validator_for(&schema).expect("schema compiles");
    v.iter_errors(doc).map(|e| e.to_string()).collect()
}

#[test]
fn schema_describes_the_topology() {
    let m = describe_json(&fixture("intel-hybrid-laptop"));
    let errs = schema_errors(&results_doc(m.clone()));
    assert!(errs.is_empty(), "{errs:?}");
    let mut bad = m;
    bad["topology"]["cpus"][0]["kind"] = "big".into();
    bad["topology"]["partners"]["same_llc"] = "two".into();
    assert_eq!(schema_errors(&results_doc(bad)).len(), 2);
}

#[test]
fn reports_show_the_topology_and_old_results_still_render() {
    let tmp = tempfile::tempdir().unwrap();
    let m = describe_json(&fixture("xeon-two-socket"));
    let mut old = m.clone();
    old.as_object_mut().unwrap().remove("topology");
    for (name, machine, shown) in [("new", m, true), ("old", old, false)] {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("results.json");
        std::fs::write(&file, results_doc(machine).to_string()).unwrap();
        let out = osmeter()
            .args(["report", "--quiet"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        for text in [&md, &html] {
            assert_eq!(text.contains("chosen CPU"), shown, "{name}");
            assert_eq!(text.contains("other_package 8"), shown, "{name}");
            assert!(text.contains("Xeon"), "{name}");
        }
    }
}

#[test]
fn without_sysfs_topology_cpuinfo_stands_in() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("server");
    copy_tree(&fixture("xeon-two-socket"), &tree);
    let cpu_dir = tree.join("sys/devices/system/cpu");
    for c in 0..32 {
        std::fs::remove_dir_all(cpu_dir.join(format!("cpu{c}/topology"))).unwrap();
        std::fs::remove_dir_all(cpu_dir.join(format!("cpu{c}/cache"))).unwrap();
    }
    let m = describe_json(&tree);
    let t = &m["topology"];
    assert_eq!(
        (t["packages"].as_u64(), t["cores"].as_u64()),
        (Some(2), Some(16))
    );
    assert!(t["llc_groups"].is_null() && m["cpu"]["caches"].as_array().unwrap().is_empty());
    assert_eq!(t["chosen_cpu"], 1);
    assert_eq!(t["partners"]["smt_sibling"], 17);
    assert_eq!(t["partners"]["other_package"], 8);
    assert!(t["partners"]["same_llc"].is_null());
    assert!(t["source"].as_str().unwrap().contains("cpuinfo"));
}

/// What a recorded Mac (a sysctl.txt of Apple's real values, see each folder's
/// SOURCES.md) must be described as, with nothing of the machine that reads it.
#[test]
fn recorded_macs_describe_their_machines_and_nothing_of_this_one() {
    let live = live_json();
    struct Mac {
        name: &'static str,
        model: &'static str,
        arch: &'static str,
        cpus: u64,
        cores: u64,
        llc_groups: u64,
        llc_level: u64,
        memory: u64,
        page: u64,
        line: u64,
        /// (level, kind, bytes, shared CPUs, instances)
        caches: &'static [(u64, &'static str, u64, u64, u64)],
        perf: &'static [u64],
        eff: &'static [u64],
        chosen: u64,
        smt_sibling: Option<u64>,
        same_llc: Option<u64>,
        other_llc: Option<u64>,
    }
    let macs = [
        Mac {
            name: "apple-m1-pro",
            model: "Apple M1 Pro",
            arch: "aarch64",
            cpus: 10,
            cores: 10,
            llc_groups: 3,
            llc_level: 2,
            memory: 16 << 30,
            page: 16384,
            line: 128,
            caches: &[
                (1, "Data", 128 * K, 1, 8),
                (1, "Data", 64 * K, 1, 2),
                (1, "Instruction", 192 * K, 1, 8),
                (1, "Instruction", 128 * K, 1, 2),
                (2, "Unified", 12 * K * K, 4, 2),
                (2, "Unified", 4 * K * K, 2, 1),
            ],
            perf: &[2, 3, 4, 5, 6, 7, 8, 9],
            eff: &[0, 1],
            chosen: 2,
            smt_sibling: None,
            same_llc: Some(3),
            other_llc: Some(6),
        },
        Mac {
            name: "macbook-pro-2017-kaby-lake",
            model: "Intel(R) Core(TM) i5-7360U CPU @ 2.30GHz",
            arch: "x86_64",
            cpus: 4,
            cores: 2,
            llc_groups: 1,
            llc_level: 3,
            memory: 8 << 30,
            page: 4096,
            line: 64,
            caches: &[
                (1, "Data", 32 * K, 2, 2),
                (1, "Instruction", 32 * K, 2, 2),
                (2, "Unified", 256 * K, 2, 2),
                (3, "Unified", 4 * K * K, 4, 1),
            ],
            perf: &[],
            eff: &[],
            chosen: 2,
            smt_sibling: Some(3),
            same_llc: Some(0),
            other_llc: None,
        },
    ];
    for e in &macs {
        let n = e.name;
        let m = describe_json(&fixture(n));
        assert_eq!(m["cpu"]["model"], e.model, "{n}");
        assert_eq!(m["os"]["arch"], e.arch, "{n}");
        assert!(
            m["os"]["kernel"].as_str().unwrap().starts_with("Darwin"),
            "{n}"
        );
        assert_eq!(m["cpu"]["logical_cpus"], e.cpus, "{n}");
        assert_eq!(m["cpu"]["physical_cores"], e.cores, "{n}");
        assert_eq!(m["memory"]["total_bytes"], e.memory, "{n}");
        assert_eq!(m["memory"]["page_bytes"], e.page, "{n}");
        let t = &m["topology"];
        assert_eq!(t["source"], "sysctl", "{n}");
        assert_eq!(t["cpus"].as_array().unwrap().len() as u64, e.cpus, "{n}");
        assert_eq!(t["cores"], e.cores, "{n}");
        assert_eq!(t["packages"], 1, "{n}");
        assert_eq!(t["llc_groups"], e.llc_groups, "{n}");
        assert_eq!(t["llc_level"], e.llc_level, "{n}");
        assert_eq!(t["chosen_cpu"], e.chosen, "{n}");
        let p = &t["partners"];
        assert_eq!(opt(&p["smt_sibling"]), e.smt_sibling, "{n}");
        assert_eq!(opt(&p["same_llc"]), e.same_llc, "{n}");
        assert_eq!(opt(&p["other_llc"]), e.other_llc, "{n}");
        let of_kind = |k: &str| -> Vec<u64> {
            t["cpus"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["kind"] == k)
                .map(|c| c["cpu"].as_u64().unwrap())
                .collect()
        };
        assert_eq!(of_kind("performance"), e.perf, "{n}");
        assert_eq!(of_kind("efficiency"), e.eff, "{n}");
        let caches: Vec<(u64, String, u64, u64, u64)> = m["cpu"]["caches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                assert_eq!(c["line_bytes"], e.line, "{n}");
                (
                    c["level"].as_u64().unwrap(),
                    c["kind"].as_str().unwrap().to_string(),
                    c["size_bytes"].as_u64().unwrap(),
                    c["shared_cpus"].as_u64().unwrap(),
                    c["instances"].as_u64().unwrap(),
                )
            })
            .collect();
        let want: Vec<(u64, String, u64, u64, u64)> = e
            .caches
            .iter()
            .map(|(l, k, s, sh, i)| (*l, k.to_string(), *s, *sh, *i))
            .collect();
        assert_eq!(caches, want, "{n}");
        // Nothing of the machine reading it.
        assert!(m["clock"].is_null(), "{n}");
        assert!(m["cpu"]["core_clock_hz"].is_null(), "{n}");
        assert_ne!(m["hostname"], live["hostname"], "{n}");
        assert_ne!(m["os"]["kernel"], live["os"]["kernel"], "{n}");
        assert!(m["os"]["distribution"].is_null(), "{n}: not this machine's");
        assert!(m["load_average"].is_null(), "{n}");
        assert!(m["cpu"]["flags"].as_object().unwrap().is_empty(), "{n}");
        assert!(
            m["cpu"]["mitigations"].as_object().unwrap().is_empty(),
            "{n}"
        );
        assert!(m["storage"]["cwd_filesystem"].is_null(), "{n}");
        assert!(m["network"].as_array().unwrap().is_empty(), "{n}");
        let unknown = m["recorded"]["unknown"].as_array().unwrap();
        assert!(
            !unknown
                .iter()
                .any(|u| u.as_str().unwrap().contains("page size")),
            "{n}: a Mac records hw.pagesize: {unknown:?}"
        );
        // The text names the P/E layout and the L2 groups where there are two kinds.
        let out = osmeter()
            .args(["machine", "--from"])
            .arg(fixture(n))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(e.model), "{n}: {text}");
        if !e.perf.is_empty() {
            assert!(
                text.contains("performance CPUs 2-9, efficiency CPUs 0-1"),
                "{text}"
            );
        }
        assert!(
            !text.contains("governor unknown (no cpufreq"),
            "{n}: {text}"
        );
    }
}
