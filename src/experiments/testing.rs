//! Test rig: an experiment run as the runner wires it, in a context a test describes
//! (its clock, machine facts and earlier results), judged as the runner judges it. The
//! failing-path tests of premise checks go through here, so a check is shown to fail
//! where the experiment meets the world, not in a helper fed made-up inputs.
#![cfg(test)]

use super::{Context, Experiment, Profile, RunOptions};
use crate::clock::Clock;
use crate::machine::Machine;
use crate::results::{Check, ExperimentResult, Status};
use std::time::Duration;

/// What a test changes about the world an experiment sees.
pub(crate) struct World<'a> {
    pub(crate) machine: Machine,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) earlier: Vec<ExperimentResult>,
    pub(crate) options: RunOptions,
    pub(crate) budget: Duration,
    /// Ticks of one empty loop iteration, as the runner measures it.
    pub(crate) loop_ticks: f64,
    /// The CPU the context names, when it is not the one the thread is pinned to (a
    /// runner whose pinning went elsewhere).
    pub(crate) claimed_cpu: Option<usize>,
}

impl<'a> World<'a> {
    /// This machine's facts, read live, timed by `clock`, nothing earlier in the run.
    pub(crate) fn live(clock: &'a dyn Clock) -> Self {
        World {
            machine: Machine::gather(),
            clock,
            earlier: Vec::new(),
            options: RunOptions::default(),
            budget: Duration::from_millis(400),
            loop_ticks: 0.0,
            claimed_cpu: None,
        }
    }

    /// `f` given the context an experiment would see (not pinned, nothing run).
    pub(crate) fn with_ctx<R>(&self, f: impl FnOnce(&Context) -> R) -> R {
        self.with_ctx_on(0, f)
    }

    /// As `with_ctx`, naming `cpu` unless the world claims another.
    fn with_ctx_on<R>(&self, cpu: usize, f: impl FnOnce(&Context) -> R) -> R {
        let scratch = std::sync::OnceLock::new();
        let ctx = Context {
            profile: Profile::Smoke,
            machine: &self.machine,
            clock: self.clock,
            cpu: self.claimed_cpu.unwrap_or(cpu),
            budget: self.budget,
            earlier: &self.earlier,
            options: &self.options,
            loop_ticks: self.loop_ticks,
            progress: &|_| {},
            scratch_cell: &scratch,
            repetition: crate::experiments::Repetition::SINGLE,
        };
        f(&ctx)
    }

    /// `exp` run once under the smoke profile, pinned where the runner pins, and judged.
    pub(crate) fn run(&self, exp: &dyn Experiment) -> ExperimentResult {
        let allowed = &self.machine.cpu.allowed_cpus;
        let cpu = *allowed.last().unwrap_or(&0);
        let _ = crate::platform::pin_to_cpu(cpu);
        self.with_ctx_on(cpu, |ctx| crate::runner::run_judged(exp, ctx))
    }
}

/// An ok result of experiment `id` with the metrics of `o`, as earlier in a run.
pub(crate) fn recorded(id: &str, o: crate::experiments::Outcome) -> ExperimentResult {
    ExperimentResult {
        metrics: o.metrics,
        ..ExperimentResult::new(id, "", "")
    }
}

/// The check named `name` of `r`, or a panic listing those it has.
pub(crate) fn check<'r>(r: &'r ExperimentResult, name: &str) -> &'r Check {
    r.checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name:?} in {}: {:?}", r.id, r.checks))
}

/// `r` is invalid and its reason names the failed premise `name`.
pub(crate) fn assert_invalid_by(r: &ExperimentResult, name: &str) {
    assert_eq!(
        r.status,
        Status::Invalid,
        "{}: {:?} {:?}",
        r.id,
        r.reason,
        r.checks
    );
    let reason = r.reason.as_deref().unwrap_or("");
    assert!(
        reason.contains(name),
        "{}: reason {reason:?} does not name {name:?}",
        r.id
    );
}

