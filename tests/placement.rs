//! Placing teams of threads by the topology (docs/METHODOLOGY.md, "Placing threads"):
//! `Topology::spread` and `one_per_node` on recorded machines, as pure functions.

use osmeter::machine::facts::FactRoot;
use osmeter::machine::{Machine, Topology};
use std::path::Path;

fn topology(name: &str) -> Topology {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/machines")
        .join(name);
    Machine::gather_from(&FactRoot::recorded(dir)).topology
}

fn core_of(t: &Topology, cpu: usize) -> usize {
    t.place(cpu).unwrap().core.unwrap()
}

fn node_of(t: &Topology, cpu: usize) -> usize {
    t.place(cpu).unwrap().node.unwrap()
}

#[test]
fn two_sockets_fill_one_nodes_cores_then_the_next_then_siblings() {
    let t = topology("xeon-two-socket");
    let all = t.allowed.clone();
    assert_eq!(all.len(), 32);
    // Two bandwidth threads: two physical cores of one node (the chosen CPU's).
    let two = t.spread(&all, 2);
    assert_eq!(two, vec![1, 2]);
    assert_ne!(core_of(&t, two[0]), core_of(&t, two[1]));
    assert_eq!(node_of(&t, two[0]), node_of(&t, two[1]));
    // Then one per node.
    assert_eq!(t.one_per_node(&all), vec![1, 8]);
    assert_ne!(node_of(&t, 1), node_of(&t, 8));
    // Sixteen threads: one per physical core, both nodes, no SMT sharing.
    let s = t.spread_of(&all, 16);
    let mut cores: Vec<usize> = s.cpus.iter().map(|&c| core_of(&t, c)).collect();
    cores.sort();
    cores.dedup();
    assert_eq!(cores.len(), 16, "{:?}", s.cpus);
    assert!(s.smt_shared.is_empty() && s.shared_note().is_none());
    assert_eq!(s.nodes.len(), 2);
    // The eight of node 0 come first.
    assert!(
        s.cpus[..8].iter().all(|&c| node_of(&t, c) == 0),
        "{:?}",
        s.cpus
    );
    // Seventeen: the seventeenth shares a core, and says so.
    let s = t.spread_of(&all, 17);
    assert_eq!(s.smt_shared.len(), 1);
    let (c, e) = s.smt_shared[0];
    assert_eq!(core_of(&t, c), core_of(&t, e));
    assert!(
        s.shared_note().unwrap().contains("SMT"),
        "{:?}",
        s.shared_note()
    );
    // All 32, each once.
    let mut v = t.spread(&all, 100);
    v.sort();
    assert_eq!(v, all);
}

#[test]
fn allowed_cpus_bound_the_spread() {
    let t = topology("xeon-two-socket");
    // Only siblings of two cores allowed: one per core first.
    assert_eq!(t.spread(&[1, 17, 2, 18], 2), vec![1, 2]);
    assert_eq!(t.spread(&[1, 17, 2, 18], 4), vec![1, 2, 17, 18]);
    // The chosen CPU not allowed: the lowest allowed core of its node first.
    assert_eq!(t.spread(&[9, 10, 25], 3), vec![9, 10, 25]);
    assert_eq!(t.one_per_node(&[9, 10, 25]), vec![9]);
}

#[test]
fn two_ccx_and_one_node_use_cores_before_siblings() {
    let t = topology("amd-two-ccx");
    let all = t.allowed.clone();
    let s = t.spread_of(&all, 16);
    assert!(s.smt_shared.is_empty(), "{:?}", s.cpus);
    assert_eq!(s.cpus[..2], [1, 2]);
    assert_eq!(t.one_per_node(&all).len(), 1);
    assert_eq!(t.spread_of(&all, 32).smt_shared.len(), 16);
}

