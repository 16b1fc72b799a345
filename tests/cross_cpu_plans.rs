//! Cross-CPU figures per topology class (docs/METHODOLOGY.md, "Cross-CPU figures"): the
//! plans `Topology::cross_cpu_plans` makes from recorded machines.

use osmeter::machine::facts::FactRoot;
use osmeter::machine::{CrossPlan, Machine, PartnerClass, Topology};
use std::path::Path;

fn topology(name: &str) -> Topology {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/machines")
        .join(name);
    Machine::gather_from(&FactRoot::recorded(dir)).topology
}

/// (class, partner, suffix) of each plan for work on `main`.
fn plans(t: &Topology, main: usize) -> Vec<(Option<&'static str>, usize, String)> {
    t.cross_cpu_plans(main, &t.allowed)
        .into_iter()
        .map(|p: CrossPlan| (p.class.map(PartnerClass::name), p.cpu, p.suffix))
        .collect()
}

fn s(v: &str) -> String {
    v.to_string()
}

#[test]
fn two_sockets_with_smt_give_three_figures() {
    let t = topology("xeon-two-socket");
    assert_eq!(t.chosen_cpu, Some(1));
    assert_eq!(
        plans(&t, 1),
        vec![
            (Some("smt_sibling"), 17, s("_smt_sibling")),
            (Some("same_llc"), 2, s("")),
            (Some("other_package"), 8, s("_other_package")),
        ]
    );
    // Work on another CPU: partners relative to it, never itself.
    let p = plans(&t, 2);
    assert_eq!(p.len(), 3, "{p:?}");
    assert!(p.iter().all(|(_, cpu, _)| *cpu != 2), "{p:?}");
    assert_eq!(p.iter().filter(|x| x.2.is_empty()).count(), 1, "{p:?}");
}

#[test]
fn two_ccx_give_an_other_llc_figure() {
    let t = topology("amd-two-ccx");
    assert_eq!(
        plans(&t, 1),
        vec![
            (Some("smt_sibling"), 17, s("_smt_sibling")),
            (Some("same_llc"), 2, s("")),
            (Some("other_llc"), 8, s("_other_llc")),
        ]
    );
}

#[test]
fn one_llc_without_smt_gives_one_figure_under_the_old_name() {
    let t = topology("arm-graviton");
    assert_eq!(plans(&t, 1), vec![(Some("same_llc"), 2, s(""))]);
    let t = topology("intel-hybrid-laptop");
    assert_eq!(
        plans(&t, 2),
        vec![
            (Some("smt_sibling"), 3, s("_smt_sibling")),
            (Some("same_llc"), 4, s("")),
        ]
    );
}

#[test]
fn allowed_cpus_limit_the_plans() {
    let t = topology("xeon-two-socket");
    let p: Vec<_> = t
        .cross_cpu_plans(1, &[1, 17])
        .into_iter()
        .map(|p| (p.cpu, p.suffix))
        .collect();
    // Only the SMT sibling remains: it is the only figure, so it keeps the name.
    assert_eq!(p, vec![(17, s(""))]);
}

#[test]
fn unknown_topology_falls_back_to_another_allowed_cpu() {
    let t = Topology::default();
    let p = t.cross_cpu_plans(0, &[0, 1]);
    assert_eq!(p.len(), 1);
    assert_eq!((p[0].class, p[0].cpu, p[0].suffix.as_str()), (None, 1, ""));
    assert_eq!(p[0].class_name(), "unknown class");
    assert!(t.cross_cpu_plans(0, &[0]).is_empty());
}

#[test]
fn this_machine_has_one_unsuffixed_figure_and_one_on_two_cpus_without_smt() {
    let m = Machine::gather();
    let t = &m.topology;
    let allowed = &m.cpu.allowed_cpus;
    let main = t.chosen_cpu.unwrap_or(allowed[0]);
    let p = t.cross_cpu_plans(main, allowed);
    assert_eq!(p.is_empty(), allowed.len() < 2, "{p:?}");
    if !p.is_empty() {
        assert_eq!(p.iter().filter(|x| x.suffix.is_empty()).count(), 1, "{p:?}");
    }
    assert!(
        p.iter().all(|x| x.cpu != main && allowed.contains(&x.cpu)),
        "{p:?}"
    );
    let smt = t.cpus.iter().any(|c| !c.siblings.is_empty());
    if allowed.len() == 2 && !smt {
        assert_eq!(p.len(), 1, "{p:?}");
    }
}
