//! The live paths of the premise checks that can fail (their failing inputs are unit
//! tests beside each pure check function) and lmbench's latency layout.

mod common;

use osmeter::experiments::memory::latency::lmbench_chain;
use osmeter::results::{Check, RunResults, Status};
use osmeter::rng::{cycle_length, Rng};

fn check<'a>(r: &'a RunResults, id: &str, name: &str) -> &'a Check {
    let e = r.experiment(id).unwrap_or_else(|| panic!("{id} missing"));
    e.checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("{id}: no check {name:?} in {:?}", e.checks))
}

/// With the user's word that the host does not cache (`--host-cache none`), the
/// counter alone decides.
#[test]
fn uncached_reads_are_confirmed_by_the_device_counter() {
    let test = "uncached_reads_are_confirmed_by_the_device_counter";
    for id in ["fs.read", "fs.cache-size"] {
        let options = osmeter::experiments::RunOptions {
            host_cache_none: true,
            ..Default::default()
        };
        let r = common::run_with(osmeter::experiments::Profile::Smoke, id, options);
        let e = r.experiment(id).unwrap();
        if e.status == Status::Skipped {
            return common::skip(test, &format!("{id} skipped: {:?}", e.reason));
        }
        let c = check(
            &r,
            id,
            "uncached reads reached the device (sectors-read counter)",
        );
        if c.unverified {
            let why = format!("no block-device counter here: {}", c.detail);
            return common::skip(test, &why);
        }
        assert!(c.passed, "{id}: {}", c.detail);
    }
}

/// In a VM with a virtual disk, uncached figures are unverified without the user's word,
/// however many sectors the guest counted: the host may have answered from its cache.
/// fs.cache-size's cold read is one such read (before, it had no device check at all).
#[test]
fn in_a_vm_uncached_reads_are_unverified_without_the_users_word() {
    let test = "in_a_vm_uncached_reads_are_unverified_without_the_users_word";
    for id in ["fs.read", "fs.cache-size"] {
        let r = common::smoke(id);
        let e = r.experiment(id).unwrap();
        if e.status == Status::Skipped {
            return common::skip(test, &format!("{id} skipped: {:?}", e.reason));
        }
        let c = check(
            &r,
            id,
            "uncached reads reached the device (sectors-read counter)",
        );
        // The disk the check names ("vda read ..."), as the run's machine describes it.
        let machine = serde_json::to_value(&r.machine).unwrap();
        let disks = machine["storage"]["disks"].as_array().cloned();
        let disk = disks.unwrap_or_default().into_iter().find(|d| {
            let name = d["name"].as_str().unwrap_or("?");
            c.detail.starts_with(&format!("{name} read "))
        });
        let kind = disk.map(|d| d["class"]["kind"].to_string());
        let virtual_disk = kind.as_deref().is_some_and(|k| {
            ["virtual", "network_block", "unknown"]
                .iter()
                .any(|v| k.contains(v))
        });
        if !r.machine.virtualization.is_vm || !virtual_disk {
            let why = format!("not a VM on a virtual disk ({kind:?}): {}", c.detail);
            return common::skip(test, &why);
        }
        assert!(c.unverified && !c.passed, "{id}: {c:?}");
        assert!(c.detail.contains("--host-cache none"), "{}", c.detail);
        assert_eq!(e.status, Status::Unverified, "{id}: {:?}", e.reason);
    }
}

#[test]
fn contention_records_its_release_and_device_reads() {
    let r = common::smoke("fs.contention");
    let e = r.experiment("fs.contention").unwrap();
    if e.status == Status::Skipped {
        common::skip(
            "contention_records_its_release_and_device_reads",
            &format!("fs.contention skipped: {:?}", e.reason),
        );
        return;
    }
    // Whether the release passes depends on the machine's load; that it is measured
    // (a spread in the detail) does not.
    let c = check(&r, "fs.contention", "readers released together");
    assert!(c.premise && c.detail.contains("spread"), "{}", c.detail);
    let d = check(
        &r,
        "fs.contention",
        "uncached reads reached the device (sectors-read counter)",
    );
    assert!(d.unverified || d.passed, "{}", d.detail);
}

#[test]
fn every_created_thread_ran_and_every_round_trip_was_echoed() {
    let r = common::smoke("cpu.thread-create");
    let c = check(&r, "cpu.thread-create", "every thread ran");
    assert!(c.passed, "{}", c.detail);
    let r = common::smoke("net.rtt");
    let c = check(&r, "net.rtt", "tcp: the peer echoed every round trip");
    assert!(c.passed, "{}", c.detail);
}

#[test]
fn lmbench_layout_is_one_cycle_over_every_line() {
    let mut rng = Rng::new(5);
    // 1 MiB of 4 KiB pages with 64-byte lines, as lat_mem_rd -t lays it.
    let next = lmbench_chain(256, 64, &mut rng);
    assert_eq!(cycle_length(&next), 256 * 64);
}