#[test]
fn hybrid_laptop_takes_performance_cores_then_efficiency_then_siblings() {
    let t = topology("intel-hybrid-laptop");
    let all = t.allowed.clone();
    let kind = |c: usize| t.place(c).unwrap().kind.clone().unwrap();
    // read_2t on the i7-12700H: two P-cores, not one core's two hyperthreads.
    let two = t.spread(&all, 2);
    assert_eq!(two, vec![2, 4]);
    assert!(two.iter().all(|&c| kind(c) == "performance"));
    // 14 threads: every core once (6 P then 8 E), no sharing.
    let s = t.spread_of(&all, 14);
    assert!(s.smt_shared.is_empty(), "{:?}", s.cpus);
    assert!(s.cpus[..6].iter().all(|&c| kind(c) == "performance"));
    assert!(s.cpus[6..].iter().all(|&c| kind(c) == "efficiency"));
    assert_eq!(t.spread_of(&all, 20).smt_shared.len(), 6);
}

#[test]
fn a_one_core_per_cpu_machine_keeps_its_order() {
    let t = topology("arm-graviton");
    let all = t.allowed.clone();
    let v = t.spread(&all, 16);
    assert_eq!(v[0], 1);
    assert_eq!(*v.last().unwrap(), 0, "CPU 0's core last");
    assert_eq!(t.one_per_node(&all), vec![1]);
    // No topology at all: the allowed list, the chosen CPU first.
    let empty = Topology::default();
    assert_eq!(empty.spread(&[0, 1], 2), vec![0, 1]);
    assert!(empty.one_per_node(&[0, 1]).is_empty());
}

/// Issue 21 item 2: where the figures per core kind run, as a pure function of the
/// recorded topology (`Topology::per_kind_cpus`).
fn kinds(t: &Topology, main: usize, allowed: &[usize]) -> Vec<(Option<String>, usize, String)> {
    t.per_kind_cpus(main, allowed)
        .into_iter()
        .map(|k| (k.kind, k.cpu, k.suffix))
        .collect()
}

#[test]
fn hybrid_laptop_measures_a_performance_and_an_efficiency_core() {
    let t = topology("intel-hybrid-laptop");
    let all = t.allowed.clone();
    let main = t.chosen_cpu.unwrap();
    let v = t.per_kind_cpus(main, &all);
    assert_eq!(
        kinds(&t, main, &all),
        [
            (Some("performance".into()), 2, String::new()),
            (Some("efficiency".into()), 12, "_efficiency".into())
        ]
    );
    assert_eq!(t.place(12).unwrap().kind.as_deref(), Some("efficiency"));
    assert!(v[1].reason.contains("efficiency cores"), "{}", v[1].reason);
    // The efficiency CPU follows the chosen CPU's rule within its kind: not CPU 0's core.
    assert_eq!(kinds(&t, main, &[0, 1, 2, 12, 13])[1].1, 12);
    // Run on an efficiency core (--cpu 13): it keeps today's names, the P-core is suffixed.
    assert_eq!(
        kinds(&t, 13, &all),
        [
            (Some("efficiency".into()), 13, String::new()),
            (Some("performance".into()), 2, "_performance".into())
        ]
    );
    // Only performance cores allowed: one kind, today's names.
    assert_eq!(
        kinds(&t, 2, &[2, 3, 4, 5]),
        [(Some("performance".into()), 2, String::new())]
    );
}

#[test]
fn apple_m1_pro_measures_both_perflevels() {
    let t = topology("apple-m1-pro");
    let all = t.allowed.clone();
    let main = t.chosen_cpu.unwrap();
    let v = kinds(&t, main, &all);
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(v[0], (Some("performance".into()), 2, String::new()));
    // The E cluster is CPUs 0-1; CPU 0 is left to interrupts.
    assert_eq!(v[1], (Some("efficiency".into()), 1, "_efficiency".into()));
}

#[test]
fn one_kind_of_core_keeps_todays_names() {
    let mut trees: Vec<(String, Topology)> = ["xeon-two-socket", "arm-graviton", "amd-two-ccx"]
        .iter()
        .map(|n| (n.to_string(), topology(n)))
        .collect();
    trees.push(("this machine".into(), Machine::gather().topology));
    for (name, t) in trees {
        let all = t.allowed.clone();
        let Some(main) = t.chosen_cpu else { continue };
        let v = t.per_kind_cpus(main, &all);
        assert_eq!(v.len(), 1, "{name}: {v:?}");
        assert_eq!((v[0].cpu, v[0].suffix.as_str()), (main, ""), "{name}");
        assert!(!t.hybrid(), "{name}");
    }
}