/// A test that cannot run here says why, and fails instead under
/// OSMETER_REQUIRE_ALL_TESTS=1 (as tests/common's `skip`).
pub(crate) fn skip(test: &str, why: &str) {
    if std::env::var("OSMETER_REQUIRE_ALL_TESTS").is_ok_and(|v| v == "1") {
        panic!("{test}: prerequisite missing and OSMETER_REQUIRE_ALL_TESTS is set: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
}

/// The failing path of each check, through the experiment as wired (docs/METHODOLOGY.md,
/// "Checks and the tests that fail them").
mod failing_checks {
    use super::*;
    use crate::clock::{CoarseClock, MisratedClock};

    fn by_id(id: &str) -> Box<dyn Experiment> {
        crate::experiments::registry()
            .into_iter()
            .find(|e| e.id() == id)
            .expect("registered")
    }

    /// cpu.timer on a 10 Hz counter: no batch of 1000 empty regions spans a tick. (At
    /// 1 kHz, under the CI rehearsal's load every batch was preempted across a 1 ms tick.)
    #[test]
    fn timer_counter_that_does_not_advance() {
        let clock = CoarseClock::new(10.0);
        let r = World::live(&clock).run(by_id("cpu.timer").as_ref());
        let c = check(&r, "counter advances");
        assert!(!c.passed, "{}", c.detail);
    }

    /// cpu.loop timed by a counter whose rate was measured 1000x too low: 100+ ns a loop.
    #[test]
    fn loop_on_a_misrated_counter_is_implausible() {
        let clock = MisratedClock::new(1e-3);
        let r = World::live(&clock).run(by_id("cpu.loop").as_ref());
        let c = check(&r, "plausible");
        assert!(!c.passed, "{}", c.detail);
    }

    /// cpu.syscall when the run measured its loop at a millisecond an iteration.
    #[test]
    fn syscall_not_above_the_loop() {
        let clock = CoarseClock::new(1e9);
        let mut w = World::live(&clock);
        w.loop_ticks = 1e6;
        let r = w.run(by_id("cpu.syscall").as_ref());
        let c = check(&r, "a system call costs more than a loop iteration");
        assert!(!c.passed, "{}", c.detail);
    }

    /// mem.latency on a machine whose sysfs lists a cache no working set can show (8 B).
    #[test]
    fn latency_misses_a_listed_cache() {
        let clock = CoarseClock::new(1e9);
        let mut w = World::live(&clock);
        w.machine.cpu.caches.push(crate::machine::Cache {
            level: 0,
            kind: "Data".into(),
            size_bytes: 8,
            line_bytes: 64,
            ways: None,
            shared_cpus: 1,
            instances: 1,
        });
        let r = w.run(by_id("mem.latency").as_ref());
        let c = check(&r, "every sysfs data cache level detected");
        assert!(!c.passed, "{}", c.detail);
    }

    /// fs.read, fs.contention and fs.cache-size where the disk's counter stands still (a
    /// cache below the file system serves every read): the uncached figures are invalid.
    #[test]
    fn uncached_reads_that_never_reach_the_device() {
        crate::machine::storage::FROZEN_SECTORS.with(|f| f.set(true));
        let clock = CoarseClock::new(1e9);
        let w = World::live(&clock);
        for id in ["fs.read", "fs.contention", "fs.cache-size"] {
            let r = w.run(by_id(id).as_ref());
            if r.status == Status::Skipped {
                return skip(
                    "uncached_reads_that_never_reach_the_device",
                    &format!("{id} skipped: {:?}", r.reason),
                );
            }
            let name = "uncached reads reached the device (sectors-read counter)";
            if !check(&r, name).premise {
                return skip(
                    "uncached_reads_that_never_reach_the_device",
                    &format!(
                        "no block device counter behind the scratch folder: {}",
                        check(&r, name).detail
                    ),
                );
            }
            assert_invalid_by(&r, name);
        }
        crate::machine::storage::FROZEN_SECTORS.with(|f| f.set(false));
    }

    /// fs.contention whose files are 16 blocks long: readers read blocks again.
    #[test]
    fn contention_rereads_blocks() {
        crate::experiments::seams::set(|s| s.small_files = Some(64 << 10));
        let clock = CoarseClock::new(1e9);
        // The readers must also start within 10% of a round, which a loaded 2-CPU host
        // sometimes cannot give three of them (the run is then rightly invalid): that
        // premise alone failing is taken again, up to three runs in all, and said.
        let mut tries = 0;
        let r = loop {
            tries += 1;
            // The user's word on a VM's host cache, so the re-reads alone are unverified.
            let mut w = World::live(&clock);
            w.options.host_cache_none = true;
            let r = w.run(by_id("fs.contention").as_ref());
            let reason = r.reason.as_deref().unwrap_or("");
            if tries < 3 && reason.starts_with("premise failed: readers released together") {
                eprintln!("contention_rereads_blocks: retrying ({tries} of 3): {reason}");
                continue;
            }
            break r;
        };
        if r.status == Status::Skipped {
            return skip("contention_rereads_blocks", &format!("{:?}", r.reason));
        }
        assert_eq!(
            r.status,
            Status::Unverified,
            "{:?} {:?}",
            r.reason,
            r.checks
        );
        let reason = r.reason.as_deref().unwrap_or("");
        assert!(
            reason.starts_with("premise not verified here: each block read at most once"),
            "{reason}"
        );
        // The overlap figure is withheld, not printed beside a failed check.
        assert!(
            r.findings.iter().all(|f| !f.text.contains("serves about")),
            "{:?}",
            r.findings
        );
    }

    /// cpu.process-create spawning a program that fails (/bin/false).
    #[test]
    fn process_create_child_that_fails() {
        if !std::path::Path::new("/bin/false").is_file() {
            return skip("process_create_child_that_fails", "no /bin/false");
        }
        crate::experiments::seams::set(|s| s.program = Some("/bin/false"));
        let clock = CoarseClock::new(1e9);
        let r = World::live(&clock).run(by_id("cpu.process-create").as_ref());
        assert_invalid_by(&r, "every /bin/false child exited with status 0");
    }

    /// cpu.process-create with the added memory not resident while forking.
    #[test]
    fn process_create_added_memory_not_resident() {
        crate::experiments::seams::set(|s| s.unwritten = true);
        let clock = CoarseClock::new(1e9);
        let r = World::live(&clock).run(by_id("cpu.process-create").as_ref());
        assert_invalid_by(
            &r,
            "the added memory was resident in base pages while forking",
        );
    }

    /// mem.pagefault and fs.cache-size on a file system that ignores eviction advice, the
    /// file cached when its eviction is asked (their writing paths leave none cached).
    #[test]
    fn eviction_that_is_ignored() {
        crate::pagecache::CACHED_AT_EVICTION.with(|c| c.set(true));
        let clock = CoarseClock::new(1e9);
        let w = World::live(&clock);
        let r = w.run(by_id("mem.pagefault").as_ref());
        if r.status == Status::Skipped {
            return skip("eviction_that_is_ignored", &format!("{:?}", r.reason));
        }
        assert_invalid_by(&r, "file evicted from the page cache (mincore)");
        // The touches of resident pages are minor faults, and that premise fails too.
        assert_invalid_by(&r, "touches were major faults (getrusage)");
        // fs.cache-size: the check fails, and the cold read, served from memory, never
        // reached the device.
        let r = w.run(by_id("fs.cache-size").as_ref());
        if r.status == Status::Skipped {
            return skip("eviction_that_is_ignored", &format!("{:?}", r.reason));
        }
        let c = check(&r, "file evicted before every first read (mincore)");
        assert!(!c.passed, "{}", c.detail);
        let device = "uncached reads reached the device (sectors-read counter)";
        let d = check(&r, device);
        if !d.unverified {
            assert_invalid_by(&r, device);
        }
    }

    /// fs.remote-read given a local folder as the remote one.
    #[test]
    fn remote_read_on_a_local_folder() {
        let dir = std::env::temp_dir().join(format!("osmeter-remote-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let clock = CoarseClock::new(1e9);
        let mut w = World::live(&clock);
        w.options.remote_dir = Some(dir.clone());
        let r = w.run(by_id("fs.remote-read").as_ref());
        let _ = std::fs::remove_dir_all(&dir);
        if r.status == Status::Skipped {
            return skip("remote_read_on_a_local_folder", &format!("{:?}", r.reason));
        }
        assert_invalid_by(&r, "remote directory on a network file system");
    }

    /// cpu.thread-create where "creating" a thread runs its routine in the caller.
    #[test]
    fn thread_create_that_makes_no_thread() {
        crate::experiments::seams::set(|s| s.inline_create = true);
        let clock = CoarseClock::new(1e9);
        let r = World::live(&clock).run(by_id("cpu.thread-create").as_ref());
        assert_invalid_by(&r, "every thread ran");
    }

    /// net.rtt told it runs on one CPU while the thread is pinned to another: the pinned
    /// figure's placement premise fails.
    #[test]
    fn rtt_client_not_where_asked() {
        let clock = CoarseClock::new(1e9);
        let mut w = World::live(&clock);
        let allowed = w.machine.cpu.allowed_cpus.clone();
        if allowed.len() < 2 {
            return skip("rtt_client_not_where_asked", "fewer than 2 CPUs allowed");
        }
        // World::run pins to the last allowed CPU; the context names the first.
        w.claimed_cpu = Some(allowed[0]);
        let r = w.run(by_id("net.rtt").as_ref());
        // Skipped, or no peer process (an emulator such as qemu-user running this test
        // beside an osmeter binary it cannot start): nothing to place.
        let no_peer = r.status == Status::Failed
            && r.reason
                .as_deref()
                .is_some_and(|x| x.contains("loopback peer"));
        if r.status == Status::Skipped || no_peer {
            return skip("rtt_client_not_where_asked", &format!("{:?}", r.reason));
        }
        assert_invalid_by(&r, "tcp_same_cpu: client and peer ran where asked");
        assert!(
            r.metric("tcp_same_cpu").is_none(),
            "the pinned figure is not reported"
        );
    }

    /// net.rtt against a peer that answers every message with other bytes (each byte
    /// inverted): the echo premise fails and the TCP figure is invalid.
    #[test]
    fn rtt_peer_that_echoes_wrong_bytes() {
        let peer = LyingPeer::start();
        let clock = CoarseClock::new(1e9);
        let mut w = World::live(&clock);
        w.options.peer = Some(peer.addr.to_string());
        let r = w.run(by_id("net.rtt").as_ref());
        assert_invalid_by(&r, "remote_tcp: the peer echoed every round trip");
        let c = check(&r, "remote_tcp: the peer echoed every round trip");
        assert!(c.detail.contains("replies differing"), "{}", c.detail);
        assert!(!c.detail.contains(" 0 replies differing"), "{}", c.detail);
    }

    /// A peer on loopback that speaks the protocol but echoes each byte inverted, and
    /// refuses every other test.
    struct LyingPeer {
        addr: std::net::SocketAddr,
    }

    impl LyingPeer {
        fn start() -> LyingPeer {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            std::thread::spawn(move || {
                for s in l.incoming().flatten() {
                    std::thread::spawn(move || LyingPeer::session(s));
                }
            });
            LyingPeer { addr }
        }

        fn session(mut s: std::net::TcpStream) -> Option<()> {
            use crate::peer::protocol::{self as p, FrameType};
            use std::io::{Read, Write};
            p::read_frame(&mut s).ok()?;
            let welcome = p::Welcome {
                version: p::VERSION,
                cpus: 1,
                info: "lying peer".into(),
            };
            p::write_frame(&mut s, FrameType::Welcome, &welcome.encode()).ok()?;
            let (_, payload) = p::read_frame(&mut s).ok()?;
            let Ok(p::Request::Echo { size, .. }) = p::Request::decode(&payload) else {
                let no = p::Refuse {
                    code: p::RefuseCode::BadRequest,
                    server_version: p::VERSION,
                    message: "this peer only echoes".into(),
                };
                return p::write_frame(&mut s, FrameType::Refuse, &no.encode()).ok();
            };
            p::write_frame(&mut s, FrameType::Ready, &p::encode_ready(0)).ok()?;
            let _ = s.set_nodelay(true);
            let mut buf = vec![0u8; size as usize];
            let mut messages = 0u64;
            while s.read_exact(&mut buf).is_ok() {
                buf.iter_mut().for_each(|b| *b = !*b);
                s.write_all(&buf).ok()?;
                messages += 1;
            }
            let report = p::EchoReport {
                messages,
                pinned: false,
                cpus: vec![],
            };
            p::write_frame(&mut s, FrameType::Report, &report.encode()).ok()
        }
    }

    /// fs.contention timed by a counter that differs by seconds between CPUs: the
    /// readers' start times, taken on their own CPUs, seem seconds apart.
    #[test]
    fn contention_readers_not_released_together() {
        let clock = crate::clock::SkewedClock::default();
        let w = World::live(&clock);
        if w.machine.cpu.allowed_cpus.len() < 2 {
            return skip(
                "contention_readers_not_released_together",
                "fewer than 2 CPUs allowed: every reader runs on one CPU",
            );
        }
        let r = w.run(by_id("fs.contention").as_ref());
        if r.status == Status::Skipped {
            return skip(
                "contention_readers_not_released_together",
                &format!("{:?}", r.reason),
            );
        }
        assert_invalid_by(&r, "readers released together");
    }

    /// fs.read and fs.contention on a file system that refuses O_DIRECT and ignores
    /// eviction advice: the uncached reads' eviction premise fails.
    #[test]
    fn uncached_reads_without_direct_io_on_files_never_evicted() {
        crate::experiments::seams::set(|s| s.no_direct = true);
        crate::pagecache::IGNORED_EVICTION.with(|i| i.set(true));
        let clock = CoarseClock::new(1e9);
        let w = World::live(&clock);
        for (id, name) in [
            (
                "fs.read",
                "uncached reads: evicted with posix_fadvise(DONTNEED) and verified with mincore",
            ),
            (
                "fs.contention",
                "uncached reads: files evicted and verified (mincore) before every round",
            ),
        ] {
            let r = w.run(by_id(id).as_ref());
            if r.status == Status::Skipped {
                return skip(
                    "uncached_reads_without_direct_io_on_files_never_evicted",
                    &format!("{id}: {:?}", r.reason),
                );
            }
            assert_invalid_by(&r, name);
            assert!(
                check(&r, name).detail.contains("still cached"),
                "{:?}",
                r.checks
            );
        }
    }

    /// fs.read while memory pressure evicts its files as soon as they are read: the
    /// cached passes are not of resident files.
    #[test]
    fn cached_reads_of_files_memory_pressure_evicts() {
        crate::pagecache::EVICTED_BY_PRESSURE.with(|e| e.set(true));
        let clock = CoarseClock::new(1e9);
        let r = World::live(&clock).run(by_id("fs.read").as_ref());
        if r.status == Status::Skipped {
            return skip(
                "cached_reads_of_files_memory_pressure_evicts",
                &format!("{:?}", r.reason),
            );
        }
        assert_invalid_by(
            &r,
            "cached reads: every page resident before and after (mincore)",
        );
    }

    /// mem.pagefault where fresh memory comes already mapped: first touches take no
    /// minor fault.
    #[test]
    fn minor_faults_on_memory_mapped_in_advance() {
        crate::experiments::seams::set(|s| s.prefaulted = true);
        let clock = CoarseClock::new(1e9);
        let r = World::live(&clock).run(by_id("mem.pagefault").as_ref());
        assert_invalid_by(&r, "minor faults happened");
    }

    /// On a system whose pinning is only a hint, the experiments whose figures rest on
    /// threads held on chosen CPUs are invalid, whatever the CPU samples say.
    #[test]
    fn placement_premises_on_a_system_without_hard_pinning() {
        crate::platform::HINT_PINNING.with(|h| h.set(true));
        let clock = CoarseClock::new(1e9);
        let w = World::live(&clock);
        let cpu = *w.machine.cpu.allowed_cpus.last().unwrap_or(&0);
        for (id, name) in [
            (
                "cpu.thread-switch",
                format!("both threads ran on CPU {cpu}"),
            ),
            (
                "cpu.core-to-core",
                "both threads on their CPUs for the whole measurement".to_string(),
            ),
            (
                "mem.loaded-latency",
                "the load threads ran alongside the chase for every point".to_string(),
            ),
        ] {
            let r = w.run(by_id(id).as_ref());
            if r.status == Status::Skipped {
                skip(
                    "placement_premises_on_a_system_without_hard_pinning",
                    &format!("{id}: {:?}", r.reason),
                );
                continue;
            }
            assert_invalid_by(&r, &name);
            assert!(
                check(&r, &name).detail.contains("not pinned"),
                "{id}: {:?}",
                check(&r, &name)
            );
        }
    }

    /// The context names a CPU the measuring thread is not pinned to (a runner whose
    /// pinning went elsewhere): the same-CPU switch and the bandwidth teams find the
    /// thread off its CPU.
    #[test]
    fn measuring_thread_not_where_placed() {
        let clock = CoarseClock::new(1e9);
        let mut w = World::live(&clock);
        let allowed = w.machine.cpu.allowed_cpus.clone();
        if allowed.len() < 2 {
            return skip(
                "measuring_thread_not_where_placed",
                "fewer than 2 CPUs allowed",
            );
        }
        w.claimed_cpu = Some(allowed[0]);
        let r = w.run(by_id("cpu.thread-switch").as_ref());
        assert_invalid_by(&r, &format!("both threads ran on CPU {}", allowed[0]));
        let r = w.run(by_id("mem.bandwidth").as_ref());
        assert_invalid_by(
            &r,
            "every thread ran on the CPU it was placed on (current CPU read around every trial)",
        );
    }

    /// mem.loaded-latency whose chase is laid over 256 KiB (a cache holds it) while its
    /// reference chase, mem.latency's, covers the whole working set: the idle chase is not
    /// mem.latency's chase, even though the reference is measured in the same window.
    #[test]
    fn loaded_latency_chase_that_fits_in_a_cache() {
        let clock = CoarseClock::new(1e9);
        let w = World::live(&clock);
        crate::experiments::seams::set(|s| s.chase_nodes = Some(4096));
        let r = w.run(by_id("mem.loaded-latency").as_ref());
        if r.status == Status::Skipped {
            return skip(
                "loaded_latency_chase_that_fits_in_a_cache",
                &format!("{:?}", r.reason),
            );
        }
        assert_invalid_by(&r, "the idle chase is mem.latency's chase");
        let c = check(&r, "the idle chase is mem.latency's chase");
        assert!(
            c.detail.contains("beyond the noise measured"),
            "{}",
            c.detail
        );
    }

    /// cpu.thread-switch where the pipe work measured alone costs far more than inside the
    /// round trip: the switch figure is negative beyond noise.
    #[test]
    fn switch_from_a_pipe_cost_above_the_round_trip() {
        crate::experiments::seams::set(|s| s.pipe_alone_extra = 200);
        let clock = CoarseClock::new(1e9);
        let w = World::live(&clock);
        // Every run finds the figure negative; on a machine busy with other tests its
        // interval can still reach zero (then the check is a sanity failure), so up to
        // three runs are made for one whose interval lies wholly below zero.
        let mut r = w.run(by_id("cpu.thread-switch").as_ref());
        for _ in 0..2 {
            assert!(
                !check(&r, "the switch figure is positive").passed,
                "{:?}",
                r.checks
            );
            if r.status == Status::Invalid {
                break;
            }
            r = w.run(by_id("cpu.thread-switch").as_ref());
        }
        assert_invalid_by(&r, "the switch figure is positive");
    }

    /// mem.bandwidth on a machine whose description puts the second CPU on a second NUMA
    /// node: the pages its thread first touches are on the one real node, away from it.
    #[test]
    fn bandwidth_memory_on_another_node_than_described() {
        let clock = CoarseClock::new(1e9);
        let mut w = World::live(&clock);
        let allowed = w.machine.cpu.allowed_cpus.clone();
        if allowed.len() < 2 {
            return skip(
                "bandwidth_memory_on_another_node_than_described",
                "fewer than 2 CPUs allowed",
            );
        }
        let t = &mut w.machine.topology;
        if t.numa_nodes.unwrap_or(1) > 1 {
            return skip(
                "bandwidth_memory_on_another_node_than_described",
                "this machine has several nodes already",
            );
        }
        for c in t.cpus.iter_mut() {
            c.node = Some(usize::from(c.cpu == allowed[0]));
        }
        t.numa_nodes = Some(2);
        let r = w.run(by_id("mem.bandwidth").as_ref());
        let name =
            "each thread's memory on its own NUMA node (first touch; get_mempolicy on sampled pages)";
        // Where the kernel cannot say which node holds a page (qemu-user has no
        // get_mempolicy), the premise is unverified, not failed: nothing to test here.
        if r.status == Status::Unverified && check(&r, name).unverified {
            return skip(
                "bandwidth_memory_on_another_node_than_described",
                &format!(
                    "the pages' nodes are unknown here: {}",
                    check(&r, name).detail
                ),
            );
        }
        assert_invalid_by(&r, name);
    }
}
