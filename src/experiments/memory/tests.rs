//! The memory experiments' plans on described machines unlike the one at hand: on each,
//! every profile's experiments lay out no more than the profile's memory limit, and quick
//! stays within 1 GiB or an eighth of what is available.

use super::{bandwidth, latency, loaded_latency, pagefault};
use crate::experiments::Profile;
use crate::machine::{Cache, Machine};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A machine with `cpus` CPUs, `avail` bytes available (within a cgroup limit when
/// `cgroup`), one last-level cache of `llc` bytes and huge pages of `huge` bytes.
fn described(cpus: usize, avail: u64, cgroup: Option<u64>, llc: u64, huge: u64) -> Machine {
    let mut m = Machine::default();
    m.cpu.allowed_cpus = (0..cpus).collect();
    m.memory.total_bytes = avail + avail / 8;
    m.memory.available_bytes = avail;
    m.memory.huge_page_bytes = Some(huge);
    m.memory.thp_enabled = Some("madvise".into());
    m.cgroup.memory_limit_bytes = cgroup;
    m.cgroup.memory_usage_bytes = cgroup.map(|_| 0);
    m.cpu.caches = [
        (1, "Data", 48 << 10),
        (2, "Unified", 2 * MIB),
        (3, "Unified", llc),
    ]
    .into_iter()
    .map(|(level, kind, size_bytes)| Cache {
        level,
        kind: kind.into(),
        size_bytes,
        line_bytes: 64,
        ways: None,
        shared_cpus: 1,
        instances: 1,
    })
    .collect();
    m
}

/// The machines: this kind of VM; a two-socket EPYC with 1.1 GiB of L3, 256 CPUs and
/// 2 TiB; an arm64 server with 64 KiB pages (512 MiB huge pages); a 1-CPU container
/// limited to 512 MiB; an unknown amount of memory.
fn machines() -> Vec<(&'static str, Machine)> {
    vec![
        (
            "2-vCPU VM, 300 MiB L3",
            described(2, 23 * GIB, None, 300 * MIB, 2 * MIB),
        ),
        (
            "2-socket EPYC",
            described(256, 1900 * GIB, None, 1152 * MIB, 2 * MIB),
        ),
        (
            "arm64 64 KiB pages",
            described(64, 200 * GIB, None, 64 * MIB, 512 * MIB),
        ),
        (
            "1-CPU container",
            described(1, 8 * GIB, Some(512 * MIB), 32 * MIB, 2 * MIB),
        ),
        ("memory unknown", described(4, 0, None, 32 * MIB, 2 * MIB)),
    ]
}

/// The most each memory experiment lays out at once (region or buffers, with a chase's
/// permutation), or why it cannot run.
fn peaks(m: &Machine, p: Profile) -> Vec<(&'static str, Result<u64, String>)> {
    let err = |e: anyhow::Error| e.to_string();
    let cpus = m.cpu.allowed_cpus.len();
    let (file, anon) = pagefault::SIZES.get(p);
    vec![
        (
            "mem.latency",
            latency::plan::set_and_cap(m, p, 64)
                .map(|(set, _)| set + 4 * set / 64)
                .map_err(err),
        ),
        (
            "mem.bandwidth",
            bandwidth::buffer(m, p, cpus)
                .map(|(b, _)| b as u64)
                .map_err(err),
        ),
        (
            "mem.loaded-latency",
            loaded_latency::sizes(m, p, 64, cpus.saturating_sub(1).max(1))
                .map(|(c, l, _)| (2 * c + l) as u64 + 4 * c as u64 / 64)
                .map_err(err),
        ),
        (
            "mem.pagefault",
            crate::experiments::kit::memory_cap(m, p, file + anon, 2 << 20).map_err(err),
        ),
    ]
}

#[test]
fn every_profile_stays_within_its_memory_limit_on_every_described_machine() {
    for (name, m) in machines() {
        let avail = m.memory_budget_bytes();
        for p in Profile::ALL {
            let limit = p.memory_limit(avail);
            if p == Profile::Quick {
                assert!(limit <= GIB, "{name}: quick's limit {limit}");
                if avail > 0 {
                    assert!(
                        limit <= avail / 8,
                        "{name}: quick's limit {limit} of {avail}"
                    );
                }
            }
            for (exp, peak) in peaks(&m, p) {
                let peak = peak.unwrap_or_else(|e| panic!("{name} {p:?} {exp}: {e}"));
                assert!(peak <= limit, "{name} {p:?} {exp}: {peak} > {limit}");
                assert!(peak >= 8 * MIB, "{name} {p:?} {exp}: {peak}");
            }
        }
    }
}

#[test]
fn many_cpus_get_as_many_threads_as_the_cap_holds() {
    let m = described(256, 1900 * GIB, None, 1152 * MIB, 2 * MIB);
    let (buf, n) = bandwidth::buffer(&m, Profile::Quick, 256).unwrap();
    assert!((128..256).contains(&n), "{n}");
    assert!(buf as u64 <= Profile::Quick.memory_limit(1900 * GIB));
    let (_, load, k) = loaded_latency::sizes(&m, Profile::Smoke, 64, 255).unwrap();
    assert!(k <= 64 && load as u64 >= k as u64 * MIB, "{k} {load}");
    // Two CPUs keep both.
    let m = described(2, 23 * GIB, None, 300 * MIB, 2 * MIB);
    assert_eq!(bandwidth::buffer(&m, Profile::Quick, 2).unwrap().1, 2);
}

#[test]
fn a_large_cache_is_not_a_reason_to_lay_out_more() {
    // The same machine with a 32 MiB and a 1.1 GiB last-level cache plans the same sets:
    // the cap decides, and the dram check says how far past the cache the set reached.
    let small = described(8, 64 * GIB, None, 32 * MIB, 2 * MIB);
    let large = described(8, 64 * GIB, None, 1152 * MIB, 2 * MIB);
    for p in Profile::ALL {
        let a: Vec<_> = peaks(&small, p).into_iter().map(|(_, v)| v.ok()).collect();
        let b: Vec<_> = peaks(&large, p).into_iter().map(|(_, v)| v.ok()).collect();
        assert_eq!(a, b, "{p:?}");
    }
}
