//! Machines recorded live in the zoo's emulated guests (zoo/run, docs/ZOO.md) with
//! `osmeter machine --snapshot`: the kernel wrote these trees, not a generator, so they
//! hold what nobody thought to generate (sub-NUMA nodes inside one L3, an arm64 firmware
//! that describes no cache, a container with /sys hidden).

use osmeter::machine::facts::FactRoot;
use osmeter::machine::{Machine, PartnerClass};
use std::path::Path;

fn machine(name: &str) -> Machine {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/machines")
        .join(name);
    Machine::gather_from(&FactRoot::recorded(dir))
}

/// qemu -smp 8,sockets=2,cores=4 with 4 NUMA nodes (2 per socket, one L3 per socket):
/// the L3's shared_cpu_list spans two nodes, as under sub-NUMA clustering.
#[test]
fn sub_numa_pairs_are_their_own_class() {
    let t = machine("zoo-snc").topology;
    assert_eq!(
        (t.packages, t.llc_groups, t.numa_nodes),
        (Some(2), Some(2), Some(4))
    );
    assert_eq!(t.pair_class(0, 1), Some(PartnerClass::SameLlc));
    // One L3, two nodes: not pooled with same_llc (it was, before other_node).
    assert_eq!(t.pair_class(0, 2), Some(PartnerClass::OtherNode));
    assert_eq!(t.pair_class(0, 4), Some(PartnerClass::OtherPackage));
    let c = t.chosen_cpu.unwrap();
    let p = t.partners;
    let node = |cpu: usize| t.place(cpu).unwrap().node;
    assert_eq!(
        node(p.same_llc.unwrap()),
        node(c),
        "same_llc on the chosen node"
    );
    assert_ne!(node(p.other_node.unwrap()), node(c));
    let plans: Vec<_> = t
        .cross_cpu_plans(c, &t.allowed)
        .into_iter()
        .map(|p| p.class.map(PartnerClass::name))
        .collect();
    assert!(plans.contains(&Some("other_node")), "{plans:?}");
}

/// qemu-system-aarch64 -M virt: the device tree has no cache nodes, so sysfs lists cache
/// levels without sizes, each with one CPU; that says nothing about sharing.
#[test]
fn undescribed_arm64_caches_leave_the_llc_unknown() {
    let m = machine("zoo-aarch64-virt-numa");
    assert_eq!(m.os.arch, "aarch64");
    let t = &m.topology;
    assert_eq!((t.packages, t.numa_nodes), (Some(2), Some(2)));
    // Not four one-CPU LLC groups (which made every pair in a socket other_llc).
    assert_eq!(t.llc_groups, None);
    assert_eq!((t.partners.same_llc, t.partners.other_llc), (None, None));
    assert_eq!(t.pair_class(0, 1), None);
    assert_eq!(t.pair_class(0, 2), Some(PartnerClass::OtherPackage));
}

/// A cgroup v2 cpuset 2-3 with memory.max 512 MiB, in a mount namespace with an empty
/// tmpfs over /sys: the CPU list comes from /proc, the cgroup cannot be read.
#[test]
fn a_container_without_sys_says_what_it_cannot_know() {
    let m = machine("zoo-container-no-sys");
    assert_eq!(m.cpu.allowed_cpus, vec![2, 3]);
    assert_eq!(m.cgroup.unseen.as_deref(), Some("/zoo/hidden"));
    assert_eq!(m.cgroup.memory_limit_bytes, None);
    assert!(
        m.warnings
            .iter()
            .any(|w| w.contains("/zoo/hidden") && w.contains("unknown")),
        "{:?}",
        m.warnings
    );
    // No cache, so no LLC: a pair in the one package is unclassed, not other_llc.
    assert_eq!(m.topology.pair_class(2, 3), None);
}
